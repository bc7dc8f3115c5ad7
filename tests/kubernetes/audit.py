"""What the workbench asks of the Kubernetes API, as its RBAC sees it: one audit record per request.

Every `ApiServerEmulator` records each request it serves here, the way kube-apiserver's audit log
does: the RBAC verb, API group, resource, subresource, namespace and name that the API server's
RequestInfoFactory derives from the method, path and query (a GET on a collection is `list`, with
`watch=true` it is `watch`, a DELETE of a collection is `deletecollection`), and who asked.

Who asked is the User-Agent: the workbench's clients name their role (`make_api_client`'s
`cube-jupyter/<version> (<role>)`); the tests' own client, playing the cluster's controllers, kubelet
and scheduler, sends `ACTOR_AGENT` and is left out, since the real ones have their own RBAC. A request
that names neither came from a client built without settings: it is kept with role None, so the
session's RBAC check can say so instead of guessing whose permissions it needed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import kmock

# The User-Agent of the tests' client acting as the cluster (controllers, kubelet, scheduler).
ACTOR_AGENT = "cube-jupyter-tests/cluster-actors"
_ROLE_AGENT = re.compile(r"^cube-jupyter/\S+(?: \((?P<role>[a-z-]+)\))?$")

# requestinfo.go: the verbs a path may start with, and the namespace subresources.
_PATH_VERBS = {"watch", "proxy"}
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}
RBAC_GROUP = "rbac.authorization.k8s.io"
BINDINGS = ("rolebindings", "clusterrolebindings")
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


@dataclass(frozen=True)
class ApiRequest:
    """One request as RBAC authorizes it. Non-resource requests (discovery: /apis, /version) have
    `path` set and an empty `resource`."""

    role: str | None
    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str | None = None
    name: str = ""
    path: str = ""
    implied_by: str = ""  # an authorization the API server makes while serving another request

    @property
    def resource_request(self) -> bool:
        return not self.path

    @property
    def combined_resource(self) -> str:
        """`resource/subresource`, as RBAC rules name it (`pods/log`)."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def describe(self) -> str:
        if not self.resource_request:
            return f"{self.verb} {self.path}"
        where = f" in {self.namespace}" if self.namespace else " (cluster-wide)"
        group = f".{self.group}" if self.group else ""
        name = f" {self.name}" if self.name else ""
        why = f" (to {self.implied_by})" if self.implied_by else ""
        return f"{self.verb} {self.combined_resource}{group}{name}{where}{why}"


def request_info(method: str, path: str, query: Mapping[str, str], role: str | None) -> ApiRequest:
    """kube-apiserver's RequestInfoFactory.NewRequestInfo, for the requests a client makes."""
    verb = _METHOD_VERBS.get(method.upper(), method.lower())
    parts = [part for part in path.strip("/").split("/") if part]
    if len(parts) < 3 or parts[0] not in ("api", "apis") or (parts[0] == "apis" and len(parts) < 4):
        return ApiRequest(role=role, verb=method.lower(), path=path)
    group = "" if parts[0] == "api" else parts[1]
    parts = parts[2:] if parts[0] == "api" else parts[3:]
    if parts[0] in _PATH_VERBS and len(parts) > 1:
        verb, parts = parts[0], parts[1:]
    namespace = None
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in _TRUE else "list"
        selected = (query.get("fieldSelector") or "").split(",")
        name = next((s.split("=")[-1] for s in selected if re.match(r"^metadata\.name==?[^=]", s)), "")
    if not name and verb == "delete":
        verb = "deletecollection"
    return ApiRequest(role, verb, group, resource, subresource, namespace, name)


def binding_check(request: ApiRequest, body: object) -> ApiRequest | None:
    """The `bind` the API server authorizes on the role a (Cluster)RoleBinding being written names
    (rolebinding/policybased: `bind` on it, else the writer must hold all its permissions)."""
    if (
        request.group != RBAC_GROUP
        or request.resource not in BINDINGS
        or request.verb not in ("create", "update")
    ):
        return None
    ref = body.get("roleRef") if isinstance(body, dict) else None
    if not isinstance(ref, dict) or ref.get("kind") not in ("Role", "ClusterRole"):
        return None
    name = (body.get("metadata") or {}).get("name") or request.name  # type: ignore[union-attr]
    return ApiRequest(
        role=request.role,
        verb="bind",
        group=RBAC_GROUP,
        resource="roles" if ref["kind"] == "Role" else "clusterroles",
        namespace=request.namespace,
        name=str(ref.get("name") or ""),
        implied_by=f"{request.verb} {request.resource} {name}",
    )


def role_of(user_agent: str) -> str | None:
    match = _ROLE_AGENT.match(user_agent)
    return match.group("role") if match else None


class AuditLog:
    """The requests the workbench made (actors' excluded), in the order the API got them."""

    def __init__(self, forward_to: AuditLog | None = None) -> None:
        self._requests: list[ApiRequest] = []
        self._forward_to = forward_to
        self.source = ""  # who is making requests now (the session's: the running test)
        self._sources: dict[ApiRequest, str] = {}

    def __iter__(self) -> Iterator[ApiRequest]:
        return iter(list(self._requests))

    def __len__(self) -> int:
        return len(self._requests)

    def record(self, request: kmock.Request) -> ApiRequest | None:
        headers = {key.lower(): value for key, value in request.headers.items()}
        agent = headers.get("user-agent", "")
        if agent == ACTOR_AGENT:
            return None
        info = request_info(str(request.method.value), request.url.path, request.params, role_of(agent))
        self._add(info)
        bind = binding_check(info, request.data)
        if bind is not None:
            self._add(bind)
        return info

    def first_source(self, request: ApiRequest) -> str:
        """The `source` that was current when `request` was first recorded."""
        return self._sources.get(request, "")

    def _add(self, info: ApiRequest) -> None:
        self._requests.append(info)
        self._sources.setdefault(info, self.source)
        if self._forward_to is not None:
            self._forward_to._add(info)


# Every emulator's requests of the whole pytest session, for the check at its end (`rbac_session`).
SESSION = AuditLog()

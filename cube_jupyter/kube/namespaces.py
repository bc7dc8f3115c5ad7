"""Which namespace a user's objects go to, and making it ready: one rule for notebook servers, jobs and
pipeline runs.

`CubeWorkbench.namespace_source` picks how a user's servers find their namespace: the template (the
default), or the Kubeflow Profile the user owns (`cube_jupyter.kube.profiles`). With
`CubeWorkbench.create_namespaces` the central workbench makes a missing template namespace ready before
it creates anything there (`prepare_namespace`: the objects of `namespace_objects`, idempotently);
without it, creating in a missing namespace is a 404 that names the setting (`missing_namespace`).
"""

from __future__ import annotations

import logging
from typing import Any

from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound
from cube_jupyter.kube.client import ApiForbidden, ApiNotFound, KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.informer import Informer
from cube_jupyter.kube.labels import MANAGED_BY, MANAGED_BY_LABEL, USER_ANNOTATION
from cube_jupyter.kube.namespace_objects import (
    ISTIO_INJECTION_LABEL,
    OWNER_ANNOTATION,
    render_namespace_objects,
)
from cube_jupyter.kube.objects import Obj, metadata_of
from cube_jupyter.kube.profiles import PROFILE, KubeflowProfiles
from cube_jupyter.storage.config import CREDENTIAL_KEYS
from cube_jupyter.workbench import WorkbenchSettings

log = logging.getLogger(__name__)


def is_missing_namespace(exc: ApiNotFound, namespace: str) -> bool:
    """The API's 404 on a create says the namespace, not the kind, is missing."""
    return exc.missing_kind == "namespaces" or f'namespaces "{namespace}" not found' in exc.message


def missing_namespace(settings: WorkbenchSettings, user: str, namespace: str) -> NotFound:
    """The one error for creating anything in a user namespace that does not exist."""
    if settings.workbench.namespace_source == "kubeflow-profile":
        how = (
            f"it is the namespace of Kubeflow Profile {namespace!r}, which Kubeflow's profile controller "
            "has not made (yet)"
        )
    else:
        how = (
            "an admin must create it, or set CubeWorkbench.create_namespaces = True to have the workbench "
            f"create it (CubeWorkbench.namespace_template is {settings.workbench.namespace_template!r})"
        )
    return NotFound(f"namespace {namespace!r} of user {user!r} does not exist; {how}", field="user")


class UserNamespaces:
    """A user's namespace for their servers, read from the cache (never the API) on every request;
    on a create, the namespace made ready first."""

    def __init__(self, settings: WorkbenchSettings, cluster: Cluster) -> None:
        self.settings = settings
        self.client = cluster.client
        self.profiles: KubeflowProfiles | None = None
        self.informers: list[Informer] = []
        if settings.workbench.namespace_source == "kubeflow-profile" and not settings.user_server:
            informer = cluster.informer(PROFILE.api_version, PROFILE.kind, indexers=KubeflowProfiles.INDEXERS)
            self.profiles = KubeflowProfiles(self.client, informer)
            self.informers.append(informer)

    def lookup(self, user: str) -> str | None:
        """`user`'s namespace, or None when they own no Profile (nothing of theirs can be anywhere)."""
        if self.profiles is None:
            return self.settings.namespace_for(user)
        owned = self.profiles.owned_by(user)
        return owned[0] if owned else None  # several: the first by name, always the same one

    def require(self, user: str) -> str:
        """`user`'s namespace; NotFound naming the setting when they own no Profile."""
        namespace = self.lookup(user)
        if namespace is None:
            raise self._no_profile(user)
        return namespace

    def prepare(self, user: str) -> str:
        """The namespace a new server of `user` goes to, made ready when `create_namespaces` says so.
        Blocking (API calls): run it in a thread."""
        namespace = self.require(user)
        prepare_namespace(self.client, self.settings, user, namespace)
        return namespace

    def _no_profile(self, user: str) -> NotFound:
        assert self.profiles is not None
        shared = ", ".join(f"{c.namespace} ({c.role})" for c in self.profiles.contributions_of(user))
        also = f"; they are a contributor in: {shared}" if shared else ""
        return NotFound(
            f"user {user!r} owns no Kubeflow Profile, and CubeWorkbench.namespace_source is "
            f"'kubeflow-profile': an admin must create a Profile whose spec.owner.name is {user!r}{also}",
            field="user",
        )


def prepare_namespace(client: KubeClient, settings: WorkbenchSettings, user: str, namespace: str) -> None:
    """Create `namespace` and what pods need in it, or bring what is there to the config: objects the
    workbench made are patched, anything else (an admin's, Kubeflow's) is left as it is. A no-op
    unless the central workbench has `CubeWorkbench.create_namespaces`."""
    if not settings.workbench.create_namespaces or settings.user_server:
        return
    for obj in render_namespace_objects(settings, user, namespace, _credentials(client, settings)):
        try:
            _apply(client, obj, user)
        except ApiForbidden as exc:
            if obj["kind"] != "RoleBinding":
                raise
            # The API server's escalation check: binding a role takes `bind` on it, or holding all it grants.
            role = settings.workbench.user_cluster_role
            raise ApiForbidden(
                f"{exc.message}. Binding the pods' accounts to CubeWorkbench.user_cluster_role {role!r} "
                "needs `bind` on that ClusterRole in the workbench's own ClusterRole (deploy/base/rbac.yaml "
                "grants it on cube-jupyter-user only)"
            ) from None


def _credentials(client: KubeClient, settings: WorkbenchSettings) -> dict[str, str] | None:
    """The store's credentials (base64, as the API holds them) from the workbench's own namespace:
    only their key names ever reach a message or the log."""
    name, home = settings.storage.credentials_secret, settings.workbench.namespace
    if not name:
        return None
    where = f"CubeStorage.credentials_secret {name!r} in the workbench's namespace {home!r}"
    try:
        secret = client.get("v1", "Secret", home, name)
    except ApiNotFound:
        raise BackendUnavailable(f"{where} does not exist; user namespaces get a copy of it") from None
    data = secret.get("data") or {}
    missing = [key for key in CREDENTIAL_KEYS if not data.get(key)]
    if missing:
        raise BackendUnavailable(f"{where} has no {' or '.join(missing)}: pods read those keys")
    return {key: str(data[key]) for key in CREDENTIAL_KEYS}


def _apply(client: KubeClient, obj: Obj, user: str) -> None:
    """Create; on 409, bring the workbench's own object to `obj` and leave anyone else's alone."""
    try:
        client.create(obj)
        log.info("created %s %s for user %r", obj["kind"], _where(obj), user)
        return
    except Conflict:
        pass
    meta = obj["metadata"]
    existing = client.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
    found = metadata_of(existing)
    if obj["kind"] == "Namespace":
        _check_owner(found, meta["name"], user)
    if (found.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
        if obj["kind"] == "Namespace" and (found.get("labels") or {}).get(ISTIO_INJECTION_LABEL) != "enabled":
            log.warning(
                "namespace %s was made by someone else without %s=enabled: its servers get no Istio "
                "sidecar, so no AuthorizationPolicy guards them",
                meta["name"],
                ISTIO_INJECTION_LABEL,
            )
        return
    if obj["kind"] == "RoleBinding" and existing.get("roleRef") != obj["roleRef"]:
        # roleRef cannot change: a binding to another ClusterRole is replaced.
        client.delete_object(obj, missing_ok=True)
        client.create(obj)
        return
    patch = _drift(obj, existing)
    if patch:
        client.patch(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], patch)
        log.info("updated %s %s (%s) for user %r", obj["kind"], _where(obj), ", ".join(sorted(patch)), user)


def _check_owner(found: dict[str, Any], namespace: str, user: str) -> None:
    annotations = found.get("annotations") or {}
    owner = annotations.get(OWNER_ANNOTATION) or annotations.get(USER_ANNOTATION)
    if owner and owner != user:
        raise Conflict(
            f"namespace {namespace!r} belongs to user {owner!r}, not {user!r}; an admin can give users "
            "distinct namespaces with CubeWorkbench.namespace_template (e.g. with {username})",
            field="user",
        )


def _drift(obj: Obj, existing: Obj) -> dict[str, Any]:
    """A merge patch of what differs from `obj`: its labels and annotations (added, never removed) and
    its body (a Secret's data, a RoleBinding's subjects)."""
    patch: dict[str, Any] = {}
    meta, found = obj["metadata"], metadata_of(existing)
    for part in ("labels", "annotations"):
        wanted = meta.get(part) or {}
        have = found.get(part) or {}
        if any(have.get(key) != value for key, value in wanted.items()):
            patch.setdefault("metadata", {})[part] = wanted
    for body in ("data", "subjects"):
        if body in obj and existing.get(body) != obj[body]:
            patch[body] = obj[body]
    return patch


def _where(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])

"""Kubernetes RBAC, evaluated the way kube-apiserver's RBAC authorizer does, against the ClusterRoles
that `deploy/base` renders; and the two questions asked of them: is every request the workbench made
allowed, and is every permission granted used by some request.

A role of the workbench (the User-Agent's `workbench` or `user`, see `audit.py`) runs as a service
account bound to one ClusterRole (`ROLE_CLUSTER_ROLES`). A ClusterRoleBinding grants it everywhere;
otherwise it is bound by RoleBindings, in a namespace at a time, so a cluster-wide request is denied.
Discovery (GET /api, /apis/...) is allowed to every authenticated user by the cluster's own
`system:discovery` ClusterRole, so it needs no rule here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.deploy.rendered import DEPLOY_DIR, render
from tests.kubernetes.audit import ApiRequest

BASE = DEPLOY_DIR / "base"
ROLE_CLUSTER_ROLES = {"workbench": "cube-jupyter", "user": "cube-jupyter-user"}
# kube-apiserver's bootstrap policy: `system:discovery` and `system:public-info-viewer`, bound to
# every authenticated user.
DISCOVERY_URLS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/readyz",
    "/version",
    "/version/",
    "/openapi",
    "/openapi/*",
)
ALL = "*"


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a ClusterRole."""

    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, rule: dict[str, Any]) -> Rule:
        return cls(
            tuple(rule.get("apiGroups") or ()),
            tuple(rule.get("resources") or ()),
            tuple(rule.get("verbs") or ()),
            tuple(rule.get("resourceNames") or ()),
            tuple(rule.get("nonResourceURLs") or ()),
        )

    def allows(self, request: ApiRequest) -> bool:
        """rbac/validation's RuleAllows: verb, then group, resource (`res/sub`, `*/sub`) and name."""
        if not (ALL in self.verbs or request.verb in self.verbs):
            return False
        if not request.resource_request:
            return any(_url_matches(url, request.path) for url in self.non_resource_urls)
        return (
            (ALL in self.api_groups or request.group in self.api_groups)
            and any(
                _resource_matches(r, request.combined_resource, request.subresource) for r in self.resources
            )
            and (not self.resource_names or request.name in self.resource_names)
        )

    def grants(self) -> list[Rule]:
        """The rule split into single permissions: one group, resource, verb (and name or URL)."""
        if self.non_resource_urls:
            return [
                Rule(verbs=(v,), non_resource_urls=(u,)) for v in self.verbs for u in self.non_resource_urls
            ]
        return [
            Rule((g,), (r,), (v,), (n,) if n else ())
            for g in self.api_groups
            for r in self.resources
            for v in self.verbs
            for n in (self.resource_names or ("",))
        ]

    def describe(self) -> str:
        if self.non_resource_urls:
            return f"{'/'.join(self.verbs)} {', '.join(self.non_resource_urls)}"
        groups = ",".join(g or '""' for g in self.api_groups)
        names = f" named {','.join(self.resource_names)}" if self.resource_names else ""
        return f"{','.join(self.verbs)} {','.join(self.resources)} in group {groups}{names}"


def _resource_matches(rule_resource: str, combined: str, subresource: str) -> bool:
    if rule_resource in (ALL, combined):
        return True
    return bool(subresource) and rule_resource == f"*/{subresource}"


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url in (ALL, path):
        return True
    return rule_url.endswith("*") and path.startswith(rule_url[:-1])


@dataclass(frozen=True)
class ClusterRole:
    name: str
    rules: tuple[Rule, ...]
    cluster_wide: bool  # bound by a ClusterRoleBinding, not only by RoleBindings

    def allows(self, request: ApiRequest) -> bool:
        discovery = any(_url_matches(url, request.path) for url in DISCOVERY_URLS)
        if not request.resource_request and request.verb == "get" and discovery:
            return True
        if request.namespace is None and not self.cluster_wide:
            return False  # a RoleBinding grants nothing cluster-wide, nor any non-resource URL
        return any(rule.allows(request) for rule in self.rules)


@dataclass(frozen=True)
class Policy:
    """The ClusterRoles of the rendered manifests: each role's (`workbench`, `user`) and all by name."""

    roles: dict[str, ClusterRole]
    by_name: dict[str, ClusterRole]

    @classmethod
    def from_manifests(cls, manifests: Iterable[dict[str, Any]]) -> Policy:
        manifests = list(manifests)
        bound_cluster_wide = {
            (m.get("roleRef") or {}).get("name")
            for m in manifests
            if m.get("kind") == "ClusterRoleBinding" and (m.get("roleRef") or {}).get("kind") == "ClusterRole"
        }
        by_name = {
            m["metadata"]["name"]: ClusterRole(
                m["metadata"]["name"],
                tuple(Rule.from_dict(rule) for rule in m.get("rules") or ()),
                m["metadata"]["name"] in bound_cluster_wide,
            )
            for m in manifests
            if m.get("kind") == "ClusterRole"
        }
        missing = {role: name for role, name in ROLE_CLUSTER_ROLES.items() if name not in by_name}
        if missing:
            raise AssertionError(f"the manifests have no ClusterRole for these roles: {missing}")
        return cls({role: by_name[name] for role, name in ROLE_CLUSTER_ROLES.items()}, by_name)

    def allows(self, request: ApiRequest) -> bool:
        role = self.roles[request.role or ""]
        if role.allows(request):
            return True
        # No `bind`: the API server lets a binding through if its writer holds every permission of
        # the role it names, where the binding grants it (ConfirmNoEscalation).
        bound = self.by_name.get(request.name) if request.verb == "bind" else None
        return bound is not None and all(
            role.allows(request_for(grant, request)) for rule in bound.rules for grant in rule.grants()
        )


def request_for(grant: Rule, bind: ApiRequest) -> ApiRequest:
    """The request a single-permission `grant` allows, made where `bind`'s binding grants it."""
    resource, _, subresource = grant.resources[0].partition("/")
    names = grant.resource_names or ("",)
    return ApiRequest(
        bind.role, grant.verbs[0], grant.api_groups[0], resource, subresource, bind.namespace, names[0]
    )


def denied(policy: Policy, requests: Iterable[ApiRequest]) -> list[str]:
    """Each distinct request the ClusterRoles do not allow, saying whose and why."""
    problems: dict[str, None] = {}
    for request in requests:
        if request.role is None:
            problems[
                f"{request.describe()}: sent by a client that names no role (build it with "
                "make_api_client(settings, host=...), so its User-Agent says whose permissions it needs)"
            ] = None
        elif request.role not in policy.roles:
            problems[f"{request.describe()}: role {request.role!r} has no ClusterRole"] = None
        elif request.verb == "bind" and request.name not in policy.by_name:
            continue  # a role an admin configured and brings: whether binding it escalates is theirs
        elif not policy.allows(request):
            role = policy.roles[request.role]
            scope = "" if role.cluster_wide or request.namespace else " (it is bound per namespace only)"
            problems[
                f"{request.describe()}: not allowed to the {request.role} role by {role.name}{scope}"
            ] = None
    return list(problems)


def unused(role: str, policy: Policy, requests: Iterable[ApiRequest]) -> list[str]:
    """Each single permission of `role`'s ClusterRole that none of its requests needed."""
    mine = [r for r in requests if r.role == role]
    cluster_role = policy.roles[role]
    problems = []
    for rule in cluster_role.rules:
        for grant in rule.grants():
            if ALL in grant.api_groups + grant.resources + grant.verbs + grant.non_resource_urls:
                problems.append(f"{cluster_role.name} grants `*` ({grant.describe()}): name what is used")
            elif not any(grant.allows(request) for request in mine):
                problems.append(f"{cluster_role.name} grants {grant.describe()}, which nothing used")
    return problems


def base_policy() -> Policy:
    """The ClusterRoles a platform admin installs: `kubectl kustomize deploy/base`."""
    return Policy.from_manifests(render(BASE))

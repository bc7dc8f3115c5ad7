"""A user's namespaces the way Kubeflow finds them (its dashboard and access management, KFAM).

A Profile (kubeflow.org/v1, cluster-scoped) names a namespace after itself and has one owner,
`spec.owner.name`; its profile controller makes the namespace. Contributors are RoleBindings in a
profile's namespace annotated `user: <name>` and `role: admin|edit|view` (KFAM writes them, binding
the ClusterRoles kubeflow-admin/-edit/-view; the owner's own one is `namespaceAdmin`, role admin).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cube_jupyter.kube.client import KubeClient, ResourceType, register_resource_type
from cube_jupyter.kube.informer import Indexer, Informer
from cube_jupyter.kube.objects import Obj, annotations_of, name_of, namespace_of

PROFILE = ResourceType("kubeflow.org/v1", "Profile", "profiles", namespaced=False)
register_resource_type(PROFILE)
ROLE_BINDING_API = "rbac.authorization.k8s.io/v1"
# KFAM's annotations on a contributor's RoleBinding.
USER_KEY = "user"
ROLE_KEY = "role"
ROLES = ("admin", "edit", "view")


@dataclass(frozen=True)
class Contribution:
    """A namespace a user was given a role in (KFAM's "contributor")."""

    namespace: str
    role: str


def profile_owner(profile: Obj) -> str:
    return str((((profile.get("spec") or {}).get("owner")) or {}).get("name") or "")


def index_owner(profile: Obj) -> list[str]:
    owner = profile_owner(profile)
    return [owner] if owner else []


def owned_namespaces(profiles: Iterable[Obj], user: str) -> list[str]:
    """The namespaces of the Profiles `user` owns, by name (a Profile's namespace is its name)."""
    return sorted(name_of(p) for p in profiles if profile_owner(p) == user and name_of(p))


def contributions(
    role_bindings: Iterable[Obj], user: str, profile_namespaces: Iterable[str]
) -> list[Contribution]:
    """The roles KFAM gave `user` in profile namespaces (RoleBindings elsewhere are not Kubeflow's)."""
    namespaces = set(profile_namespaces)
    found = set()
    for binding in role_bindings:
        annotations = annotations_of(binding)
        role = annotations.get(ROLE_KEY)
        if annotations.get(USER_KEY) == user and role in ROLES and namespace_of(binding) in namespaces:
            found.add(Contribution(namespace=namespace_of(binding), role=str(role)))
    return sorted(found, key=lambda c: (c.namespace, c.role))


class KubeflowProfiles:
    """The cluster's Profiles, from an informer indexed by owner; contributors read on demand."""

    INDEXERS: dict[str, Indexer] = {"owner": index_owner}

    def __init__(self, client: KubeClient, profiles: Informer) -> None:
        self.client = client
        self.profiles = profiles

    def owned_by(self, user: str) -> list[str]:
        """`user`'s own profile namespaces, from the cache."""
        return owned_namespaces(self.profiles.by_index("owner", user), user)

    def contributions_of(self, user: str) -> list[Contribution]:
        """Where `user` is a contributor: one API list of RoleBindings (only when explaining why a
        user has no namespace of their own, never per read)."""
        bindings = self.client.list(ROLE_BINDING_API, "RoleBinding").items
        names = [name_of(p) for p in self.profiles.list()]
        return contributions(bindings, user, names)

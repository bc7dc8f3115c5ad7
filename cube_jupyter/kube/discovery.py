"""Which APIs the cluster serves, read from the API's discovery documents as `kubectl api-resources`
does: `/apis` names the group versions, `/apis/<group>/<version>` the kinds each one serves.

Features ask only about the group versions they use (the Training Operator's, Katib's, KServe's,
Argo's), so discovery costs one request plus one per such group version the cluster has, once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cube_jupyter.kube.resources import resource_type

if TYPE_CHECKING:
    from cube_jupyter.kube.client import KubeClient


@dataclass(frozen=True)
class ServedApis:
    """The (apiVersion, kind) pairs the cluster serves, among the group versions asked about."""

    kinds: frozenset[tuple[str, str]]

    def serves(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in self.kinds


def missing_crd(api_version: str, kind: str) -> str:
    """What to tell a user whose request needs a kind the cluster does not serve."""
    crd = resource_type(api_version, kind).describe()
    return f"{kind} needs the CRD {crd}, which this cluster does not serve"


def discover(client: KubeClient, group_versions: Iterable[str]) -> ServedApis:
    """The kinds served in `group_versions` ('kubeflow.org/v1', ...). Blocking: call in a thread."""
    from cube_jupyter.kube.client import ApiNotFound  # the client is loaded: it is given one

    listed = client.get_path("/apis", "reading the cluster's API groups")
    offered = {
        str(version.get("groupVersion"))
        for group in listed.get("groups") or []
        for version in group.get("versions") or []
    }
    kinds: set[tuple[str, str]] = set()
    for group_version in sorted(set(group_versions) & offered):
        try:
            resources = client.get_path(
                f"/apis/{group_version}", f"reading the resources of API {group_version}"
            )
        except ApiNotFound:  # removed between the two requests (a CRD being uninstalled)
            continue
        for resource in resources.get("resources") or []:
            name = str(resource.get("name") or "")
            if name and "/" not in name:  # `pods/log` and the like are subresources, not kinds
                kinds.add((group_version, str(resource.get("kind") or "")))
    return ServedApis(frozenset(kinds))

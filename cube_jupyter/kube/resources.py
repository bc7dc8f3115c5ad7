"""Where each kind lives in the API's URL space: the one table the client, discovery and the
renderers' "which CRD is missing" messages read. No client here, so importing it costs nothing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    """Where objects of one apiVersion/kind live in the API's URL space."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def base_path(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        path = self.base_path
        if self.namespaced and namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{self.plural}"
        if name:
            path += f"/{name}"
            if subresource:
                path += f"/{subresource}"
        return path

    def describe(self) -> str:
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


# The kinds the workbench creates or watches. Others are guessed the way CRDs are usually named.
_KNOWN_TYPES = [
    ResourceType("v1", "Pod", "pods"),
    ResourceType("v1", "Event", "events"),
    ResourceType("v1", "Service", "services"),
    ResourceType("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ResourceType("v1", "Namespace", "namespaces", namespaced=False),
    ResourceType("v1", "ConfigMap", "configmaps"),
    ResourceType("v1", "ResourceQuota", "resourcequotas"),
    ResourceType("v1", "Secret", "secrets"),
    ResourceType("apps/v1", "StatefulSet", "statefulsets"),
    ResourceType("apps/v1", "Deployment", "deployments"),
    ResourceType("kubeflow.org/v1", "Notebook", "notebooks"),
    ResourceType("kubeflow.org/v1beta1", "Notebook", "notebooks"),
    ResourceType("networking.istio.io/v1", "VirtualService", "virtualservices"),
    ResourceType("networking.istio.io/v1beta1", "VirtualService", "virtualservices"),
    ResourceType("security.istio.io/v1", "AuthorizationPolicy", "authorizationpolicies"),
    ResourceType("security.istio.io/v1beta1", "AuthorizationPolicy", "authorizationpolicies"),
]
_TYPES = {(t.api_version, t.kind): t for t in _KNOWN_TYPES}


def resource_type(api_version: str, kind: str) -> ResourceType:
    """The URL layout of `kind`; unknown kinds are assumed namespaced with plural `<kind>s`."""
    found = _TYPES.get((api_version, kind))
    if found is not None:
        return found
    lower = kind.lower()
    plural = lower + "es" if lower.endswith(("s", "x", "ch", "sh")) else lower + "s"
    return ResourceType(api_version, kind, plural)


def register_resource_type(resource: ResourceType) -> None:
    """Teach the client a kind whose plural or scope does not follow the usual pattern."""
    _TYPES[(resource.api_version, resource.kind)] = resource

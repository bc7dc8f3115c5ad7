"""How per-user notebook servers are shaped, named, routed and limited: the `CubeSpawner` traitlets
admins set (after KubeSpawner's), and `NotebookSettings`, what the notebooks feature reads.

    c.CubeSpawner.profiles = [{"name": "gpu", "image": "...", "gpu": 1, ...}]
    c.CubeSpawner.resource_kind = "StatefulSet"

Workbench-wide policy (admins, the GPU quota, users' namespaces) is `CubeWorkbench`'s; its old
`CubeSpawner.*` names still load, with a warning (`cube_jupyter.config`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from traitlets import CaselessStrEnum, Dict, Int, List, Unicode

from cube_jupyter.configurable import (
    CubePods,
    checked,
    dns_name,
    is_http_url,
    non_negative,
    not_empty,
    optional,
)
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.fields import quantity
from cube_jupyter.images import NOTEBOOK_IMAGE
from cube_jupyter.notebooks.spec import Profile
from cube_jupyter.workbench import WorkbenchSettings

DEFAULT_PROFILES: list[dict[str, Any]] = [
    {
        "name": "standard",
        "display_name": "Standard",
        "description": "1 CPU, 2 GiB memory",
        "image": NOTEBOOK_IMAGE,
        "cpu": "1",
        "memory": "2Gi",
        "default": True,
    }
]
# Kubeflow's notebook controller routes every Notebook at /notebook/{namespace}/{name}/ and sets NB_PREFIX.
KUBEFLOW_PATH_PREFIX = "/notebook"
# An Istio mTLS principal: trust domain, then the pod's namespace and service account.
PRINCIPAL = re.compile(r"^[^/\s]+/ns/[^/\s]+/sa/[^/\s]+$")
# An HTTP header name (RFC 9110 token).
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _route_prefix(value: str, field: str) -> None:
    if not value.startswith("/") or value.endswith("/"):
        raise InvalidInput(
            f"{field} {value!r} must start with '/' and not end with '/' (e.g. '/notebook')", field=field
        )


def _gateway(value: str, field: str) -> None:
    if not value or value.count("/") > 1:
        raise InvalidInput(f"{field} {value!r} must be 'namespace/name' or 'name'", field=field)


def _principal(value: str, field: str) -> None:
    if not PRINCIPAL.match(value):
        raise InvalidInput(
            f"{field} {value!r} must be an Istio principal 'TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT'",
            field=field,
        )


def _header_name(value: str, field: str) -> None:
    if not HEADER_NAME.match(value):
        raise InvalidInput(
            f"{field} {value!r} must be an HTTP header name (e.g. 'kubeflow-userid')", field=field
        )


def _server_url(value: str, field: str) -> None:
    try:
        url = value.format(name="nb", namespace="ns")
    except (KeyError, IndexError, AttributeError, ValueError):
        url = ""
    if not is_http_url(url, path=False):
        raise InvalidInput(
            f"{field} {value!r} must be an http(s) URL without a path, using only {{name}} and "
            "{namespace} (e.g. 'http://{name}.{namespace}.svc.cluster.local')",
            field=field,
        )


def parse_profiles(raw_profiles: list[Any]) -> tuple[Profile, ...]:
    """`CubeSpawner.profiles` as Profiles: at least one, names unique, at most one default."""
    where = "CubeSpawner.profiles"
    if not raw_profiles:
        raise InvalidInput(f"{where} is empty: offer at least one profile", field=where)
    profiles = tuple(Profile.from_config(raw, i) for i, raw in enumerate(raw_profiles))
    seen: set[str] = set()
    for i, profile in enumerate(profiles):
        if profile.name in seen:
            named = f"{where}[{i}].name"
            raise InvalidInput(f"{named}: profile name {profile.name!r} is used twice", field=named)
        seen.add(profile.name)
    defaults = [p.name for p in profiles if p.default]
    if len(defaults) > 1:
        raise InvalidInput(f"{where}: only one profile may be the default, got {defaults}", field=where)
    return profiles


def _profile_list(value: list[Any], field: str) -> None:
    parse_profiles(value)


class CubeSpawner(CubePods):
    """How per-user notebook servers are shaped, named, routed and limited (after KubeSpawner)."""

    profiles = List(
        Dict(),
        default_value=DEFAULT_PROFILES,
        help="Server profiles offered to users: dicts with name, display_name, description, image, "
        "cpu, memory, gpu, gpu_resource, node_selector, tolerations, env, default.",
    )
    path_prefix = Unicode(
        KUBEFLOW_PATH_PREFIX,
        help="Route prefix: servers live at {path_prefix}/{namespace}/{name}/ on Kubernetes. With "
        "resource_kind 'Notebook' Kubeflow's notebook controller routes '/notebook/...', so it must "
        "stay '/notebook'.",
    )
    istio_gateway = Unicode(
        "kubeflow/kubeflow-gateway",
        help="Istio Gateway the VirtualServices of resource_kind 'StatefulSet' bind to (with 'Notebook' "
        "the notebook controller's ISTIO_GATEWAY decides).",
    )
    istio_ingress_principal = Unicode(
        "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account",
        help="mTLS principal of the ingress gateway; AuthorizationPolicies admit only it.",
    )
    user_header = Unicode(
        "kubeflow-userid",
        help="Trusted identity header set by the mesh (used by the trusted-header identity provider "
        "and by each server's AuthorizationPolicy).",
    )
    user_header_prefix = Unicode(
        "", help="Prefix stripped from the identity header's value (e.g. 'accounts.google.com:')."
    )
    workspace_size = Unicode("10Gi", help="Size of each server's workspace PVC.")
    storage_class = Unicode("", help="StorageClass of workspace PVCs; empty: the cluster default.")
    resource_kind = CaselessStrEnum(
        ["Notebook", "StatefulSet"],
        default_value="Notebook",
        help="Render servers as kubeflow.org/v1 Notebooks, whose Service and VirtualService Kubeflow's "
        "notebook controller makes (USE_ISTIO=true, its default), or as a StatefulSet + Service + "
        "VirtualService the workbench makes itself.",
    )
    cmd = List(
        Unicode(),
        default_value=["jupyter", "lab"],
        help="Command started in the server container; base_url and port flags are appended.",
    )
    max_servers_per_user = Int(10, help="Most servers (running or stopped) one user may have; 0: no limit.")
    max_starting_servers = Int(
        8,
        help="Most servers starting at once, all users together: a create or start past it is refused "
        "(503, try again) until one is up, so a burst of creates cannot start more than the machine "
        "or cluster takes. 0: no limit.",
    )
    cull_idle_seconds = Int(
        0, help="Stop servers with no kernel or terminal activity for this long; 0: never."
    )
    max_queued_servers_per_user = Int(
        4,
        help="Most servers one user may have waiting in the local queue for GPUs (status 'queued'): a "
        "create or start past it is refused (403) naming this field. 0: no limit.",
    )
    server_url_template = Unicode(
        "http://{name}.{namespace}.svc.cluster.local",
        help="Where the workbench reaches a server in the cluster to read its activity (for culling), "
        "without the route prefix, which is appended; {name} and {namespace} are the server's.",
    )
    workbench_principal = Unicode(
        "cluster.local/ns/kubeflow/sa/cube-jupyter",
        help="mTLS principal of the workbench's own pod; each server's AuthorizationPolicy lets it GET "
        "the server's api/kernels and api/terminals lists (and nothing else) to detect idleness.",
    )

    _profiles_ok = checked(_profile_list, "profiles")
    _limits_ok = checked(
        non_negative,
        "max_servers_per_user",
        "max_starting_servers",
        "cull_idle_seconds",
        "max_queued_servers_per_user",
    )
    _path_prefix_ok = checked(optional(_route_prefix), "path_prefix")
    _istio_gateway_ok = checked(_gateway, "istio_gateway")
    _principals_ok = checked(_principal, "istio_ingress_principal", "workbench_principal")
    _user_header_ok = checked(_header_name, "user_header")
    _cmd_ok = checked(not_empty, "cmd")
    _workspace_size_ok = checked(quantity, "workspace_size")
    _storage_class_ok = checked(optional(dns_name), "storage_class")
    _server_url_template_ok = checked(_server_url, "server_url_template")

    def check(self) -> None:
        """What the traits mean only together: the notebook controller's fixed route."""
        if self.resource_kind == "Notebook" and self.path_prefix != KUBEFLOW_PATH_PREFIX:
            raise ConfigError(
                f"CubeSpawner.path_prefix {self.path_prefix!r} must be {KUBEFLOW_PATH_PREFIX!r} with "
                "resource_kind 'Notebook': Kubeflow's notebook controller routes every Notebook at "
                "/notebook/{namespace}/{name}/ (use resource_kind 'StatefulSet' for another prefix)",
                field="CubeSpawner.path_prefix",
            )


@dataclass(frozen=True, kw_only=True)
class NotebookSettings(WorkbenchSettings):
    """What the notebooks feature reads: the spawner's traits, its profiles, and the config every
    server it starts loads (the workbench's effective Cube* config, so runs, jobs and GPUs there count
    against the same limits and state)."""

    spawner: CubeSpawner
    profiles: tuple[Profile, ...]
    server_config: dict[str, dict[str, Any]] = field(default_factory=dict)

    def profile(self, name: str | None) -> Profile:
        """The named profile, or the default one when `name` is empty."""
        if not name:
            return next((p for p in self.profiles if p.default), self.profiles[0])
        for profile in self.profiles:
            if profile.name == name:
                return profile
        offered = ", ".join(p.name for p in self.profiles)
        raise InvalidInput(f"profile {name!r} is not offered; choose one of: {offered}", field="profile")

"""Admin configuration: traitlets Configurables set from `jupyter_server_config.py`.

    c.CubeWorkbench.backend = "kubernetes"
    c.CubeSpawner.profiles = [{"name": "gpu", "image": "...", "gpu": 1, ...}]

`load_settings` builds and validates both at startup; any bad value raises `ConfigError` naming the
field (`CubeSpawner.profiles[1].cpu`), so a server never runs with config it silently ignored.
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jupyter_core.paths import jupyter_data_dir
from traitlets import (
    CaselessStrEnum,
    Dict,
    Float,
    Int,
    List,
    TraitError,
    Unicode,
    default,
)
from traitlets.config import Config, Configurable, PyFileConfigLoader

from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.names import MAX_SLUG_LENGTH, parse_quantity, validate_dns_label
from cube_jupyter.notebooks.spec import Profile

DEFAULT_PROFILES: list[dict[str, Any]] = [
    {
        "name": "standard",
        "display_name": "Standard",
        "description": "1 CPU, 2 GiB memory",
        "image": "quay.io/jupyter/scipy-notebook:2025-03-17",
        "cpu": "1",
        "memory": "2Gi",
        "default": True,
    }
]
# An Istio mTLS principal: trust domain, then the pod's namespace and service account.
PRINCIPAL = re.compile(r"^[^/\s]+/ns/[^/\s]+/sa/[^/\s]+$")
# An HTTP header name (RFC 9110 token).
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class CubeWorkbench(Configurable):
    """Workbench-wide settings: which backend runs things, and where local state lives."""

    backend = CaselessStrEnum(
        ["local", "kubernetes"],
        default_value="local",
        help="Where servers, runs and jobs run: 'local' child processes, or 'kubernetes' objects.",
    ).tag(config=True)

    state_dir = Unicode(help="Directory for local state (sqlite, server logs, workspaces).").tag(config=True)

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "cube-jupyter")

    default_user = Unicode(
        help="The user a single-user server acts as (Jupyter's own auth has one owner). "
        "Ignored when a trusted-header identity provider names the caller.",
    ).tag(config=True)

    @default("default_user")
    def _default_default_user(self) -> str:
        try:
            return getpass.getuser()
        except (KeyError, OSError):
            return "jovyan"

    kubernetes_context = Unicode(
        "", help="kubeconfig context for the kubernetes backend; empty: in-cluster config, then kubeconfig."
    ).tag(config=True)

    prometheus_url = Unicode(
        "",
        help="Prometheus scraping the DCGM exporter, for GPU use by pod on the kubernetes backend; "
        "'' reads this machine's GPUs through NVML. CubeGPU.prometheus_url, when set, wins.",
    ).tag(config=True)

    poll_seconds = Float(
        5.0,
        help="How often servers are checked: the local backend's children for liveness and activity, "
        "and (when CubeSpawner.cull_idle_seconds > 0) the kubernetes backend's running servers for "
        "activity. The name is historical; it applies to both backends.",
    ).tag(config=True)


class CubeSpawner(Configurable):
    """How per-user notebook servers are shaped, named, routed and limited (after KubeSpawner)."""

    profiles = List(
        Dict(),
        default_value=DEFAULT_PROFILES,
        help="Server profiles offered to users: dicts with name, display_name, description, image, "
        "cpu, memory, gpu, gpu_resource, node_selector, tolerations, env, default.",
    ).tag(config=True)
    namespace_template = Unicode(
        "cube-{username}", help="Kubernetes namespace of a user's servers; {username} is escaped."
    ).tag(config=True)
    path_prefix = Unicode(
        "/notebook", help="Route prefix: servers live at {path_prefix}/{namespace}/{name}/ on Kubernetes."
    ).tag(config=True)
    istio_gateway = Unicode(
        "kubeflow/kubeflow-gateway", help="Istio Gateway the VirtualServices bind to."
    ).tag(config=True)
    istio_ingress_principal = Unicode(
        "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account",
        help="mTLS principal of the ingress gateway; AuthorizationPolicies admit only it.",
    ).tag(config=True)
    user_header = Unicode(
        "kubeflow-userid",
        help="Trusted identity header set by the mesh (used by the trusted-header identity provider "
        "and by each server's AuthorizationPolicy).",
    ).tag(config=True)
    user_header_prefix = Unicode(
        "", help="Prefix stripped from the identity header's value (e.g. 'accounts.google.com:')."
    ).tag(config=True)
    workspace_size = Unicode("10Gi", help="Size of each server's workspace PVC.").tag(config=True)
    storage_class = Unicode("", help="StorageClass of workspace PVCs; empty: the cluster default.").tag(
        config=True
    )
    resource_kind = CaselessStrEnum(
        ["Notebook", "StatefulSet"],
        default_value="Notebook",
        help="Render servers as kubeflow.org/v1 Notebooks, or as a StatefulSet + Service.",
    ).tag(config=True)
    cmd = List(
        Unicode(),
        default_value=["jupyter", "lab"],
        help="Command started in the server container; base_url and port flags are appended.",
    ).tag(config=True)
    service_account = Unicode("default-editor", help="Service account of server pods ('' for default).").tag(
        config=True
    )
    max_servers_per_user = Int(
        10, help="Most servers (running or stopped) one user may have; 0: no limit."
    ).tag(config=True)
    gpu_quota_per_user = Int(
        0, help="Most GPUs one user's running servers may hold together; 0: no limit."
    ).tag(config=True)
    cull_idle_seconds = Int(
        0, help="Stop servers with no kernel or terminal activity for this long; 0: never."
    ).tag(config=True)
    admin_users = List(Unicode(), help="Users who may see and act on every user's servers.").tag(config=True)
    server_url_template = Unicode(
        "http://{name}.{namespace}.svc.cluster.local",
        help="Where the workbench reaches a server in the cluster to read its activity (for culling), "
        "without the route prefix, which is appended; {name} and {namespace} are the server's.",
    ).tag(config=True)
    workbench_principal = Unicode(
        "cluster.local/ns/kubeflow/sa/cube-jupyter",
        help="mTLS principal of the workbench's own pod; each server's AuthorizationPolicy lets it GET "
        "the server's api/kernels and api/terminals lists (and nothing else) to detect idleness.",
    ).tag(config=True)


@dataclass(frozen=True)
class Settings:
    """Validated admin config, built once at startup and passed to the core."""

    workbench: CubeWorkbench
    spawner: CubeSpawner
    profiles: tuple[Profile, ...]

    @property
    def state_dir(self) -> Path:
        return Path(self.workbench.state_dir)

    def profile(self, name: str | None) -> Profile:
        """The named profile, or the default one when `name` is empty."""
        if not name:
            return next((p for p in self.profiles if p.default), self.profiles[0])
        for profile in self.profiles:
            if profile.name == name:
                return profile
        offered = ", ".join(p.name for p in self.profiles)
        raise InvalidInput(f"profile {name!r} is not offered; choose one of: {offered}", field="profile")

    def is_admin(self, user: str) -> bool:
        return user in self.spawner.admin_users

    def namespace_for(self, user_slug: str) -> str:
        return self.spawner.namespace_template.format(username=user_slug)


def load_settings(config: Config | None = None) -> Settings:
    """Instantiate and validate the Configurables from `config`; raise ConfigError naming the field."""
    try:
        workbench = CubeWorkbench(config=config)
        spawner = CubeSpawner(config=config)
    except TraitError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    profiles = _validate_profiles(spawner.profiles)
    _validate_spawner(spawner)
    return Settings(workbench=workbench, spawner=spawner, profiles=profiles)


def load_config_file(path: str | os.PathLike[str]) -> Config:
    """Read a `jupyter_server_config.py`-style file (`c.CubeSpawner.x = ...`) for the CLI."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} does not exist", field="--config")
    loader = PyFileConfigLoader(file.name, path=str(file.parent.resolve()))
    try:
        return loader.load_config()
    except Exception as exc:  # a config file is user code: any error it raises is a config error
        raise ConfigError(f"config file {str(file)!r} could not be loaded: {exc}", field="--config") from None


def _validate_profiles(raw_profiles: list[dict[str, Any]]) -> tuple[Profile, ...]:
    if not raw_profiles:
        raise ConfigError(
            "CubeSpawner.profiles is empty: offer at least one profile", field="CubeSpawner.profiles"
        )
    try:
        profiles = tuple(Profile.from_config(raw, i) for i, raw in enumerate(raw_profiles))
    except InvalidInput as exc:
        raise ConfigError(exc.message, field=exc.field) from None
    seen: set[str] = set()
    for i, profile in enumerate(profiles):
        if profile.name in seen:
            field = f"CubeSpawner.profiles[{i}].name"
            raise ConfigError(f"{field}: profile name {profile.name!r} is used twice", field=field)
        seen.add(profile.name)
    defaults = [p.name for p in profiles if p.default]
    if len(defaults) > 1:
        raise ConfigError(
            f"CubeSpawner.profiles: only one profile may be the default, got {defaults}",
            field="CubeSpawner.profiles",
        )
    return profiles


def _validate_spawner(spawner: CubeSpawner) -> None:
    checks: list[tuple[str, bool, str]] = [
        ("max_servers_per_user", spawner.max_servers_per_user >= 0, "must be >= 0 (0: no limit)"),
        ("gpu_quota_per_user", spawner.gpu_quota_per_user >= 0, "must be >= 0 (0: no limit)"),
        ("cull_idle_seconds", spawner.cull_idle_seconds >= 0, "must be >= 0 (0: never cull)"),
        (
            "path_prefix",
            (spawner.path_prefix.startswith("/") and not spawner.path_prefix.endswith("/"))
            or spawner.path_prefix == "",
            "must start with '/' and not end with '/' (e.g. '/notebook')",
        ),
        (
            "istio_gateway",
            spawner.istio_gateway.count("/") <= 1 and bool(spawner.istio_gateway),
            "must be 'namespace/name' or 'name'",
        ),
        (
            "user_header",
            bool(HEADER_NAME.match(spawner.user_header)),
            "must be an HTTP header name (e.g. 'kubeflow-userid')",
        ),
        ("cmd", bool(spawner.cmd), "must not be empty"),
        ("namespace_template", "{username}" in spawner.namespace_template, "must contain '{username}'"),
        (
            "server_url_template",
            _is_server_url_template(spawner.server_url_template),
            "must be an http(s) URL without a path, using only {name} and {namespace} "
            "(e.g. 'http://{name}.{namespace}.svc.cluster.local')",
        ),
        (
            "workbench_principal",
            bool(PRINCIPAL.match(spawner.workbench_principal)),
            "must be an Istio principal 'TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT'",
        ),
    ]
    for name, ok, why in checks:
        if not ok:
            field = f"CubeSpawner.{name}"
            raise ConfigError(f"{field} {getattr(spawner, name)!r} {why}", field=field)
    try:
        parse_quantity(spawner.workspace_size, "CubeSpawner.workspace_size")
        _validate_namespace_template(spawner.namespace_template)
        if spawner.storage_class:
            validate_dns_label(spawner.storage_class, "CubeSpawner.storage_class", 253)
    except InvalidInput as exc:
        raise ConfigError(exc.message, field=exc.field) from None


def _validate_namespace_template(template: str) -> None:
    """Every user's namespace must be a DNS label: check with the longest slug a user can get, so a
    template that fits short names but not long ones fails at startup, not at some user's create."""
    field = "CubeSpawner.namespace_template"
    try:
        longest = template.format(username="x" * MAX_SLUG_LENGTH)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"{field} {template!r} is not a valid template: only {{username}} may be used ({exc!r})",
            field=field,
        ) from None
    try:
        validate_dns_label(longest, field)
    except InvalidInput as exc:
        raise ConfigError(
            f"{field} {template!r} does not make a DNS-1123 label for every user: with the longest "
            f"user slug ({MAX_SLUG_LENGTH} characters) it gives {longest!r}: {exc.message}",
            field=field,
        ) from None


def _is_server_url_template(template: str) -> bool:
    try:
        url = urlsplit(template.format(name="nb", namespace="ns"))
        url.port  # noqa: B018 - raises ValueError on a bad port
    except (KeyError, IndexError, AttributeError, ValueError):
        return False
    return url.scheme in ("http", "https") and bool(url.hostname) and url.path in ("", "/") and not url.query

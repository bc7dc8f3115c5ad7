"""Admin configuration: traitlets Configurables set from `jupyter_server_config.py`.

    c.CubeWorkbench.backend = "kubernetes"
    c.CubeSpawner.profiles = [{"name": "gpu", "image": "...", "gpu": 1, ...}]

`load_settings` is the one loader: at startup it loads every Configurable in `CONFIG_CLASSES` once,
each trait checked by its traitlets `@validate`; any bad value raises `ConfigError` naming the field
(`CubeSpawner.profiles[1].cpu`), so a server never runs with config it silently ignored. Features
read their part of the result (`settings.jobs`, `settings.gpu`, ...), never the Config again.
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, CaselessStrEnum, Dict, Float, Int, List, Unicode, default
from traitlets.config import Config, PyFileConfigLoader

from cube_jupyter.configurable import (
    CubeConfigurable,
    CubeNamespaces,
    CubePods,
    CubePrometheus,
    checked,
    dns_name,
    is_http_url,
    non_negative,
    not_empty,
    optional,
    positive,
    quantity,
)
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.gpu.config import CubeGPU, GpuSettings
from cube_jupyter.images import NOTEBOOK_IMAGE
from cube_jupyter.jobs.config import CubeJobs, JobSettings
from cube_jupyter.names import namespace_from_template
from cube_jupyter.notebooks.spec import Profile
from cube_jupyter.pipelines.config import CubePipelines, PipelineSettings
from cube_jupyter.storage.config import CubeStorage

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
# An Istio mTLS principal: trust domain, then the pod's namespace and service account.
# Kubeflow's notebook controller routes every Notebook at /notebook/{namespace}/{name}/ and sets NB_PREFIX.
KUBEFLOW_PATH_PREFIX = "/notebook"
NAMESPACE_SOURCES = ("template", "kubeflow-profile")
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
    field = "CubeSpawner.profiles"
    if not raw_profiles:
        raise InvalidInput(f"{field} is empty: offer at least one profile", field=field)
    profiles = tuple(Profile.from_config(raw, i) for i, raw in enumerate(raw_profiles))
    seen: set[str] = set()
    for i, profile in enumerate(profiles):
        if profile.name in seen:
            where = f"{field}[{i}].name"
            raise InvalidInput(f"{where}: profile name {profile.name!r} is used twice", field=where)
        seen.add(profile.name)
    defaults = [p.name for p in profiles if p.default]
    if len(defaults) > 1:
        raise InvalidInput(f"{field}: only one profile may be the default, got {defaults}", field=field)
    return profiles


def _profile_list(value: list[Any], field: str) -> None:
    parse_profiles(value)


# What a notebook server the workbench starts is told in its environment (a local child's, a pod's).
ROLE_ENV = "CUBE_JUPYTER_ROLE"
OWNER_ENV = "CUBE_JUPYTER_USER"
NAMESPACE_ENV = "CUBE_JUPYTER_NAMESPACE"
WORKBENCH_URL_ENV = "CUBE_JUPYTER_WORKBENCH_URL"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
ROLES = ("workbench", "user")


class CubeWorkbench(CubePrometheus):
    """Workbench-wide settings: which backend runs things, and where local state lives."""

    backend = CaselessStrEnum(
        ["local", "kubernetes"],
        default_value="local",
        help="Where servers, runs and jobs run: 'local' child processes, or 'kubernetes' objects.",
    )

    role = CaselessStrEnum(
        list(ROLES),
        help="What this server does. 'workbench' (the default): the central workbench, spawning notebook "
        "servers with the profiles, quotas, admin views and path router, and, on one machine, also the "
        "user's own pipelines, jobs and GPU panels. 'user': a notebook server the workbench started "
        "(a local child or a pod), serving its owner's pipelines, jobs and GPU panels on its own "
        "workspace; its owner is `default_user`. Defaults to $CUBE_JUPYTER_ROLE when set.",
    )

    @default("role")
    def _default_role(self) -> str:
        return os.environ.get(ROLE_ENV, "").lower() or "workbench"

    namespace = Unicode(
        help="This server's own Kubernetes namespace: a user server's Workflows and jobs go there (role "
        "'user' on the kubernetes backend); the central workbench reads CubeStorage.credentials_secret "
        "there for CubeSpawner.create_namespaces. Defaults to $CUBE_JUPYTER_NAMESPACE (the notebook "
        "pod's namespace, from the downward API), else the pod's service account namespace.",
    )

    @default("namespace")
    def _default_namespace(self) -> str:
        if os.environ.get(NAMESPACE_ENV):
            return os.environ[NAMESPACE_ENV]
        try:
            with open(SERVICE_ACCOUNT_NAMESPACE) as stream:
                return stream.read().strip()
        except OSError:
            return ""

    workbench_url = Unicode(
        help="A user server's link back to the central workbench (its Notebook Servers panel). "
        "Defaults to $CUBE_JUPYTER_WORKBENCH_URL.",
    )

    @default("workbench_url")
    def _default_workbench_url(self) -> str:
        return os.environ.get(WORKBENCH_URL_ENV, "")

    state_dir = Unicode(help="Directory for local state (sqlite, server logs, workspaces).")

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "cube-jupyter")

    default_user = Unicode(
        help="The user a single-user server acts as (Jupyter's own auth has one owner): a user server's "
        "owner. Defaults to $CUBE_JUPYTER_USER, else the OS user. Ignored when a trusted-header identity "
        "provider names the caller.",
    )

    @default("default_user")
    def _default_default_user(self) -> str:
        if os.environ.get(OWNER_ENV):
            return os.environ[OWNER_ENV]
        try:
            return getpass.getuser()
        except (KeyError, OSError):
            return "jovyan"

    kubernetes_context = Unicode(
        "", help="kubeconfig context for the kubernetes backend; empty: in-cluster config, then kubeconfig."
    )

    poll_seconds = Float(
        5.0,
        help="How often servers are checked: the local backend's children for liveness and activity, "
        "and (when CubeSpawner.cull_idle_seconds > 0) the kubernetes backend's running servers for "
        "activity. The name is historical; it applies to both backends.",
    )

    _poll_seconds_ok = checked(positive, "poll_seconds")

    local_code_execution = CaselessStrEnum(
        ["everyone", "admins"],
        default_value="everyone",
        help="Who may run code on this machine through the workbench (local pipeline runs, local jobs) "
        "when a trusted header names many users (local backend): local code runs as the server's OS "
        "user and can read every file the server can. 'admins': only CubeSpawner.admin_users.",
    )


class CubeSpawner(CubePods, CubeNamespaces):
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
    namespace_source = CaselessStrEnum(
        list(NAMESPACE_SOURCES),
        default_value="template",
        help="Where a user's servers go. 'template': namespace_template. 'kubeflow-profile': the "
        "namespace of the Kubeflow Profile (kubeflow.org/v1) the user owns (spec.owner.name), found "
        "as Kubeflow's dashboard finds it; Kubeflow's profile controller makes the namespace, its "
        "ServiceAccounts and RoleBindings. A user who owns none gets a 404 naming this setting.",
    )
    create_namespaces = Bool(
        False,
        help="Create a missing user namespace (namespace_source 'template'), idempotently: labelled "
        "istio-injection=enabled, the pods' service accounts bound to user_cluster_role, and a copy of "
        "CubeStorage.credentials_secret read from the workbench's own namespace. Off: creating in a "
        "missing namespace is a 404 naming it.",
    )
    user_cluster_role = Unicode(
        "cube-jupyter-user",
        help="ClusterRole that create_namespaces binds the pods' service accounts to in each user "
        "namespace (deploy/ installs it).",
    )
    cmd = List(
        Unicode(),
        default_value=["jupyter", "lab"],
        help="Command started in the server container; base_url and port flags are appended.",
    )
    max_servers_per_user = Int(10, help="Most servers (running or stopped) one user may have; 0: no limit.")
    gpu_quota_per_user = Int(
        0, help="Most GPUs one user's servers and unfinished jobs may hold together; 0: no limit."
    )
    cull_idle_seconds = Int(
        0, help="Stop servers with no kernel or terminal activity for this long; 0: never."
    )
    admin_users = List(Unicode(), help="Users who may see and act on every user's servers.")
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
    _limits_ok = checked(non_negative, "max_servers_per_user", "gpu_quota_per_user", "cull_idle_seconds")
    _path_prefix_ok = checked(optional(_route_prefix), "path_prefix")
    _istio_gateway_ok = checked(_gateway, "istio_gateway")
    _principals_ok = checked(_principal, "istio_ingress_principal", "workbench_principal")
    _user_header_ok = checked(_header_name, "user_header")
    _cmd_ok = checked(not_empty, "cmd")
    _workspace_size_ok = checked(quantity, "workspace_size")
    _storage_class_ok = checked(optional(dns_name), "storage_class")
    _user_cluster_role_ok = checked(dns_name, "user_cluster_role")
    _server_url_template_ok = checked(_server_url, "server_url_template")


# Every Configurable an admin sets, in load order; the extension app lists them for --help-all.
CONFIG_CLASSES: tuple[type[CubeConfigurable], ...] = (
    CubeWorkbench,
    CubeSpawner,
    CubeStorage,
    CubeGPU,
    CubePipelines,
    CubeJobs,
)


@dataclass(frozen=True)
class Settings:
    """Validated admin config, built once at startup (`load_settings`) and passed to the core."""

    workbench: CubeWorkbench
    spawner: CubeSpawner
    profiles: tuple[Profile, ...]
    storage: CubeStorage  # one artifact store config, shared by pipelines and jobs
    gpu: GpuSettings
    pipelines: PipelineSettings
    jobs: JobSettings

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

    def as_config(self) -> dict[str, dict[str, Any]]:
        """Every loaded Configurable's effective trait values, as a JSON config: what a notebook
        server this workbench starts loads, so it runs under the same limits and state."""
        loaded = (
            self.workbench,
            self.spawner,
            self.storage,
            self.gpu,
            self.pipelines.workload,
            self.jobs.workload,
        )
        return {
            type(configurable).__name__: {
                name: getattr(configurable, name) for name in configurable.trait_names(config=True)
            }
            for configurable in loaded
        }

    @property
    def user_server(self) -> bool:
        """This is a notebook server of one user (role 'user'), not the central workbench."""
        return self.workbench.role == "user"

    def is_admin(self, user: str) -> bool:
        """Admins are the central workbench's: in a user server nobody acts for others."""
        return not self.user_server and user in self.spawner.admin_users

    def namespace_for(self, user: str) -> str:
        """A user's namespace: from the template, or in a user server on a cluster its own. (With
        `namespace_source = "kubeflow-profile"` servers go to the user's Profile, which only the
        cluster knows: see `cube_jupyter.kube.namespaces`.)"""
        if self.user_server and self.workbench.namespace:
            return self.workbench.namespace
        template = self.spawner.namespace_template
        return namespace_from_template(template, user, "CubeSpawner.namespace_template")

    @property
    def watch_namespace(self) -> str | None:
        """The one namespace informers watch: a user server's own (its service account can list
        nothing else); None on the central workbench, which watches every user's."""
        return self.workbench.namespace if self.user_server else None


def load_settings(config: Config | None = None) -> Settings:
    """The one loader: every Configurable in `CONFIG_CLASSES` from `config`, once, each trait checked
    by its `@validate`; the first bad value is a ConfigError naming the field."""
    config = config if config is not None else Config()
    workbench = CubeWorkbench.load(config)
    spawner = CubeSpawner.load(config)
    storage = CubeStorage.load(config)
    gpu = CubeGPU.load(config)
    pipelines = CubePipelines.load(config)
    jobs = CubeJobs.load(config)
    if workbench.role == "user" and workbench.backend == "kubernetes" and not workbench.namespace:
        raise ConfigError(
            "a user server on the kubernetes backend needs its namespace: set CubeWorkbench.namespace "
            "(or $CUBE_JUPYTER_NAMESPACE; in a pod it is read from the service account)",
            field="CubeWorkbench.namespace",
        )
    _check_namespaces(workbench, spawner, storage)
    profiles = parse_profiles(spawner.profiles)
    image = next((p for p in profiles if p.default), profiles[0]).image
    if not gpu.prometheus_url:  # CubeGPU's wins; else the workbench-wide one (the name)
        gpu.prometheus_url = workbench.prometheus_url
    return Settings(
        workbench=workbench,
        spawner=spawner,
        profiles=profiles,
        storage=storage,
        gpu=gpu,
        pipelines=PipelineSettings(pipelines, storage, pipelines.default_image or image),
        jobs=JobSettings(
            jobs, storage, jobs.default_image or image, jobs.serving_prometheus_url or gpu.prometheus_url
        ),
    )


def _check_namespaces(workbench: CubeWorkbench, spawner: CubeSpawner, storage: CubeStorage) -> None:
    """What the spawner's traits mean only together: the controller's fixed route, and what creating
    namespaces needs."""
    if spawner.resource_kind == "Notebook" and spawner.path_prefix != KUBEFLOW_PATH_PREFIX:
        raise ConfigError(
            f"CubeSpawner.path_prefix {spawner.path_prefix!r} must be {KUBEFLOW_PATH_PREFIX!r} with "
            "resource_kind 'Notebook': Kubeflow's notebook controller routes every Notebook at "
            "/notebook/{namespace}/{name}/ (use resource_kind 'StatefulSet' for another prefix)",
            field="CubeSpawner.path_prefix",
        )
    if not spawner.create_namespaces:
        return
    if spawner.namespace_source == "kubeflow-profile":
        raise ConfigError(
            "CubeSpawner.create_namespaces is for namespace_source 'template': with 'kubeflow-profile' "
            "Kubeflow's profile controller creates each Profile's namespace",
            field="CubeSpawner.create_namespaces",
        )
    if storage.credentials_secret and workbench.role == "workbench" and not workbench.namespace:
        raise ConfigError(
            "CubeSpawner.create_namespaces copies CubeStorage.credentials_secret from the workbench's own "
            "namespace, which is unknown outside a pod: set CubeWorkbench.namespace",
            field="CubeWorkbench.namespace",
        )


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

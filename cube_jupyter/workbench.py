"""Workbench-wide settings and policy, under every feature: where things run (`backend`, `role`), where
local state lives, who the admins are, how many GPUs a user may hold, and which namespace a user's
servers, jobs and runs go to.

    c.CubeWorkbench.backend = "kubernetes"
    c.CubeWorkbench.admin_users = ["alice"]
    c.CubeWorkbench.gpu_quota_per_user = 2

`WorkbenchSettings` is what every feature's settings extend: the loaded `CubeWorkbench` and
`CubeStorage`, and what the aggregate loader (`cube_jupyter.config.load_settings`) derives from every
feature's config once — the GPU resource names, the pods' service accounts, the jobs' namespace
template — so a feature reads one rule without reading another feature's config.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, CaselessStrEnum, Float, Int, List, Unicode, default

from cube_jupyter.configurable import (
    CubeNamespaces,
    CubePrometheus,
    CubeWorkload,
    checked,
    dns_name,
    non_negative,
    positive,
)
from cube_jupyter.errors import ConfigError
from cube_jupyter.names import namespace_from_template
from cube_jupyter.queues import CubeQueues
from cube_jupyter.storage.config import CubeStorage

# What a notebook server the workbench starts is told in its environment (a local child's, a pod's).
ROLE_ENV = "CUBE_JUPYTER_ROLE"
OWNER_ENV = "CUBE_JUPYTER_USER"
NAMESPACE_ENV = "CUBE_JUPYTER_NAMESPACE"
WORKBENCH_URL_ENV = "CUBE_JUPYTER_WORKBENCH_URL"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
ROLES = ("workbench", "user")
NAMESPACE_SOURCES = ("template", "kubeflow-profile")
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


class CubeWorkbench(CubePrometheus, CubeNamespaces):
    """Workbench-wide settings: which backend runs things, where local state lives, and the policy
    every feature shares (admins, the GPU quota, users' namespaces)."""

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
        "there for create_namespaces. Defaults to $CUBE_JUPYTER_NAMESPACE (the notebook pod's "
        "namespace, from the downward API), else the pod's service account namespace.",
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
        "Defaults to $CUBE_JUPYTER_WORKBENCH_URL; on the central workbench, to its own Lab.",
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

    local_code_execution = CaselessStrEnum(
        ["everyone", "admins"],
        default_value="everyone",
        help="Who may run code on this machine through the workbench (local pipeline runs, local jobs) "
        "when a trusted header names many users (local backend): local code runs as the server's OS "
        "user and can read every file the server can. 'admins': only admin_users.",
    )

    admin_users = List(
        Unicode(), help="Users who may see and act on every user's servers, runs, schedules and jobs."
    )
    gpu_quota_per_user = Int(
        0, help="Most GPUs one user's servers and unfinished jobs may hold together; 0: no limit."
    )
    namespace_source = CaselessStrEnum(
        list(NAMESPACE_SOURCES),
        default_value="template",
        help="Where a user's servers, jobs and runs go. 'template': namespace_template. "
        "'kubeflow-profile': the namespace of the Kubeflow Profile (kubeflow.org/v1) the user owns "
        "(spec.owner.name), found as Kubeflow's dashboard finds it; Kubeflow's profile controller makes "
        "the namespace, its ServiceAccounts and RoleBindings. A user who owns none gets a 404 naming "
        "this setting.",
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

    _poll_seconds_ok = checked(positive, "poll_seconds")
    _quota_ok = checked(non_negative, "gpu_quota_per_user")
    _user_cluster_role_ok = checked(dns_name, "user_cluster_role")


# Workbench-wide traits that lived on CubeSpawner: still read there, with a warning at startup, as
# JupyterHub does when it renames a trait.
MOVED_TO_WORKBENCH = (
    "admin_users",
    "gpu_quota_per_user",
    "namespace_template",
    "namespace_source",
    "create_namespaces",
    "user_cluster_role",
)

S = TypeVar("S", bound="WorkbenchSettings")


@dataclass(frozen=True, kw_only=True)
class WorkbenchSettings:
    """The workbench-wide part of the loaded config, which every feature's settings extend."""

    workbench: CubeWorkbench
    storage: CubeStorage  # one artifact store config, shared by pipelines and jobs
    queues: CubeQueues = dataclasses.field(default_factory=CubeQueues)  # Kueue, for every feature
    # Every extended resource a user's pod may ask for as GPUs: each profile's, the jobs' and the
    # steps' (`kube.objects.gpu_request` counts these, and only these, as GPUs).
    gpu_resources: tuple[str, ...] = (DEFAULT_GPU_RESOURCE,)
    # Every service account a user's pods run as (servers, replicas, models, steps; 'default' for
    # ''), sorted: what a namespace the workbench creates binds.
    pod_service_accounts: tuple[str, ...] = ()
    jobs_namespace_template: str = ""  # CubeJobs.namespace_template: '' puts jobs beside the servers
    workbench_url: str = ""  # the trait, else (on the central workbench) its own Lab

    def extend(self, cls: type[S], **fields: Any) -> S:
        """A feature's settings: these, and the feature's own `fields`."""
        shared = {field.name: getattr(self, field.name) for field in dataclasses.fields(WorkbenchSettings)}
        return cls(**shared, **fields)

    @property
    def state_dir(self) -> Path:
        return Path(self.workbench.state_dir)

    @property
    def user_server(self) -> bool:
        """This is a notebook server of one user (role 'user'), not the central workbench."""
        return self.workbench.role == "user"

    @property
    def local(self) -> bool:
        return self.workbench.backend == "local"

    @property
    def gpu_quota(self) -> int | None:
        return self.workbench.gpu_quota_per_user or None

    def is_admin(self, user: str) -> bool:
        """Admins are the central workbench's: in a user server nobody acts for others."""
        return not self.user_server and user in self.workbench.admin_users

    def namespace_for(self, user: str) -> str:
        """A user's namespace: from the template, or in a user server on a cluster its own. (With
        `namespace_source = "kubeflow-profile"` it is the user's Profile's, which only the cluster
        knows: see `cube_jupyter.kube.namespaces`.)"""
        if self.user_server and self.workbench.namespace:
            return self.workbench.namespace
        return namespace_from_template(
            self.workbench.namespace_template, user, "CubeWorkbench.namespace_template"
        )

    def jobs_namespace_for(self, user: str) -> str:
        """Where a user's jobs go: CubeJobs.namespace_template's namespace when set (not in a user
        server, which has only its own), else the user's namespace."""
        if self.jobs_namespace_template and not self.user_server:
            return namespace_from_template(self.jobs_namespace_template, user, "CubeJobs.namespace_template")
        return self.namespace_for(user)

    def user_namespaces(self, user: str) -> tuple[str, ...]:
        """Every namespace a user's pods may be in: their servers' and, when elsewhere, their jobs'."""
        return tuple(dict.fromkeys((self.namespace_for(user), self.jobs_namespace_for(user))))

    @property
    def watch_namespace(self) -> str | None:
        """The one namespace informers watch: a user server's own (its service account can list
        nothing else); None on the central workbench, which watches every user's."""
        return self.workbench.namespace if self.user_server else None

    def check(self) -> None:
        """What the workbench-wide traits mean only together; a ConfigError naming the field."""
        workbench = self.workbench
        if workbench.role == "user" and workbench.backend == "kubernetes" and not workbench.namespace:
            raise ConfigError(
                "a user server on the kubernetes backend needs its namespace: set CubeWorkbench.namespace "
                "(or $CUBE_JUPYTER_NAMESPACE; in a pod it is read from the service account)",
                field="CubeWorkbench.namespace",
            )
        if not workbench.create_namespaces:
            return
        if workbench.namespace_source == "kubeflow-profile":
            raise ConfigError(
                "CubeWorkbench.create_namespaces is for namespace_source 'template': with "
                "'kubeflow-profile' Kubeflow's profile controller creates each Profile's namespace",
                field="CubeWorkbench.create_namespaces",
            )
        if self.storage.credentials_secret and workbench.role == "workbench" and not workbench.namespace:
            raise ConfigError(
                "CubeWorkbench.create_namespaces copies CubeStorage.credentials_secret from the "
                "workbench's own namespace, which is unknown outside a pod: set CubeWorkbench.namespace",
                field="CubeWorkbench.namespace",
            )


W = TypeVar("W", bound=CubeWorkload)


@dataclass(frozen=True, kw_only=True)
class WorkloadSettings(WorkbenchSettings, Generic[W]):
    """What the job renderers and the pipeline compiler read: their Configurable (image, resources,
    GPU placement, service account, runtime injection) and the resolved default image."""

    workload: W
    default_image: str  # the trait, else the default notebook profile's image

    @property
    def gpu_node_selector(self) -> dict[str, str]:
        return dict(self.workload.gpu_node_selector)

    @property
    def gpu_tolerations(self) -> list[dict[str, Any]]:
        return list(self.workload.gpu_tolerations)

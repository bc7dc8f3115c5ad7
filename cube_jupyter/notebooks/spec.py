"""Typed specs for notebook servers: admin profiles, a user's create request, and the server record.

Profiles are parsed once from admin config (`CubeSpawner.profiles`); requests are parsed once at the
edge (REST body or CLI flags). Everything past this module works with validated dataclasses.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from cube_jupyter import fields
from cube_jupyter.errors import Conflict, InvalidInput, quote
from cube_jupyter.names import validate_dns_label
from cube_jupyter.workbench import DEFAULT_GPU_RESOURCE

# A server name becomes part of object names like "<name>-workspace" and of DNS names.
MAX_SERVER_NAME = 52
PROFILE_KEYS = {
    "name",
    "display_name",
    "description",
    "image",
    "cpu",
    "memory",
    "gpu",
    "gpu_resource",
    "node_selector",
    "tolerations",
    "env",
    "default",
}


@dataclass(frozen=True)
class Profile:
    """One admin-offered server shape, like an entry of KubeSpawner's `profile_list`."""

    name: str
    display_name: str
    description: str
    image: str
    cpu: str
    memory: str
    gpu: int = 0
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    default: bool = False

    @classmethod
    def from_config(cls, raw: object, index: int) -> Profile:
        """Build a profile from one `CubeSpawner.profiles` entry; errors name `profiles[i].key`."""
        where = f"CubeSpawner.profiles[{index}]"
        if not isinstance(raw, dict):
            raise InvalidInput(f"{where} must be a dict, not {type(raw).__name__}", field=where)
        fields.reject_unknown(raw, PROFILE_KEYS, where)
        name = validate_dns_label(raw.get("name"), f"{where}.name")
        if not raw.get("image"):
            raise InvalidInput(f"{where}.image is required", field=f"{where}.image")
        return cls(
            name=name,
            display_name=fields.string(
                raw.get("display_name", name), f"{where}.display_name", allow_empty=True
            ),
            description=fields.string(raw.get("description", ""), f"{where}.description", allow_empty=True),
            image=fields.image_reference(raw["image"], f"{where}.image"),
            cpu=fields.quantity(raw.get("cpu", "1"), f"{where}.cpu"),
            memory=fields.quantity(raw.get("memory", "2Gi"), f"{where}.memory"),
            gpu=fields.integer(raw.get("gpu", 0), f"{where}.gpu", minimum=0),
            gpu_resource=fields.extended_resource(
                raw.get("gpu_resource", DEFAULT_GPU_RESOURCE), f"{where}.gpu_resource"
            ),
            node_selector=fields.node_selector(raw.get("node_selector", {}), f"{where}.node_selector"),
            tolerations=fields.tolerations(raw.get("tolerations", []), f"{where}.tolerations"),
            env=_profile_env(raw.get("env", {}), f"{where}.env"),
            default=fields.boolean(raw.get("default", False), f"{where}.default"),
        )

    def resources(self) -> Resources:
        return Resources(cpu=self.cpu, memory=self.memory, gpu=self.gpu, gpu_resource=self.gpu_resource)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Resources:
    """What a server asks for; rendered as requests/limits on Kubernetes."""

    cpu: str
    memory: str
    gpu: int
    gpu_resource: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NotebookSpec:
    """A validated request for one server: whose, what it is called, and which profile it uses."""

    user: str
    name: str
    profile: Profile

    @property
    def resources(self) -> Resources:
        return self.profile.resources()


def server_exists(user: str, name: str) -> Conflict:
    """The one wording of "this server already exists", whichever layer notices it."""
    return Conflict(f"user {quote(user)} already has a server named {quote(name)}", field="name")


class ServerStatus(enum.StrEnum):
    """Lifecycle of a server, the same words on both backends."""

    QUEUED = "queued"  # waiting in a queue (this machine's; Kueue's on a cluster): holds nothing yet
    PENDING = "pending"  # created or starting, not yet answering
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"  # exited, crashed, or cannot be scheduled/started
    TERMINATING = "terminating"


@dataclass
class NotebookServer:
    """A server as users see it in REST responses, the CLI and the panel."""

    user: str
    name: str
    profile: str
    status: ServerStatus
    url: str
    resources: Resources
    created: str  # RFC 3339, UTC
    image: str = ""
    reason: str | None = None  # why it is not running: exit code, scheduler event, ...
    last_activity: str | None = None
    namespace: str | None = None
    queue_position: int | None = None  # a queued server's place in the queue, from 1, where known
    queue_reason: str | None = None  # and what it waits for

    @property
    def queue_place(self) -> str:
        """A queued server's place and why it waits (`#2: waiting for 1 GPU: 0 of 2 free`; on a cluster,
        its place in Kueue's ClusterQueue), '' for any other: what the CLI, the router's 503 and the
        panel say."""
        if self.status != ServerStatus.QUEUED:
            return ""
        where = f"#{self.queue_position}" if self.queue_position else ""
        return ": ".join(part for part in (where, self.queue_reason or "") if part)

    @property
    def state(self) -> str:
        """The status, with a queued server's place and reason: never a bare wait."""
        return f"{self.status.value} {self.queue_place}" if self.queue_place else self.status.value

    @property
    def gpus_held(self) -> int:
        """GPUs counted against the user's quota: every server that is not stopped (or still queued,
        holding nothing yet) holds its GPUs.

        Conservative on purpose: a failed pod in CrashLoopBackOff, a pending one and a terminating
        one all keep (or may get) their GPU on Kubernetes.
        """
        return 0 if self.status in (ServerStatus.STOPPED, ServerStatus.QUEUED) else self.resources.gpu

    @property
    def actions(self) -> list[str]:
        return server_actions(self.status, self.url)

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["status"] = self.status.value
        body["actions"] = self.actions
        return body


class ServerAction(enum.StrEnum):
    """What a user may do to a server now; the panel shows exactly these buttons."""

    CONNECT = "connect"
    STOP = "stop"
    START = "start"
    DELETE = "delete"


_ACTIONS: dict[ServerStatus, tuple[ServerAction, ...]] = {
    ServerStatus.QUEUED: (ServerAction.STOP,),  # stopping leaves the queue
    ServerStatus.PENDING: (ServerAction.STOP,),
    ServerStatus.RUNNING: (ServerAction.CONNECT, ServerAction.STOP),
    ServerStatus.STOPPING: (),
    ServerStatus.STOPPED: (ServerAction.START,),
    # A failed server may still hold a pod (and its GPU): stopping it releases them.
    ServerStatus.FAILED: (ServerAction.STOP, ServerAction.START),
    ServerStatus.TERMINATING: (),
}


def server_actions(status: ServerStatus, url: str = "") -> list[str]:
    """The actions offered for a server in `status`, in display order; deleting is always offered.

    Both backends accept every action listed here for that status, so the rule lives in one place
    instead of in each client.
    """
    actions = [a for a in _ACTIONS[status] if a != ServerAction.CONNECT or url]
    return [a.value for a in (*actions, ServerAction.DELETE)]


def validate_server_name(value: object) -> str:
    """A DNS-1035 label: Kubeflow names a Service after the server, and Service names need a letter first."""
    name = validate_dns_label(value, "name", MAX_SERVER_NAME)
    if not name[0].isalpha():
        raise InvalidInput(
            f"name {quote(name)} must start with a letter (it also names a Service)", field="name"
        )
    return name


def _profile_env(value: object, field_name: str) -> dict[str, str]:
    env = fields.env(fields.string_map(value, field_name), field_name)
    if "NB_PREFIX" in env:
        raise InvalidInput(
            f"{field_name} may not set NB_PREFIX: the workbench sets it to the server's route prefix",
            field=f"{field_name}.NB_PREFIX",
        )
    reserved = sorted(key for key in env if key.startswith("CUBE_JUPYTER_") or key == "JUPYTER_CONFIG_PATH")
    if reserved:
        raise InvalidInput(
            f"{field_name} may not set {reserved[0]}: the workbench tells each server who and where it is",
            field=f"{field_name}.{reserved[0]}",
        )
    return env

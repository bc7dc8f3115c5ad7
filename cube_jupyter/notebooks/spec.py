"""Typed specs for notebook servers: admin profiles, a user's create request, and the server record.

Profiles are parsed once from admin config (`CubeSpawner.profiles`); requests are parsed once at the
edge (REST body or CLI flags). Everything past this module works with validated dataclasses.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from cube_jupyter.errors import InvalidInput
from cube_jupyter.names import parse_quantity, validate_dns_label

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
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
TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


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
        unknown = sorted(set(raw) - PROFILE_KEYS)
        if unknown:
            raise InvalidInput(
                f"{where} has unknown key(s) {unknown}; allowed: {sorted(PROFILE_KEYS)}",
                field=f"{where}.{unknown[0]}",
            )
        name = validate_dns_label(raw.get("name"), f"{where}.name")
        image = raw.get("image")
        if not isinstance(image, str) or not image.strip():
            raise InvalidInput(f"{where}.image is required", field=f"{where}.image")
        cpu = _quantity(raw.get("cpu", "1"), f"{where}.cpu")
        memory = _quantity(raw.get("memory", "2Gi"), f"{where}.memory")
        gpu = raw.get("gpu", 0)
        if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
            raise InvalidInput(f"{where}.gpu must be a whole number >= 0, got {gpu!r}", field=f"{where}.gpu")
        gpu_resource = raw.get("gpu_resource", DEFAULT_GPU_RESOURCE)
        if not isinstance(gpu_resource, str) or "/" not in gpu_resource:
            raise InvalidInput(
                f"{where}.gpu_resource must be an extended resource name such as "
                f"'nvidia.com/gpu' or 'tencent.com/vcuda-core', got {gpu_resource!r}",
                field=f"{where}.gpu_resource",
            )
        return cls(
            name=name,
            display_name=_string(raw.get("display_name", name), f"{where}.display_name"),
            description=_string(raw.get("description", ""), f"{where}.description"),
            image=image.strip(),
            cpu=cpu,
            memory=memory,
            gpu=gpu,
            gpu_resource=gpu_resource,
            node_selector=_string_map(raw.get("node_selector", {}), f"{where}.node_selector"),
            tolerations=_tolerations(raw.get("tolerations", []), f"{where}.tolerations"),
            env=_profile_env(raw.get("env", {}), f"{where}.env"),
            default=_bool(raw.get("default", False), f"{where}.default"),
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


class ServerStatus(enum.StrEnum):
    """Lifecycle of a server, the same words on both backends."""

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

    @property
    def gpus_held(self) -> int:
        """GPUs counted against the user's quota: stopped and failed servers hold none."""
        held = self.status in (ServerStatus.PENDING, ServerStatus.RUNNING, ServerStatus.STOPPING)
        return self.resources.gpu if held else 0

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["status"] = self.status.value
        return body


def validate_server_name(value: object) -> str:
    """A DNS-1035 label: Kubeflow names a Service after the server, and Service names need a letter first."""
    name = validate_dns_label(value, "name", MAX_SERVER_NAME)
    if not name[0].isalpha():
        raise InvalidInput(f"name {name!r} must start with a letter (it also names a Service)", field="name")
    return name


def _quantity(value: object, field_name: str) -> str:
    parse_quantity(value, field_name)
    return str(value)


def _string(value: object, field_name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field_name} must be a string, got {value!r}", field=field_name)
    return value


def _bool(value: object, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{field_name} must be true or false, got {value!r}", field=field_name)
    return value


def _string_map(value: object, field_name: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidInput(f"{field_name} must map strings to strings, got {value!r}", field=field_name)
    return dict(value)


def _profile_env(value: object, field_name: str) -> dict[str, str]:
    env = _string_map(value, field_name)
    if "NB_PREFIX" in env:
        raise InvalidInput(
            f"{field_name} may not set NB_PREFIX: the workbench sets it to the server's route prefix",
            field=f"{field_name}.NB_PREFIX",
        )
    return env


def _tolerations(value: object, field_name: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise InvalidInput(f"{field_name} must be a list of tolerations", field=field_name)
    for i, toleration in enumerate(value):
        where = f"{field_name}[{i}]"
        if not isinstance(toleration, dict):
            raise InvalidInput(f"{where} must be a dict", field=where)
        unknown = sorted(set(toleration) - TOLERATION_KEYS)
        if unknown:
            raise InvalidInput(
                f"{where} has unknown key(s) {unknown}; allowed: {sorted(TOLERATION_KEYS)}",
                field=f"{where}.{unknown[0]}",
            )
        if toleration.get("operator", "Equal") not in ("Equal", "Exists"):
            raise InvalidInput(f"{where}.operator must be 'Equal' or 'Exists'", field=f"{where}.operator")
        if toleration.get("effect", "NoSchedule") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise InvalidInput(
                f"{where}.effect must be NoSchedule, PreferNoSchedule or NoExecute", field=f"{where}.effect"
            )
    return [dict(t) for t in value]

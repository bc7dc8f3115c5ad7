"""Typed specs for notebook servers: admin profiles, a user's create request, and the server record.

Profiles are parsed once from admin config (`CubeSpawner.profiles`); requests are parsed once at the
edge (REST body or CLI flags). Everything past this module works with validated dataclasses.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from cube_jupyter.errors import Conflict, InvalidInput, quote
from cube_jupyter.names import (
    parse_quantity,
    validate_dns_label,
    validate_label_value,
    validate_qualified_name,
)

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
# An image reference: registry/path[:tag][@digest], no whitespace.
IMAGE_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
# What Kubernetes accepts as a container env var name.
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


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
        if not isinstance(image, str) or not image:
            raise InvalidInput(f"{where}.image is required", field=f"{where}.image")
        if not IMAGE_REFERENCE.match(image):
            raise InvalidInput(
                f"{where}.image {quote(image)} is not an image reference "
                "(e.g. 'quay.io/jupyter/base-notebook:2025-03-17'; no spaces)",
                field=f"{where}.image",
            )
        cpu = _positive_quantity(raw.get("cpu", "1"), f"{where}.cpu")
        memory = _positive_quantity(raw.get("memory", "2Gi"), f"{where}.memory")
        gpu = raw.get("gpu", 0)
        if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
            raise InvalidInput(
                f"{where}.gpu must be a whole number >= 0, got {quote(gpu)}", field=f"{where}.gpu"
            )
        gpu_resource = raw.get("gpu_resource", DEFAULT_GPU_RESOURCE)
        try:
            validate_qualified_name(gpu_resource, f"{where}.gpu_resource", prefix_required=True)
        except InvalidInput:
            raise InvalidInput(
                f"{where}.gpu_resource must be an extended resource name such as "
                f"'nvidia.com/gpu' or 'tencent.com/vcuda-core', got {quote(gpu_resource)}",
                field=f"{where}.gpu_resource",
            ) from None
        return cls(
            name=name,
            display_name=_string(raw.get("display_name", name), f"{where}.display_name"),
            description=_string(raw.get("description", ""), f"{where}.description"),
            image=image,
            cpu=cpu,
            memory=memory,
            gpu=gpu,
            gpu_resource=gpu_resource,
            node_selector=parse_node_selector(raw.get("node_selector", {}), f"{where}.node_selector"),
            tolerations=parse_tolerations(raw.get("tolerations", []), f"{where}.tolerations"),
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


def server_exists(user: str, name: str) -> Conflict:
    """The one wording of "this server already exists", whichever layer notices it."""
    return Conflict(f"user {quote(user)} already has a server named {quote(name)}", field="name")


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
        """GPUs counted against the user's quota: every server that is not stopped holds its GPUs.

        Conservative on purpose: a failed pod in CrashLoopBackOff, a pending one and a terminating
        one all keep (or may get) their GPU on Kubernetes.
        """
        return 0 if self.status == ServerStatus.STOPPED else self.resources.gpu

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


def _positive_quantity(value: object, field_name: str) -> str:
    if parse_quantity(value, field_name) <= 0:
        raise InvalidInput(f"{field_name} must be more than 0, got {quote(value)}", field=field_name)
    return str(value)


def _string(value: object, field_name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field_name} must be a string, got {quote(value)}", field=field_name)
    return value


def _bool(value: object, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{field_name} must be true or false, got {quote(value)}", field=field_name)
    return value


def _string_map(value: object, field_name: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidInput(f"{field_name} must map strings to strings, got {quote(value)}", field=field_name)
    return dict(value)


def parse_node_selector(value: object, field_name: str) -> dict[str, str]:
    selector = _string_map(value, field_name)
    for key, label in selector.items():
        validate_qualified_name(key, f"{field_name}.{key}")
        validate_label_value(label, f"{field_name}.{key}")
    return selector


def _profile_env(value: object, field_name: str) -> dict[str, str]:
    env = _string_map(value, field_name)
    for key in env:
        if not ENV_NAME.match(key):
            raise InvalidInput(
                f"{field_name} key {quote(key)} is not a valid environment variable name",
                field=f"{field_name}.{key}",
            )
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


def parse_tolerations(value: object, field_name: str) -> list[dict[str, Any]]:
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
        effect = toleration.get("effect", "NoSchedule")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise InvalidInput(
                f"{where}.effect must be NoSchedule, PreferNoSchedule or NoExecute", field=f"{where}.effect"
            )
        _toleration_fields(toleration, where, effect)
    return [dict(t) for t in value]


def _toleration_fields(toleration: dict[str, Any], where: str, effect: object) -> None:
    """The checks kube-apiserver makes on a toleration, so a bad one fails at startup."""
    key = toleration.get("key", "")
    if key != "":
        validate_qualified_name(key, f"{where}.key")
    elif toleration.get("operator", "Equal") != "Exists":
        raise InvalidInput(f"{where}.key may be empty only with operator 'Exists'", field=f"{where}.key")
    value = toleration.get("value", "")
    validate_label_value(value, f"{where}.value")
    if value and toleration.get("operator") == "Exists":
        raise InvalidInput(f"{where}.value must be empty when operator is 'Exists'", field=f"{where}.value")
    if "tolerationSeconds" in toleration:
        seconds = toleration["tolerationSeconds"]
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise InvalidInput(
                f"{where}.tolerationSeconds must be a whole number of seconds, got {quote(seconds)}",
                field=f"{where}.tolerationSeconds",
            )
        if effect != "NoExecute":
            raise InvalidInput(
                f"{where}.tolerationSeconds is only allowed with effect 'NoExecute'",
                field=f"{where}.tolerationSeconds",
            )

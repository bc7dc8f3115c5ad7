"""What one replica (pod or process) asks for: CPU, memory and GPUs, shared by all three job kinds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cube_jupyter.fields import integer, join, mapping, quantity, reject_unknown

RESOURCE_KEYS = ("cpu", "memory", "gpu")


@dataclass(frozen=True)
class ResourceSpec:
    """CPU and memory as Kubernetes quantities (None: the admin's default) and a whole GPU count."""

    cpu: str | None = None
    memory: str | None = None
    gpu: int = 0

    @classmethod
    def from_dict(
        cls, raw: object, field: str = "resources", base: ResourceSpec | None = None
    ) -> ResourceSpec:
        """Parse `{cpu, memory, gpu}`; keys left out are taken from `base` (the spec-wide default)."""
        base = base or cls()
        if raw is None:
            return base
        body = mapping(raw, field)
        reject_unknown(body, RESOURCE_KEYS, field)
        cpu = _quantity(body, field, "cpu", base.cpu)
        memory = _quantity(body, field, "memory", base.memory)
        gpu = integer(body["gpu"], join(field, "gpu"), minimum=0) if "gpu" in body else base.gpu
        return cls(cpu=cpu, memory=memory, gpu=gpu)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.cpu is not None:
            body["cpu"] = self.cpu
        if self.memory is not None:
            body["memory"] = self.memory
        if self.gpu:
            body["gpu"] = self.gpu
        return body


def _quantity(body: dict[str, Any], field: str, key: str, default: str | None) -> str | None:
    """`body[key]` as a quantity (None: the admin's default), or `default` when not given."""
    if key not in body:
        return default
    value = body[key]
    return None if value is None else quantity(value, join(field, key))

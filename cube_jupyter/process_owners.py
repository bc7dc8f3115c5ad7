"""Whose work a process on this machine is: a user's job replica, tuning trial, served model or
pipeline step, so the GPU report names a GPU process after it ("job toy-ddp, worker-0") rather than
its program ("python3").

Each feature that starts processes gives an `OwnerSource` (the composition root wires them, as it
wires the GPU ledger's holders), read from that feature's own records (a replica's pid, a run's
driving process and the GPUs each of its steps was given); the GPU report knows no feature. In a
kernel, where the inline monitor reads the GPUs itself, the IPython extension registers the same
sources (`register`), read from the machine's shared state, and the monitor asks `known()`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

log = logging.getLogger(__name__)
WorkloadKind = Literal["job", "tuning job", "model", "step"]


@dataclass(frozen=True)
class Workload:
    """A user's job (its replica `part`), tuning job (trial), served model or pipeline step (`name`
    the run id, `part` the step). `label` is how people read it; `series` its GPU history's key."""

    user: str
    kind: WorkloadKind
    name: str
    part: str = ""
    label: str = field(init=False)
    series: str = field(init=False)

    def __post_init__(self) -> None:
        label = f"{self.kind} {self.name}" + (f", {self.part}" if self.part else "")
        whole = f"step:{self.name}/{self.part}" if self.kind == "step" else f"job:{self.user}/{self.name}"
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "series", whole)


@dataclass(frozen=True)
class ProcessOwner:
    """`workload` owns process `pid` and its descendants; on the GPUs `gpu_ids` only (this machine's
    indexes, as `CUDA_VISIBLE_DEVICES` gave them) where one process runs several workloads, as a
    pipeline run's driving process runs its steps, each on its own GPUs."""

    pid: int
    workload: Workload
    gpu_ids: tuple[str, ...] | None = None


OwnerSource = Callable[[], Iterable[ProcessOwner]]

_registered: list[OwnerSource] = []


def register(source: OwnerSource) -> None:
    """Make `source` one of this process's (a kernel's: its IPython extension registers them)."""
    if source not in _registered:
        _registered.append(source)


def known() -> list[ProcessOwner]:
    """Every owner the registered sources name now; a source that fails names none."""
    found: list[ProcessOwner] = []
    for source in _registered:
        try:
            found.extend(source())
        except Exception:  # naming a GPU process is a nicety: it never breaks a reading
            log.debug("process owners unavailable", exc_info=True)
    return found

"""What a backend does with a profile, told to users before they pick it: which of its image, CPU,
memory and GPUs apply, and how, in words the panel shows as they are.

On Kubernetes all of them apply (the pod runs the image with those requests and limits). The local
backend has no container: a server runs in this machine's Python environment, never in the image;
its memory and CPU are limited as `local.limits` finds it can on this machine, for the server and
whatever it starts (its kernels, and the pipeline runs and jobs started from it, which on Kubernetes
get pods of their own), and it sees only the GPUs it was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cube_jupyter.fields import parse_quantity
from cube_jupyter.local.limits import Limiter, Limits, Method
from cube_jupyter.notebooks.spec import Profile


@dataclass(frozen=True)
class Enforcement:
    """Which parts of a profile a server is really given, and one sentence per part saying how."""

    image: bool
    cpu: bool
    memory: bool
    gpu: bool
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "enforced": {"image": self.image, "cpu": self.cpu, "memory": self.memory, "gpu": self.gpu},
            "enforcement": list(self.notes),
        }


def on_cluster(profile: Profile) -> Enforcement:
    """A pod runs the image with the profile's CPU and memory as requests and limits, and its GPUs."""
    cpu = cores_text(parse_quantity(profile.cpu, "cpu"))
    memory = bytes_text(parse_quantity(profile.memory, "memory"))
    gpu = f"GPU: {profile.gpu} × {profile.gpu_resource}." if profile.gpu else "GPU: none."  # noqa: RUF001
    notes = (
        f"Runs the image {profile.image}.",
        f"CPU: {cpu}, requested and limited.",
        f"Memory: {memory}, requested and limited.",
        gpu,
    )
    return Enforcement(image=True, cpu=True, memory=True, gpu=True, notes=notes)


def on_this_machine(profile: Profile, limiter: Limiter) -> Enforcement:
    """A local child: this machine's Python environment, limits as `limiter` applies them. A limit at
    or above what the machine has is said to be no limit (and not counted as enforced)."""
    limits = Limits.of(profile.cpu, profile.memory, f"profile {profile.name!r}")
    memory, ram = bytes_text(limits.memory_bytes), bytes_text(limiter.ram)
    memory_binds = limiter.memory_binds(limits)
    if not memory_binds:
        memory_note = f"Memory: all of this machine's {ram} (the profile asks for {memory})."
    elif limiter.memory_method == Method.CGROUP:
        memory_note = f"Memory: at most {memory}, shared by the server and everything it starts."
    else:
        memory_note = f"Memory: at most {memory} per process."
    cores = limiter.cpu_cores(limits)
    machine = len(limiter.cores)
    if cores is None:
        cpu_note = (
            f"CPU: all of this machine's {cores_text(machine)} (the profile asks for {limits.cpu_cores:g})."
        )
    elif limiter.cpu_method == Method.CGROUP:
        cpu_note = f"CPU: at most {cores:g} of this machine's {cores_text(machine)}."
    else:  # whole cores only
        cpu_note = f"CPU: {cores:g} of this machine's {cores_text(machine)}."
    notes = (
        "Runs in this machine's Python environment; the image is not used.",
        memory_note,
        cpu_note,
        f"GPU: {profile.gpu}, visible to this server only." if profile.gpu else "GPU: none visible.",
    )
    return Enforcement(image=False, cpu=cores is not None, memory=memory_binds, gpu=True, notes=notes)


def cores_text(cores: float) -> str:
    return f"{cores:g} core" if cores <= 1 else f"{cores:g} cores"


def bytes_text(size: float) -> str:
    """A size in the largest binary unit it reaches, e.g. "2 GiB", "1.5 GiB", "512 MiB"."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{round(size / scale, 1):g} {unit}"
    return f"{size:g} bytes"

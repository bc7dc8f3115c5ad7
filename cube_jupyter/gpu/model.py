"""What a GPU reading is, whichever source produced it: NVML on this machine, or DCGM via Prometheus.

These records are the contract between the metric sources, the GPU service, the REST API
(`GET /cube/api/v1/gpu` returns `GpuReport.to_dict()`), the CLI table, the inline widget and the Lab
panel. A value a source cannot read is `None` ("not reported"), never a made-up zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from cube_jupyter.process_owners import Workload

Source = Literal["nvml", "prometheus", "none"]


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU, and what it is to the user when we can tell.

    `kernel_id`/`notebook_path`/`server` are set when the PID is one of this workbench's kernels;
    `workload` when it is (or descends from) a process the workbench started for a job replica,
    trial, served model or pipeline step; `note` says plainly why neither otherwise (another user's
    process, a PID from another PID namespace).
    """

    pid: int
    used_memory_mib: float | None = None
    name: str | None = None
    kernel_id: str | None = None
    notebook_path: str | None = None
    server: str | None = None
    note: str | None = None
    workload: Workload | None = None


@dataclass(frozen=True)
class MigInstance:
    """A MIG slice of a GPU (A100/H100 partitioned): a device of its own to the processes on it."""

    gpu_instance_id: int
    compute_instance_id: int | None
    uuid: str | None
    name: str | None
    memory_used_mib: float | None
    memory_total_mib: float | None


@dataclass(frozen=True)
class GpuDevice:
    """One GPU at one instant. On the Prometheus path, `namespace`/`pod`/`container` name the pod
    DCGM attributes it to (empty when the GPU is unallocated) and `host` its node."""

    index: int
    uuid: str
    name: str | None = None
    host: str | None = None
    utilization_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    processes: tuple[GpuProcess, ...] = ()
    mig: tuple[MigInstance, ...] = ()


@dataclass(frozen=True)
class PodGpu:
    """The GPUs one pod holds (notebook server, job replica or other), summed over its devices."""

    namespace: str
    pod: str
    kind: Literal["notebook", "job", "other"]
    gpus: tuple[str, ...]  # device UUIDs
    utilization_pct: float | None  # mean over its devices
    memory_used_mib: float | None
    memory_total_mib: float | None
    owner: str | None = None  # the workbench user, when the namespace maps back to one


@dataclass(frozen=True)
class KernelGpu:
    """GPU use of one Jupyter kernel: the memory its process tree holds, on which devices."""

    kernel_id: str
    notebook_path: str | None
    server: str | None
    pids: tuple[int, ...]
    gpus: tuple[str, ...]  # device UUIDs
    memory_used_mib: float
    utilization_pct: float | None  # of the devices it holds (NVML has no per-process SM share)


@dataclass(frozen=True)
class WorkloadGpu:
    """GPU use of one job (all its replicas or trials) or one pipeline step: the memory its processes
    hold, on which devices. Its history is under `workload.series`."""

    workload: Workload
    pids: tuple[int, ...]
    gpus: tuple[str, ...]  # device UUIDs
    memory_used_mib: float
    utilization_pct: float | None  # of the devices it holds (NVML has no per-process SM share)


@dataclass(frozen=True)
class Series:
    """History of one metric of one GPU (`gpu:<uuid>`), pod (`pod:<namespace>/<pod>`), kernel
    (`kernel:<id>`), job (`job:<user>/<name>`) or pipeline step (`step:<run id>/<step>`)."""

    key: str
    metric: Literal["utilization_pct", "memory_used_mib"]
    points: tuple[tuple[float, float], ...]  # (unix seconds, value)


@dataclass(frozen=True)
class QueuedGpuJob:
    """A job or notebook server of the user's waiting in the queue for GPUs it asks for: it holds
    none of them yet."""

    name: str
    gpus: int  # all replicas together
    position: int | None  # 1-based place in the queue; None where Kueue does not say
    reason: str  # what it waits for
    kind: Literal["job", "notebook"] = "job"  # the GPU ledger's holder kinds


@dataclass(frozen=True)
class GpuQuota:
    """GPUs the user holds against `CubeWorkbench.gpu_quota_per_user` (limit None: no limit), and
    the GPUs their queued jobs and servers ask for beside it (counted toward nothing until admitted)."""

    used: int
    limit: int | None
    holders: tuple[dict[str, Any], ...] = ()  # {"kind": "notebook"|"job", "name": ..., "gpus": n}
    queued: int = 0  # GPUs the queued jobs and servers ask for, all together
    queued_jobs: tuple[QueuedGpuJob, ...] = ()  # in queue order, jobs and servers together


@dataclass(frozen=True)
class IdleWarning:
    """A kernel, pod, job or pipeline step that has held GPU memory at 0% utilization for longer
    than allowed."""

    key: str  # "kernel:<id>", "pod:<namespace>/<pod>", "job:<user>/<name>" or "step:<run>/<step>"
    gpu: str  # device UUID
    idle_seconds: float
    message: str
    kernel_id: str | None = None
    notebook_path: str | None = None
    pod: str | None = None
    workload: str | None = None  # "job toy-ddp", "step <run>, train": a job, model or step of this machine
    # Seconds until the culler stops what holds the GPU (its notebook server, or an opted-in training
    # job); None when it never will.
    stops_in_seconds: float | None = None


@dataclass(frozen=True)
class GpuReport:
    """Everything `/gpu` answers. `available` is False with a `message` ("No GPU visible: ...")
    when the source sees no GPU; that is a state to show, not an error."""

    source: Source
    available: bool
    timestamp: float
    message: str | None = None
    devices: tuple[GpuDevice, ...] = ()
    pods: tuple[PodGpu, ...] = ()
    kernels: tuple[KernelGpu, ...] = ()
    workloads: tuple[WorkloadGpu, ...] = ()
    history: tuple[Series, ...] = ()
    quota: GpuQuota | None = None
    idle: tuple[IdleWarning, ...] = ()
    idle_after_seconds: float | None = None
    interval_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. {"user": ..., "is_admin": ...}

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        extra = body.pop("extra")
        body.update(extra)
        return body

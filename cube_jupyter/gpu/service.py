"""GPU use as a caller may see it: devices, their kernels or pods, history, idle warnings, quota.

`/gpu` calls `report()`. On the local backend the GPUs are this machine's (NVML); their processes are
attributed to the workbench's own kernels and to those of its child notebook servers, or to the job
replicas, trials, served models and pipeline steps the features say they run (`process_owners`),
and a sampler keeps recent history, per device, kernel, job and step. With a Prometheus URL (the
kubernetes backend) the GPUs are the DCGM exporter's, by pod, limited to the caller's namespace
unless an admin asks for everyone's. Reads are cached per scope for `cache_seconds`, with concurrent
requests sharing one read.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from cube_jupyter import access
from cube_jupyter.errors import CubeError, InvalidInput
from cube_jupyter.gpu.attribution import KernelProcess, attribute, attribute_workloads, server_kernels
from cube_jupyter.gpu.cache import CoalescingCache
from cube_jupyter.gpu.config import MAX_HISTORY_SECONDS, GpuSettings
from cube_jupyter.gpu.history import IdleSpell, IdleTracker, SampleHistory, trailing_idle_seconds
from cube_jupyter.gpu.model import (
    GpuDevice,
    GpuProcess,
    GpuQuota,
    GpuReport,
    IdleWarning,
    KernelGpu,
    PodGpu,
    QueuedGpuJob,
    Series,
    WorkloadGpu,
)
from cube_jupyter.gpu.pods import group_pods, server_of_pod
from cube_jupyter.gpu.sources import NoGpuVisible, no_gpu_visible
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.periodic import repeat
from cube_jupyter.process_owners import OwnerSource, ProcessOwner

log = logging.getLogger(__name__)

OTHER_USERS_KERNEL = "a kernel of another workbench user"
NO_PROMETHEUS = (
    "no GPU metrics: the kubernetes backend reads GPUs from the DCGM exporter through Prometheus; "
    "set c.CubeGPU.prometheus_url (or c.CubeWorkbench.prometheus_url)"
)
# How often the central workbench on a cluster looks for servers and jobs whose GPUs sit idle (DCGM
# is scraped every 15-30 s; the culling limit is hours).
CLUSTER_CULL_SECONDS = 30.0
# Points per history chart at most; Prometheus' step grows with the window asked for.
HISTORY_POINTS = 300
IDLE_POINTS = 60


@dataclass(frozen=True)
class ServerRef:
    """A notebook server as the GPU report names its pods: whose, what it is called, where."""

    user: str
    name: str
    namespace: str | None = None  # None: the user's namespace (or no cluster at all)


@dataclass(frozen=True)
class ChildServer:
    """A running local notebook server whose kernels the report attributes GPU processes to."""

    user: str
    name: str
    url: str  # where it answers, base URL included
    token: str
    pid: int


class NotebookServers(Protocol):
    """The central workbench's notebook servers, as the GPU report needs them (the composition root
    gives the notebook backend's; a user server has none to read)."""

    def servers(self, user: str | None) -> list[ServerRef]:
        """The servers of `user` (every user's for None); CubeError when they cannot be read."""
        ...

    def running_children(self) -> list[ChildServer]:
        """The local backend's running servers; none on a cluster."""
        ...


# The GPU jobs and notebook servers a user has waiting in the queue (the composition root reads the
# job and notebook backends'); raises CubeError when they cannot be read.
QueuedGpuJobs = Callable[[str], Iterable[QueuedGpuJob]]


@dataclass(frozen=True)
class JobRef:
    """A running training job as the report finds it among a cluster's pods (locally its processes
    are named by `owners`): whose, what it is called, where, and its pods."""

    user: str
    name: str
    namespace: str | None = None  # None: the user's namespace
    pods: tuple[str, ...] = ()


# Every user's running training jobs (the composition root reads the job backend's).
RunningJobs = Callable[[], Iterable[JobRef]]
Culled = Literal["server", "job"]


@dataclass(frozen=True)
class IdleHolder:
    """A notebook server or training job whose GPUs have sat idle (memory held at 0% utilization)
    this long."""

    kind: Culled
    user: str
    name: str  # "" for a user server itself (the central workbench knows its name)
    idle_seconds: float
    keys: tuple[str, ...] = ()  # the idle keys it is judged by: its kernels', or the job's series


# Stops a user's server or training job, with the reason to record (the composition root gives the
# notebook and job services').
StopIdle = Callable[[str, str, str], Awaitable[None]]


def gpu_cull_reason(limit_seconds: float) -> str:
    return (
        f"stopped after its GPU memory sat at 0% utilization for {_duration(limit_seconds)} "
        "(c.CubeGPU.cull_idle_gpu_seconds)"
    )


@dataclass(frozen=True)
class OwnedKernel:
    """A kernel and the workbench user it belongs to (who may see its notebook path)."""

    kernel: KernelProcess
    owner: str


@dataclass(frozen=True)
class LocalReading:
    """One NVML read, attributed to kernels; `message` says why there is nothing when NVML sees no GPU."""

    timestamp: float
    devices: tuple[GpuDevice, ...] = ()
    kernels: tuple[KernelGpu, ...] = ()
    owners: tuple[tuple[str, str], ...] = ()  # (kernel id, owner)
    workloads: tuple[WorkloadGpu, ...] = ()
    message: str | None = None


class GpuService:
    """GPU reports for callers; `kernels` lists this server's own kernels (cheap, on the event loop);
    on the central workbench the local backend's children are asked for theirs.

    A user server (a local child, a notebook pod) reads its own GPUs through NVML, as a pod sees
    only the GPUs it was given, and attributes them to its own kernels; the central workbench on
    the cluster reads DCGM through Prometheus by pod."""

    def __init__(
        self,
        settings: GpuSettings,
        ledger: GpuLedger,
        notebooks: NotebookServers | None = None,
        kernels: Callable[[], list[KernelProcess]] | None = None,
        *,
        queued: QueuedGpuJobs | None = None,
        owners: Sequence[OwnerSource] = (),
        stop_idle: StopIdle | None = None,
        jobs: RunningJobs | None = None,
        stop_idle_job: StopIdle | None = None,
        nvml: Any = None,
        prometheus: Any = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.notebooks = notebooks  # the spawner's servers (their kernels or pods); None in a user server
        self.kernels = kernels
        self.queued = queued  # the caller's queued GPU demand beside what they hold; None: no queue
        self.owners = owners  # whose job replicas, trials, models and steps this machine's processes are
        self.stop_idle = stop_idle  # stops a server whose GPUs sit idle; None: a user server culls nothing
        self.jobs = jobs  # the running training jobs, by pod on a cluster
        # stops a training job whose GPUs sit idle, where the admin opted in (cull_idle_gpu_jobs)
        self.stop_idle_job = stop_idle_job if settings.gpu.cull_idle_gpu_jobs else None
        self.config = settings.gpu
        self.prometheus = prometheus
        self.nvml = nvml
        if settings.prometheus_url and prometheus is None and not settings.user_server:
            from cube_jupyter.gpu.prometheus import PrometheusSource

            self.prometheus = PrometheusSource(
                settings.prometheus_url, timeout=self.config.prometheus_timeout_seconds
            )
        elif not settings.prometheus_url and nvml is None and not self._on_cluster:
            from cube_jupyter.gpu.nvml import NvmlSource

            self.nvml = NvmlSource()
        self.history = SampleHistory(self.config.history_seconds, self.config.sample_seconds)
        self.idle = IdleTracker()
        self.reads: CoalescingCache[Any] = CoalescingCache(self.config.cache_seconds)
        self._sampler: asyncio.Task[None] | None = None
        self._culler: asyncio.Task[None] | None = None
        self._sampled: LocalReading | None = None  # the sampler's last reading, which culling judges

    @property
    def _on_cluster(self) -> bool:
        """The central workbench on a cluster: its GPUs are the pods', not this machine's."""
        return self.settings.workbench.backend == "kubernetes" and not self.settings.user_server

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start sampling NVML into the history (local GPUs only; Prometheus keeps its own), and
        culling servers (and training jobs, where the admin opted in) whose GPUs sit idle where
        `cull_idle_gpu_seconds` asks it: after each sample locally, every `CLUSTER_CULL_SECONDS`
        from Prometheus."""
        if self.nvml is not None and (self._sampler is None or self._sampler.done()):
            self._sampler = asyncio.create_task(
                repeat(self._sample_and_cull, self.config.sample_seconds, "GPU sampling"),
                name="cube-gpu-sampler",
            )
        stops = self.stop_idle is not None or self.stop_idle_job is not None
        culls = self.prometheus is not None and stops and self.config.cull_idle_gpu_seconds
        if culls and (self._culler is None or self._culler.done()):
            self._culler = asyncio.create_task(
                repeat(self._cull, CLUSTER_CULL_SECONDS, "GPU culling"), name="cube-gpu-culler"
            )

    async def close(self) -> None:
        for task in (self._sampler, self._culler):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._sampler = self._culler = None
        close = getattr(self.nvml, "close", None)
        if close is not None:
            await asyncio.to_thread(close)

    # -- reports -----------------------------------------------------------------------------------

    async def report(
        self, caller: str, all_users: bool = False, history_seconds: float | None = None
    ) -> GpuReport:
        """What `caller` may see now; `all_users` (admins only) widens it to every user's kernels
        and pods. No GPU is a report with `available` False; an unreachable Prometheus raises
        BackendUnavailable naming prometheus_url."""
        is_admin = self.settings.is_admin(caller)
        if all_users:
            access.require_admin_for_all(self.settings, caller, "see every user's GPU use")
        seconds = self.config.history_seconds if history_seconds is None else history_seconds
        if not (isinstance(seconds, int | float) and 0 <= seconds <= MAX_HISTORY_SECONDS):
            raise InvalidInput(
                f"history must be a number of seconds between 0 and {MAX_HISTORY_SECONDS:.0f}, "
                f"got {seconds!r}",
                field="history",
            )
        if self.prometheus is not None:
            report = await self._cluster_report(caller, all_users, float(seconds))
        elif self.nvml is not None:
            report = await self._local_report(caller, all_users, float(seconds))
        else:
            report = GpuReport(source="none", available=False, timestamp=time.time(), message=NO_PROMETHEUS)
        return replace(
            report,
            quota=self.quota(caller),
            idle_after_seconds=self.config.idle_warning_seconds or None,
            interval_seconds=self.config.sample_seconds,
            extra={"user": caller, "is_admin": is_admin},
        )

    def quota(self, caller: str) -> GpuQuota | None:
        """GPUs the caller's servers and unfinished jobs hold against the limit (the ledger's view),
        and what their jobs and servers waiting in the queue ask for beside it."""
        ledger = self.ledger
        try:
            holders = ledger.holders(caller)
        except CubeError as exc:
            log.debug("GPU quota of %s unavailable: %s", caller, exc.message)
            return None
        waiting = self._queued(caller)
        return GpuQuota(
            used=sum(h.gpus for h in holders),
            limit=ledger.limit,
            holders=tuple(h.to_dict() for h in holders),
            queued=sum(j.gpus for j in waiting),
            queued_jobs=waiting,
        )

    def _queued(self, caller: str) -> tuple[QueuedGpuJob, ...]:
        """The caller's queued jobs and servers that ask for GPUs, in queue order (one queue for both
        where it says positions); none when they cannot be read."""
        if self.queued is None:
            return ()
        try:
            found = [job for job in self.queued(caller) if job.gpus]
        except CubeError as exc:
            log.debug("queued GPU jobs of %s unavailable: %s", caller, exc.message)
            return ()
        return tuple(sorted(found, key=lambda j: (j.position is None, j.position or 0, j.name)))

    # -- local: NVML + kernels ---------------------------------------------------------------------

    async def sample_once(self) -> None:
        """One sampler pass: read (or reuse the cached reading), record history and idle spells."""
        reading: LocalReading = await self.reads.get(("nvml",), self._read_local)
        self._sampled = reading
        if reading.message is not None:
            return
        now = reading.timestamp
        for device in reading.devices:
            key = f"gpu:{device.uuid}"
            self.history.add(key, "utilization_pct", now, device.utilization_pct)
            self.history.add(key, "memory_used_mib", now, device.memory_used_mib)
        by_uuid = {d.uuid: d for d in reading.devices}
        holders: list[tuple[str, KernelGpu | WorkloadGpu]] = [
            (f"kernel:{k.kernel_id}", k) for k in reading.kernels
        ]
        holders += [(w.workload.series, w) for w in reading.workloads]
        for key, usage in holders:
            self.history.add(key, "memory_used_mib", now, usage.memory_used_mib)
            busy = [u for g in usage.gpus if (u := by_uuid[g].utilization_pct) is not None]
            if key.startswith(("job:", "step:")):
                self.history.add(key, "utilization_pct", now, usage.utilization_pct)
            self.idle.observe(key, usage.gpus[0], now, usage.memory_used_mib, max(busy) if busy else None)
        alive = [f"gpu:{d.uuid}" for d in reading.devices] + [key for key, _ in holders]
        self.history.forget(alive, now)
        self.idle.forget(alive)

    async def _sample_and_cull(self) -> None:
        await self.sample_once()
        await self.cull_once()

    async def _cull(self) -> None:
        await self.cull_once()

    # -- GPU-aware culling -------------------------------------------------------------------------

    async def cull_once(self) -> list[IdleHolder]:
        """Stop every notebook server (and, where the admin opted in, every training job) whose GPUs
        have held memory at 0% utilization for longer than `cull_idle_gpu_seconds`, saying why; the
        ones stopped. A stop that fails is logged and tried again on the next pass."""
        limit = self.config.cull_idle_gpu_seconds
        if not limit or (self.stop_idle is None and self.stop_idle_job is None):
            return []
        if self.prometheus is not None:
            idle = await self._idle_on_cluster(limit)
        elif self.nvml is not None:
            idle = self._idle_locally(limit)
        else:
            idle = []
        stopped = []
        for holder in idle:
            stop = self.stop_idle if holder.kind == "server" else self.stop_idle_job
            if stop is None:
                continue
            what = f"{holder.kind} {holder.user}/{holder.name}"
            log.info("stopping %s: its GPUs idle for %.0f s", what, holder.idle_seconds)
            try:
                await stop(holder.user, holder.name, gpu_cull_reason(limit))
            except CubeError as exc:
                log.warning("could not stop %s: %s", what, exc.message)
                continue
            except Exception:  # one holder's failure never spares the others
                log.exception("could not stop %s", what)
                continue
            stopped.append(holder)
        return stopped

    def _idle_locally(self, limit: float) -> list[IdleHolder]:
        """In the sampler's last reading: the holders the culler stops that have sat idle for `limit`
        seconds or more."""
        reading = self._sampled
        if reading is None or reading.message is not None:
            return []
        holders = self._local_holders(reading, reading.timestamp)
        return [holder for holder in holders if holder.idle_seconds >= limit]

    def _local_holders(self, reading: LocalReading, at: float) -> list[IdleHolder]:
        """The notebook servers and (opted in) training jobs of this machine that the culler stops
        once idle, each with how long its GPUs have been idle at `at`: a server's is its least idle
        kernel's of those holding GPU memory (every one must be idle), a job's its processes'. In the
        central workbench, its child servers; in a user server, itself, as the central workbench
        judges it."""
        servers: dict[tuple[str, str], list[str]] = {}
        if self.settings.user_server:
            own = [f"kernel:{usage.kernel_id}" for usage in reading.kernels]
            servers = {(self.settings.workbench.default_user, ""): own} if own else {}
        elif self.notebooks is not None and self.stop_idle is not None:
            children = {f"{c.user}/{c.name}": c for c in self.notebooks.running_children()}
            for usage in reading.kernels:
                child = children.get(usage.server or "")
                if child is not None:
                    servers.setdefault((child.user, child.name), []).append(f"kernel:{usage.kernel_id}")
        holders = [
            IdleHolder(
                "server", user, name, min(self.idle.idle_seconds(key, at) for key in keys), tuple(keys)
            )
            for (user, name), keys in servers.items()
        ]
        if self.config.cull_idle_gpu_jobs and (self.stop_idle_job is not None or self.settings.user_server):
            for job in reading.workloads:
                if job.workload.kind == "job":
                    key = job.workload.series
                    seconds = self.idle.idle_seconds(key, at)
                    holders.append(IdleHolder("job", job.workload.user, job.workload.name, seconds, (key,)))
        return holders

    async def _idle_on_cluster(self, limit: float) -> list[IdleHolder]:
        """Every user's notebook servers whose pods' GPUs DCGM has seen idle for `limit` seconds, and
        (opted in) the running training jobs all of whose GPU pods it has."""
        prometheus = self.prometheus
        try:
            devices: list[GpuDevice] = await self.reads.get(
                ("prometheus", None), lambda: asyncio.to_thread(prometheus.read, None)
            )
        except NoGpuVisible:
            return []
        servers = {}
        if self.stop_idle is not None:
            servers = {(self._namespace_of(s), s.name): s for s in self._servers(None)}
        jobs = self._job_pods()
        notebooks: dict[str, set[str]] = {}
        for namespace, name in servers:
            notebooks.setdefault(namespace, set()).add(name)
        pods = [
            p
            for p in group_pods(devices, notebooks, {})
            if p.kind == "notebook" or (p.namespace, p.pod) in jobs
        ]
        pod_spells = await self._pod_idle_spells(pods, None, time.time(), limit)
        idle_pods = {key: seconds for key, seconds in pod_spells.items() if seconds >= limit}
        idle = []
        for pod in pods:
            server = servers.get((pod.namespace, server_of_pod(pod.pod))) if pod.kind == "notebook" else None
            seconds = idle_pods.get((pod.namespace, pod.pod))
            if server is not None and seconds is not None:
                idle.append(IdleHolder("server", server.user, server.name, seconds))
        held: dict[JobRef, list[float | None]] = {}
        for pod in pods:
            job = jobs.get((pod.namespace, pod.pod))
            if job is not None:
                held.setdefault(job, []).append(idle_pods.get((pod.namespace, pod.pod)))
        for job, spells in held.items():
            if all(seconds is not None for seconds in spells):
                idle.append(IdleHolder("job", job.user, job.name, min(s for s in spells if s is not None)))
        return idle

    def _job_pods(self) -> dict[tuple[str, str], JobRef]:
        """The running training jobs by (namespace, pod), where they are culled (opted in)."""
        if self.jobs is None or self.stop_idle_job is None:
            return {}
        try:
            jobs = list(self.jobs())
        except CubeError as exc:
            log.debug("jobs unavailable for GPU culling: %s", exc.message)
            return {}
        return {
            (job.namespace or self.settings.namespace_for(job.user), pod): job
            for job in jobs
            for pod in job.pods
        }

    async def _read_local(self) -> LocalReading:
        assert self.nvml is not None
        try:
            devices = await asyncio.to_thread(self.nvml.read)
        except NoGpuVisible as exc:
            return LocalReading(timestamp=time.time(), message=exc.message)
        kernels = await self._workbench_kernels()
        attributed, usage = attribute(devices, [k.kernel for k in kernels])
        owners = await asyncio.to_thread(self._process_owners)
        attributed, workloads = attribute_workloads(attributed, owners)
        return LocalReading(
            timestamp=time.time(),
            devices=tuple(attributed),
            kernels=tuple(usage),
            owners=tuple((k.kernel.kernel_id, k.owner) for k in kernels),
            workloads=tuple(workloads),
        )

    def _process_owners(self) -> list[ProcessOwner]:
        """Whose this machine's job, model and step processes are, from every feature that says;
        one that cannot be read now names none."""
        found: list[ProcessOwner] = []
        for source in self.owners:
            try:
                found.extend(source())
            except CubeError as exc:
                log.debug("process owners unavailable: %s", exc.message)
        return found

    async def _workbench_kernels(self) -> list[OwnedKernel]:
        """The workbench server's kernels (its owner's) and those of the local backend's children."""
        owned = []
        if self.kernels is not None:
            try:
                own = self.kernels()
            except Exception:
                log.exception("listing the workbench's kernels failed")
                own = []
            owned = [OwnedKernel(k, self.settings.workbench.default_user) for k in own]
        children = self.notebooks.running_children() if self.notebooks is not None else []
        if children:
            found = await asyncio.to_thread(
                lambda: [
                    OwnedKernel(kernel, child.user)
                    for child in children
                    for kernel in server_kernels(
                        child.url, child.token, child.pid, f"{child.user}/{child.name}"
                    )
                ]
            )
            owned.extend(found)
        return owned

    async def _local_report(self, caller: str, all_users: bool, seconds: float) -> GpuReport:
        reading: LocalReading = await self.reads.get(("nvml",), self._read_local)
        if reading.message is not None:
            return GpuReport(
                source="nvml", available=False, timestamp=reading.timestamp, message=reading.message
            )
        owners = dict(reading.owners)
        visible = {kid for kid, owner in owners.items() if all_users or owner == caller}
        devices = tuple(_hide_others(d, visible, caller, all_users) for d in reading.devices)
        kernels = tuple(k for k in reading.kernels if k.kernel_id in visible)
        workloads = tuple(w for w in reading.workloads if all_users or w.workload.user == caller)
        now = time.time()
        keys = [f"gpu:{d.uuid}" for d in devices] + [f"kernel:{k.kernel_id}" for k in kernels]
        keys += [w.workload.series for w in workloads]
        history = tuple(self.history.series(keys, seconds, now)) if seconds else ()
        culled: dict[str, float] = {}  # idle key -> how long what the culler stops for it has been idle
        if self.config.cull_idle_gpu_seconds:
            culled = {key: h.idle_seconds for h in self._local_holders(reading, now) for key in h.keys}
        return GpuReport(
            source="nvml",
            available=True,
            timestamp=reading.timestamp,
            devices=devices,
            kernels=kernels,
            workloads=workloads,
            history=history,
            idle=(
                *self._kernel_idle_warnings(kernels, devices, now, culled),
                *self._workload_idle_warnings(workloads, devices, now, culled),
            ),
        )

    def _idle_past_warning(self, key: str, now: float) -> tuple[float, IdleSpell] | None:
        """How long `key` has held GPU memory at 0%, and its spell, once past `idle_warning_seconds`
        (None before that, or when warnings are off)."""
        limit = self.config.idle_warning_seconds
        spell = self.idle.spell(key)
        idle = self.idle.idle_seconds(key, now)
        return (idle, spell) if limit and spell is not None and idle >= limit else None

    def _kernel_idle_warnings(
        self,
        kernels: Iterable[KernelGpu],
        devices: Iterable[GpuDevice],
        now: float,
        culled: Mapping[str, float],
    ) -> list[IdleWarning]:
        """`culled`: by idle key, how long what the culler stops for it (the kernel's server) has
        sat idle."""
        index = {d.uuid: d.index for d in devices}
        warnings = []
        for usage in kernels:
            key = f"kernel:{usage.kernel_id}"
            past = self._idle_past_warning(key, now)
            if past is None:
                continue
            idle, spell = past
            what = usage.notebook_path or f"kernel {usage.kernel_id}"
            gpu = index.get(spell.gpu, "?")
            notice, stops_in = self._stop_notice("server", culled.get(key))
            warnings.append(
                IdleWarning(
                    key=key,
                    gpu=spell.gpu,
                    idle_seconds=idle,
                    message=f"{what} has held {usage.memory_used_mib:.0f} MiB on GPU {gpu} "
                    f"at 0% utilization for {_duration(idle)}; shut its kernel down to free the GPU{notice}",
                    kernel_id=usage.kernel_id,
                    notebook_path=usage.notebook_path,
                    stops_in_seconds=stops_in,
                )
            )
        return warnings

    def _workload_idle_warnings(
        self,
        workloads: Iterable[WorkloadGpu],
        devices: Iterable[GpuDevice],
        now: float,
        culled: Mapping[str, float],
    ) -> list[IdleWarning]:
        """Jobs, models and pipeline steps of this machine that have held GPU memory at 0% for longer
        than `idle_warning_seconds`."""
        index = {d.uuid: d.index for d in devices}
        warnings = []
        for usage in workloads:
            workload = usage.workload
            past = self._idle_past_warning(workload.series, now)
            if past is None:
                continue
            idle, spell = past
            step = workload.kind == "step"
            what = workload.label if step else f"{workload.kind} {workload.name}"  # the whole job
            free = "cancel its run" if step else "delete it"
            notice, stops_in = self._stop_notice("job", culled.get(workload.series))
            held = [str(index.get(uuid, "?")) for uuid in usage.gpus]
            on = f"GPU {held[0]}" if len(held) == 1 else f"GPUs {', '.join(held)}"
            warnings.append(
                IdleWarning(
                    key=workload.series,
                    gpu=spell.gpu,
                    idle_seconds=idle,
                    message=f"{what} has held {usage.memory_used_mib:.0f} MiB on {on} "
                    f"at 0% utilization for {_duration(idle)}; "
                    f"{free} to free the GPU{notice}",
                    workload=what,
                    stops_in_seconds=stops_in,
                )
            )
        return warnings

    # -- cluster: DCGM through Prometheus ----------------------------------------------------------

    async def _cluster_report(self, caller: str, all_users: bool, seconds: float) -> GpuReport:
        prometheus = self.prometheus
        namespaces = None if all_users else self.settings.user_namespaces(caller)
        scope = list(namespaces) if namespaces else None
        why: str | None = None
        try:
            devices: list[GpuDevice] = await self.reads.get(
                ("prometheus", namespaces), lambda: asyncio.to_thread(prometheus.read, scope)
            )
        except NoGpuVisible as exc:
            devices, why = [], exc.message
        now = time.time()
        if not devices:
            where = f"namespace {', '.join(namespaces)}" if namespaces else "the cluster"
            message = why or no_gpu_visible(f"Prometheus reports no GPU allocated to pods in {where}")
            return GpuReport(source="prometheus", available=False, timestamp=now, message=message)
        servers = self._servers(None if all_users else caller)
        notebooks: dict[str, set[str]] = {}
        owners: dict[str, str] = dict.fromkeys(namespaces or (), caller)
        for server in servers:
            namespace = self._namespace_of(server)
            notebooks.setdefault(namespace, set()).add(server.name)
            owners.setdefault(namespace, server.user)
        pods = group_pods(devices, notebooks, owners)
        history: tuple[Series, ...] = ()
        if seconds:
            step = _step(seconds, HISTORY_POINTS)
            history = tuple(
                await self.reads.get(
                    ("prometheus-history", namespaces, seconds),
                    lambda: asyncio.to_thread(prometheus.history, scope, now - seconds, now, step),
                )
            )
        return GpuReport(
            source="prometheus",
            available=True,
            timestamp=now,
            devices=tuple(devices),
            pods=tuple(pods),
            history=history,
            idle=tuple(await self._pod_idle_warnings(pods, namespaces, now)),
        )

    def _stop_notice(self, kind: Culled, holder_idle: float | None) -> tuple[str, float | None]:
        """What an idle warning adds when the culler stops what holds the GPU (a notebook server or,
        opted in, a training job), and the seconds left before it does: None while another GPU of
        the holder works (it counts from when all are idle), ("", None) when nothing will stop it.
        `holder_idle`: how long the holder has sat idle as the culler counts it, None when the
        culler does not stop it."""
        limit = self.config.cull_idle_gpu_seconds
        if not limit or holder_idle is None:
            return "", None
        what = "a notebook server" if kind == "server" else "a training job"
        return f" ({what} is stopped after {_duration(limit)} of this)", (
            max(0.0, limit - holder_idle) if holder_idle > 0 else None
        )

    async def _pod_idle_spells(
        self, pods: list[PodGpu], namespaces: tuple[str, ...] | None, now: float, span: float
    ) -> dict[tuple[str, str], float]:
        """How long each pod's GPU memory has been held at 0%, by (namespace, pod): 0 when busy, at
        most about `span`, from a coarse `query_range` over that span (longer than any chart's)."""
        if not pods:
            return {}
        prometheus = self.prometheus
        step = _step(span, IDLE_POINTS)
        scope = list(namespaces) if namespaces else None
        series: list[Series] = await self.reads.get(
            ("prometheus-idle", namespaces, span),
            lambda: asyncio.to_thread(prometheus.history, scope, now - span - 2 * step, now, step),
        )
        by_key: dict[tuple[str, str], tuple[tuple[float, float], ...]] = {
            (s.key, s.metric): s.points for s in series
        }
        spells = {}
        for pod in pods:
            key = f"pod:{pod.namespace}/{pod.pod}"
            spells[(pod.namespace, pod.pod)] = trailing_idle_seconds(
                by_key.get((key, "utilization_pct"), ()), by_key.get((key, "memory_used_mib"), ()), step
            )
        return spells

    async def _pod_idle_warnings(
        self, pods: list[PodGpu], namespaces: tuple[str, ...] | None, now: float
    ) -> list[IdleWarning]:
        """Pods whose GPU memory has been held at 0% for longer than `idle_warning_seconds`. Read
        over the culler's span too where it runs, so the time left before a stop is known."""
        limit = self.config.idle_warning_seconds
        if not limit:
            return []
        culls = self.stop_idle is not None or self.stop_idle_job is not None
        span = max(limit, self.config.cull_idle_gpu_seconds if culls else 0.0)
        spells = await self._pod_idle_spells(pods, namespaces, now, span)
        culled_jobs = self._job_pods()
        warnings = []
        for pod in pods:
            idle = spells[(pod.namespace, pod.pod)]
            if idle < limit:
                continue
            job = culled_jobs.get((pod.namespace, pod.pod))
            if job is not None:  # stopped once every pod of it that holds a GPU is idle
                held = [(pod.namespace, other) for other in job.pods]
                notice, stops_in = self._stop_notice("job", min(spells[k] for k in held if k in spells))
            else:
                server = pod.kind == "notebook" and self.stop_idle is not None
                notice, stops_in = self._stop_notice("server", idle if server else None)
            warnings.append(
                IdleWarning(
                    key=f"pod:{pod.namespace}/{pod.pod}",
                    gpu=pod.gpus[0],
                    idle_seconds=idle,
                    message=f"pod {pod.pod} has held {pod.memory_used_mib or 0:.0f} MiB of GPU memory at 0% "
                    f"utilization for {_duration(idle)}; stop it to free the GPU{notice}",
                    pod=pod.pod,
                    stops_in_seconds=stops_in,
                )
            )
        return warnings

    def _servers(self, user: str | None) -> list[ServerRef]:
        if self.notebooks is None:
            return []
        try:
            return self.notebooks.servers(user)
        except CubeError as exc:
            log.debug("servers unavailable for GPU pods: %s", exc.message)
            return []

    def _namespace_of(self, server: ServerRef) -> str:
        return server.namespace or self.settings.namespace_for(server.user)


def _hide_others(device: GpuDevice, visible: set[str], caller: str, all_users: bool) -> GpuDevice:
    """The device as a caller sees it: other users' kernels and workloads are named as such, without
    their paths or names."""

    def seen(process: GpuProcess) -> GpuProcess:
        if process.kernel_id is not None and process.kernel_id not in visible:
            return replace(process, kernel_id=None, notebook_path=None, server=None, note=OTHER_USERS_KERNEL)
        if process.workload is not None and not all_users and process.workload.user != caller:
            note = f"a {process.workload.kind} of another workbench user"
            return replace(process, workload=None, note=note)
        return process

    return replace(device, processes=tuple(seen(p) for p in device.processes))


def _step(seconds: float, points: int) -> float:
    """A whole number of seconds between points, so `seconds` spans at most `points` of them."""
    return float(max(1, math.ceil(seconds / points)))


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"

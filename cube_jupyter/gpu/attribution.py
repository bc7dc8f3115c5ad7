"""Which Jupyter kernel (and notebook), or which job replica, trial, served model or pipeline step,
holds a GPU process's memory, or plainly why we cannot tell.

NVML names PIDs; users think in notebooks. A kernel is found by its connection file in its command
line (`-f .../kernel-<id>.json`, as every Jupyter server launches kernels), its notebook by asking the
server that started it (`api/sessions`). A GPU process belongs to a kernel when it is the kernel or a
descendant of one (a DataLoader worker, a `!python train.py`). Where the PID cannot be followed, the
process gets a `note` instead: PID namespaces (a GPU shared with another container) and other users'
processes are facts to state, not errors.

A process that is no kernel of ours may still be one the workbench started for a user's workload:
the features say which (`process_owners`), and a GPU process that is, or descends from, one of
those pids is named after it ("job toy-ddp, worker-0").
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from cube_jupyter.gpu.model import GpuDevice, KernelGpu, WorkloadGpu
from cube_jupyter.process_owners import ProcessOwner

log = logging.getLogger(__name__)

# jupyter_client names connection files `kernel-<kernel id>.json`; the id is a UUID.
CONNECTION_FILE = re.compile(r"kernel-(?P<id>[0-9a-fA-F]{8}-[0-9a-fA-F-]{27})\.json$")
SESSIONS_TIMEOUT_SECONDS = 1.0


@dataclass(frozen=True)
class KernelProcess:
    """A running kernel: its id, its process, and (when its server told us) its notebook."""

    kernel_id: str
    pid: int
    notebook_path: str | None = None
    server: str | None = None  # which Jupyter server runs it: "alice/nb1", or a server URL


def kernel_id_of(cmdline: Iterable[str]) -> str | None:
    """The kernel id in a kernel's command line, or None if the process is not a kernel.

    `jupyter console --existing kernel-<id>.json` is a client of a kernel, not one.
    """
    args = list(cmdline)
    if "--existing" in args:
        return None
    for arg in args:
        match = CONNECTION_FILE.search(arg)
        if match:
            return match.group("id")
    return None


def kernel_pids(processes: Iterable[psutil.Process] | None = None) -> dict[str, int]:
    """{kernel id: pid} of the kernels among `processes` (default: every process we can see)."""
    found: dict[str, int] = {}
    for proc in processes if processes is not None else psutil.process_iter():
        try:
            kernel_id = kernel_id_of(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if kernel_id and kernel_id not in found:
            found[kernel_id] = proc.pid
    return found


def fetch_sessions(url: str, token: str | None, timeout: float = SESSIONS_TIMEOUT_SECONDS) -> dict[str, str]:
    """{kernel id: notebook path} from a Jupyter server's `api/sessions` (`url` ends in '/');
    empty when it does not answer in time or refuses us."""
    headers = {"Authorization": f"token {token}"} if token else {}
    request = urllib.request.Request(f"{url}api/sessions", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            sessions = json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        log.debug("sessions of %s unavailable: %s", url, exc)
        return {}
    paths: dict[str, str] = {}
    for session in sessions if isinstance(sessions, list) else []:
        kernel = session.get("kernel") if isinstance(session, dict) else None
        if isinstance(kernel, dict) and isinstance(kernel.get("id"), str):
            path = session.get("path") or (session.get("notebook") or {}).get("path")
            if isinstance(path, str):
                paths[kernel["id"]] = path
    return paths


def server_kernels(url: str, token: str | None, root_pid: int, server: str) -> list[KernelProcess]:
    """The kernels of one Jupyter server: kernel processes below `root_pid`, with the notebook paths
    its `api/sessions` gives. Never raises: a server that has gone has no kernels."""
    try:
        descendants = psutil.Process(root_pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
    pids = kernel_pids(descendants)
    if not pids:
        return []
    paths = fetch_sessions(url, token)
    return [KernelProcess(kid, pid, paths.get(kid), server) for kid, pid in sorted(pids.items())]


def discover_kernels(runtime_dir: str | os.PathLike[str] | None = None) -> list[KernelProcess]:
    """Every kernel visible from this process, with notebook paths from the Jupyter servers whose
    runtime files (`jpserver-*.json`) we can read. Never raises."""
    try:
        pids = kernel_pids()
        if not pids:
            return []
        paths: dict[str, tuple[str, str]] = {}
        for info in _server_infos(runtime_dir):
            url = info["url"]
            for kernel_id, path in fetch_sessions(url, info.get("token")).items():
                paths.setdefault(kernel_id, (path, url))
        return [
            KernelProcess(kid, pid, *(paths.get(kid) or (None, None))) for kid, pid in sorted(pids.items())
        ]
    except Exception:  # attribution is a nicety: it must never break the report or the kernel
        log.debug("kernel discovery failed", exc_info=True)
        return []


def _server_infos(runtime_dir: str | os.PathLike[str] | None) -> list[dict[str, str]]:
    """Live Jupyter servers' runtime info (url, token), from their `jpserver-<pid>.json` files."""
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = jupyter_runtime_dir()
    infos = []
    for file in sorted(Path(runtime_dir).glob("jpserver-*.json")):
        try:
            info = json.loads(file.read_text())
        except (OSError, ValueError):
            continue
        url, pid = info.get("url"), info.get("pid")
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            continue
        if isinstance(pid, int) and not psutil.pid_exists(pid):
            continue  # a stale file of a server that has exited
        infos.append({"url": url if url.endswith("/") else url + "/", "token": str(info.get("token") or "")})
    return infos


def attribute(
    devices: Iterable[GpuDevice], kernels: Iterable[KernelProcess]
) -> tuple[list[GpuDevice], list[KernelGpu]]:
    """Devices with each process's kernel (or a note saying why it has none), and per kernel the GPU
    memory its process tree holds. Kernels holding no GPU memory are not listed."""
    by_pid = {kernel.pid: kernel for kernel in kernels}
    devices = list(devices)
    owners: dict[int, KernelProcess | str] = {}  # pid -> its kernel, or the note
    result: list[GpuDevice] = []
    for device in devices:
        processes = []
        for process in device.processes:
            if process.pid not in owners:
                owners[process.pid] = _owner(process.pid, by_pid)
            owner = owners[process.pid]
            if isinstance(owner, KernelProcess):
                processes.append(
                    replace(
                        process,
                        kernel_id=owner.kernel_id,
                        notebook_path=owner.notebook_path,
                        server=owner.server,
                        note=None,
                    )
                )
            else:
                processes.append(replace(process, note=owner))
        result.append(replace(device, processes=tuple(processes)))
    return result, kernel_usage(result, {k.kernel_id: k for k in by_pid.values()})


def kernel_usage(devices: Iterable[GpuDevice], kernels: Mapping[str, KernelProcess]) -> list[KernelGpu]:
    """Per kernel: the GPU memory of its attributed processes, and the mean utilization of the
    devices it holds (NVML has no per-process SM share)."""
    pids: dict[str, set[int]] = {}
    gpus: dict[str, list[GpuDevice]] = {}
    memory: dict[str, float] = {}
    for device in devices:
        for process in device.processes:
            if process.kernel_id is None:
                continue
            pids.setdefault(process.kernel_id, set()).add(process.pid)
            held = gpus.setdefault(process.kernel_id, [])
            if device not in held:
                held.append(device)
            memory[process.kernel_id] = memory.get(process.kernel_id, 0.0) + (process.used_memory_mib or 0.0)
    usage = []
    for kernel_id, held in gpus.items():
        kernel = kernels.get(kernel_id)
        utilizations = [d.utilization_pct for d in held if d.utilization_pct is not None]
        usage.append(
            KernelGpu(
                kernel_id=kernel_id,
                notebook_path=kernel.notebook_path if kernel else None,
                server=kernel.server if kernel else None,
                pids=tuple(sorted(pids[kernel_id])),
                gpus=tuple(d.uuid for d in held),
                memory_used_mib=memory[kernel_id],
                utilization_pct=sum(utilizations) / len(utilizations) if utilizations else None,
            )
        )
    return sorted(usage, key=lambda k: (-k.memory_used_mib, k.kernel_id))


def _owner(pid: int, kernels: Mapping[int, KernelProcess]) -> KernelProcess | str:
    """The kernel `pid` is (or descends from), or the note saying why it is none."""
    if pid in kernels:
        return kernels[pid]
    try:
        proc = psutil.Process(pid)
        lineage = [proc, *proc.parents()]
        for ancestor in lineage[1:]:
            if ancestor.pid in kernels:
                return kernels[ancestor.pid]
        for member in lineage:
            other = _kernel_id_or_none(member)
            if other:
                return f"a Jupyter kernel of another server (kernel {other})"
        if proc.uids().real != os.getuid():
            return f"process of another user ({_username(proc)})"
        return f"not a Jupyter kernel: {proc.name()}"
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return f"PID {pid} is not visible in this PID namespace (the GPU is shared with another container)"
    except psutil.AccessDenied:
        return "process of another user"


def attribute_workloads(
    devices: Iterable[GpuDevice], owners: Iterable[ProcessOwner]
) -> tuple[list[GpuDevice], list[WorkloadGpu]]:
    """Devices with each process that is no kernel of ours named after the workload whose process it
    is or descends from (on the GPUs that workload was given), and per workload the GPU memory its
    processes hold."""
    by_pid: dict[int, list[ProcessOwner]] = {}
    for owner in owners:
        by_pid.setdefault(owner.pid, []).append(owner)
    lineages: dict[int, list[int]] = {}
    result = []
    for device in devices:
        processes = []
        for process in device.processes:
            if process.kernel_id is None and by_pid:
                if process.pid not in lineages:
                    lineages[process.pid] = _lineage(process.pid)
                found = _workload_owner(lineages[process.pid], by_pid, device)
                if found is not None:
                    process = replace(process, workload=found.workload, note=None)
            processes.append(process)
        result.append(replace(device, processes=tuple(processes)))
    return result, workload_usage(result)


def workload_usage(devices: Iterable[GpuDevice]) -> list[WorkloadGpu]:
    """Per job (all its replicas) or pipeline step: its processes' GPU memory, and the mean
    utilization of the devices it holds."""
    found: dict[str, tuple[list[int], list[GpuDevice], list[float]]] = {}
    workloads = {}
    for device in devices:
        for process in device.processes:
            if process.workload is None:
                continue
            key = process.workload.series
            workloads[key] = process.workload
            pids, held, memory = found.setdefault(key, ([], [], []))
            pids.append(process.pid)
            if device not in held:
                held.append(device)
            memory.append(process.used_memory_mib or 0.0)
    usage = []
    for key, (pids, held, memory) in found.items():
        utilizations = [d.utilization_pct for d in held if d.utilization_pct is not None]
        usage.append(
            WorkloadGpu(
                workload=workloads[key],
                pids=tuple(sorted(set(pids))),
                gpus=tuple(d.uuid for d in held),
                memory_used_mib=sum(memory),
                utilization_pct=sum(utilizations) / len(utilizations) if utilizations else None,
            )
        )
    return sorted(usage, key=lambda w: (-w.memory_used_mib, w.workload.series))


def _lineage(pid: int) -> list[int]:
    """`pid` and its ancestors' pids, nearest first; just `pid` when it cannot be followed."""
    try:
        proc = psutil.Process(pid)
        return [pid, *(parent.pid for parent in proc.parents())]
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return [pid]


def _workload_owner(
    lineage: list[int], owners: Mapping[int, list[ProcessOwner]], device: GpuDevice
) -> ProcessOwner | None:
    """The nearest owner in `lineage` whose workload was given `device` (or any GPU)."""
    given = {str(device.index), device.uuid}
    for pid in lineage:
        for owner in owners.get(pid, ()):
            if owner.gpu_ids is None or given & set(owner.gpu_ids):
                return owner
    return None


def _kernel_id_or_none(proc: psutil.Process) -> str | None:
    try:
        return kernel_id_of(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _username(proc: psutil.Process) -> str:
    try:
        return str(proc.username())
    except (psutil.AccessDenied, KeyError):
        return f"uid {proc.uids().real}"

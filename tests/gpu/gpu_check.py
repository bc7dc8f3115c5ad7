"""`make gpu-check`: on a machine with NVIDIA GPUs, check what the GPU features promise, for real, and
print a table of pass/fail with figures. Standard output only; no internet; about two minutes.

What it exercises, each as a user meets it: a notebook kernel holding GPU memory attributed to its
kernel; `%gpu --once` and `monitor()` in that kernel; `cube-jupyter gpu`; a local training job whose
replicas (two on two GPUs when there are two or more) all-reduce over NCCL, its replica attributed as
"job ..., worker-0"; a GPU pipeline whose steps pass a CUDA tensor, its step attributed as
"step ..., use"; the GPU quota refusing what no wait could give; and GPU-aware culling, with a short
threshold, noticing the kernel that holds an idle GPU and stopping a training job whose replica does
(`cull_idle_gpu_jobs`).

Without a GPU it says so and exits 2; a failed check exits 1. Everything runs in a temporary state
directory, on the local backend, as user `gpu-check`.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager
from traitlets.config import Config

from cube_jupyter.config import Settings, load_settings
from cube_jupyter.errors import CubeError
from cube_jupyter.gpu.model import GpuDevice
from cube_jupyter.gpu.nvml import NvmlSource
from cube_jupyter.gpu.report import local_report
from cube_jupyter.gpu.service import ChildServer, GpuService, ServerRef
from cube_jupyter.gpu.sources import NoGpuVisible
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.pipelines.targets import RunRequest
from cube_jupyter.services import Workbench
from tests.pipelines.notebooks import code, notebook, write

USER = "gpu-check"
DDP_SCRIPT = """\
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)  # CUDA_VISIBLE_DEVICES gives each replica its own GPU
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((32 * 2**20,), float(rank + 1), device="cuda")
dist.all_reduce(t)
assert float(t[0]) == world * (world + 1) / 2, (float(t[0]), world)
print("allreduce ok", world, flush=True)
time.sleep(8)  # holds its GPU memory while the check looks at it
dist.destroy_process_group()
"""
# A replica that takes GPU memory, then computes nothing: what job culling must find.
IDLE_SCRIPT = """\
import time, torch
x = torch.ones(64 * 2**20, device="cuda")
torch.cuda.synchronize()
print("holding", x.numel() * 4 >> 20, "MiB", flush=True)
time.sleep(120)
"""


@dataclass
class Result:
    name: str
    ok: bool
    figure: str


class Checks:
    """Runs each check, timing it; an exception is that check's failure, said in one line."""

    def __init__(self) -> None:
        self.results: list[Result] = []

    async def run(self, name: str, check: Callable[[], Awaitable[str]]) -> None:
        started = time.monotonic()
        try:
            figure = await check()
            self.results.append(Result(name, True, f"{figure} ({time.monotonic() - started:.1f} s)"))
        except Exception as exc:  # a check that fails is reported, and the others still run
            why = exc.message if isinstance(exc, CubeError) else f"{type(exc).__name__}: {exc}"
            self.results.append(Result(name, False, why.splitlines()[0][:160] if why else type(exc).__name__))

    def table(self) -> str:
        rows = [("CHECK", "RESULT", "FIGURES")] + [
            (r.name, "pass" if r.ok else "FAIL", r.figure) for r in self.results
        ]
        width = [max(len(row[i]) for row in rows) for i in range(2)]
        return "\n".join(f"{a.ljust(width[0])}  {b.ljust(width[1])}  {c}" for a, b, c in rows)


def settings_in(folder: Path, quota: int = 1, **gpu: Any) -> Settings:
    config = Config()
    config.CubeWorkbench.state_dir = str(folder / "state")
    config.CubeWorkbench.default_user = USER
    config.CubeWorkbench.gpu_quota_per_user = quota
    for key, value in gpu.items():
        setattr(config.CubeGPU, key, value)
    return load_settings(config)


class Kernel:
    """A Python kernel, as a notebook's (its connection file named as a Jupyter server names it,
    which is how the GPU report knows a kernel): run code in it and read what it printed."""

    def __init__(self, folder: Path) -> None:
        connection = folder / f"kernel-{uuid.uuid4()}.json"
        self.manager = KernelManager(kernel_name="python3", connection_file=str(connection))
        self.manager.start_kernel()
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        self.pid = int(self.run("import os; print(os.getpid())"))

    def run(self, source: str, timeout: float = 60) -> str:
        printed: list[str] = []

        def output(message: dict[str, Any]) -> None:
            content = message["content"]
            if message["msg_type"] == "stream":
                printed.append(content["text"])
            elif message["msg_type"] == "error":
                printed.append("\n".join(content["traceback"]))

        reply = self.client.execute_interactive(source, output_hook=output, timeout=timeout)
        text = "".join(printed).strip()
        if reply["content"]["status"] != "ok":
            raise RuntimeError(re.sub(r"\x1b\[[0-9;]*m", "", text)[-300:])
        return text

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def held_by(devices: list[GpuDevice], pid: int) -> float:
    return sum(p.used_memory_mib or 0 for d in devices for p in d.processes if p.pid == pid)


async def main() -> int:
    try:
        devices = NvmlSource().read()
    except NoGpuVisible as exc:
        print(exc.message)
        print("gpu-check: nothing to check without a GPU")
        return 2
    gpus = len(devices)
    print(f"gpu-check: {gpus} GPU(s): {', '.join(sorted({d.name or d.uuid for d in devices}))}\n")
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="cube-gpu-check-") as scratch:
        folder = Path(scratch)
        await checks.run("NVML read", lambda: nvml_reads())
        kernel = Kernel(folder)
        try:
            await checks.run("kernel attribution", lambda: kernel_attribution(kernel))
            await checks.run("%gpu --once", lambda: gpu_once(kernel))
            await checks.run("monitor()", lambda: gpu_monitor(kernel))
            await checks.run("cube-jupyter gpu", lambda: gpu_cli(kernel))
            await checks.run("GPU-aware culling", lambda: culling(kernel, folder / "cull"))
        finally:
            kernel.close()
        workbench = Workbench(settings_in(folder, quota=gpus), root_dir=str(folder))
        try:
            await checks.run("quota refusal", lambda: quota_refusal(workbench, gpus))
            await checks.run(f"training job, NCCL x{min(gpus, 2)}", lambda: training(workbench, folder, gpus))
            await checks.run("GPU pipeline", lambda: pipeline(workbench, folder))
        finally:
            await workbench.close()
        await checks.run("idle training job culled", lambda: job_culling(folder / "job-cull"))
    print(checks.table())
    return 0 if all(r.ok for r in checks.results) else 1


async def nvml_reads() -> str:
    source = NvmlSource()
    took = []
    for _ in range(20):
        started = time.perf_counter()
        source.read()
        took.append(time.perf_counter() - started)
    source.close()
    return f"median {statistics.median(took) * 1000:.2f} ms per read"


async def kernel_attribution(kernel: Kernel) -> str:
    kernel.run("import torch\nx = torch.ones(64 * 2**20, device='cuda')\ntorch.cuda.synchronize()")
    report = local_report()
    mine = [p for d in report.devices for p in d.processes if p.pid == kernel.pid]
    if not mine or mine[0].kernel_id is None:
        raise AssertionError(f"the kernel's process {kernel.pid} is not attributed to it: {mine}")
    return f"kernel {mine[0].kernel_id[:8]} holds {held_by(list(report.devices), kernel.pid):.0f} MiB"


async def gpu_once(kernel: Kernel) -> str:
    printed = kernel.run("%load_ext cube_jupyter.ipython\n%gpu --once")
    if "this notebook" not in printed:
        raise AssertionError(f"no 'this notebook' in: {printed[:200]}")
    return "says 'this notebook'"


async def gpu_monitor(kernel: Kernel) -> str:
    printed = kernel.run(
        "from cube_jupyter.gpu import monitor\nimport time\n"
        "m = monitor(interval=0.5)\ntime.sleep(2.2)\nprint(m.samples, m.last_error)\nm.stop()"
    )
    samples, error = printed.splitlines()[-1].split(maxsplit=1)
    if int(samples) < 3 or error != "None":
        raise AssertionError(f"monitor: {printed[-200:]}")
    return f"{samples} samples in 2.2 s at 0.5 s"


async def gpu_cli(kernel: Kernel) -> str:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cube_jupyter.cli", "gpu"], capture_output=True, text=True, timeout=60
    )
    took = time.perf_counter() - started
    if done.returncode != 0 or f"pid {kernel.pid}" not in done.stdout:
        raise AssertionError(f"exit {done.returncode}: {(done.stdout + done.stderr)[-200:]}")
    return f"lists the kernel's pid; {took:.2f} s cold"


async def culling(kernel: Kernel, folder: Path) -> str:
    """The kernel (a child of this process, standing for its server) holds GPU memory and computes
    nothing: with a 3 s threshold the workbench asks to stop its server."""
    settings = settings_in(folder, cull_idle_gpu_seconds=3.0, sample_seconds=0.5, cache_seconds=0)
    server = ChildServer(USER, "check", "http://127.0.0.1:9/", "", os.getpid())
    asked: list[str] = []

    class Servers:
        def servers(self, user: str | None) -> list[ServerRef]:
            return [ServerRef(USER, "check")]

        def running_children(self) -> list[ChildServer]:
            return [server]

    async def stop(user: str, name: str, reason: str) -> None:
        asked.append(reason)

    service = GpuService(settings.gpu, GpuLedger(None, []), Servers(), stop_idle=stop)
    started = time.monotonic()
    while not asked and time.monotonic() - started < 30:
        await service.sample_once()
        await service.cull_once()
        await asyncio.sleep(0.5)
    await service.close()
    if not asked:
        raise AssertionError("the kernel's idle GPU was never found idle for 3 s")
    return f"stop asked after {time.monotonic() - started:.1f} s: {asked[0][:60]}..."


async def quota_refusal(workbench: Workbench, gpus: int) -> str:
    """One GPU more than the quota (all the machine's GPUs): no wait could give it."""
    spec = {
        "name": "too-big",
        "framework": "pytorch",
        "replicas": {"worker": {"replicas": gpus + 1, "resources": {"gpu": 1}}},
        "command": [sys.executable, "-c", "pass"],
    }
    try:
        await (await workbench.started_jobs()).submit(USER, {"kind": "training", "spec": spec})
    except CubeError as refused:
        return f"refused at once: {refused.message[:70]}"
    raise AssertionError(f"{gpus + 1} GPUs past a quota of {gpus} were accepted")


async def training(workbench: Workbench, folder: Path, gpus: int) -> str:
    (folder / "ddp_check.py").write_text(DDP_SCRIPT)
    replicas = min(gpus, 2)
    spec = {
        "name": "gpu-check-ddp",
        "framework": "pytorch",
        "replicas": {"worker": {"replicas": replicas, "resources": {"gpu": 1}}},
        "script": "ddp_check.py",
    }
    jobs = await workbench.started_jobs()
    started = time.monotonic()
    await jobs.submit(USER, {"kind": "training", "spec": spec})
    seen = ""
    while time.monotonic() - started < 90:
        job = jobs.get(USER, "gpu-check-ddp")
        if not seen:
            report = await workbench.gpu.report(USER, history_seconds=0)
            labels = {p.workload.label for d in report.devices for p in d.processes if p.workload}
            seen = next((label for label in sorted(labels) if label.startswith("job gpu-check-ddp")), "")
        if job.finished:
            break
        await asyncio.sleep(0.5)
    if job.phase != "Succeeded":
        raise AssertionError(f"the job ended {job.phase}: {job.message or ''}"[:200])
    if not seen:
        raise AssertionError("no GPU process was attributed to the job's replicas")
    return f"{replicas} replica(s) all-reduced and succeeded in {time.monotonic() - started:.1f} s; '{seen}'"


async def pipeline(workbench: Workbench, folder: Path) -> str:
    steps = notebook(
        code("import torch, time", "imports"),
        code("x = torch.ones(16 * 2**20, device='cuda')", "step:make", "gpu:1"),
        code("total = float(x.sum())\ntime.sleep(8)", "step:use", "prev:make", "gpu:1"),
    )
    write(steps, folder / "gpu_pipeline.ipynb")
    service = await workbench.started_pipelines()
    started = time.monotonic()
    run = await service.start_run(USER, RunRequest("gpu_pipeline.ipynb"))
    seen = ""
    while not seen and time.monotonic() - started < 60:
        report = await workbench.gpu.report(USER, history_seconds=0)
        labels = {p.workload.label for d in report.devices for p in d.processes if p.workload}
        seen = next((label for label in labels if label.endswith(", use")), "")
        await asyncio.sleep(0.5)
    done = await service.wait(USER, run.id)
    if done.status != "succeeded":
        raise AssertionError(f"the run {done.status}: {done.error}"[:200])
    if not seen:
        raise AssertionError("no GPU process was attributed to step 'use'")
    durations = ", ".join(f"{s.name} {s.duration or 0:.1f} s" for s in service.get_run(USER, run.id).steps)
    return f"a CUDA tensor passed between steps ({durations}); '{seen}'"


async def job_culling(folder: Path) -> str:
    """A one-GPU job whose replica holds memory at 0% utilization, with a 3 s threshold and jobs
    opted in: the workbench's own sampler stops it, Failed with reason IdleGPU."""
    settings = settings_in(
        folder, cull_idle_gpu_seconds=3.0, cull_idle_gpu_jobs=True, sample_seconds=0.5, cache_seconds=0
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "idle.py").write_text(IDLE_SCRIPT)
    workbench = Workbench(settings, root_dir=str(folder))
    spec = {
        "name": "gpu-check-idle",
        "framework": "pytorch",
        "replicas": {"worker": {"replicas": 1, "resources": {"gpu": 1}}},
        "script": "idle.py",
    }
    try:
        jobs = await workbench.started_jobs()
        gpu = workbench.gpu
        await jobs.submit(USER, {"kind": "training", "spec": spec})
        started = time.monotonic()
        job = jobs.get(USER, "gpu-check-idle")
        while not job.finished and time.monotonic() - started < 60:
            await gpu.sample_once()
            await gpu.cull_once()
            await asyncio.sleep(0.5)
            job = jobs.get(USER, "gpu-check-idle")
        reason = job.conditions[-1].reason if job.conditions else ""
        if job.phase != "Failed" or reason != "IdleGPU":
            raise AssertionError(f"the job is {job.phase} ({reason}): {job.message or ''}"[:200])
        return f"stopped {time.monotonic() - started:.1f} s after submit: {job.message or ''}"[:150]
    finally:
        await workbench.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""GPU processes named after the work they do: a local job's replica (and its children), a pipeline
step's kernel on the GPUs it was given, in `/gpu`, its history, the CLI and the inline monitor.

NVML readings come from a REPLAY of recorded NVML answers (tests/gpu/nvml_replay.py; this machine has
no GPU) whose recorded PID is mapped onto a live process the workbench really started: a replica's
child process of a real local training job, a real pipeline step's forked kernel.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from cube_jupyter.cli.gpu_commands import show
from cube_jupyter.gpu.nvml import NvmlSource
from cube_jupyter.gpu.service import GpuService
from cube_jupyter.gpu.widget import GpuMonitor
from cube_jupyter.jobs.service import JobService
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.pipelines.local.gpus import process_owners
from cube_jupyter.pipelines.targets import RunRequest
from cube_jupyter.services import Workbench
from tests.gpu.nvml_replay import NvmlReplay
from tests.gpu.test_service import GPU0, GPU1, MIB, make_settings
from tests.pipelines.notebooks import notebook, write
from tests.pipelines.test_gpu_steps import Env, gpu_step
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)

RECORDED = 41234  # the recording's process on both GPUs (18944 MiB on GPU 0, 512 MiB on GPU 1)
WAIT = 60.0
# A replica that starts a child holding the GPU memory, as a DataLoader worker or `!python train.py`.
WITH_CHILD = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "time.sleep(120)\n"
)


def child_of(pid: int) -> psutil.Process | None:
    children = psutil.Process(pid).children(recursive=True)
    return children[0] if children else None


async def start_job_with_child(jobs: JobService) -> psutil.Process:
    """Alice's local job toy-ddp: one replica that starts a child; that child, once it runs."""
    spec = {
        "name": "toy-ddp",
        "framework": "pytorch",
        "replicas": {"worker": 1},
        "command": [sys.executable, "-c", WITH_CHILD],
    }
    await jobs.submit("alice", {"kind": "training", "spec": spec})
    job = await wait_until_async(
        lambda: jobs.get("alice", "toy-ddp"),
        WAIT,
        "the replica running with its child",
        until=lambda j: bool(j.replicas and j.replicas[0].pid and child_of(j.replicas[0].pid)),
    )
    child = child_of(job.replicas[0].pid or 0)
    assert child is not None
    return child


async def test_a_job_replicas_gpu_memory_is_named_after_the_job_in_the_report_history_and_cli(
    tmp_path: Path, install_nvml_replay: Callable[..., NvmlReplay], capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path)
    workbench = Workbench(settings, root_dir=str(tmp_path))
    jobs = workbench.jobs
    await jobs.start()
    try:
        child = await start_job_with_child(jobs)
        install_nvml_replay("a100x2-processes.json", pid_map={RECORDED: child.pid})
        gpu = workbench.gpu

        report = await gpu.report("alice", history_seconds=0)
        held = [p for d in report.devices for p in d.processes if p.pid == child.pid]
        assert [p.workload.label if p.workload else p.note for p in held] == ["job toy-ddp, worker-0"] * 2
        (usage,) = report.workloads
        assert usage.workload.series == "job:alice/toy-ddp" and usage.gpus == (GPU0, GPU1)
        assert usage.memory_used_mib == (19864223744 + 536870912) / MIB
        assert usage.pids == (child.pid,)

        bob = await gpu.report("bob", history_seconds=0)  # another user: what it is, not whose
        assert bob.workloads == ()
        notes = {p.note for d in bob.devices for p in d.processes if p.pid == child.pid}
        assert notes == {"a job of another workbench user"}

        await gpu.sample_once()
        sampled = await gpu.report("alice", history_seconds=60)
        series = {(s.key, s.metric) for s in sampled.history}
        assert {("job:alice/toy-ddp", "memory_used_mib"), ("job:alice/toy-ddp", "utilization_pct")} <= series

        assert show(argparse.Namespace(history=0, prometheus=None, json=False), settings) == 0
        printed = capsys.readouterr().out
        assert f"pid {child.pid}" in printed and "job toy-ddp, worker-0" in printed, printed

        owners = workbench.process_owners()
        monitor = GpuMonitor(NvmlSource(), owners=lambda: [o for source in owners for o in source()])
        try:
            monitor.refresh()
            shown = monitor.widget  # the process table under each GPU names the job
            assert "job toy-ddp, worker-0" in repr_html(shown)
        finally:
            monitor.close()
    finally:
        await jobs.backend.delete("alice", "toy-ddp")
        await jobs.close()


def repr_html(widget: object) -> str:
    """Every HTML value in an ipywidgets tree."""
    found = [getattr(widget, "value", "")] if isinstance(getattr(widget, "value", None), str) else []
    for child in getattr(widget, "children", ()):
        found.append(repr_html(child))
    return "\n".join(found)


def test_a_pipeline_steps_kernel_is_named_after_the_step_on_its_own_gpu_only(
    tmp_path: Path, install_nvml_replay: Callable[..., NvmlReplay], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = Env(tmp_path, quota=None)  # the recording's 2 GPUs are the machine's
    install_nvml_replay("a100x2-processes.json")
    gpu = GpuService(make_settings(tmp_path).gpu, GpuLedger(None, []), owners=[process_owners(env.history)])
    write(notebook(gpu_step("train", seconds=6)), env.root / "work" / "one.ipynb")

    async def scenario() -> tuple[str, str, list[tuple[int, str | None, str | None]]]:
        run = await env.service.start_run("alice", RunRequest("work/one.ipynb"))
        [step] = await wait_until_async(
            lambda: env.history.gpu_steps(), WAIT, "the GPU step running", until=lambda s: len(s) == 1
        )
        kernel = await wait_until_async(
            lambda: next(
                (p for p in psutil.Process(os.getpid()).children(recursive=True) if is_kernel(p)), None
            ),
            WAIT,
            "the step's kernel",
        )
        install_nvml_replay("a100x2-processes.json", pid_map={RECORDED: kernel.pid})
        report = await gpu.report("alice", history_seconds=0)
        seen = [
            (d.index, p.workload.label if p.workload else None, p.note)
            for d in report.devices
            for p in d.processes
            if p.pid == kernel.pid
        ]
        await env.service.wait("alice", run.id)
        return run.id, step.gpu_ids[0], seen

    try:
        run_id, given, seen = env.loop.run_until_complete(scenario())
    finally:
        env.close()
    label = f"step {run_id}, train"
    assert sorted((index, workload) for index, workload, _ in seen) == [
        (index, label if str(index) == given else None) for index in (0, 1)
    ]
    assert all(note for index, _, note in seen if str(index) != given)  # said plainly what it is


def is_kernel(process: psutil.Process) -> bool:
    """A step's kernel: forked by the run's worker, named as the kernel it stands for."""
    try:
        return "ipykernel_launcher" in process.cmdline()
    except psutil.Error:
        return False

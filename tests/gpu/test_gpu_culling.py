"""GPU-aware culling (`CubeGPU.cull_idle_gpu_seconds`): a notebook server whose GPUs have held memory
at 0% utilization that long is stopped, with a reason saying so, on both backends; a training job too
where the admin opted in (`cull_idle_gpu_jobs`).

Locally the readings are a REPLAY of recorded NVML answers (tests/gpu/nvml_replay.py; this machine
has no GPU) whose idle process is mapped onto a real kernel process of a real server process; on a
cluster a real Prometheus scrapes the DCGM sample page, where bob's server pod holds memory at 0%.
The notebook servers are listed as the notebook backend lists them, and the stop the workbench asks
for is recorded (the notebook backends' own stop with a reason: tests/local, tests/kubernetes).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from cube_jupyter.gpu.attribution import KernelProcess
from cube_jupyter.gpu.service import ChildServer, GpuService, IdleHolder, JobRef, ServerRef, gpu_cull_reason
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.services import Workbench
from tests.gpu.nvml_replay import NvmlReplay
from tests.gpu.prometheus_server import NO_DCGM_PAGE, SAMPLE_PAGE, DcgmPrometheus
from tests.gpu.test_service import make_settings
from tests.gpu.test_workload_attribution import start_job_with_child
from tests.server.openapi import assert_response_matches
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(120)

IDLE_PID = 41377  # in the recording: 1 GiB on GPU 0, busy in samples 0-3, 0% in samples 4-6


class Servers:
    """The notebook servers as the GPU service reads them (`NotebookServers`)."""

    def __init__(self, children: list[ChildServer], servers: list[ServerRef]) -> None:
        self.children, self.listed = children, servers

    def servers(self, user: str | None) -> list[ServerRef]:
        return [s for s in self.listed if user is None or s.user == user]

    def running_children(self) -> list[ChildServer]:
        return self.children


class Stops:
    """What the workbench asked to stop, and why."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    async def __call__(self, user: str, name: str, reason: str) -> None:
        self.asked.append((user, name, reason))


@pytest.fixture
def server_with_kernel() -> Iterator[tuple[int, int]]:
    """A server process with one kernel process below it, launched as Jupyter launches kernels."""
    kernel_file = f"/tmp/kernel-{uuid.uuid4()}.json"
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', '-f', "
            f"{kernel_file!r}])\n"
            "time.sleep(120)\n",
        ]
    )
    try:
        import psutil

        kernel = None
        while kernel is None:
            children = psutil.Process(server.pid).children()
            kernel = children[0].pid if children else None
        yield server.pid, kernel
    finally:
        server.kill()
        server.wait()


async def test_a_local_server_whose_kernel_holds_an_idle_gpu_is_stopped_saying_why(
    tmp_path: Path,
    install_nvml_replay: Callable[..., NvmlReplay],
    server_with_kernel: tuple[int, int],
) -> None:
    server_pid, kernel_pid = server_with_kernel
    install_nvml_replay("a100x2-processes.json", pid_map={IDLE_PID: kernel_pid})
    lab = ChildServer("alice", "lab", "http://127.0.0.1:9/", "token", server_pid)  # answers no sessions
    settings = make_settings(
        tmp_path, cache_seconds=0, sample_seconds=0.01, idle_warning_seconds=0.1, cull_idle_gpu_seconds=0.2
    )
    stops = Stops()
    service = GpuService(
        settings.gpu, GpuLedger(None, []), Servers([lab], [ServerRef("alice", "lab")]), stop_idle=stops
    )
    for _ in range(4):  # samples 0-3: the kernel's GPU is busy
        await service.sample_once()
        assert await service.cull_once() == []
    await service.sample_once()  # sample 4: the idle spell starts
    await asyncio.sleep(0.25)  # (a real wait: the spell's age is wall-clock time, as in test_service)
    await service.sample_once()  # sample 5: still idle
    stopped = await service.cull_once()
    assert [(s.kind, s.user, s.name) for s in stopped] == [("server", "alice", "lab")]
    assert stopped[0].idle_seconds >= 0.2
    assert stops.asked == [("alice", "lab", gpu_cull_reason(0.2))]
    assert "0% utilization for" in stops.asked[0][2] and "cull_idle_gpu_seconds" in stops.asked[0][2]
    (warning,) = (await service.report("alice")).idle  # sample 6, still idle: what the panel says
    assert "at 0% utilization" in warning.message and "a notebook server is stopped after" in warning.message
    assert warning.stops_in_seconds == 0.0  # past the limit: the next pass stops it


async def test_culling_is_off_by_default_and_never_stops_the_workbenchs_own_kernels(
    tmp_path: Path, install_nvml_replay: Callable[..., NvmlReplay], server_with_kernel: tuple[int, int]
) -> None:
    _, kernel_pid = server_with_kernel
    install_nvml_replay("a100x2-processes.json", pid_map={IDLE_PID: kernel_pid})
    stops = Stops()
    off = GpuService(make_settings(tmp_path).gpu, GpuLedger(None, []), Servers([], []), stop_idle=stops)
    assert await off.cull_once() == []
    settings = make_settings(
        tmp_path, cache_seconds=0, sample_seconds=0.01, idle_warning_seconds=0.01, cull_idle_gpu_seconds=0.01
    )
    own = [KernelProcess("k-own", kernel_pid, "gpu.ipynb", "http://127.0.0.1:8888/")]  # the workbench's
    no_child = GpuService(settings.gpu, GpuLedger(None, []), Servers([], []), lambda: own, stop_idle=stops)
    for _ in range(5):  # samples 0-4: busy, then idle
        await no_child.sample_once()
    await asyncio.sleep(0.05)  # (a real wait: the spell's age is wall-clock time)
    await no_child.sample_once()  # sample 5: still idle
    assert await no_child.cull_once() == [] and stops.asked == []  # idle, but no server of ours holds it
    # Warned about (sample 6), and told truly: nothing will stop it.
    (warning,) = (await no_child.report("alice")).idle
    assert warning.kernel_id == "k-own" and warning.notebook_path == "gpu.ipynb"
    assert warning.stops_in_seconds is None and "is stopped after" not in warning.message


async def test_a_user_server_warns_of_the_stop_the_central_workbench_will_make(
    tmp_path: Path, install_nvml_replay: Callable[..., NvmlReplay], server_with_kernel: tuple[int, int]
) -> None:
    """A user's own server (role user: a local child or a pod) culls nothing itself, but the central
    workbench stops it when its kernels' GPUs sit idle: its warning says so, with the time left."""
    _, kernel_pid = server_with_kernel
    install_nvml_replay("a100x2-processes.json", pid_map={IDLE_PID: kernel_pid})
    settings = make_settings(
        tmp_path,
        role="user",
        cache_seconds=0,
        sample_seconds=0.01,
        idle_warning_seconds=0.05,
        cull_idle_gpu_seconds=3600,
    )
    own = [KernelProcess("k-own", kernel_pid, "model.ipynb", "http://127.0.0.1:8888/")]
    service = GpuService(settings.gpu, GpuLedger(None, []), None, lambda: own)
    for _ in range(5):  # samples 0-4: busy, then idle
        await service.sample_once()
    await asyncio.sleep(0.1)  # (a real wait: the spell's age is wall-clock time)
    await service.sample_once()  # sample 5: still idle
    assert await service.cull_once() == []  # the central workbench stops it, not this server
    (warning,) = (await service.report("alice")).idle  # sample 6
    assert warning.kernel_id == "k-own" and "a notebook server is stopped after 1.0 h" in warning.message
    assert warning.stops_in_seconds is not None and 3500 < warning.stops_in_seconds < 3600


def test_the_countdown_waits_while_another_gpu_of_the_holder_works(tmp_path: Path) -> None:
    """A server is stopped once every kernel of it holding GPU memory is idle: while one works, the
    idle one's warning names the rule but counts nothing down."""
    settings = make_settings(tmp_path, idle_warning_seconds=60, cull_idle_gpu_seconds=3600)
    service = GpuService(settings.gpu, GpuLedger(None, []))
    assert service._stop_notice("server", None) == ("", None)  # nothing stops it
    notice, stops_in = service._stop_notice("server", 0.0)  # a sibling kernel works
    assert notice == " (a notebook server is stopped after 1.0 h of this)" and stops_in is None
    assert service._stop_notice("server", 600.0)[1] == 3000.0
    # Idle for less than the warning's 60 s: the stop is still counted from when all went idle.
    assert service._stop_notice("server", 30.0)[1] == 3570.0
    assert service._stop_notice("job", 4000.0) == (" (a training job is stopped after 1.0 h of this)", 0.0)


async def test_a_cluster_server_pod_idle_in_dcgm_is_stopped_and_a_busy_one_kept(
    tmp_path: Path, prometheus_url: str
) -> None:
    """bob-lab-0 holds 512 MiB at 0% in the sample page; alice-nb-0 is busy (37%)."""
    settings = make_settings(
        tmp_path, prometheus_url=prometheus_url, cache_seconds=0, cull_idle_gpu_seconds=3
    )
    servers = Servers([], [ServerRef("bob", "bob-lab"), ServerRef("alice", "alice-nb")])
    stops = Stops()
    service = GpuService(settings.gpu, GpuLedger(None, []), servers, stop_idle=stops)
    stopped: list[IdleHolder] = await wait_until_async(
        service.cull_once, 30, "bob's idle server stopped", interval=0.5
    )
    assert [(s.user, s.name) for s in stopped] == [("bob", "bob-lab")] and stopped[0].idle_seconds >= 3
    assert stops.asked == [("bob", "bob-lab", gpu_cull_reason(3))]


@pytest.mark.parametrize("opted_in", [True, False], ids=["opted-in", "off"])
async def test_a_local_training_job_whose_gpu_sits_idle_is_stopped_only_where_the_admin_opts_in(
    tmp_path: Path, install_nvml_replay: Callable[..., NvmlReplay], opted_in: bool
) -> None:
    """The idle process is a real local job replica's child (a DataLoader worker, say): the job is
    warned about, then (opted in) stopped: Failed with reason IdleGPU, its processes gone, its record
    and logs kept; off, it is only warned about and keeps running."""
    settings = make_settings(
        tmp_path,
        cache_seconds=0,
        sample_seconds=0.01,
        idle_warning_seconds=0.1,
        cull_idle_gpu_seconds=0.2,
        cull_idle_gpu_jobs=opted_in,
    )
    workbench = Workbench(settings, root_dir=str(tmp_path))
    jobs = workbench.jobs
    await jobs.start()
    try:
        child = await start_job_with_child(jobs)
        install_nvml_replay("a100x2-processes.json", pid_map={IDLE_PID: child.pid})
        gpu = workbench.gpu
        for _ in range(4):  # samples 0-3: the job's GPU is busy
            await gpu.sample_once()
            assert await gpu.cull_once() == []
        await gpu.sample_once()  # sample 4: the idle spell starts
        await asyncio.sleep(0.25)  # (a real wait: the spell's age is wall-clock time)
        await gpu.sample_once()  # sample 5: still idle
        report = await gpu.report("alice")  # sample 6, as `/gpu` sends it:
        assert_response_matches("/gpu", "get", 200, json.loads(json.dumps(report.to_dict())))
        (warning,) = [w for w in report.idle if w.workload]
        assert warning.key == "job:alice/toy-ddp" and warning.workload == "job toy-ddp"
        assert "at 0% utilization" in warning.message and "delete it to free the GPU" in warning.message
        assert ("a training job is stopped after" in warning.message) is opted_in
        assert (warning.stops_in_seconds is not None) is opted_in

        stopped = await gpu.cull_once()
        job = jobs.get("alice", "toy-ddp")
        if not opted_in:
            assert stopped == [] and job.phase == "Running" and child.is_running()
            return
        assert [(s.kind, s.user, s.name) for s in stopped] == [("job", "alice", "toy-ddp")]
        why = gpu_cull_reason(0.2)
        assert job.phase == "Failed" and job.message == f"PyTorchJob toy-ddp failed: {why}"
        assert (job.conditions[-1].type, job.conditions[-1].reason) == ("Failed", "IdleGPU")
        assert job.replicas[0].state == "Failed" and job.replicas[0].message == why
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE  # its processes stopped
        assert workbench.ledger.holders("alice") == []  # its GPU counts toward nothing now
        assert jobs.get("alice", "toy-ddp").name == "toy-ddp"  # kept, with its logs, until deleted
        await gpu.sample_once()
        assert await gpu.cull_once() == []  # stopped once: finished, it is no workload any more
    finally:
        await jobs.backend.delete("alice", "toy-ddp")
        await jobs.close()
        await workbench.gpu.close()


async def test_a_cluster_training_job_all_of_whose_gpu_pods_sit_idle_in_dcgm_is_stopped(
    tmp_path: Path, dcgm_prometheus: DcgmPrometheus
) -> None:
    """The sample page with alice's job replica resnet-ddp-worker-0 at 0% (96% in the sample); bob's
    server pod idle as before; a job whose pods hold no GPU is never stopped."""
    page = tmp_path / "idle-job.txt"
    replica = r'(DCGM_FI_DEV_GPU_UTIL\{[^}]*pod="resnet-ddp-worker-0"\}) 96'
    page.write_text(re.sub(replica, r"\1 0", SAMPLE_PAGE.read_text()))
    dcgm_prometheus.serve(direct=page, relabelled=NO_DCGM_PAGE)
    settings = make_settings(
        tmp_path,
        prometheus_url=dcgm_prometheus.url,
        cache_seconds=0,
        idle_warning_seconds=3,
        cull_idle_gpu_seconds=3,
        cull_idle_gpu_jobs=True,
    )
    servers = Servers([], [ServerRef("bob", "bob-lab"), ServerRef("alice", "alice-nb")])
    running = [
        JobRef("alice", "resnet-ddp", "cube-alice", ("resnet-ddp-worker-0", "resnet-ddp-worker-1")),
        JobRef("alice", "cpu-only", "cube-alice", ("cpu-only-worker-0",)),
    ]
    server_stops, job_stops = Stops(), Stops()
    service = GpuService(
        settings.gpu,
        GpuLedger(None, []),
        servers,
        stop_idle=server_stops,
        jobs=lambda: running,
        stop_idle_job=job_stops,
    )
    stopped: list[IdleHolder] = await wait_until_async(
        service.cull_once, 30, "the idle job stopped", interval=0.5, until=lambda s: len(s) == 2
    )
    assert sorted((s.kind, s.user, s.name) for s in stopped) == [
        ("job", "alice", "resnet-ddp"),
        ("server", "bob", "bob-lab"),
    ]
    assert job_stops.asked == [("alice", "resnet-ddp", gpu_cull_reason(3))]
    # (the recorded stops change nothing on the page: bob's server was asked on every pass)
    assert set(server_stops.asked) == {("bob", "bob-lab", gpu_cull_reason(3))}
    report = await service.report("root-admin", all_users=True)
    assert_response_matches("/gpu", "get", 200, json.loads(json.dumps(report.to_dict())))
    (warning,) = [w for w in report.idle if w.pod == "resnet-ddp-worker-0"]
    assert "a training job is stopped after 3 s of this" in warning.message
    assert warning.stops_in_seconds == 0.0  # every GPU pod of it idle past the limit (worker-1 holds none)

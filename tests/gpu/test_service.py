"""The GPU service: scoping, attribution, history, idle warnings, quota and the read cache.

NVML readings come from a REPLAY of recorded NVML answers (tests/gpu/nvml_replay.py; this machine has
no GPU) fed to the real `NvmlSource`; the kernels are real processes, the notebook service runs on a
real local backend's sqlite state, and the cluster path reads a real Prometheus scraping DCGM pages.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import Settings, load_settings
from cube_jupyter.errors import BackendUnavailable, ConfigError, Forbidden, InvalidInput
from cube_jupyter.gpu.attribution import KernelProcess
from cube_jupyter.gpu.model import QueuedGpuJob
from cube_jupyter.gpu.pods import pod_kind
from cube_jupyter.gpu.service import OTHER_USERS_KERNEL, GpuService
from cube_jupyter.jobs.backend import gpu_holders
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.services import Workbench
from tests.gpu.nvml_replay import NvmlReplay
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(120)

GPU0 = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
GPU1 = "GPU-1b2c3d4e-0000-1111-2222-333344445555"
MIB = 1024 * 1024


def make_settings(tmp: Path, role: str = "workbench", **gpu: Any) -> Settings:
    config = Config()
    config.CubeWorkbench.role = role
    config.CubeWorkbench.state_dir = str(tmp / "state")
    config.CubeWorkbench.default_user = "alice"
    config.CubeWorkbench.admin_users = ["root-admin"]
    config.CubeWorkbench.gpu_quota_per_user = 4
    for key, value in gpu.items():
        setattr(config.CubeGPU, key, value)
    return load_settings(config)


@pytest.fixture
def kernel_process() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real process launched as Jupyter launches a kernel (its connection file in argv)."""
    kernel_id = str(uuid.uuid4())
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "-f", f"/tmp/kernel-{kernel_id}.json"]
    )
    yield proc, kernel_id
    proc.kill()
    proc.wait()


def make_service(settings: Settings, kernels: list[KernelProcess] | None = None) -> GpuService:
    """The GPU service as the composition root wires it (local backend state in a temp dir)."""
    listed = (lambda: list(kernels)) if kernels is not None else None
    return Workbench(settings, kernels=listed).gpu


def test_config_is_validated_naming_the_field(tmp_path: Path) -> None:
    for key, value, field in [
        ("sample_seconds", 0, "CubeGPU.sample_seconds"),
        ("history_seconds", -1, "CubeGPU.history_seconds"),
        ("idle_warning_seconds", -5, "CubeGPU.idle_warning_seconds"),
        ("cache_seconds", -1, "CubeGPU.cache_seconds"),
        ("prometheus_url", "prometheus:9090", "CubeGPU.prometheus_url"),
    ]:
        with pytest.raises(ConfigError) as raised:
            make_settings(tmp_path, **{key: value})
        assert raised.value.field == field, key
    config = Config()
    config.CubeWorkbench.prometheus_url = "ftp://nope"
    with pytest.raises(ConfigError) as raised:
        load_settings(config)
    assert raised.value.field == "CubeWorkbench.prometheus_url"


def test_either_prometheus_url_works_and_cubegpu_wins(tmp_path: Path) -> None:
    config = Config()
    config.CubeWorkbench.prometheus_url = "http://workbench-prom:9090"
    assert load_settings(config).gpu.prometheus_url == "http://workbench-prom:9090/"
    config.CubeGPU.prometheus_url = "http://gpu-prom:9090/prometheus"
    gpu = load_settings(config).gpu
    assert gpu.prometheus_url == "http://gpu-prom:9090/prometheus/" and gpu.source == "prometheus"
    assert make_settings(tmp_path).gpu.source == "nvml"


async def test_no_gpu_is_a_state_not_an_error(tmp_path: Path) -> None:
    """The real pynvml on this GPU-less machine."""
    service = make_service(make_settings(tmp_path))
    report = await service.report("alice")
    assert report.available is False and report.source == "nvml"
    assert report.message and report.message.startswith("No GPU visible")
    assert report.devices == () and report.quota is not None and report.quota.limit == 4
    body = report.to_dict()
    assert body["user"] == "alice" and body["is_admin"] is False


async def test_gpu_memory_is_attributed_to_the_callers_kernel_only(
    tmp_path: Path,
    install_nvml_replay: Callable[..., NvmlReplay],
    kernel_process: tuple[subprocess.Popen[bytes], str],
) -> None:
    """REPLAY of two A100s: recorded PID 41234 (on both GPUs) is mapped onto a live kernel process."""
    proc, kernel_id = kernel_process
    install_nvml_replay("a100x2-processes.json", pid_map={41234: proc.pid})
    kernel = KernelProcess(kernel_id, proc.pid, "work/train.ipynb", "workbench")
    service = make_service(make_settings(tmp_path), [kernel])

    report = await service.report("alice")  # the workbench's kernels are its owner's
    assert report.available and [d.uuid for d in report.devices] == [GPU0, GPU1]
    held = [p for d in report.devices for p in d.processes if p.pid == proc.pid]
    assert len(held) == 2
    assert all(
        (p.kernel_id, p.notebook_path, p.server) == (kernel_id, "work/train.ipynb", "workbench") for p in held
    )
    (usage,) = report.kernels
    assert usage.kernel_id == kernel_id and usage.gpus == (GPU0, GPU1)
    assert usage.memory_used_mib == (19864223744 + 536870912) / MIB
    assert usage.utilization_pct == (37 + 96) / 2

    # Another user sees the devices but not whose notebook it is.
    bob = await service.report("bob")
    assert bob.kernels == ()
    for process in (p for d in bob.devices for p in d.processes if p.pid == proc.pid):
        assert process.kernel_id is None and process.notebook_path is None
        assert process.note == OTHER_USERS_KERNEL
    # Admins may look at everyone's; others may not ask to.
    admin = await service.report("root-admin", all_users=True)
    assert [k.kernel_id for k in admin.kernels] == [kernel_id]
    with pytest.raises(Forbidden) as forbidden:
        await service.report("bob", all_users=True)
    assert forbidden.value.field == "all"
    for bad in (-1, 86401, float("nan")):
        with pytest.raises(InvalidInput) as invalid:
            await service.report("alice", history_seconds=bad)
        assert invalid.value.field == "history"


async def test_sampler_history_and_idle_warning(
    tmp_path: Path,
    install_nvml_replay: Callable[..., NvmlReplay],
    kernel_process: tuple[subprocess.Popen[bytes], str],
) -> None:
    """REPLAY: recorded PID 41377 holds 1 GiB on GPU 0, which is busy in samples 0-3, idle (0%) in
    samples 4-6 and busy again from sample 7. Each read takes the next sample (no cache here)."""
    proc, kernel_id = kernel_process
    replay = install_nvml_replay("a100x2-processes.json", pid_map={41377: proc.pid})
    kernel = KernelProcess(kernel_id, proc.pid, "idle.ipynb", "workbench")
    settings = make_settings(tmp_path, cache_seconds=0, idle_warning_seconds=0.2, sample_seconds=0.01)
    service = make_service(settings, [kernel])

    for _ in range(5):  # samples 0..4: the idle spell starts at sample 4
        await service.sample_once()
    await asyncio.sleep(0.3)
    await service.sample_once()  # sample 5: still idle
    report = await service.report("alice")  # reads sample 6
    assert replay.reads == 7
    (warning,) = report.idle
    assert warning.key == f"kernel:{kernel_id}" and warning.kernel_id == kernel_id
    assert warning.gpu == GPU0 and warning.notebook_path == "idle.ipynb"
    assert warning.idle_seconds >= 0.2
    assert "idle.ipynb has held 1024 MiB on GPU 0 at 0% utilization" in warning.message
    assert report.idle_after_seconds == 0.2

    by_key = {(s.key, s.metric): [v for _, v in s.points] for s in report.history}
    assert by_key[(f"gpu:{GPU0}", "utilization_pct")] == [37, 42, 55, 61, 0, 0]
    assert by_key[(f"gpu:{GPU1}", "memory_used_mib")] == [75096915968 / MIB] * 6
    assert by_key[(f"kernel:{kernel_id}", "memory_used_mib")] == [1024.0] * 6
    assert (await service.report("bob", history_seconds=600)).idle == ()  # not bob's kernel
    assert not any(s.key.startswith("kernel:") for s in (await service.report("bob")).history)

    await service.sample_once()  # sample 9 (the reports took 7 and 8): busy, the spell ends
    assert (await service.report("alice")).idle == ()
    assert (await service.report("alice", history_seconds=0)).history == ()


async def test_the_sampler_runs_in_the_background(
    tmp_path: Path, install_nvml_replay: Callable[..., NvmlReplay]
) -> None:
    replay = install_nvml_replay("a100x2-processes.json")
    service = make_service(make_settings(tmp_path, cache_seconds=0, sample_seconds=0.05))
    await service.start()
    try:
        await wait_until_async(lambda: replay.reads >= 3, 30, "the sampler to read NVML three times")
    finally:
        await service.close()
    # Stopped: no sampler task is left to read again.
    assert [t for t in asyncio.all_tasks() if t.get_name() == "cube-gpu-sampler" and not t.done()] == []
    series = {(s.key, s.metric): s for s in (await service.report("alice")).history}
    assert len(series[(f"gpu:{GPU0}", "utilization_pct")].points) >= 3


async def test_concurrent_reports_share_one_read(
    tmp_path: Path, install_nvml_replay: Callable[..., NvmlReplay]
) -> None:
    replay = install_nvml_replay("a100x2-processes.json")
    cached = make_service(make_settings(tmp_path, cache_seconds=30))
    reports = await asyncio.gather(*(cached.report(f"user{i % 5}") for i in range(50)))
    assert replay.reads == 1 and cached.reads.loads == 1
    assert {r.timestamp for r in reports} == {reports[0].timestamp}
    assert {r.to_dict()["user"] for r in reports} == {f"user{i}" for i in range(5)}

    uncached = make_service(make_settings(tmp_path, cache_seconds=0))
    await asyncio.gather(*(uncached.report("alice") for _ in range(50)))
    assert replay.reads == 51


async def test_quota_is_the_ledgers_view_of_servers_and_jobs(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    quota = make_service(settings).quota("alice")
    assert quota is not None and (quota.used, quota.limit, quota.holders) == (0, 4, ())
    held = HeldJobs({"alice": [("resnet", 2, False), ("done", 4, True)]})
    service = GpuService(settings.gpu, GpuLedger(settings.gpu_quota, [gpu_holders(held)]))  # type: ignore[arg-type]
    quota = service.quota("alice")
    assert quota is not None and quota.used == 2  # a finished job holds nothing
    assert quota.holders == ({"kind": "job", "name": "resnet", "gpus": 2},)
    assert service.quota("bob") == type(quota)(used=0, limit=4, holders=())


async def test_quota_shows_the_queued_gpu_demand_beside_what_is_held(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    waiting = {
        "alice": [
            QueuedGpuJob("later", 1, 3, "behind big, submitted before it"),
            QueuedGpuJob("big", 2, 1, "waiting for 2 GPUs: 0 of 2 free"),
            QueuedGpuJob("cpu-only", 0, 2, "waiting for 2 CPU slots"),  # asks for no GPU: not shown
            QueuedGpuJob("lab", 1, 2, "behind job big, submitted before it", kind="notebook"),
        ]
    }
    service = GpuService(settings.gpu, GpuLedger(settings.gpu_quota), queued=lambda u: waiting.get(u, []))
    quota = service.quota("alice")
    assert quota is not None and (quota.used, quota.queued) == (0, 4)
    # in the machine's one queue's order, jobs and servers together
    assert [(j.kind, j.name) for j in quota.queued_jobs] == [
        ("job", "big"),
        ("notebook", "lab"),
        ("job", "later"),
    ]
    body = (await service.report("alice")).to_dict()["quota"]
    assert body["queued"] == 4
    assert list(body["queued_jobs"][:2]) == [
        {"name": "big", "gpus": 2, "position": 1, "reason": "waiting for 2 GPUs: 0 of 2 free", "kind": "job"},
        {
            "name": "lab",
            "gpus": 1,
            "position": 2,
            "reason": "behind job big, submitted before it",
            "kind": "notebook",
        },
    ]
    assert service.quota("bob") == type(quota)(used=0, limit=4)

    def unreadable(user: str) -> list[QueuedGpuJob]:
        raise BackendUnavailable("the job backend is not started")

    blind = GpuService(settings.gpu, GpuLedger(settings.gpu_quota), queued=unreadable)
    quota = blind.quota("alice")  # what is held still shows
    assert quota is not None and (quota.queued, quota.queued_jobs) == (0, ())


class HeldJobs:
    """A job backend's `list` as the ledger reads it: (name, gpus, finished) per user."""

    def __init__(self, jobs: dict[str, list[tuple[str, int, bool]]]) -> None:
        self.jobs = jobs

    def list(self, user: str | None) -> list[Any]:
        return [
            SimpleNamespace(name=name, gpus=gpus, finished=finished, queue=None)
            for name, gpus, finished in self.jobs.get(user or "", [])
        ]


# -- the cluster path: a real Prometheus scraping the DCGM sample page -------------------------------


def cluster_settings(tmp: Path, url: str, **gpu: Any) -> Settings:
    return make_settings(tmp, prometheus_url=url, **gpu)


async def test_cluster_pods_are_scoped_to_the_callers_namespace(tmp_path: Path, prometheus_url: str) -> None:
    service = make_service(cluster_settings(tmp_path, prometheus_url, idle_warning_seconds=0))
    alice = await service.report("alice", history_seconds=0)
    assert alice.source == "prometheus" and alice.available
    assert {d.namespace for d in alice.devices} == {"cube-alice"}
    pods = {p.pod: p for p in alice.pods}
    assert set(pods) == {"alice-nb-0", "resnet-ddp-worker-0"}
    assert pods["resnet-ddp-worker-0"].kind == "job"
    assert pods["alice-nb-0"].kind == "other"  # alice has no server named alice-nb here
    assert pods["alice-nb-0"].utilization_pct == 37 and pods["alice-nb-0"].memory_used_mib == 20112
    assert pods["alice-nb-0"].memory_total_mib == 20112 + 60937 and pods["alice-nb-0"].owner == "alice"

    bob = await service.report("bob", history_seconds=0)
    assert [p.pod for p in bob.pods] == ["bob-lab-0"]
    carol = await service.report("carol", history_seconds=0)
    assert carol.available is False and "cube-carol" in (carol.message or "")

    everyone = await service.report("root-admin", all_users=True, history_seconds=0)
    assert len(everyone.devices) == 4  # with the unallocated one
    assert {p.pod for p in everyone.pods} == {"alice-nb-0", "resnet-ddp-worker-0", "bob-lab-0"}


async def test_cluster_pods_include_the_callers_job_namespace(tmp_path: Path, prometheus_url: str) -> None:
    """With `CubeJobs.namespace_template` apart from the servers' namespace, job replicas are the
    caller's pods too (the sample page has alice's in cube-alice; her servers would be in nb-alice)."""
    config = Config()
    config.CubeWorkbench.state_dir = str(tmp_path / "state")
    config.CubeWorkbench.namespace_template = "nb-{username}"
    config.CubeJobs.namespace_template = "cube-{username}"
    config.CubeGPU.prometheus_url = prometheus_url
    config.CubeGPU.idle_warning_seconds = 0
    service = make_service(load_settings(config))
    alice = await service.report("alice", history_seconds=0)
    assert alice.available, alice.message
    assert {p.pod for p in alice.pods} == {"alice-nb-0", "resnet-ddp-worker-0"}
    assert {p.owner for p in alice.pods} == {"alice"}
    carol = await service.report("carol", history_seconds=0)
    assert not carol.available and "nb-carol, cube-carol" in (carol.message or "")


async def test_cluster_history_and_idle_pod(tmp_path: Path, prometheus_url: str) -> None:
    """bob-lab-0 holds 512 MiB at 0% in the sample page: idle for as long as Prometheus has scraped it."""
    service = make_service(
        cluster_settings(tmp_path, prometheus_url, idle_warning_seconds=3, cache_seconds=0)
    )
    report = await wait_until_async(
        lambda: service.report("bob", history_seconds=60),
        30,
        "an idle warning for bob-lab-0",
        until=lambda report: report.idle,
        interval=0.5,
    )
    (warning,) = report.idle
    assert warning.key == "pod:cube-bob/bob-lab-0" and warning.pod == "bob-lab-0"
    assert warning.gpu == "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff" and warning.idle_seconds >= 3
    keys = {s.key for s in report.history}
    assert keys == {"gpu:GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff", "pod:cube-bob/bob-lab-0"}
    assert all(v == 512 for s in report.history if s.metric == "memory_used_mib" for _, v in s.points)
    alice = await service.report("alice", history_seconds=60)
    assert alice.idle == ()  # alice's pods are busy
    assert {s.key for s in alice.history} >= {
        "pod:cube-alice/alice-nb-0",
        "pod:cube-alice/resnet-ddp-worker-0",
    }


async def test_unreachable_prometheus_names_the_field(tmp_path: Path, refused_port: int) -> None:
    service = make_service(cluster_settings(tmp_path, f"http://127.0.0.1:{refused_port}"))
    with pytest.raises(BackendUnavailable) as raised:
        await service.report("alice")
    assert raised.value.field == "prometheus_url" and "unreachable" in raised.value.message


async def test_cluster_without_prometheus_says_how_to_configure_it(tmp_path: Path) -> None:
    config = Config()
    config.CubeWorkbench.backend = "kubernetes"
    settings = load_settings(config)
    service = GpuService(settings.gpu, GpuLedger(settings.gpu_quota))
    report = await service.report("alice")
    assert report.available is False and report.source == "none"
    assert "CubeGPU.prometheus_url" in (report.message or "")


async def test_a_failed_read_is_shared_by_its_waiters_and_not_kept(tmp_path: Path, refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"
    service = make_service(cluster_settings(tmp_path, url, cache_seconds=30))
    results = await asyncio.gather(*(service.report("alice") for _ in range(10)), return_exceptions=True)
    assert all(isinstance(r, BackendUnavailable) for r in results)
    assert service.reads.loads == 1
    with pytest.raises(BackendUnavailable):
        await service.report("alice")
    assert service.reads.loads == 2  # retried, not answered from a cached failure


@pytest.mark.parametrize(
    ("pod", "kind"),
    [
        ("nb1-0", "notebook"),
        ("nb1-1", "notebook"),
        ("other-nb-0", "other"),
        ("mnist-master-0", "job"),
        ("resnet-ddp-worker-12", "job"),
        ("bert-launcher-0", "job"),
        ("tf-chief-0", "job"),
        ("tf-ps-1", "job"),
        ("tf-evaluator-0", "job"),
        ("resnet-worker", "other"),
        ("postgres-0", "other"),
    ],
)
def test_pod_kinds(pod: str, kind: str) -> None:
    assert pod_kind(pod, {"nb1"}) == kind

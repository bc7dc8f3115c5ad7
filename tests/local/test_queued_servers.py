"""GPU notebook servers in this machine's one queue (`local.admission`), with real children on a
machine NVML says has GPUs (`gpus.nvml_device_count`, as tests/server fake it): past the free GPUs or
the quota a server waits `queued` with its place and reason, holding nothing, and starts (with
`CUDA_VISIBLE_DEVICES`) once what it waits for is freed, by a server or a training job, even under
the next workbench; it can be stopped or deleted while queued; the bounds hold."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from traitlets.config import Config

from cube_jupyter.config import Settings, load_settings
from cube_jupyter.errors import BackendUnavailable, QuotaExceeded
from cube_jupyter.jobs.local.training import LocalTrainingRunner
from cube_jupyter.local import gpus
from cube_jupyter.local.admission import QueuePolicy, Rules
from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookServer, NotebookSpec, ServerStatus
from cube_jupyter.storage.local import LocalStore
from tests.jobs.local.conftest import training
from tests.jobs.local.test_local_training import TIMEOUT, awaiting
from tests.local.support import PROFILES

pytestmark = pytest.mark.timeout(180)
Backends = Callable[..., LocalNotebookBackend]
GPU_PROFILE = {"name": "gpu", "image": "x", "cpu": "1", "memory": "1Gi", "gpu": 1}
TWO_GPU_PROFILE = {**GPU_PROFILE, "name": "gpu2", "gpu": 2}
ONE_FREE = "waiting for 1 GPU: 0 of 1 free"


def settings_for(state_dir: Path, quota: int = 0, **spawner: Any) -> Settings:
    config = Config(
        {
            "CubeWorkbench": {"state_dir": str(state_dir), "poll_seconds": 0.3, "gpu_quota_per_user": quota},
            "CubeSpawner": {"profiles": [*PROFILES, GPU_PROFILE, TWO_GPU_PROFILE], **spawner},
        }
    )
    return load_settings(config)


def visible_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(gpus, "nvml_device_count", lambda: count)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def gpu_server(settings: Settings, user: str, name: str) -> NotebookSpec:
    return NotebookSpec(user, name, settings.notebooks.profile("gpu"))


def place(server: NotebookServer | None) -> tuple[ServerStatus, int | None, str | None]:
    assert server is not None
    return server.status, server.queue_position, server.queue_reason


def gpus_of(backend: LocalNotebookBackend, user: str, name: str) -> str:
    """The CUDA_VISIBLE_DEVICES a server's child was started with."""
    record = backend.state.get(user, name)
    assert record is not None and record.pid
    return str(psutil.Process(record.pid).environ()["CUDA_VISIBLE_DEVICES"])


def test_a_server_waits_for_a_free_gpu_and_starts_when_one_is_freed(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    visible_gpus(monkeypatch, 1)
    settings = settings_for(state_dir)
    backend = backends(settings)

    async def run() -> None:
        first = await backend.create_server(gpu_server(settings, "alice", "g1"))
        assert first.status == ServerStatus.PENDING and gpus_of(backend, "alice", "g1") == "0"
        queued = await backend.create_server(gpu_server(settings, "bob", "g2"))
        assert place(queued) == (ServerStatus.QUEUED, 1, ONE_FREE)
        assert queued.gpus_held == 0 and queued.actions == ["stop", "delete"]
        later = await backend.create_server(gpu_server(settings, "alice", "g3"))
        assert place(later) == (ServerStatus.QUEUED, 2, ONE_FREE)  # alice holds a GPU: bob first
        cpu = await backend.create_server(NotebookSpec("carol", "c1", settings.notebooks.profile(None)))
        assert cpu.status == ServerStatus.PENDING  # no GPU asked: never queued

        await backend.delete_server("alice", "g3")  # deleted while queued: nothing of it is left
        assert backend.get_server("alice", "g3") is None
        await backend.set_stopped("alice", "g1", True)  # its GPU is free: the head of the queue starts
        assert place(backend.get_server("bob", "g2")) == (ServerStatus.PENDING, None, None)
        assert gpus_of(backend, "bob", "g2") == "0"
        running = await backend.wait_until_ready("bob", "g2", timeout=60)
        assert running.status == ServerStatus.RUNNING

        # starting the stopped one queues it again; stopping it while queued leaves the queue
        assert place(await backend.set_stopped("alice", "g1", False)) == (ServerStatus.QUEUED, 1, ONE_FREE)
        assert place(await backend.set_stopped("alice", "g1", True)) == (ServerStatus.STOPPED, None, None)

    loop.run_until_complete(run())


def test_past_the_quota_a_server_waits_and_the_bounds_refuse_at_once(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    visible_gpus(monkeypatch, 2)
    settings = settings_for(state_dir, quota=1, max_queued_servers_per_user=1)
    backend = backends(settings)

    async def run() -> None:
        await backend.create_server(gpu_server(settings, "alice", "g1"))
        second = await backend.create_server(gpu_server(settings, "alice", "g2"))
        assert place(second) == (
            ServerStatus.QUEUED,
            1,
            "waiting for 1 GPU of quota: 'alice' holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)",
        )
        with pytest.raises(QuotaExceeded, match="max_queued_servers_per_user") as refused:
            await backend.create_server(gpu_server(settings, "alice", "g3"))
        assert refused.value.field == "name" and backend.get_server("alice", "g3") is None
        other = await backend.create_server(gpu_server(settings, "bob", "g1"))  # bob's quota is his own
        assert other.status == ServerStatus.PENDING

    loop.run_until_complete(run())

    # what no wait could give fails at once, naming the field: more GPUs than the quota itself...
    service = NotebookService(settings.notebooks, backend)
    with pytest.raises(QuotaExceeded, match=r"'gpu2' asks for 2 GPUs .* limit per user is 1") as over:
        loop.run_until_complete(service.create("carol", {"name": "g9", "profile": "gpu2"}))
    assert over.value.field == "profile" and backend.get_server("carol", "g9") is None
    # ...or than the machine has
    huge = NotebookSpec("alice", "g9", settings.notebooks.profile("gpu"))
    visible_gpus(monkeypatch, 0)
    with pytest.raises(BackendUnavailable, match="asks for 1 GPU") as never:
        loop.run_until_complete(backend.create_server(huge))
    assert never.value.field == "profile" and backend.get_server("alice", "g9") is None


def test_a_queued_server_survives_a_restart_and_starts_under_the_next_workbench(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    visible_gpus(monkeypatch, 1)
    settings = settings_for(state_dir)
    first = backends(settings)

    async def run() -> None:
        await first.create_server(gpu_server(settings, "alice", "g1"))
        await first.wait_until_ready("alice", "g1", timeout=60)
        await first.create_server(gpu_server(settings, "bob", "g2"))
        await first.close()  # the workbench goes; its children and the queue stay
        record = first.state.get("alice", "g1")
        assert record is not None and record.pid
        holder = psutil.Process(record.pid)
        holder.kill()  # what held the GPU ends while no workbench runs
        holder.wait(timeout=30)

        following = backends(settings)
        await following.reattach()  # g1's exit is noticed
        assert place(following.get_server("bob", "g2")) == (ServerStatus.QUEUED, 1, ONE_FREE)
        await following.check_once()  # its supervision pass: what the queue waits on changed
        assert following.get_server("bob", "g2") is not None
        assert (await following.wait_until_ready("bob", "g2", timeout=60)).status == ServerStatus.RUNNING

    loop.run_until_complete(run())


def test_servers_and_training_jobs_share_one_queue(
    state_dir: Path,
    backends: Backends,
    loop: asyncio.AbstractEventLoop,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A job holding the only GPU keeps a server queued until it ends; that server, waiting first,
    then holds back a job submitted after it: each feature's pass runs the same rule over both."""
    visible_gpus(monkeypatch, 1)
    settings = settings_for(state_dir)
    runner = LocalTrainingRunner(
        state_dir, store=LocalStore(tmp_path / "store"), mpirun="", stop_grace_seconds=3.0
    )
    backend = backends(settings, queue=QueuePolicy(Rules(None, 0, {}), others=[runner.queue_side()]))
    runner.policy = QueuePolicy(others=[backend.queue_side()])
    go = tmp_path / "go"
    job = {
        "name": "train",
        "framework": "pytorch",
        "replicas": {"master": {"replicas": 1, "resources": {"gpu": 1}}},
    }

    async def run() -> None:
        holder = await asyncio.to_thread(runner.start, training({**job, "command": awaiting(go, 0)}))
        assert holder.phase == "Running"
        server = await backend.create_server(gpu_server(settings, "bob", "g1"))
        assert place(server) == (ServerStatus.QUEUED, 1, ONE_FREE)
        later = await asyncio.to_thread(
            runner.start, training({**job, "name": "later", "command": awaiting(go, 0)})
        )
        assert later.queue is not None and (later.queue.position, later.queue.reason) == (2, ONE_FREE)

        go.touch()
        assert (await asyncio.to_thread(runner.wait, holder.user, "train", TIMEOUT)).phase == "Succeeded"
        await asyncio.to_thread(runner.refresh_all)  # the jobs' pass: the GPU is the server's, ahead
        assert runner.get(holder.user, "later").phase == "Queued"  # type: ignore[union-attr]
        await backend.check_once()  # the servers' pass starts the server, the head
        assert gpus_of(backend, "bob", "g1") == "0"
        await asyncio.to_thread(runner.refresh_all)
        waiting = runner.get(holder.user, "later")
        assert waiting is not None and waiting.queue is not None
        assert (waiting.phase, waiting.queue.position, waiting.queue.reason) == ("Queued", 1, ONE_FREE)

    try:
        loop.run_until_complete(run())
    finally:
        for each in runner.list():
            runner.delete(each.user, each.name)

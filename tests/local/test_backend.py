"""LocalNotebookBackend with real child processes: lifecycle, failures, GPUs, restart re-attach."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import psutil
import pytest
from tornado.httpclient import AsyncHTTPClient

from cube_jupyter.backends.local import LocalNotebookBackend, process
from cube_jupyter.backends.local.notebooks import DOWN_REASON
from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.local.support import EXITING_LAB, children_of, make_settings

pytestmark = pytest.mark.timeout(120)
Backends = Callable[..., LocalNotebookBackend]


async def child_get(backend: LocalNotebookBackend, user: str, name: str, path: str) -> dict[str, object]:
    """GET a path of a running child directly, with its token (what the router does)."""
    upstream = backend.upstream(user, name)
    assert upstream is not None
    response = await AsyncHTTPClient().fetch(
        f"http://{upstream.host}:{upstream.port}{upstream.base_url}{path}",
        headers={"Authorization": f"token {upstream.token}"},
    )
    return cast(dict[str, object], json.loads(response.body))


def test_lifecycle_create_stop_start_delete(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    settings = make_settings(state_dir)
    backend = backends(settings)
    spec = NotebookSpec("alice", "nb1", settings.profile(None))

    async def run() -> None:
        began = time.monotonic()
        created = await backend.create_server(spec)
        assert time.monotonic() - began < 1.0  # create answers at once; the child starts behind it
        assert created.status == ServerStatus.PENDING
        assert created.url == "/a%40b/cube/notebook/alice/nb1/"
        assert created.resources.cpu == "500m" and created.resources.memory == "1Gi"
        with pytest.raises(Conflict):
            await backend.create_server(spec)
        running = await backend.wait_until_ready("alice", "nb1", timeout=60)
        assert running.status == ServerStatus.RUNNING and running.reason is None

        record = backend.state.get("alice", "nb1")
        assert record is not None and record.pid and record.port and record.token
        child = psutil.Process(record.pid)
        assert os.getsid(record.pid) == record.pid  # its own session: survives the main server
        assert record.token not in " ".join(child.cmdline())  # the token is not in `ps` output
        env = child.environ()
        assert env["CUBE_TEST_PROFILE"] == "small" and env["CUDA_VISIBLE_DEVICES"] == ""
        assert "127.0.0.1" in " ".join(child.cmdline())
        workspace = state_dir / "workspaces" / "alice" / "nb1"
        assert (state_dir / "logs" / "alice-nb1.log").is_file()
        (workspace / "keep.txt").write_text("kept")
        assert (await child_get(backend, "alice", "nb1", "api/contents/keep.txt"))["type"] == "file"

        stopped = await backend.set_stopped("alice", "nb1", True)
        assert stopped.status == ServerStatus.STOPPED and stopped.reason is None
        assert (
            not psutil.pid_exists(record.pid) or psutil.Process(record.pid).status() == psutil.STATUS_ZOMBIE
        )
        assert backend.upstream("alice", "nb1") is None

        await backend.set_stopped("alice", "nb1", False)
        again = await backend.wait_until_ready("alice", "nb1", timeout=60)
        assert again.status == ServerStatus.RUNNING
        second = backend.state.get("alice", "nb1")
        assert second is not None and second.pid != record.pid and second.token != record.token
        content = await child_get(backend, "alice", "nb1", "api/contents/keep.txt?content=1")
        assert content["content"] == "kept"  # same workspace after a restart

        await backend.delete_server("alice", "nb1")
        assert backend.get_server("alice", "nb1") is None
        assert children_of(state_dir) == []
        assert (workspace / "keep.txt").read_text() == "kept"  # the workspace outlives the server
        with pytest.raises(NotFound):
            await backend.delete_server("alice", "nb1")

    loop.run_until_complete(run())


def test_spawn_failure_leaves_no_record(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    settings = make_settings(state_dir)
    spec = NotebookSpec("alice", "nb1", settings.profile(None))

    async def run() -> None:
        state_dir.mkdir(parents=True)
        (state_dir / "logs").write_text("a file where the log directory should be")
        with pytest.raises(BackendUnavailable, match="could not start server 'nb1'"):
            await backends(settings).create_server(spec)
        (state_dir / "logs").unlink()
        missing = backends(settings, lab_command=[str(state_dir / "no-such-jupyter")])
        with pytest.raises(BackendUnavailable, match="could not start server 'nb1'"):
            await missing.create_server(spec)
        assert missing.list_servers(None) == []
        assert children_of(state_dir) == []

    loop.run_until_complete(run())


def test_child_that_exits_is_failed_with_code_and_log(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    settings = make_settings(state_dir)
    backend = backends(settings, lab_command=EXITING_LAB)

    async def run() -> None:
        await backend.create_server(NotebookSpec("alice", "nb1", settings.profile(None)))
        with pytest.raises(BackendUnavailable, match="code 3"):
            await backend.wait_until_ready("alice", "nb1", timeout=30)
        server = backend.get_server("alice", "nb1")
        assert server is not None and server.status == ServerStatus.FAILED
        assert server.reason is not None and "no lab here today" in server.reason

    loop.run_until_complete(run())


def test_gpu_profile_is_refused_when_the_machine_has_too_few(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    visible = process.visible_gpu_ids()
    wanted = len(visible) + 1
    profiles = [{"name": "big-gpu", "image": "x", "gpu": wanted, "default": True}]
    settings = make_settings(state_dir, profiles=profiles)
    backend = backends(settings)

    async def run() -> None:
        with pytest.raises(BackendUnavailable) as refused:
            await backend.create_server(NotebookSpec("alice", "nb1", settings.profile(None)))
        assert refused.value.field == "profile"
        assert f"profile 'big-gpu' asks for {wanted} GPU(s)" in refused.value.message
        assert f"of {len(visible)} visible" in refused.value.message
        assert backend.list_servers(None) == []

    loop.run_until_complete(run())


def test_visible_gpus_follow_nvml_and_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    count = process.nvml_device_count()
    assert process.visible_gpu_ids({}) == [str(i) for i in range(count)]
    # The admin's own restriction narrows the set, and never invents devices NVML does not see.
    assert process.visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "1,0"}) == ["1", "0"][:count]


def test_restart_reattaches_live_children_and_marks_dead_ones(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    settings = make_settings(state_dir)
    profile = settings.profile(None)

    async def run() -> None:
        first = backends(settings)
        for name in ("live", "dead"):
            await first.create_server(NotebookSpec("alice", name, profile))
        for name in ("live", "dead"):
            await first.wait_until_ready("alice", name, timeout=60)
        await first.close()  # the main server goes away; its children do not
        live, dead = first.state.get("alice", "live"), first.state.get("alice", "dead")
        assert live is not None and dead is not None and live.pid and dead.pid
        os.killpg(dead.pid, signal.SIGKILL)
        await asyncio.to_thread(psutil.Process(dead.pid).wait, 10)

        second = backends(settings)
        await second.start()
        assert (server := second.get_server("alice", "live")) is not None
        assert server.status == ServerStatus.RUNNING
        assert second.state.get("alice", "live").pid == live.pid  # type: ignore[union-attr]
        failed = second.get_server("alice", "dead")
        assert failed is not None and failed.status == ServerStatus.FAILED and failed.reason == DOWN_REASON
        assert second.upstream("alice", "live") is not None

    loop.run_until_complete(run())


def test_recycled_pid_is_not_taken_for_a_child(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    """A record whose pid now belongs to another process (here: this test runner) is failed, and that
    process is left alone."""
    settings = make_settings(state_dir)
    backend = backends(settings, lab_command=EXITING_LAB)

    async def run() -> None:
        await backend.create_server(NotebookSpec("alice", "nb1", settings.profile(None)))
        record = backend.state.get("alice", "nb1")
        assert record is not None
        backend.state.update("alice", "nb1", status=ServerStatus.RUNNING, pid=os.getpid())
        restarted = backends(settings)
        await restarted.reattach()
        server = restarted.get_server("alice", "nb1")
        assert server is not None and server.status == ServerStatus.FAILED and server.reason == DOWN_REASON
        await restarted.delete_server("alice", "nb1")  # must not signal the recycled pid (us)

    loop.run_until_complete(run())

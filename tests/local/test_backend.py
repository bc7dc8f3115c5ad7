"""LocalNotebookBackend with real child processes: lifecycle, failures, GPUs, restart re-attach."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import psutil
import pytest
from jupyter_core.paths import jupyter_runtime_dir
from tornado.httpclient import AsyncHTTPClient

from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound, QuotaExceeded
from cube_jupyter.gpu.service import gpu_cull_reason
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.local import gpus
from cube_jupyter.local.locks import KeyedLocks
from cube_jupyter.notebooks.local.backend import DOWN_REASON, LocalNotebookBackend
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.local.support import EXITING_LAB, children_of, kernel_environment, make_settings
from tests.waiting import wait_until_async

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
    spec = NotebookSpec("alice", "nb1", settings.notebooks.profile(None))

    async def run() -> None:
        created = await backend.create_server(spec)
        assert created.status == ServerStatus.PENDING  # create answers at once; the child starts behind it
        assert created.url == "/a%40b/cube/notebook/alice/nb1/"
        assert created.resources.cpu == "1" and created.resources.memory == "1Gi"
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
        assert (state_dir / "logs" / "alice" / "nb1.log").is_file()
        (workspace / "keep.txt").write_text("kept")
        assert (await child_get(backend, "alice", "nb1", "api/contents/keep.txt"))["type"] == "file"
        # Lab's layouts live in the server's own workspace, not in a folder every server writes
        assert "workspaces" in await child_get(backend, "alice", "nb1", "lab/api/workspaces")
        assert f"--LabApp.workspaces_dir={workspace / '.jupyter/lab/workspaces'}" in child.cmdline()

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

        # stopped by the workbench itself (its GPUs sat idle: CubeGPU.cull_idle_gpu_seconds), saying why
        service = NotebookService(settings.notebooks, backend, GpuLedger(None, []))
        await service.stop_idle("alice", "nb1", gpu_cull_reason(7200))
        culled = backend.get_server("alice", "nb1")
        assert culled is not None and culled.status == ServerStatus.STOPPED
        assert culled.reason == gpu_cull_reason(7200) and "2.0 h" in (culled.reason or "")
        await service.stop_idle("alice", "nb1", "again")  # already stopped: left as it is
        assert backend.get_server("alice", "nb1").reason == gpu_cull_reason(7200)  # type: ignore[union-attr]

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
    spec = NotebookSpec("alice", "nb1", settings.notebooks.profile(None))

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
        await backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile(None)))
        with pytest.raises(BackendUnavailable, match="code 3"):
            await backend.wait_until_ready("alice", "nb1", timeout=30)
        server = backend.get_server("alice", "nb1")
        assert server is not None and server.status == ServerStatus.FAILED
        assert server.reason is not None and "no lab here today" in server.reason
        assert server.actions == ["stop", "start", "delete"]
        stopped = await backend.set_stopped("alice", "nb1", True)  # a failed server can be stopped
        assert stopped.status == ServerStatus.STOPPED and stopped.actions == ["start", "delete"]

    loop.run_until_complete(run())


def test_gpu_profile_is_refused_when_the_machine_has_too_few(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    visible = gpus.visible_gpu_ids()
    wanted = len(visible) + 1
    profiles = [{"name": "big-gpu", "image": "x", "gpu": wanted, "default": True}]
    settings = make_settings(state_dir, profiles=profiles)
    backend = backends(settings)

    async def run() -> None:
        with pytest.raises(BackendUnavailable) as refused:
            await backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile(None)))
        assert refused.value.field == "profile"
        assert f"profile 'big-gpu' asks for {wanted} GPU(s)" in refused.value.message
        assert f"this machine has {len(visible)} (GPUs visible" in refused.value.message
        assert backend.list_servers(None) == []

    loop.run_until_complete(run())


def test_visible_gpus_follow_nvml_and_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    count = gpus.nvml_device_count()
    assert gpus.visible_gpu_ids({}) == [str(i) for i in range(count)]
    # The admin's own restriction narrows the set, and never invents devices NVML does not see.
    assert gpus.visible_gpu_ids({"CUDA_VISIBLE_DEVICES": "1,0"}) == ["1", "0"][:count]


def test_restart_reattaches_live_children_and_marks_dead_ones(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    settings = make_settings(state_dir)
    profile = settings.notebooks.profile(None)

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
        await backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile(None)))
        record = backend.state.get("alice", "nb1")
        assert record is not None
        backend.state.update("alice", "nb1", status=ServerStatus.RUNNING, pid=os.getpid())
        restarted = backends(settings)
        await restarted.reattach()
        server = restarted.get_server("alice", "nb1")
        assert server is not None and server.status == ServerStatus.FAILED and server.reason == DOWN_REASON
        await restarted.delete_server("alice", "nb1")  # must not signal the recycled pid (us)

    loop.run_until_complete(run())


# A "lab" that prints its argv (which names the server's base_url) and exits.
ARGV_LAB = (sys.executable, "-c", "import sys; print('argv', *sys.argv[1:], flush=True); sys.exit(3)")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tokens_and_logs_are_private_to_the_workbench_user(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    """state.sqlite holds every child's token and logs may echo them: 0700 dirs, 0600 files, whatever
    the umask (0 here, the worst case)."""
    settings = make_settings(state_dir)
    old_umask = os.umask(0)
    try:
        backend = backends(settings, lab_command=EXITING_LAB)

        async def run() -> None:
            await backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile(None)))
            with pytest.raises(BackendUnavailable):
                await backend.wait_until_ready("alice", "nb1", timeout=30)

        loop.run_until_complete(run())
        # While a connection has the database open (as the server's have), SQLite's WAL sidecars
        # exist: they are made with the database's own mode, still under umask 0.
        with contextlib.closing(sqlite3.connect(state_dir / "state.sqlite")) as db:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            sidecars = {suffix: mode(state_dir / f"state.sqlite-{suffix}") for suffix in ("wal", "shm")}
    finally:
        os.umask(old_umask)
    assert mode(state_dir) == 0o700
    database = state_dir / "state.sqlite"
    assert mode(database) == 0o600
    assert sidecars == {"wal": 0o600, "shm": 0o600}
    log = state_dir / "logs" / "alice" / "nb1.log"
    assert "no lab here today" in log.read_text()
    assert mode(log) == 0o600 and mode(log.parent) == 0o700


def test_log_files_of_users_never_collide(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    """User `a`'s server `b-c` and user `a-b`'s server `c` once shared `logs/a-b-c.log`: each saw the
    other's output (tokens included) in its failure reason."""
    settings = make_settings(state_dir)
    backend = backends(settings, lab_command=ARGV_LAB)
    servers = [("a", "b-c"), ("a-b", "c")]

    async def run() -> None:
        for user, name in servers:
            await backend.create_server(NotebookSpec(user, name, settings.notebooks.profile(None)))
        for user, name in servers:
            with pytest.raises(BackendUnavailable, match="code 3"):
                await backend.wait_until_ready(user, name, timeout=30)

    loop.run_until_complete(run())
    for (user, name), (other_user, other_name) in zip(servers, reversed(servers), strict=True):
        mine, theirs = f"/cube/notebook/{user}/{name}/", f"/cube/notebook/{other_user}/{other_name}/"
        log = (state_dir / "logs" / user / f"{name}.log").read_text()
        assert mine in log and theirs not in log
        reason = backend.get_server(user, name).reason  # type: ignore[union-attr]
        assert reason is not None and mine in reason and theirs not in reason


def test_keyed_locks_stay_while_someone_waits(loop: asyncio.AbstractEventLoop) -> None:
    """delete_server used to drop a server's lock on its way out while another call waited on it; the
    next caller then got a fresh lock and ran alongside the waiter."""
    locks = KeyedLocks()
    inside: list[str] = []
    overlaps: list[tuple[str, ...]] = []

    async def work(who: str, hold: float) -> None:
        async with locks.hold(("alice", "nb1")):
            inside.append(who)
            overlaps.append(tuple(inside))
            await asyncio.sleep(hold)
            inside.remove(who)

    async def run() -> None:
        first = asyncio.create_task(work("delete", 0.05))
        await asyncio.sleep(0.01)
        waiter = asyncio.create_task(work("stop", 0.1))  # waits for the delete
        await first
        newcomer = asyncio.create_task(work("start", 0.01))  # arrives while "stop" holds the lock
        await asyncio.gather(waiter, newcomer)

    loop.run_until_complete(run())
    assert overlaps == [("delete",), ("stop",), ("start",)]
    assert len(locks) == 0  # and nothing is kept once everyone is done


def test_start_without_supervision_leaves_the_children_alone(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    """The CLI starts the backend with supervise=False: it neither re-attaches (stopping, failing or
    watching other servers) nor runs the supervisor that culls."""
    settings = make_settings(state_dir, cull_idle_seconds=1)
    backend = backends(settings, lab_command=EXITING_LAB)

    async def run() -> None:
        await backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile(None)))
        backend.state.update("alice", "nb1", status=ServerStatus.STOPPING)  # a stop the server is doing
        await backend.close()
        cli = backends(settings)
        await cli.start(supervise=False)
        assert cli._supervisor is None and not cli._watchers
        record = cli.state.get("alice", "nb1")
        assert record is not None and record.status == ServerStatus.STOPPING  # not the CLI's to finish
        server = backends(settings)
        await server.start()
        assert server._supervisor is not None
        assert server.get_server("alice", "nb1").status == ServerStatus.STOPPED  # type: ignore[union-attr]

    loop.run_until_complete(run())


def test_concurrent_creates_never_exceed_the_server_limit(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    settings = make_settings(state_dir, max_servers_per_user=2)
    service = NotebookService(settings.notebooks, backends(settings, lab_command=EXITING_LAB))

    async def run() -> list[object]:
        return await asyncio.gather(
            *(service.create("alice", {"name": f"nb{i}"}) for i in range(6)), return_exceptions=True
        )

    results = loop.run_until_complete(run())
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(results) - len(refused) == 2
    assert [type(r) for r in refused] == [QuotaExceeded] * 4
    assert len(service.list_servers("alice")) == 2


def test_concurrent_creates_of_one_name_make_one_server(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    settings = make_settings(state_dir)
    backend = backends(settings, lab_command=EXITING_LAB)
    service = NotebookService(settings.notebooks, backend)
    cli_side = backends(settings, lab_command=EXITING_LAB)  # another process on the same state file

    async def run() -> list[object]:
        calls = [service.create("alice", {"name": "same"}) for _ in range(4)]
        calls.append(cli_side.create_server(NotebookSpec("alice", "same", settings.notebooks.profile(None))))
        return await asyncio.gather(*calls, return_exceptions=True)

    results = loop.run_until_complete(run())
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert [type(r) for r in results if isinstance(r, BaseException)] == [Conflict] * 4
    assert [s.name for s in backend.list_servers("alice")] == ["same"]


def test_a_supervising_backend_forks_its_servers_and_they_outlive_it(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    """Once its fork server is up, a started backend's children are forks of it, yet the server a
    spawn makes: its own session and log, its argv in `ps` (how it is found again), the profile's
    environment and limits, a user server on its own config. They outlive the backend and its fork
    server and are re-attached; one that dies is failed with its exit code."""
    settings = make_settings(state_dir)
    spec = NotebookSpec("alice", "nb1", settings.notebooks.profile(None))

    async def run() -> None:
        first = backends(settings)
        await first.start()
        await first.create_server(spec)  # after the fork server's imports: they are under way
        await first.wait_until_ready("alice", "nb1", timeout=60)
        record = first.state.get("alice", "nb1")
        assert record is not None and record.pid and record.token
        child = psutil.Process(record.pid)
        assert psutil.Process(child.ppid()).cmdline()[1:3] == ["-m", "cube_jupyter.local.fork_server"]
        assert os.getsid(record.pid) == record.pid
        shown = child.cmdline()
        assert shown[1:3] == ["-m", "jupyterlab"] and f"--ServerApp.base_url={record.base_url}" in shown
        assert record.token not in " ".join(shown)
        assert Path(child.cwd()) == state_dir / "workspaces" / "alice" / "nb1"
        upstream = first.upstream("alice", "nb1")
        assert upstream is not None
        env = await kernel_environment(upstream, record.pid)
        assert env["CUBE_TEST_PROFILE"] == "small" and env["CUDA_VISIBLE_DEVICES"] == ""
        assert env["JUPYTER_TOKEN"] == record.token  # its own, not the workbench's
        runtime = state_dir / "runtime" / "alice" / "nb1"  # its token's files: private to the workbench
        assert env["JUPYTER_RUNTIME_DIR"] == str(runtime.resolve())
        assert runtime.stat().st_mode & 0o777 == 0o700  # (Jupyter adds its sticky bit)
        assert list(runtime.glob(f"jpserver-{record.pid}*")), "the child wrote no server file there"
        assert not list(Path(jupyter_runtime_dir()).glob(f"jpserver-{record.pid}*"))
        info = await child_get(first, "alice", "nb1", "cube/api/v1/info")
        assert info["role"] == "user" and info["user"] == "alice"  # a user server, from its own config
        if first.limiter.memory is None:  # else its cgroup holds it (test_limits)
            assert child.rlimit(psutil.RLIMIT_DATA)[0] == 1 << 30
        else:
            assert f"/{record.pid}" in Path(f"/proc/{record.pid}/cgroup").read_text()
        log = (state_dir / "logs" / "alice" / "nb1.log").read_text()
        assert "Jupyter Server" in log and "is running at" in log

        await first.close()  # the workbench goes, and its fork server: the server stays
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
        second = backends(settings)
        await second.start()
        assert second.get_server("alice", "nb1").status == ServerStatus.RUNNING  # type: ignore[union-attr]
        assert (await child_get(second, "alice", "nb1", "api/status"))["started"]

        again = backends(settings)  # a fork of a fork server that lives on, killed
        await again.start()
        await again.create_server(NotebookSpec("alice", "nb2", settings.notebooks.profile(None)))
        await again.wait_until_ready("alice", "nb2", timeout=60)
        doomed = again.state.get("alice", "nb2")
        assert doomed is not None and doomed.pid
        os.kill(doomed.pid, signal.SIGKILL)
        failed = await wait_until_async(
            lambda: again.get_server("alice", "nb2"),
            30,
            "the killed server failed, with its exit code",
            until=lambda s: (
                s is not None and s.status == ServerStatus.FAILED and "code -9" in (s.reason or "")
            ),
        )
        assert failed is not None

    loop.run_until_complete(run())

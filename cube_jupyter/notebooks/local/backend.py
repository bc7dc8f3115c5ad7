"""Notebook servers as `jupyter lab` child processes on this machine, recorded in sqlite.

The record is the source of truth; this object supervises the children it can see: it watches new
ones until they answer, re-attaches to live ones after a restart, notices crashes, and culls idle
servers. The profile's image is not used locally (there is no container); its cpu and memory are
limits each child is put under (`local.limits`: a cgroup where this machine allows one, else
rlimit and affinity); its GPUs are handed out by `CUDA_VISIBLE_DEVICES`. `enforcement` says which.

A GPU server waits its turn in this machine's one queue (`local.admission`, with training jobs and
GPU pipeline steps): created or started, it is `queued` (holding nothing, its place and reason
recorded) until the admission pass, run here under the machine's assignment lock, gives it free GPUs
within its owner's quota; the pass runs when a server is created, started, stopped or deleted, and
on every supervision pass that finds the queue's inputs changed (work ended in any process). What no
wait could give (more GPUs than the machine has) is refused at once.

While supervising, the backend keeps a fork server that has imported `jupyter lab` and the
workbench extension (`children.LAB_MODULES`): a child is forked from it, with its own argv,
environment, config and log, and skips the second or more of imports a spawned one spends; until
that server is up (or where it cannot start) children are spawned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cube_jupyter.errors import BackendUnavailable, Conflict, CubeError, NotFound, QuotaExceeded
from cube_jupyter.fields import format_timestamp, parse_timestamp
from cube_jupyter.ledger import HolderKind
from cube_jupyter.local import admission, files, gpus, limits, locks, processes
from cube_jupyter.local.forks import Forks, module_command
from cube_jupyter.local.kernel_sockets import socket_dir
from cube_jupyter.local.locks import KeyedLocks
from cube_jupyter.names import user_slug
from cube_jupyter.notebooks import activity as culler
from cube_jupyter.notebooks import enforcement
from cube_jupyter.notebooks.backend import ROUTE_PREFIX, Upstream
from cube_jupyter.notebooks.config import NotebookSettings
from cube_jupyter.notebooks.local import children
from cube_jupyter.notebooks.local.state import ACTIVE, ServerRecord, StateStore
from cube_jupyter.notebooks.spec import NotebookServer, NotebookSpec, Profile, ServerStatus
from cube_jupyter.periodic import repeat

log = logging.getLogger(__name__)

DOWN_REASON = "process exited while the workbench was down"
Key = tuple[str, str]
NOTEBOOK: HolderKind = "notebook"


class LocalNotebookBackend:
    """The `local` NotebookBackend. `base_url` is the main server's base_url: a child's own
    base_url is `{base_url}cube/notebook/{user_slug}/{name}/`, the exact path the router serves
    it on, so links the child writes are right in the browser."""

    def __init__(
        self,
        settings: NotebookSettings,
        *,
        base_url: str = "/",
        lab_command: Sequence[str] = children.LAB_COMMAND,
        stop_grace_seconds: float = 10.0,
        ready_timeout_seconds: float = 120.0,
        limiter: limits.Limiter | None = None,
        queue: admission.QueuePolicy | None = None,
    ) -> None:
        """`queue` is this machine's queue as the composition root wires it (the shared rules, the
        GPU ledger's count, the other features' sides); None: the GPU quota over servers alone."""
        self.settings = settings
        self.queue = queue or admission.QueuePolicy(
            admission.Rules(settings.gpu_quota, 0, {}),
            max_queued=settings.spawner.max_queued_servers_per_user,
        )
        self._wake = admission.Wake()  # whether a supervision pass (`check_once`) admits
        self.base_url = "/" + base_url.strip("/") + "/" if base_url.strip("/") else "/"
        self.lab_command = tuple(lab_command)
        self.stop_grace_seconds = stop_grace_seconds
        self.ready_timeout_seconds = ready_timeout_seconds
        self._limiter = limiter
        self.state = StateStore(settings.state_dir / "state.sqlite")
        self._children: dict[Key, subprocess.Popen[bytes]] = {}  # ours: reaped, exit codes known
        self._watchers: dict[Key, asyncio.Task[None]] = {}
        self._locks = KeyedLocks()
        self._supervisor: asyncio.Task[None] | None = None
        self._forks: Forks | None = None
        self._forks_started: asyncio.Future[None] | None = None

    @property
    def limiter(self) -> limits.Limiter:
        """How children are limited here: given, or found on first use (a command that starts no
        server never probes)."""
        return self._limiter or limits.limiter()

    # -- NotebookBackend ---------------------------------------------------------------------------

    async def start(self, *, supervise: bool = True) -> None:
        """Re-attach to children recorded as live, then supervise (and cull) them in the background.

        `supervise=False` (the CLI) does neither: the workbench server owns the children, and a short
        command must not cull or stop servers behind its back, or be cut off in the middle of a stop.
        """
        if not supervise:
            return
        await self.reattach()
        self._start_forks()
        if self._supervisor is None or self._supervisor.done():
            self._supervisor = asyncio.create_task(self._supervise(), name="cube-local-supervisor")

    def _start_forks(self) -> None:
        """Start the fork server children come from, in the background (children are spawned
        until it is up), or again if it died; it keeps what it forked running when it stops, as
        spawned children are kept. Only a supervising backend has one (a CLI command starts none)."""
        command = module_command(self.lab_command)
        if command is None:
            return
        if self._forks is None:
            self._forks = Forks(socket_dir(os.getpid()), preload=children.LAB_MODULES, keep=True)
        elif self._forks_started is not None and (
            not self._forks_started.done() or self._forks.running(command.prefix)
        ):
            return
        env = {k: v for k, v in os.environ.items() if k not in processes.TOKEN_VARIABLES}
        self._forks_started = asyncio.ensure_future(asyncio.to_thread(self._forks.start, command.prefix, env))

    async def close(self) -> None:
        """Stop background work; children keep running and are re-attached by the next start()."""
        tasks = [t for t in [self._supervisor, *self._watchers.values()] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._supervisor = None
        self._watchers.clear()
        if self._forks is not None:
            await asyncio.to_thread(self._forks.close)
            if self._forks_started is not None:
                await asyncio.gather(self._forks_started, return_exceptions=True)
            self._forks = self._forks_started = None

    def list_servers(self, user: str | None) -> list[NotebookServer]:
        return [record.to_server() for record in self.state.list(user)]

    def get_server(self, user: str, name: str) -> NotebookServer | None:
        record = self.state.get(user, name)
        return record.to_server() if record else None

    async def create_server(self, spec: NotebookSpec) -> NotebookServer:
        """Record the server as pending and spawn it (a GPU server: queued, and spawned once the
        queue admits it); returns at once, a watcher marks it running. If spawning fails, or the
        server would wait past `max_queued_servers_per_user`, the record is removed again: nothing is
        left half-created. The insert is the atomic duplicate check (Conflict), also against the CLI
        in another process."""
        self._check_machine(spec.profile.name, spec.profile.gpu)
        if self._forks is not None:
            self._start_forks()  # again, if it died
        if self._forks_started is not None and not self._forks_started.done():
            # its imports are under way: a fork once they are done is sooner than a spawn beside them
            await asyncio.wait([self._forks_started])
        slug = user_slug(spec.user)
        record = ServerRecord(
            user=spec.user,
            name=spec.name,
            slug=slug,
            profile=spec.profile.name,
            image="",  # no container runs here: the server is this machine's Python, not the image
            resources=spec.resources,
            env=dict(spec.profile.env),
            base_url=f"{self.base_url}{ROUTE_PREFIX}/{slug}/{spec.name}/",
            status=ServerStatus.QUEUED if spec.profile.gpu else ServerStatus.PENDING,
            created=_now(),
            enqueued=time.time() if spec.profile.gpu else None,
        )
        self.state.insert(record)
        try:
            record = self._enqueue(record, "name") if spec.profile.gpu else self._launch(record)
        except BaseException:
            self.state.delete(spec.user, spec.name)
            raise
        if record.status == ServerStatus.PENDING:
            self._watch(record)
        return record.to_server()

    async def set_stopped(
        self, user: str, name: str, stopped: bool, reason: str | None = None
    ) -> NotebookServer:
        async with self._lock((user, name)):
            record = self._require(user, name)
            if stopped:
                if record.status != ServerStatus.STOPPED:
                    record = await self._stop(record, reason=reason)
                    self.admit_waiting()  # what it held, or its place in the queue, is free
                return record.to_server()
            if record.status in (ServerStatus.QUEUED, ServerStatus.PENDING, ServerStatus.RUNNING):
                return record.to_server()
            if record.status == ServerStatus.STOPPING:
                raise Conflict(f"server {name!r} is still stopping; try again in a moment", field="stopped")
            if not record.resources.gpu:
                record = self._launch(record)
            else:
                self._check_machine(record.profile, record.resources.gpu)
                queued = self.state.update(
                    user, name, status=ServerStatus.QUEUED, reason=None, gpu_ids=(), enqueued=time.time()
                )
                try:
                    record = self._enqueue(queued or record, "stopped")
                except BaseException:  # not started: as it was
                    self.state.update(user, name, **_unqueued(status=record.status, reason=record.reason))
                    raise
            if record.status == ServerStatus.PENDING:
                self._watch(record)
            return record.to_server()

    async def delete_server(self, user: str, name: str) -> None:
        """Stop the child and forget the server; its workspace directory is kept."""
        async with self._lock((user, name)):
            record = self._require(user, name)
            if record.status != ServerStatus.STOPPED:
                await self._stop(record, reason=None)
            self.state.delete(user, name)
            shutil.rmtree(
                files.child_config_dir(self.settings.state_dir, record.slug, name), ignore_errors=True
            )
            self.admit_waiting()  # what it held, or its place in the queue, is free

    def enforcement(self, profile: Profile) -> enforcement.Enforcement:
        return enforcement.on_this_machine(profile, self.limiter)

    # -- for the path router, tests and benchmarks -------------------------------------------------

    def upstream(self, user: str, name: str) -> Upstream | None:
        """Where the router forwards a running server's traffic; None unless it is running."""
        record = self.state.get(user, name)
        if record is None or record.status != ServerStatus.RUNNING or not record.port or not record.token:
            return None
        return Upstream(
            host=processes.LOOPBACK, port=record.port, token=record.token, base_url=record.base_url
        )

    def running_records(self) -> list[ServerRecord]:
        """The records of the running servers that answer (pid, port, token known)."""
        return [r for r in self.state.list(statuses=(ServerStatus.RUNNING,)) if r.port and r.token and r.pid]

    async def wait_until_ready(self, user: str, name: str, timeout: float = 60.0) -> NotebookServer:
        """Wait until the server runs; BackendUnavailable if it fails or stops, TimeoutError if slow."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            record = self._require(user, name)
            if record.status == ServerStatus.RUNNING:
                return record.to_server()
            if record.status in (ServerStatus.FAILED, ServerStatus.STOPPED):
                raise BackendUnavailable(
                    f"server {name!r} of user {user!r} is {record.status.value}: "
                    f"{record.reason or 'stopped by request'}",
                    field="name",
                )
            if record.status == ServerStatus.PENDING:
                self._watch(record)
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"server {name!r} of user {user!r} was not ready within {timeout} s")
            await asyncio.sleep(0.05)

    async def reattach(self) -> None:
        """After a restart: live children that answer with their token are running again (or still
        starting); recorded children that are gone are marked failed, and their cgroups removed."""
        self.limiter.release()
        for record in self.state.list(statuses=ACTIVE):
            child = processes.find_marked(record.pid, children.base_url_arg(record.base_url))
            if child is None:
                self.state.update(
                    record.user,
                    record.name,
                    expect={"pid": record.pid, "status": record.status},
                    status=ServerStatus.FAILED
                    if record.status != ServerStatus.STOPPING
                    else ServerStatus.STOPPED,
                    reason=DOWN_REASON if record.status != ServerStatus.STOPPING else None,
                    pid=None,
                    port=None,
                    token=None,
                )
            elif record.status == ServerStatus.STOPPING:
                async with self._lock(record.key):
                    await self._stop(record, reason=None)
            elif (
                record.port
                and record.token
                and await children.probe_status(record.port, record.base_url, record.token)
            ):
                self.state.update(
                    record.user, record.name, expect={"pid": record.pid}, status=ServerStatus.RUNNING
                )
            else:
                # Alive but not answering yet: it was still starting. The watcher decides.
                updated = self.state.update(
                    record.user, record.name, expect={"pid": record.pid}, status=ServerStatus.PENDING
                )
                if updated:
                    self._watch(updated)

    async def check_once(self) -> None:
        """One supervision pass: admit from the queue when its inputs changed, watch pending servers,
        notice dead ones, record activity, cull."""
        self._wake_queue()
        limit = self.settings.spawner.cull_idle_seconds
        for record in self.state.list(statuses=(ServerStatus.PENDING, ServerStatus.RUNNING)):
            if record.status == ServerStatus.PENDING:
                self._watch(record)
                continue
            if processes.find_marked(record.pid, children.base_url_arg(record.base_url)) is None:
                self._mark_exited(record)
                continue
            if not (record.port and record.token):
                continue
            started = parse_timestamp(record.started) or datetime.now(UTC)
            try:
                activity = await culler.fetch_activity(
                    f"http://{processes.LOOPBACK}:{record.port}{record.base_url}", started, token=record.token
                )
            except culler.ActivityUnavailable as exc:
                log.debug("activity of %s/%s unavailable: %s", record.user, record.name, exc)
                continue
            now = datetime.now(UTC)
            self.state.update(
                record.user,
                record.name,
                expect={"pid": record.pid},
                last_activity=format_timestamp(activity.stamp(now)),
            )
            if culler.should_cull(activity, now, limit):
                log.info(
                    "culling %s/%s: idle for %.0f s", record.user, record.name, activity.idle_seconds(now)
                )
                async with self._lock(record.key):
                    current = self.state.get(record.user, record.name)
                    if current and current.pid == record.pid and current.status == ServerStatus.RUNNING:
                        await self._stop(current, reason=culler.cull_reason(limit))

    # -- internals ---------------------------------------------------------------------------------

    def _launch(self, record: ServerRecord) -> ServerRecord:
        """Start the child for `record` (status pending, fresh port and token) and record its pid."""
        workspace = files.workspace_path(self.settings.state_dir, record.slug, record.name)
        log_path = files.log_path(self.settings.state_dir, record.slug, record.name)
        try:
            files.private_dir(workspace)
            port, token = processes.free_port(), secrets.token_hex(24)
            argv = children.lab_argv(
                self.lab_command,
                base_url=record.base_url,
                port=port,
                root_dir=workspace,
                user=record.user,
                state_dir=self.settings.state_dir.resolve(),
                workbench_url=f"{self.base_url}lab",
            )
            config_dir = files.child_config_dir(self.settings.state_dir, record.slug, record.name)
            children.write_child_config(config_dir, self.settings.server_config)
            env = children.child_env(
                os.environ,
                token=token,
                profile_env=record.env,
                gpu_ids=record.gpu_ids,
                config_dir=config_dir,
                runtime_dir=files.private_dir(
                    files.child_runtime_dir(self.settings.state_dir, record.slug, record.name)
                ),
            )
            limit = limits.Limits.of(record.resources.cpu, record.resources.memory)
            header = f"{record.user}/{record.name} at {_now()}"
            child: processes.Leader | None = None
            if self._forks is not None:
                confine = self.limiter.confine(limit)
                child = processes.fork(
                    self._forks, argv, env, workspace, log_path, header, confine, children.READ_LATER
                )
            if child is None:
                child = processes.spawn(
                    argv, env, workspace, log_path, header, preexec=self.limiter.preexec(limit)
                )
        except OSError as exc:
            raise BackendUnavailable(f"could not start server {record.name!r}: {exc}", field="name") from None
        except subprocess.SubprocessError:
            why = processes.log_tail(log_path, lines=1)  # what the child wrote before it gave up
            raise BackendUnavailable(f"could not start server {record.name!r}: {why}", field="name") from None
        if isinstance(child, subprocess.Popen):  # a fork is its server's child: its exit code is logged
            self._children[record.key] = child
        updated = self.state.update(
            record.user,
            record.name,
            status=ServerStatus.PENDING,
            reason=None,
            pid=child.pid,
            port=port,
            token=token,
            gpu_ids=record.gpu_ids,
            started=_now(),
            last_activity=None,
            **_unqueued(),
        )
        if updated is None:  # deleted meanwhile (by the CLI, say): do not leave an orphan behind
            child.kill()
            child.wait()
            raise NotFound(
                f"server {record.name!r} of user {record.user!r} was deleted while starting", field="name"
            )
        return updated

    def _watch(self, record: ServerRecord) -> None:
        """Make sure a task is waiting for this pending child to answer (or to die)."""
        task = self._watchers.get(record.key)
        if task is None or task.done():
            self._watchers[record.key] = asyncio.create_task(
                self._wait_ready(record), name=f"cube-ready-{record.user}/{record.name}"
            )

    async def _wait_ready(self, record: ServerRecord) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ready_timeout_seconds
        marker = children.base_url_arg(record.base_url)
        while True:
            current = self.state.get(record.user, record.name)
            if current is None or current.status != ServerStatus.PENDING or current.pid != record.pid:
                return
            if self._exit_code(record) is not None or processes.find_marked(record.pid, marker) is None:
                self._mark_exited(record)
                return
            if (
                record.port
                and record.token
                and await children.probe_status(record.port, record.base_url, record.token)
            ):
                self.state.update(
                    record.user,
                    record.name,
                    expect={"pid": record.pid, "status": ServerStatus.PENDING},
                    status=ServerStatus.RUNNING,
                    last_activity=_now(),
                )
                return
            if loop.time() > deadline:
                async with self._lock(record.key):
                    await self._stop(
                        record,
                        reason=f"did not answer within {self.ready_timeout_seconds:.0f} s",
                        final=ServerStatus.FAILED,
                    )
                return
            await asyncio.sleep(0.1)

    def _mark_exited(self, record: ServerRecord) -> None:
        code = self._exit_code(record, wait=0.5)
        if code is not None:
            self._children.pop(record.key, None)
        reason = "process exited" if code is None else f"process exited with code {code}"
        tail = processes.log_tail(files.log_path(self.settings.state_dir, record.slug, record.name))
        if tail:
            reason += f"; last lines of its log:\n{tail}"
        self.limiter.release()
        self.state.update(
            record.user,
            record.name,
            expect={"pid": record.pid, "status": record.status},
            status=ServerStatus.FAILED,
            reason=reason,
            pid=None,
            port=None,
            token=None,
        )

    def _exit_code(self, record: ServerRecord, wait: float = 0.0) -> int | None:
        """The child's exit code once it has exited: ours, or as its fork server noted it in its log
        (read only with `wait`). `wait` covers an exiting process, which loses its argv a moment
        before its exit code is known."""
        child = self._children.get(record.key)
        if child is None or child.pid != record.pid:
            if not wait or record.pid is None:
                return None
            log_path = files.log_path(self.settings.state_dir, record.slug, record.name)
            return processes.logged_exit_code(record.pid, log_path, wait)
        try:
            return child.wait(timeout=wait) if wait else child.poll()
        except subprocess.TimeoutExpired:
            return None

    async def _stop(
        self, record: ServerRecord, reason: str | None, final: ServerStatus = ServerStatus.STOPPED
    ) -> ServerRecord:
        """Terminate the child (if any) and record `final` with `reason`. Caller holds the lock."""
        watcher = self._watchers.pop(record.key, None)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
        child = processes.find_marked(record.pid, children.base_url_arg(record.base_url))
        if child is not None:
            self.state.update(record.user, record.name, status=ServerStatus.STOPPING)
            await processes.stop_tree(child, self.stop_grace_seconds)
        popen = self._children.pop(record.key, None)
        if popen is not None:
            popen.poll()  # reap it if psutil did not
        self.limiter.release()
        updated = self.state.update(
            record.user,
            record.name,
            **_unqueued(status=final, reason=reason, pid=None, port=None, token=None),
        )
        return updated or record.evolve(status=final, reason=reason, pid=None, port=None, token=None)

    # -- the machine's queue -----------------------------------------------------------------------

    def queues(self, profile: str) -> bool:
        """Every GPU server waits in this machine's queue when it cannot start now."""
        return True

    def queue_side(self) -> admission.QueueSide:
        """The servers' part of the machine's queue: queued GPU servers, and the GPU ids of those
        with a live child (for the other features' passes too)."""
        return admission.QueueSide(waiting=self._waiting_items, held=self._held_items)

    def _waiting_items(self) -> list[admission.Waiting]:
        return [
            admission.Waiting(r.user, r.name, r.enqueued or 0.0, r.resources.gpu, 0, kind=NOTEBOOK)
            for r in self.state.list(statuses=(ServerStatus.QUEUED,))
        ]

    def _held_items(self) -> list[admission.Held]:
        return [
            admission.Held(r.user, NOTEBOOK, r.gpu_ids) for r in self.state.list(statuses=ACTIVE) if r.gpu_ids
        ]

    def admit_waiting(self, fresh: Key | None = None) -> None:
        """The servers' admission pass (`admission.machine_verdict`, the machine's one rule, under
        its assignment lock): start every queued server the queue admits, with free GPUs, and record
        the others' places and reasons. A server that cannot be started fails, except `fresh` (the
        one being created or started): its error is raised."""
        with locks.blocking_file_lock(gpus.assign_lock_path(self.settings.state_dir)):
            if not self.state.list(statuses=(ServerStatus.QUEUED,)):
                return
            verdict, free = admission.machine_verdict(self.queue_side(), self.queue)
            for chosen in verdict.admit:
                current = self.state.get(chosen.user, chosen.name) if chosen.kind == NOTEBOOK else None
                if current is None or current.status != ServerStatus.QUEUED:
                    continue  # another feature's, or stopped or deleted meanwhile
                given, free = tuple(free[: chosen.gpus]), free[chosen.gpus :]
                try:
                    self._launch(current.evolve(gpu_ids=given))
                except CubeError as exc:
                    if current.key == fresh:
                        raise
                    failed = _unqueued(status=ServerStatus.FAILED, reason=exc.message)
                    self.state.update(current.user, current.name, **failed)
                else:
                    log.info("admitted server %s/%s from the queue", current.user, current.name)
            for (kind, user, name), (position, reason) in verdict.waiting.items():
                if kind == NOTEBOOK:
                    self.state.update(
                        user,
                        name,
                        expect={"status": ServerStatus.QUEUED},
                        queue_position=position,
                        queue_reason=reason,
                    )

    def _wake_queue(self) -> None:
        """Admit when what the queue waits on changed since the last pass (`admission.Wake`)."""
        if self._wake.due(
            self.queue_side(), self.queue, waiting=bool(self.state.list(statuses=(ServerStatus.QUEUED,)))
        ):
            self.admit_waiting()

    def _enqueue(self, record: ServerRecord, field: str) -> ServerRecord:
        """Run the admission pass for a server just queued (`field`: what the request set); the
        record after it: started (pending) or queued. QuotaExceeded when it waits and its owner
        already has `max_queued` servers queued."""
        self.admit_waiting(fresh=record.key)
        current = self._require(record.user, record.name)
        limit = self.queue.max_queued
        if current.status == ServerStatus.QUEUED and limit:
            queued = len(self.state.list(record.user, statuses=(ServerStatus.QUEUED,)))
            if queued > limit:
                raise QuotaExceeded(
                    f"user {record.user!r} has {queued - 1} servers waiting in the queue for GPUs, the "
                    f"limit (CubeSpawner.max_queued_servers_per_user) is {limit}; stop or delete one, "
                    "or wait for one to start",
                    field=field,
                )
        return current

    @staticmethod
    def _check_machine(profile: str, count: int) -> None:
        """Refuse, naming the profile, what no wait could give: more GPUs than this machine has."""
        visible = len(gpus.visible_gpu_ids()) if count else 0
        if count > visible:
            raise BackendUnavailable(
                f"profile {profile!r} asks for {count} GPU(s) but this machine has {visible} "
                "(GPUs visible to the workbench)",
                field="profile",
            )

    def _require(self, user: str, name: str) -> ServerRecord:
        record = self.state.get(user, name)
        if record is None:
            raise NotFound(f"user {user!r} has no server named {name!r}", field="name")
        return record

    def _lock(self, key: Key) -> contextlib.AbstractAsyncContextManager[None]:
        return self._locks.hold(key)

    async def _supervise(self) -> None:
        await repeat(self.check_once, self.settings.workbench.poll_seconds, "local supervision")


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


def _unqueued(**changes: Any) -> dict[str, Any]:
    """`changes` with the queue's fields cleared: the server left the queue."""
    return {"enqueued": None, "queue_position": None, "queue_reason": None, **changes}

"""Worker processes that run pipeline steps, each with a kernel started ahead of need.

A step's fixed cost is mostly kernel start-up (about a second); papermill with a started kernel
(`km=`) costs a quarter of that. So each worker keeps one started `KernelManager` ready: when a step
takes it, the next one starts in the background while the step runs, and the used kernel is shut
down afterwards, so every step still gets a fresh kernel (isolation) without waiting for one.

Workers are `python -m cube_jupyter.pipelines.local.workers` children speaking JSON lines: the parent
writes commands to stdin, the worker answers on its original stdout (anything else printed there is
sent to stderr). Each worker runs in its own session so a terminal's Ctrl-C reaches only the parent,
which cancels the run itself. A step's timeout and a cancel kill the step's kernel (its process
group), so the runner sees a dead kernel, stores what the step got done, and returns.

The pool never holds more than `size` workers (an admin's bound on the host's memory); they are
started as steps need them, and one left idle for `idle_seconds` is released with its kernel, so a
burst of work does not hold the host's memory for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

import cube_jupyter
from cube_jupyter.local import processes
from cube_jupyter.local.kernel_sockets import kernel_transport, socket_dir

LOG = logging.getLogger(__name__)
STDERR_LINES = 40  # kept per worker for the error of a worker that died
KILL_GRACE = 20.0  # seconds a worker gets to report after its kernel was killed
RELEASE_GRACE = 5.0  # seconds a released worker gets to shut its kernel down before it is killed
ASYNC_CLIENT = "jupyter_client.asynchronous.AsyncKernelClient"


@dataclass(frozen=True)
class KernelSpec:
    """What a started kernel must match to be used for a step: kernel, working directory, extra env."""

    name: str
    cwd: str
    env: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "cwd": self.cwd, "env": dict(self.env)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> KernelSpec:
        return cls(raw["name"], raw["cwd"], tuple(sorted(raw.get("env", {}).items())))


@dataclass
class StepTask:
    """One attempt of one step, as sent to a worker; `timeout` is enforced by the pool."""

    pipeline: dict[str, Any]
    step: str
    run_id: str
    store: str
    storage: dict[str, Any]
    parameters: dict[str, Any]
    inputs: dict[str, str]  # variable -> store key of the upstream output it is read from
    kernel: KernelSpec
    timeout: float | None = None  # a backstop: the runner enforces the step's own timeout first
    id: str = ""
    # why the pool killed the step's kernel: "timeout" or "cancelled"
    killed: str | None = None
    kernel_pid: int | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def message(self) -> dict[str, Any]:
        return {
            "op": "run",
            "id": self.id,
            "pipeline": self.pipeline,
            "step": self.step,
            "run_id": self.run_id,
            "store": self.store,
            "storage": self.storage,
            "parameters": self.parameters,
            "inputs": self.inputs,
            "kernel": self.kernel.to_dict(),
        }


class WorkerDied(Exception):
    """The worker process exited while it held a step; the message has its last stderr lines."""


class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, process: asyncio.subprocess.Process, number: int) -> None:
        self.process = process
        self.number = number
        self.warm = False
        self.task: StepTask | None = None
        self.result: asyncio.Future[dict[str, Any]] | None = None
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self.readers: list[asyncio.Task[None]] = []
        self.idle_since = time.monotonic()
        self.released = False

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(message) + "\n").encode())

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


class WorkerPool:
    """At most `size` worker processes; `run(task)` runs a step on an idle one (warm kernels first),
    starting a worker when none is idle and the pool has room. With `idle_seconds`, a worker idle
    that long exits with its kernel."""

    def __init__(self, size: int, warm: KernelSpec | None = None, idle_seconds: float | None = None) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.size = size
        self.warm_spec = warm
        self.idle_seconds = idle_seconds
        self._reaper: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()  # releases under way, awaited by `close`
        self._workers: list[_Worker] = []
        self._idle: list[_Worker] = []
        self._idle_changed: asyncio.Condition | None = None
        self._numbers = itertools.count(1)
        self._task_ids = itertools.count(1)
        self._closing = False
        self._started = False
        self._start_lock: asyncio.Lock | None = None

    @property
    def worker_count(self) -> int:
        """How many worker processes the pool holds now."""
        return len(self._workers)

    async def start(self, workers: int | None = None) -> None:
        """Have at least `workers` (default: `size`, at most `size`) started; each starts a kernel
        for `warm` right away, so the first steps need not wait for one."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
            self._idle_changed = asyncio.Condition()
        async with self._start_lock:
            if not self._started and self.idle_seconds is not None:
                self._reaper = asyncio.create_task(self._release_idle(self.idle_seconds))
            self._started = True
            while len(self._workers) < min(workers or self.size, self.size) and not self._closing:
                await self._set_idle(await self._spawn())

    async def _release_idle(self, idle_seconds: float) -> None:
        """Release workers idle for `idle_seconds`; checked a few times per period."""
        while not self._closing:
            await asyncio.sleep(max(idle_seconds / 4, 0.05))
            assert self._idle_changed is not None
            async with self._idle_changed:
                expired = [w for w in self._idle if time.monotonic() - w.idle_since >= idle_seconds]
                for worker in expired:
                    self._idle.remove(worker)
                    self._workers.remove(worker)
                    worker.released = True
            for worker in expired:
                LOG.info("releasing pipeline worker %d, idle for %.0f s", worker.number, idle_seconds)
                stop = asyncio.create_task(self._stop(worker))
                self._stopping.add(stop)
                stop.add_done_callback(self._stopping.discard)

    async def _stop(self, worker: _Worker) -> None:
        """Ask the worker to exit (it shuts its kernel down), then stop whatever of it is left."""
        try:
            family = [psutil.Process(worker.process.pid)]
            family += family[0].children(recursive=True)  # its kernels, each in a session of its own
        except psutil.NoSuchProcess:
            family = []
        with contextlib.suppress(ConnectionError, RuntimeError):
            worker.send({"op": "exit"})
            assert worker.process.stdin is not None
            worker.process.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(worker.process.wait(), RELEASE_GRACE)
        for leftover in family:
            if leftover.is_running():  # the same process still (psutil compares its create time)
                await processes.stop_tree(leftover, RELEASE_GRACE)
        await worker.process.wait()

    async def _spawn(self) -> _Worker:
        package_root = str(Path(cube_jupyter.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cube_jupyter.pipelines.local.workers",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
            limit=64 * 1024 * 1024,
        )
        worker = _Worker(process, next(self._numbers))
        worker.readers = [
            asyncio.create_task(self._read_events(worker)),
            asyncio.create_task(self._read_stderr(worker)),
        ]
        if self.warm_spec is not None:
            worker.send({"op": "warm", "kernel": self.warm_spec.to_dict()})
        self._workers.append(worker)
        return worker

    async def _set_idle(self, worker: _Worker) -> None:
        assert self._idle_changed is not None
        async with self._idle_changed:
            if worker.alive and worker not in self._idle:
                worker.idle_since = time.monotonic()
                self._idle.append(worker)
            self._idle_changed.notify_all()

    async def _acquire(self) -> _Worker:
        assert self._idle_changed is not None
        async with self._idle_changed:
            while True:
                if self._closing:
                    raise RuntimeError("the worker pool is closed")
                live = [w for w in self._idle if w.alive]
                if live:
                    worker = next((w for w in live if w.warm), live[0])
                    self._idle.remove(worker)
                    return worker
                if len(self._workers) < self.size:
                    return await self._spawn()  # taken at once: its kernel starts with the step
                await self._idle_changed.wait()

    async def run(self, task: StepTask, on_start: Callable[[StepTask], None] | None = None) -> dict[str, Any]:
        """Run one step attempt; the runner's result dict. A timeout, `kill` or cancelling the caller
        ends it early by killing its kernel (`task.killed` says why); the worker is reused once it
        has reported."""
        await self.start(1)  # more workers start as steps need them (`_acquire`), up to `size`
        worker = await self._acquire()
        task.id = task.id or f"t{next(self._task_ids)}"
        attempt = asyncio.create_task(self._attempt(worker, task, on_start))
        attempt.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            self.kill(task, "cancelled")
            raise

    async def _attempt(
        self, worker: _Worker, task: StepTask, on_start: Callable[[StepTask], None] | None
    ) -> dict[str, Any]:
        worker.task, worker.result = task, asyncio.get_running_loop().create_future()
        worker.warm = False
        result = worker.result
        try:
            worker.send(task.message())
            started = asyncio.create_task(task.started.wait())
            waiting: list[asyncio.Future[Any]] = [started, result]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            started.cancel()
            if task.started.is_set():
                if task.killed:  # killed before its kernel was known
                    self._kill_kernel(task)
                if on_start is not None:
                    on_start(task)
                try:
                    return await asyncio.wait_for(asyncio.shield(result), task.timeout)
                except TimeoutError:
                    self.kill(task, "timeout")
            try:
                return await asyncio.wait_for(asyncio.shield(result), KILL_GRACE if task.killed else None)
            except TimeoutError:
                LOG.warning("worker %d did not report after its kernel was killed; killing it", worker.number)
                worker.process.kill()
                return await result
        finally:
            worker.task, worker.result = None, None
            if worker.alive and not self._closing:
                await self._set_idle(worker)

    def kill(self, task: StepTask, why: str) -> None:
        """End a running step by killing its kernel (`why`: "timeout" or "cancelled")."""
        task.killed = task.killed or why
        self._kill_kernel(task)

    @staticmethod
    def _kill_kernel(task: StepTask) -> None:
        if task.kernel_pid:
            processes.kill_group(task.kernel_pid)

    async def _read_events(self, worker: _Worker) -> None:
        assert worker.process.stdout is not None
        while line := await worker.process.stdout.readline():
            try:
                event = json.loads(line)
            except ValueError:
                LOG.warning("worker %d: unreadable event %r", worker.number, line[:200])
                continue
            kind = event.get("event")
            task = worker.task
            if kind == "warm":
                worker.warm = True
            elif kind == "started" and task is not None and event.get("id") == task.id:
                task.kernel_pid = event.get("kernel_pid")
                task.started.set()
            elif kind == "result" and worker.result is not None and not worker.result.done():
                worker.result.set_result(event["result"])
        await worker.process.wait()
        shutil.rmtree(socket_dir(worker.process.pid), ignore_errors=True)  # left by a killed worker
        await self._worker_exited(worker)

    async def _read_stderr(self, worker: _Worker) -> None:
        assert worker.process.stderr is not None
        while line := await worker.process.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            worker.stderr.append(text)
            LOG.debug("worker %d: %s", worker.number, text)

    async def _worker_exited(self, worker: _Worker) -> None:
        if worker.released:
            return
        if worker in self._workers:
            self._workers.remove(worker)
        if worker in self._idle:
            self._idle.remove(worker)
        if worker.result is not None and not worker.result.done():
            # let the stderr reader drain, so the error shows the worker's last words
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(worker.readers[1]), 2)
            tail = "\n".join(worker.stderr)
            worker.result.set_exception(
                WorkerDied(f"worker process exited with code {worker.process.returncode}:\n{tail}")
            )
        if not self._closing:
            await self._set_idle(await self._spawn())  # keep the pool at size

    async def close(self) -> None:
        """Stop every worker and its kernels."""
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(*self._stopping, return_exceptions=True)
        if self._idle_changed is not None:
            async with self._idle_changed:
                self._idle_changed.notify_all()
        workers = list(self._workers)
        for worker in workers:
            if worker.task is not None:
                self.kill(worker.task, "cancelled")
            with contextlib.suppress(ConnectionError, RuntimeError):
                worker.send({"op": "exit"})
                assert worker.process.stdin is not None
                worker.process.stdin.close()
        for worker in workers:
            try:
                await asyncio.wait_for(worker.process.wait(), 10)
            except TimeoutError:
                worker.process.kill()
                await worker.process.wait()
            for reader in worker.readers:
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(reader, 2)


# ---- the worker process ----------------------------------------------------------------------------


class _KernelKeeper:
    """Keeps one started kernel ready for the next step; starts and stops kernels off the main thread."""

    def __init__(self, on_warm: Callable[[], None]) -> None:
        self._threads = ThreadPoolExecutor(1, thread_name_prefix="kernels")
        self._spec: KernelSpec | None = None
        self._spare: Future[Any] | None = None
        self._on_warm = on_warm

    def prepare(self, spec: KernelSpec) -> None:
        if self._spec == spec and self._spare is not None:
            return
        self._discard_spare()
        self._spec = spec
        self._spare = self._threads.submit(self._start, spec)
        self._spare.add_done_callback(lambda f: f.exception() is None and self._on_warm())

    def take(self, spec: KernelSpec) -> Any:
        """A started kernel for `spec` (waiting for it if needed); the next one starts meanwhile."""
        self.prepare(spec)
        assert self._spare is not None
        spare, self._spare = self._spare, None
        try:
            return spare.result()
        finally:
            self.prepare(spec)

    def retire(self, km: Any) -> None:
        self._threads.submit(_shutdown, km)

    def close(self) -> None:
        self._discard_spare()
        self._threads.shutdown(wait=True)

    def _discard_spare(self) -> None:
        if self._spare is not None:
            spare, self._spare = self._spare, None

            def stop_when_started() -> None:
                if spare.exception() is None:
                    _shutdown(spare.result())

            self._threads.submit(stop_when_started)

    @staticmethod
    def _start(spec: KernelSpec) -> Any:
        from jupyter_client.manager import KernelManager

        # An async client: nbclient polls a blocking one in its event loop and would never notice the
        # kernel dying (a cancel or a timeout would hang the step); the manager stays sync for the runner.
        km = KernelManager(kernel_name=spec.name, client_class=ASYNC_CLIENT, **kernel_transport())
        km.start_kernel(cwd=spec.cwd, env={**os.environ, **dict(spec.env)})
        return km


def _shutdown(km: Any) -> None:
    with contextlib.suppress(Exception):
        km.shutdown_kernel(now=True)


def _kernel_pid(km: Any) -> int | None:
    provisioner = getattr(km, "provisioner", None)
    pid = getattr(provisioner, "pid", None)
    return int(pid) if pid else None


def _run(message: dict[str, Any], keeper: _KernelKeeper, send: Callable[[dict[str, Any]], None]) -> None:
    from cube_jupyter.pipelines.model import pipeline_from_dict
    from cube_jupyter.pipelines.runner import run_step
    from cube_jupyter.storage import CubeStorage, open_store

    task_id, step = message["id"], message["step"]
    spec = KernelSpec.from_dict(message["kernel"])
    try:
        km = keeper.take(spec)
    except Exception as exc:
        failure = _failure(step, f"step {step!r}: kernel {spec.name!r} did not start: {exc}", "kernel")
        send({"event": "result", "id": task_id, "result": failure})
        return
    send({"event": "started", "id": task_id, "kernel_pid": _kernel_pid(km)})
    try:
        storage = CubeStorage(**message["storage"])
        result = run_step(
            pipeline_from_dict(message["pipeline"]),
            step,
            message["run_id"],
            open_store(message["store"], storage, check=False),  # the run reached it before any step
            message["parameters"],
            kernel_manager=km,
            cwd=spec.cwd,
            inputs=message["inputs"],
            storage=storage,
        )
        send({"event": "result", "id": task_id, "result": result.to_dict()})
    except Exception as exc:  # bad input the runner refused, or a store that failed: still a result
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        LOG.error("step %s failed outside its cells:\n%s", step, traceback.format_exc())
        send({"event": "result", "id": task_id, "result": _failure(step, f"step {step!r}: {text}", "runner")})
    finally:
        keeper.retire(km)


def _failure(step: str, message: str, phase: str) -> dict[str, Any]:
    """A failed result shaped like the runner's `StepResult.to_dict()`, for a failure around the step."""
    error = {"message": message, "cell": None, "phase": phase, "ename": "StepError", "evalue": message}
    return {
        "step": step,
        "status": "failed",
        "duration": 0.0,
        "notebook": None,
        "outputs": {},
        "metrics": {},
        "error": {**error, "traceback": ""},
    }


def worker_main(stdin: IO[str], protocol: IO[str]) -> None:
    lock = threading.Lock()

    def send(event: dict[str, Any]) -> None:
        with lock:
            protocol.write(json.dumps(event) + "\n")
            protocol.flush()

    keeper = _KernelKeeper(lambda: send({"event": "warm"}))
    try:
        for line in stdin:
            message = json.loads(line)
            if message["op"] == "warm":
                keeper.prepare(KernelSpec.from_dict(message["kernel"]))
            elif message["op"] == "run":
                _run(message, keeper, send)
            elif message["op"] == "exit":
                break
    finally:
        keeper.close()
        shutil.rmtree(socket_dir(os.getpid()), ignore_errors=True)


def _exit_when_orphaned(parent: int, interval: float = 0.5) -> None:
    """Watch for the parent's death (a workbench killed with -9): then stop this worker's kernels and
    exit, so a step it was running is not still writing while a resume of its run reruns it."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        for kernel in psutil.Process().children():  # each kernel leads a session of its own
            processes.stop_tree_sync(kernel, 1.0)
        shutil.rmtree(socket_dir(os.getpid()), ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def main() -> None:
    from cube_jupyter.startup import skip_unused_schema_formats

    skip_unused_schema_formats()
    _exit_when_orphaned(os.getppid())
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints from papermill, kernels or user code must not corrupt the protocol
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent cancels; a stray SIGINT must not kill us
    worker_main(sys.stdin, protocol)


if __name__ == "__main__":
    main()

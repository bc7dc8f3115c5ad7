"""The worker process that runs pipeline steps, each in a fresh kernel forked ahead of need.

A step's fixed cost is its kernel's start: a spawned Python kernel spends about half a second
importing ipykernel; papermill with a started kernel (`km=`) costs a fraction of that. So the worker
forks its kernels from a pre-imported fork server (`cube_jupyter.local.forked_kernels`: tens of
milliseconds each) and keeps as many started as the run can use at once (its `parallel`, say 4 for a
4-way fan-out; `SPARE_KERNELS` until told) for the next steps: when a step takes
one, another starts in the background while the step runs (at once for a step set up alone; for
steps set up together, such as a fan-out's branches, once all have reached their own cells: a
kernel start is tens of milliseconds of CPU that would slow their setup), and the used kernel is
killed afterwards, so every step gets a fresh kernel (isolation) without waiting for one.

One worker process runs up to `size` steps at once, each on a thread of its own driving its kernel
(the steps' code runs in their kernels; the worker only waits on them), so a run pays one
interpreter start and one set of imports, however wide it fans out. The worker is
`python -m cube_jupyter.pipelines.local.workers SIZE [MODULE...]` (the first kernels' `preload`),
speaking JSON lines: the parent writes commands to stdin, the worker answers on its original stdout
(anything else printed there is sent to stderr). It runs in its own session so a terminal's Ctrl-C
reaches only the parent, which cancels the run itself. A step's timeout and a cancel kill the step's
kernel (its process group), so the runner sees a dead kernel, stores what the step got done, and
returns.

The worker is started when a step needs it and, with `idle_seconds`, released with its kernels
after that long without a step, so a burst of work does not hold the host's memory for good.
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
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any

import psutil

from cube_jupyter.local import processes
from cube_jupyter.local.forks import KERNEL_MODULES, Forks, preloadable_imports
from cube_jupyter.local.kernel_sockets import kernel_transport, socket_dir
from cube_jupyter.pipelines.stepnb import RUNTIME

if TYPE_CHECKING:
    from cube_jupyter.pipelines.model import Pipeline

LOG = logging.getLogger(__name__)
STDERR_LINES = 40  # kept per worker for the error of a worker that died
KILL_GRACE = 20.0  # seconds a worker gets to report after its kernel was killed
RELEASE_GRACE = 5.0  # seconds a released worker gets to shut its kernels down before it is killed
SPARE_KERNELS = 2  # started kernels a worker keeps ready for the next steps, unless told how many
ASYNC_CLIENT = "jupyter_client.asynchronous.AsyncKernelClient"
IN_MEMORY_HISTORY = ["--HistoryManager.hist_file=:memory:"]


@dataclass(frozen=True)
class KernelSpec:
    """What a started kernel must match to be used for a step: kernel, working directory, extra env,
    and the modules its fork server imports beyond a kernel's own (`preload`: torch, for a notebook
    that imports it, so that no step pays its import)."""

    name: str
    cwd: str
    env: tuple[tuple[str, str], ...] = ()
    preload: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "cwd": self.cwd, "env": dict(self.env), "preload": list(self.preload)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> KernelSpec:
        env = tuple(sorted(raw.get("env", {}).items()))
        return cls(raw["name"], raw["cwd"], env, tuple(raw.get("preload", ())))

    @classmethod
    def for_pipeline(cls, pipeline: Pipeline, cwd: str, env: dict[str, str]) -> KernelSpec:
        """The kernel of `pipeline`'s steps, run in `cwd` with `env` (its store's)."""
        code = [*pipeline.imports, *pipeline.functions, pipeline.parameters_source]
        code += [source for step in pipeline.steps for source in step.source]
        return cls(pipeline.kernel_name, cwd, tuple(sorted(env.items())), preloadable_imports(code))


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
    # the step's own environment (its GPUs): its kernel is started for it, never a warm spare
    env: dict[str, str] = field(default_factory=dict)
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
            "env": self.env,
        }


class WorkerDied(Exception):
    """The worker process exited while it held a step; the message has its last stderr lines."""


class _Worker:
    """The parent's handle on the worker process and the steps it runs."""

    def __init__(self, process: asyncio.subprocess.Process, number: int) -> None:
        self.process = process
        self.number = number
        self.tasks: dict[str, StepTask] = {}
        self.results: dict[str, asyncio.Future[dict[str, Any]]] = {}
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
    """Runs at most `size` steps at once on one worker process; `run(task)` waits for a free slot.
    The worker starts with the first step (its kernels for `warm` right away); with `idle_seconds`,
    a worker without a step that long exits with its kernels."""

    def __init__(self, size: int, warm: KernelSpec | None = None, idle_seconds: float | None = None) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one slot")
        self.size = size
        self.warm_spec = warm
        self._warm_kernels = min(SPARE_KERNELS, size)
        self.idle_seconds = idle_seconds
        self._reaper: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()  # releases under way, awaited by `close`
        self._worker: _Worker | None = None
        self._running = 0  # slots taken
        self._slots: asyncio.Condition | None = None
        self._numbers = itertools.count(1)
        self._task_ids = itertools.count(1)
        self._closing = False
        self._start_lock: asyncio.Lock | None = None

    @property
    def worker_count(self) -> int:
        """How many worker processes the pool holds now (0 or 1)."""
        return int(self._worker is not None)

    def warm(self, spec: KernelSpec, kernels: int = SPARE_KERNELS) -> None:
        """Have `kernels` kernels started for `spec` ahead of the steps that will take them (now, if
        the worker is up; else when it starts)."""
        self.warm_spec, self._warm_kernels = spec, max(1, min(kernels, self.size))
        if self._worker is not None and self._worker.alive:
            self._worker.send(self._warm_message(spec))

    def _warm_message(self, spec: KernelSpec) -> dict[str, Any]:
        return {"op": "warm", "kernel": spec.to_dict(), "kernels": self._warm_kernels}

    async def start(self) -> None:
        """Have the worker started (it starts kernels for `warm` right away)."""
        await self._live_worker()

    async def _live_worker(self) -> _Worker:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
            self._slots = asyncio.Condition()
            if self.idle_seconds is not None:
                self._reaper = asyncio.create_task(self._release_idle(self.idle_seconds))
        async with self._start_lock:
            if self._closing:
                raise RuntimeError("the worker pool is closed")
            if self._worker is None or not self._worker.alive:
                self._worker = await self._spawn()
            return self._worker

    async def _release_idle(self, idle_seconds: float) -> None:
        """Release the worker once it has run no step for `idle_seconds`; checked a few times per period."""
        while not self._closing:
            await asyncio.sleep(max(idle_seconds / 4, 0.05))
            worker = self._worker
            if worker is None or worker.tasks or time.monotonic() - worker.idle_since < idle_seconds:
                continue
            self._worker, worker.released = None, True
            LOG.info("releasing the pipeline worker, idle for %.0f s", idle_seconds)
            stop = asyncio.create_task(self._stop(worker))
            self._stopping.add(stop)
            stop.add_done_callback(self._stopping.discard)

    async def _stop(self, worker: _Worker) -> None:
        """Ask the worker to exit (it stops its kernels), then stop whatever of it is left."""
        try:
            family = [psutil.Process(worker.process.pid)]
            family += family[0].children(recursive=True)  # its fork server and kernels
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
        env = processes.python_child_environ()  # the worker's kernels run user code
        first_preload = self.warm_spec.preload if self.warm_spec is not None else ()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cube_jupyter.pipelines.local.workers",
            str(self.size),
            *first_preload,
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
            worker.send(self._warm_message(self.warm_spec))
        return worker

    async def _take_slot(self) -> None:
        await self._live_worker()  # sets up the condition, and fails once the pool is closed
        assert self._slots is not None
        async with self._slots:
            while self._running >= self.size:
                await self._slots.wait()
                if self._closing:
                    raise RuntimeError("the worker pool is closed")
            self._running += 1

    async def _free_slot(self) -> None:
        assert self._slots is not None
        async with self._slots:
            self._running -= 1
            self._slots.notify()

    async def run(self, task: StepTask, on_start: Callable[[StepTask], None] | None = None) -> dict[str, Any]:
        """Run one step attempt; the runner's result dict. A timeout, `kill` or cancelling the caller
        ends it early by killing its kernel (`task.killed` says why)."""
        await self._take_slot()
        task.id = task.id or f"t{next(self._task_ids)}"
        attempt = asyncio.create_task(self._attempt(task, on_start))
        attempt.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            self.kill(task, "cancelled")
            raise

    async def _attempt(self, task: StepTask, on_start: Callable[[StepTask], None] | None) -> dict[str, Any]:
        try:
            worker = await self._live_worker()
            result = worker.results[task.id] = asyncio.get_running_loop().create_future()
            worker.tasks[task.id] = task
            try:
                return await self._follow(worker, task, result, on_start)
            finally:
                worker.tasks.pop(task.id, None)
                worker.results.pop(task.id, None)
                worker.idle_since = time.monotonic()
        finally:
            await self._free_slot()

    async def _follow(
        self,
        worker: _Worker,
        task: StepTask,
        result: asyncio.Future[dict[str, Any]],
        on_start: Callable[[StepTask], None] | None,
    ) -> dict[str, Any]:
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
            LOG.warning("the worker did not report a step after its kernel was killed; killing it")
            worker.process.kill()
            return await result

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
            kind, task_id = event.get("event"), event.get("id")
            task, result = worker.tasks.get(task_id), worker.results.get(task_id)
            if kind == "started" and task is not None:
                task.kernel_pid = event.get("kernel_pid")
                task.started.set()
            elif kind == "result" and result is not None and not result.done():
                result.set_result(event["result"])
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
        """Fail the steps a dead worker held; the next step starts another."""
        if self._worker is worker:
            self._worker = None
        pending = [r for r in worker.results.values() if not r.done()]
        if pending and not worker.released:
            # let the stderr reader drain, so the error shows the worker's last words
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(worker.readers[1]), 2)
            tail = "\n".join(worker.stderr)
            for result in pending:
                result.set_exception(
                    WorkerDied(f"worker process exited with code {worker.process.returncode}:\n{tail}")
                )

    async def close(self) -> None:
        """Stop the worker and its kernels."""
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(*self._stopping, return_exceptions=True)
        if self._slots is not None:
            async with self._slots:
                self._slots.notify_all()
        worker, self._worker = self._worker, None
        if worker is None:
            return
        for task in list(worker.tasks.values()):
            self.kill(task, "cancelled")
        with contextlib.suppress(ConnectionError, RuntimeError):
            worker.send({"op": "exit"})
            assert worker.process.stdin is not None
            worker.process.stdin.close()
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
    """Keeps started kernels ready for the next steps (`SPARE_KERNELS`, or as many as the last
    `prepare` asked for), forked by `forks`; kernels start and stop on threads of their own, off the
    steps' threads. A taken kernel is replaced as `take` says, each step telling `under_way`."""

    def __init__(self, slots: int, forks: Forks) -> None:
        self._forks = forks
        self._slots = slots
        self._starts = ThreadPoolExecutor(2 * slots, thread_name_prefix="kernel-start")
        self._stops = ThreadPoolExecutor(slots, thread_name_prefix="kernel-stop")
        self._lock = threading.Lock()
        self._spec: KernelSpec | None = None
        self._wanted = min(SPARE_KERNELS, slots)
        self._spares: deque[Future[Any]] = deque()
        self._setting_up = 0  # steps that took a kernel and have not reached their own cells

    def prepare(self, spec: KernelSpec, kernels: int | None = None) -> None:
        """Have `kernels` spare kernels for `spec` started (the ones for another spec are stopped)."""
        with self._lock:
            if kernels is not None:
                self._wanted = max(1, min(kernels, self._slots))
            self._prepare(spec)

    def _prepare(self, spec: KernelSpec) -> None:
        if self._spec != spec:
            while self._spares:
                self._discard(self._spares.popleft())
            self._spec = spec
        while len(self._spares) < self._wanted:
            self._spares.append(self._starts.submit(self._start, spec))

    def take(self, spec: KernelSpec) -> Any:
        """A started kernel for `spec`: a spare that is up, else the one that started first (none
        left: they start now). A step taking one alone has it replaced at once; beside other steps
        still being set up, the spares are topped up once none is (`under_way`)."""
        with self._lock:
            if self._spec != spec or not self._spares:
                self._prepare(spec)
            taken = next((f for f in self._spares if f.done()), self._spares[0])
            self._spares.remove(taken)
            self._setting_up += 1
            if self._setting_up == 1:
                self._prepare(spec)
        try:
            return taken.result()
        except BaseException:
            self.under_way()  # no step will come of it
            raise

    def start_for(self, spec: KernelSpec, env: dict[str, str]) -> Any:
        """A kernel started now for one step, with the step's own `env` on top of `spec`'s (its
        `CUDA_VISIBLE_DEVICES`): forked per kernel, the spares for `spec` left as they are. Like
        `take`, followed by one `under_way`."""
        with self._lock:
            self._setting_up += 1
        try:
            return self._start(replace(spec, env=tuple(sorted({**dict(spec.env), **env}.items()))))
        except BaseException:
            self.under_way()
            raise

    def under_way(self) -> None:
        """Called once for each `take`: its step is set up (its own cells started) or over."""
        with self._lock:
            self._setting_up -= 1
            if self._setting_up == 0 and self._spec is not None:
                self._prepare(self._spec)

    def retire(self, km: Any) -> None:
        self._stops.submit(_shutdown, km)

    def close(self) -> None:
        """Let the starts and stops under way finish, and forget the spares: the worker, exiting,
        stops them with everything else it started (`_stop_children`), all at once."""
        self._starts.shutdown(wait=True, cancel_futures=True)
        self._stops.shutdown(wait=True)
        self._spares.clear()

    def _discard(self, spare: Future[Any]) -> None:
        def stop_when_started() -> None:
            if spare.exception() is None:
                _shutdown(spare.result())

        self._stops.submit(stop_when_started)

    def _start(self, spec: KernelSpec) -> Any:
        from cube_jupyter.local.forked_kernels import ForkedKernelManager

        # An async client: nbclient polls a blocking one in its event loop and would never notice the
        # kernel dying (a cancel or a timeout would hang the step); the manager stays sync for the runner.
        km = ForkedKernelManager(
            self._forks, spec.preload, kernel_name=spec.name, client_class=ASYNC_CLIENT, **kernel_transport()
        )
        km.start_kernel(
            cwd=spec.cwd, env={**os.environ, **dict(spec.env)}, extra_arguments=_step_kernel_arguments(km)
        )
        return km


def _step_kernel_arguments(km: Any) -> list[str]:
    """An IPython kernel's input history kept in memory: a step's cells are not the user's history
    (`%history` still works within the step), and kernels that all write the one history.sqlite,
    with a commit per cell, wait on each other: a 4-way fan-out lost ~0.1 s to it. Other kernels
    are started as their spec says."""
    from cube_jupyter.local.forked_kernels import LAUNCHER
    from cube_jupyter.local.forks import module_command

    command = module_command(km.kernel_spec.argv)
    return IN_MEMORY_HISTORY if command is not None and command.module == LAUNCHER else []


def _shutdown(km: Any) -> None:
    with contextlib.suppress(Exception):
        km.shutdown_kernel(now=True)


def _kernel_pid(km: Any) -> int | None:
    provisioner = getattr(km, "provisioner", None)
    pid = getattr(provisioner, "pid", None)
    return int(pid) if pid else None


def _run(message: dict[str, Any], keeper: _KernelKeeper, send: Callable[[dict[str, Any]], None]) -> None:
    """Run one step and send its result, whatever happens: the parent waits for it."""
    task_id, step = message["id"], message["step"]
    try:
        result = _run_step(message, keeper, send)
    except Exception as exc:  # bad input the runner refused, or a store that failed: still a result
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        LOG.error("step %s failed outside its cells:\n%s", step, traceback.format_exc())
        result = _failure(step, f"step {step!r}: {text}", "runner")
    send({"event": "result", "id": task_id, "result": result})


def _run_step(
    message: dict[str, Any], keeper: _KernelKeeper, send: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    from cube_jupyter.pipelines.model import pipeline_from_dict
    from cube_jupyter.pipelines.runner import run_step
    from cube_jupyter.storage import CubeStorage, open_store

    step = message["step"]
    spec = KernelSpec.from_dict(message["kernel"])
    env = message.get("env") or {}
    try:
        km = keeper.start_for(spec, env) if env else keeper.take(spec)
    except Exception as exc:
        return _failure(step, f"step {step!r}: kernel {spec.name!r} did not start: {exc}", "kernel")
    send({"event": "started", "id": message["id"], "kernel_pid": _kernel_pid(km)})
    told = False

    def under_way() -> None:  # once: when the step's own cells start, else as it ends
        nonlocal told
        if not told:
            told = True
            keeper.under_way()

    try:
        storage = CubeStorage(**message["storage"])
        return run_step(
            pipeline_from_dict(message["pipeline"]),
            step,
            message["run_id"],
            open_store(message["store"], storage, check=False),  # the run reached it before any step
            message["parameters"],
            kernel_manager=km,
            cwd=spec.cwd,
            inputs=message["inputs"],
            storage=storage,
            on_cells=under_way,
        ).to_dict()
    finally:
        under_way()  # a step that failed before its own cells
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


def worker_main(stdin: IO[str], protocol: IO[str], slots: int, first_preload: tuple[str, ...] = ()) -> None:
    """Run the steps `stdin` asks for; `first_preload`: what the first kernels' fork server imports
    beyond a kernel's own (their `KernelSpec.preload`)."""
    lock = threading.Lock()

    def send(event: dict[str, Any]) -> None:
        with lock:
            protocol.write(json.dumps(event) + "\n")
            protocol.flush()

    forks = Forks(socket_dir(os.getpid()), preload=[*KERNEL_MODULES, RUNTIME])
    # The usual kernel (the workbench's own interpreter) gets its server now, beside this worker's
    # imports, preloading what the first kernels need; a kernel spec with another interpreter or
    # flags, or other needs, starts its own on first use.
    first_server = ((sys.executable,), dict(os.environ), first_preload)
    threading.Thread(target=forks.start, args=first_server, daemon=True).start()
    # What steps and kernel starts use, imported here, once, before the threads that use it exist:
    # threads importing the same packages at once can be handed a module only partly initialised.
    import papermill  # noqa: F401

    import cube_jupyter.local.forked_kernels
    import cube_jupyter.pipelines.runner  # noqa: F401

    keeper = _KernelKeeper(slots, forks)
    steps = ThreadPoolExecutor(slots, thread_name_prefix="step")
    try:
        for line in stdin:
            message = json.loads(line)
            if message["op"] == "warm":
                keeper.prepare(KernelSpec.from_dict(message["kernel"]), message.get("kernels"))
            elif message["op"] == "run":
                steps.submit(_run, message, keeper, send)
            elif message["op"] == "exit":
                break
    finally:
        steps.shutdown(wait=True)
        keeper.close()
        forks.close()  # each server kills the kernels it forked, spares included, all at once
        _stop_children()  # kernels spawned without a fork server
        shutil.rmtree(socket_dir(os.getpid()), ignore_errors=True)  # their sockets and connection files


def _stop_children() -> None:
    for child in psutil.Process().children():  # each kernel leads a session of its own
        processes.stop_tree_sync(child, 1.0)


def _exit_when_orphaned(parent: int, interval: float = 0.5) -> None:
    """Watch for the parent's death (a workbench killed with -9): then stop this worker's kernels and
    exit, so a step it was running is not still writing while a resume of its run reruns it."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        _stop_children()  # the fork server with its kernels, and any kernel spawned directly
        shutil.rmtree(socket_dir(os.getpid()), ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def main() -> None:
    from cube_jupyter.startup import skip_papermill_remote_io, skip_unused_schema_formats

    skip_unused_schema_formats()
    skip_papermill_remote_io()
    _exit_when_orphaned(os.getppid())
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints from papermill, kernels or user code must not corrupt the protocol
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent cancels; a stray SIGINT must not kill us
    size, *first_preload = sys.argv[1:]
    worker_main(sys.stdin, protocol, int(size), tuple(first_preload))
    protocol.close()
    sys.stderr.flush()
    os._exit(0)  # its kernels are stopped: tearing down papermill, zmq and the rest is time for nothing


if __name__ == "__main__":
    main()

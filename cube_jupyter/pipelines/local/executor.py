"""The local executor: a pipeline's steps on a pool of kernel-warm worker processes.

A step is dispatched the moment its last upstream step has succeeded (or was taken from the cache),
up to `parallel` at once, and up to what the user's runs together may (`user_slots`). Before
running, a step's content hash is looked up in the store's cache: a hit reuses the earlier outputs
and executed notebook, so an unchanged step never runs twice and a failed run resumes from the
failure when run again. A failed step is retried `retries:N` times; when it still fails, the steps
below it are skipped while independent branches run to the end, and the run fails naming the step.
Cancelling kills the running steps' kernels. Every state change is written to the run history as it
happens, so nothing computed is lost whatever ends the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cube_jupyter.errors import CubeError
from cube_jupyter.pipelines import marshal
from cube_jupyter.pipelines.cache import CacheEntry, StepCache, step_cache_key
from cube_jupyter.pipelines.datafiles import fingerprints
from cube_jupyter.pipelines.history import COMPLETED_STEP, RunHistory, RunRecord, StepRecord, now
from cube_jupyter.pipelines.local.workers import KernelSpec, StepTask, WorkerDied, WorkerPool
from cube_jupyter.pipelines.model import Pipeline
from cube_jupyter.storage import ArtifactStore, CubeStorage

if TYPE_CHECKING:
    from cube_jupyter.pipelines.local.gpus import StepGpus

LOG = logging.getLogger(__name__)
TIMEOUT_BACKSTOP = 30.0  # seconds past a step's timeout (+ the runner's grace) before the pool kills it
SETTLED = ("succeeded", "cached", "failed", "skipped", "cancelled")
Observer = Callable[[StepRecord], None]


@dataclass
class _Done:
    """What downstream steps need from a finished step."""

    outputs: dict[str, dict[str, Any]]
    cache_key: str


@dataclass
class RunOptions:
    parallel: int
    no_cache: bool = False
    cwd: str = "."  # the kernels' working directory: the notebook's folder
    storage: CubeStorage = field(default_factory=CubeStorage)
    user_slots: asyncio.Semaphore | None = None  # shared by every run of the user: their step limit
    gpus: StepGpus | None = None  # assigns `gpu:N` steps their GPUs; None: steps see every GPU


class LocalExecutor:
    """Starts runs on a shared worker pool and records them in the run history."""

    def __init__(self, pool: WorkerPool, history: RunHistory) -> None:
        self.pool = pool
        self.history = history

    def start(
        self,
        run: RunRecord,
        pipeline: Pipeline,
        store: ArtifactStore,
        options: RunOptions,
        observer: Observer | None = None,
    ) -> RunHandle:
        """Drive `run` (already in the history, steps pending) in a background task."""
        handle = RunHandle(self, run, pipeline, store, options, observer)
        handle.task = asyncio.create_task(handle.drive(), name=f"pipeline run {run.id}")
        return handle


class RunHandle:
    """One run in progress: wait for it, or cancel it."""

    task: asyncio.Task[RunRecord]

    def __init__(
        self,
        executor: LocalExecutor,
        run: RunRecord,
        pipeline: Pipeline,
        store: ArtifactStore,
        options: RunOptions,
        observer: Observer | None,
    ) -> None:
        self.run = run
        self.pipeline = pipeline
        self.store = store
        self.options = options
        self.pool = executor.pool
        self.history = executor.history
        self.cache = StepCache(store)
        self.observer = observer
        # A resumed run's completed steps stay as they are: downstream steps read their outputs.
        completed = {s.name: s for s in run.steps if s.status in COMPLETED_STEP and s.cache_key}
        self.steps: dict[str, StepRecord] = {
            s.name: completed.get(s.name) or StepRecord(name=s.name) for s in pipeline.steps
        }
        self.cancelled = False
        self._tasks: dict[str, StepTask] = {}
        self._done: dict[str, _Done] = {
            name: _Done(step.outputs, step.cache_key or "") for name, step in completed.items()
        }
        self._slots = asyncio.Semaphore(max(1, options.parallel))
        self._user_slots: contextlib.AbstractAsyncContextManager[Any] = (
            options.user_slots or contextlib.nullcontext()
        )
        self._kernel = KernelSpec.for_pipeline(pipeline, options.cwd, store.kernel_env())

    @property
    def id(self) -> str:
        return self.run.id

    async def wait(self) -> RunRecord:
        return await asyncio.shield(self.task)

    def cancel(self) -> None:
        """Stop the run: nothing new starts, running steps' kernels are killed."""
        if self.cancelled or self.task.done():
            return
        self.cancelled = True
        for task in list(self._tasks.values()):
            self.pool.kill(task, "cancelled")

    async def drive(self) -> RunRecord:
        self.history.update_run(self.run.id, status="running", started=now())
        try:
            await asyncio.to_thread(self.store.check)
        except CubeError as exc:  # the store is reached here, so the request that started us answered
            return self._finish(exc.message)
        try:
            await self._schedule()  # workers start as steps need them: a cached re-run starts none
        except Exception as exc:  # a bug here must still settle the run, never leave it "running"
            LOG.exception("pipeline run %s failed in the executor", self.run.id)
            return self._finish(f"internal error in the executor: {type(exc).__name__}: {exc}")
        return self._finish(None)

    async def _schedule(self) -> None:
        running: dict[asyncio.Task[str], str] = {}
        state = {name: step.status if name in self._done else "pending" for name, step in self.steps.items()}
        while True:
            if not self.cancelled:
                self._skip_below_failures(state)
            for step in self.pipeline.steps:
                if state[step.name] != "pending":
                    continue
                if self.cancelled:
                    state[step.name] = "cancelled"
                    self._set(step.name, status="cancelled", finished=now())
                elif all(state[up] in ("succeeded", "cached") for up in step.after):
                    state[step.name] = "scheduled"
                    running[asyncio.create_task(self._step(step.name))] = step.name
            if not running:
                return
            finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                state[running.pop(task)] = task.result()

    def _skip_below_failures(self, state: dict[str, str]) -> None:
        changed = True
        while changed:
            changed = False
            for step in self.pipeline.steps:
                blocked = [up for up in step.after if state[up] in ("failed", "skipped", "cancelled")]
                if state[step.name] == "pending" and blocked:
                    state[step.name] = "skipped"
                    why = f"upstream step {blocked[0]!r} {state[blocked[0]]}"
                    self._set(
                        step.name, status="skipped", finished=now(), error={"message": f"skipped: {why}"}
                    )
                    changed = True

    async def _step(self, name: str) -> str:
        step = self.pipeline.step(name)
        upstream_outputs = {up: self._done[up].outputs for up in step.after}
        files = await asyncio.to_thread(fingerprints, step.files, self.options.cwd)
        key = step_cache_key(
            self.pipeline,
            name,
            self.run.parameters,
            upstream_outputs,
            {up: self._done[up].cache_key for up in step.after},
            marshal.FORMAT_VERSION,
            user=self.run.user,
            files=files,
        )
        if files:
            self._set(name, files=sorted(files))
        if step.options.cache and not self.options.no_cache:  # `cache:disabled` runs every time
            entry = await asyncio.to_thread(self.cache.lookup, key)
            if entry is not None:
                stamp = now()
                self._done[name] = _Done(entry.outputs, key)
                self._set(
                    name,
                    status="cached",
                    cache_hit=True,
                    cache_key=key,
                    started=stamp,
                    finished=stamp,
                    duration=0.0,
                    notebook=entry.notebook,
                    outputs=entry.outputs,
                    metrics=entry.metrics,
                )
                return "cached"
        inputs = {}
        for edge in self.pipeline.edges:
            if edge.downstream == name:
                inputs.update({var: upstream_outputs[edge.upstream][var]["key"] for var in edge.variables})
        async with self._slots, self._user_slots:
            return await self._attempts(name, key, inputs)

    async def _attempts(self, name: str, key: str, inputs: dict[str, str]) -> str:
        """Run the step's attempts; a `gpu:N` step first waits (`queued`, with the reason) for N GPUs
        of its own, which its kernels get as `CUDA_VISIBLE_DEVICES` and hold until it ends."""
        wanted, gate = self.pipeline.step(name).options.gpu, self.options.gpus
        if not wanted or gate is None:
            return await self._tries(name, key, inputs, {})
        given = await gate.acquire(
            self.run.user,
            self.run.id,
            name,
            wanted,
            waiting=lambda why: self._set(name, status="queued", reason=why),
            cancelled=lambda: self.cancelled,
        )
        if given is None:
            self._set(name, status="cancelled", finished=now())
            return "cancelled"
        self._set(name, status="running", gpus=given, reason=None)
        try:
            return await self._tries(name, key, inputs, {"CUDA_VISIBLE_DEVICES": ",".join(given)})
        finally:
            gate.released()

    async def _tries(self, name: str, key: str, inputs: dict[str, str], env: dict[str, str]) -> str:
        step = self.pipeline.step(name)
        tries = step.options.retries + 1
        result: dict[str, Any] = {}
        for attempt in range(1, tries + 1):
            if self.cancelled:
                self._set(name, status="cancelled", finished=now())
                return "cancelled"
            task = StepTask(
                pipeline=self.pipeline.to_dict(),
                step=name,
                run_id=self.run.id,
                store=self.store.url(),
                storage=_storage_values(self.options.storage),
                parameters=dict(self.run.parameters),
                inputs=inputs,
                kernel=self._kernel,
                timeout=_backstop(step.options.timeout),
                env=env,
            )
            self._tasks[name] = task
            self._set(name, status="running", attempts=attempt, started=now(), cache_key=key, error=None)
            try:
                result = await self.pool.run(task)
            except WorkerDied as exc:
                result = {
                    "status": "failed",
                    "duration": None,
                    "notebook": None,
                    "outputs": {},
                    "metrics": {},
                    "error": {
                        "message": f"step {name!r}: {exc}",
                        "cell": None,
                        "ename": "WorkerDied",
                        "evalue": str(exc),
                        "traceback": "",
                    },
                }
            finally:
                self._tasks.pop(name, None)
            if task.killed == "cancelled" or (self.cancelled and result.get("status") != "succeeded"):
                self._record(name, result, status="cancelled")
                return "cancelled"
            if task.killed == "timeout" and result.get("status") != "succeeded":
                limit = step.options.timeout
                message = f"step {name!r} ran past its timeout of {limit:g} s and was killed"
                result["error"] = {**(result.get("error") or {}), "message": message, "ename": "TimeoutError"}
            if result.get("status") == "succeeded":
                break
            if attempt < tries:
                LOG.info(
                    "run %s: step %s failed (attempt %d of %d); retrying", self.run.id, name, attempt, tries
                )
        status = "succeeded" if result.get("status") == "succeeded" else "failed"
        self._record(name, result, status=status)
        if status == "succeeded":
            outputs = result.get("outputs") or {}
            self._done[name] = _Done(outputs, key)
            entry = CacheEntry(
                key=key,
                step=name,
                run_id=self.run.id,
                notebook=result.get("notebook") or "",
                outputs=outputs,
                metrics=result.get("metrics") or {},
                duration=float(result.get("duration") or 0.0),
            )
            try:
                await asyncio.to_thread(self.cache.record, entry)
            except Exception as exc:  # the step's work is safe in the store; only reuse is lost
                LOG.warning("run %s: could not record step %s in the cache: %s", self.run.id, name, exc)
        return status

    def _record(self, name: str, result: Mapping[str, Any], status: str) -> None:
        self._set(
            name,
            status=status,
            finished=now(),
            duration=result.get("duration"),
            notebook=result.get("notebook"),
            outputs=result.get("outputs") or {},
            metrics=result.get("metrics") or {},
            error=result.get("error") if status != "succeeded" else None,
        )

    def _set(self, name: str, **changes: Any) -> None:
        self.history.update_step(self.run.id, name, **changes)
        self.steps[name] = replace(self.steps[name], **changes)
        if self.observer is not None:
            try:
                self.observer(self.steps[name])
            except Exception:  # a progress display must never break a run
                LOG.exception("pipeline run observer failed")

    def _finish(self, run_error: str | None) -> RunRecord:
        """Settle the run from its steps; `run_error` is a failure of the run itself, not a step's."""
        failed = [s for s in self.steps.values() if s.status == "failed"]
        if self.cancelled:
            status, error = "cancelled", "cancelled by the user"
        elif run_error or failed:
            status = "failed"
            messages = [str((s.error or {}).get("message") or f"step {s.name!r} failed") for s in failed]
            error = "; ".join([*messages, *([run_error] if run_error else [])])
        else:
            status, error = "succeeded", None
        self.history.finish_steps(self.run.id, "cancelled" if self.cancelled else "skipped")
        self.run = self.history.update_run(
            self.run.id, only_if_active=True, status=status, finished=now(), error=error
        )
        return self.run


def _backstop(timeout: float | None) -> float | None:
    from cube_jupyter.pipelines.runner import INTERRUPT_GRACE  # the runner loads jupyter_client

    return timeout + INTERRUPT_GRACE + TIMEOUT_BACKSTOP if timeout else None


def _storage_values(storage: CubeStorage) -> dict[str, Any]:
    """The CubeStorage settings a worker needs to reopen the same store (plain data)."""
    return {
        name: getattr(storage, name)
        for name in storage.trait_names()
        if storage.trait_metadata(name, "config")
    }

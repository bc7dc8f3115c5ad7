"""Runs on this machine: steps run by papermill in kernels of one shared pool of kernel-warm workers,
bounded by the admin's `CubePipelines.max_*` limits (a run asking for more `parallel` than one run may
is refused; a user's runs together wait for their turn). A `gpu:N` step is given N GPUs of its own
and waits for them (`pipelines.local.gpus`). The run is driven by this process; another process's
runs are read from the shared history."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cube_jupyter import access
from cube_jupyter.errors import Conflict, CubeError, InvalidInput, QuotaExceeded
from cube_jupyter.local import gpus
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.history import RunHistory, RunRecord
from cube_jupyter.pipelines.local.gpus import StepGpus
from cube_jupyter.pipelines.model import Pipeline, pipeline_from_dict
from cube_jupyter.pipelines.targets import NewRun, Observer, RunRequest
from cube_jupyter.storage import ArtifactStore, open_store

if TYPE_CHECKING:
    from cube_jupyter.pipelines.local.executor import RunHandle
    from cube_jupyter.pipelines.local.workers import WorkerPool

LOG = logging.getLogger(__name__)
CANCEL_WAIT = 30.0  # seconds `cancel` waits for a local run to settle


def _require_gpus(pipeline: Pipeline, limit: int | None = None) -> None:
    """A step that asks for GPUs (`gpu:N`, Kale's `limit:nvidia.com/gpu:N`) runs here only where this
    machine has that many, never silently on the CPU, and only within the GPU quota `limit`: what
    no wait could give is refused now, naming the step; the rest waits for its GPUs as it runs."""
    asking = [step for step in pipeline.steps if step.options.gpu]
    if not asking:
        return
    step = max(asking, key=lambda s: s.options.gpu)
    have = len(gpus.visible_gpu_ids())
    if step.options.gpu > have:
        raise InvalidInput(
            f"step {step.name!r} asks for {step.options.gpu} GPU(s) (a gpu: or limit: tag on "
            f"{_cells(step.cells)}), but this machine has {have}: run it on the cluster, or remove the tag "
            "to run the step on the CPU",
            field=f"steps.{step.name}.gpu",
        )
    if limit and step.options.gpu > limit:
        raise QuotaExceeded(
            f"step {step.name!r} asks for {step.options.gpu} GPU(s) (a gpu: or limit: tag on "
            f"{_cells(step.cells)}) and the limit per user is {limit} (CubeWorkbench.gpu_quota_per_user)",
            field=f"steps.{step.name}.gpu",
        )


def _cells(indices: tuple[int, ...]) -> str:
    return f"cell {indices[0]}" if len(indices) == 1 else f"its cells {', '.join(map(str, indices))}"


class LocalRunTarget:
    def __init__(
        self,
        settings: PipelineSettings,
        history: RunHistory,
        root_dir: Path,
        *,
        pool: WorkerPool | None = None,
        pool_size: int | None = None,
        multi_user: bool = False,
        gpus: StepGpus | None = None,
    ) -> None:
        """`gpus` assigns GPU steps their GPUs (the composition root's, with the one ledger and the
        jobs' GPUs); None: the steps of this process's runs only, no quota."""
        self.settings = settings
        self.gpus = gpus or StepGpus(history, settings.state_dir)
        self.limits = settings.pipelines
        self.history = history
        self.root_dir = root_dir
        self.multi_user = multi_user
        self.pool_size = pool_size or self.limits.max_workers
        self._pool = pool
        self._owns_pool = pool is None
        self._warming: asyncio.Task[None] | None = None  # a worker started ahead of a run
        self._runs: dict[str, RunHandle] = {}
        self._user_slots: dict[str, asyncio.Semaphore] = {}  # each user's steps running at once

    async def start(self) -> None:
        """Nothing to start: the worker starts with the first run (or `start_workers`)."""

    def admit(self, caller: str, request: RunRequest) -> None:
        access.require_local_execution(
            self.settings, caller, self.multi_user, "run pipelines on the workbench itself", "target"
        )
        if request.parallel is not None and request.parallel > self.limits.max_parallel_per_run:
            raise InvalidInput(
                f"parallel {request.parallel} is over CubePipelines.max_parallel_per_run "
                f"({self.limits.max_parallel_per_run})",
                field="parallel",
            )

    async def launch(self, run: NewRun, observer: Observer | None = None) -> RunRecord:
        await asyncio.to_thread(_require_gpus, run.pipeline, self.gpus.limit)
        request = run.request
        store = request.store
        if store:
            store = access.local_store(
                self.settings, run.caller, self.root_dir, store, self.multi_user, "store"
            )
        # Reached by the run, not here: a slow or broken store fails the run, never the request.
        opened = await asyncio.to_thread(open_store, store or None, self.settings.storage, check=False)
        parallel = request.parallel or min(self.limits.max_parallel_per_run, self._local_pool().size)
        self._pool_for(run.pipeline, str(run.folder), opened, parallel)
        spec = {
            "pipeline": run.pipeline.to_dict(),
            "parallel": parallel,
            "no_cache": request.no_cache,
            "cwd": str(run.folder),
        }
        record = run.record(opened.url(), spec=spec)
        return self._drive(record, run.pipeline, opened, spec, observer)

    async def resume(self, caller: str, run: RunRecord, observer: Observer | None = None) -> RunRecord:
        """Run a failed, cancelled or interrupted run again from where it stopped: the same pipeline,
        parameters and store; completed steps kept (their outputs are in the store), the rest run.
        The run becomes this process's to drive."""
        access.require_local_execution(
            self.settings, caller, self.multi_user, "resume pipeline runs here", "id"
        )
        spec = self.history.spec(run.id)
        if spec is None or not run.resumable:
            raise Conflict(
                f"run {run.id!r} is {run.status}"
                + ("" if spec else " and was recorded before runs could resume")
                + "; only a failed or cancelled local run with steps left resumes",
                field="id",
            )
        pipeline = pipeline_from_dict(spec["pipeline"])
        await asyncio.to_thread(_require_gpus, pipeline, self.gpus.limit)
        opened = await asyncio.to_thread(open_store, run.store, self.settings.storage, check=False)
        record = self.history.claim_for_resume(run.id)
        LOG.info("resuming pipeline run %s for %s", run.id, run.user)
        self._pool_for(pipeline, spec["cwd"], opened, spec["parallel"])
        return self._drive(record, pipeline, opened, spec, observer)

    def _drive(
        self,
        record: RunRecord,
        pipeline: Pipeline,
        store: ArtifactStore,
        spec: Mapping[str, Any],
        observer: Observer | None,
    ) -> RunRecord:
        """Start driving a local run (recorded, its pool warmed) in the background."""
        assert self._pool is not None
        user_slots = self._user_slots.setdefault(
            record.user, asyncio.Semaphore(self.limits.max_parallel_per_user)
        )
        from cube_jupyter.pipelines.local.executor import LocalExecutor, RunOptions  # runs, not graphs

        options = RunOptions(
            parallel=spec["parallel"],
            no_cache=spec["no_cache"],
            cwd=spec["cwd"],
            storage=self.settings.storage,
            user_slots=user_slots,
            gpus=self.gpus,
        )
        handle = LocalExecutor(self._pool, self.history).start(record, pipeline, store, options, observer)
        self._runs[record.id] = handle
        handle.task.add_done_callback(lambda _t: self._runs.pop(record.id, None))
        return record

    async def wait(self, run: RunRecord) -> None:
        """Until a run driven here has settled."""
        handle = self._runs.get(run.id)
        if handle is not None:
            await handle.wait()

    async def cancel(self, run: RunRecord) -> None:
        """Kill the run's running steps' kernels; it is recorded as cancelled."""
        handle = self._runs.get(run.id)
        if handle is None:
            raise Conflict(
                f"run {run.id!r} is driven by another process (a CLI or another server); cancel it there",
                field="id",
            )
        handle.cancel()
        try:
            await asyncio.wait_for(handle.wait(), CANCEL_WAIT)
        except TimeoutError:
            LOG.warning("run %s still settling %.0fs after cancel", run.id, CANCEL_WAIT)

    def current(self, run: RunRecord) -> RunRecord:
        return run  # the executor writes every change to the history as it happens

    # -- the worker pool ---------------------------------------------------------------------------

    def warm_for(self, caller: str, pipeline: Pipeline, folder: Path) -> None:
        """Start the worker and its next kernels for this notebook while its graph is looked at (the
        Lab panel asks for it before the user presses Run), so a server's first run does not wait
        for them. Only in a server (a running loop), and only for a caller who may run here."""
        try:
            asyncio.get_running_loop()
            access.require_local_execution(self.settings, caller, self.multi_user, "run here", "path")
            store = open_store(None, self.settings.storage, check=False)  # the default: no request made
        except (RuntimeError, CubeError):
            return
        pool = self._pool_for(pipeline, str(folder), store, self.limits.max_parallel_per_run)
        if pool.worker_count == 0:
            self.start_workers()

    def start_workers(self) -> None:
        """Start the local worker now, for a run the caller knows will execute steps (`--no-cache`):
        its interpreter start and imports then overlap reading the notebook and the run's records.
        A run that may be fully cached does not call this: it starts nothing."""
        pool = self._local_pool()
        if self._warming is None or self._warming.done():
            self._warming = asyncio.create_task(pool.start())

    def _local_pool(self) -> WorkerPool:
        from cube_jupyter.pipelines.local.workers import WorkerPool

        if self._pool is None:
            self._pool = WorkerPool(self.pool_size, idle_seconds=self.limits.worker_idle_seconds)
        return self._pool

    def _pool_for(self, pipeline: Pipeline, cwd: str, store: ArtifactStore, parallel: int) -> WorkerPool:
        """The shared pool, with as many kernels warmed for this run as it can use at once (the run
        starts the worker)."""
        from cube_jupyter.pipelines.local.workers import KernelSpec

        pool = self._local_pool()
        kernel = KernelSpec.for_pipeline(pipeline, cwd, store.kernel_env())
        pool.warm(kernel, min(parallel, len(pipeline.steps)))
        return pool

    async def close(self) -> None:
        """Cancel local runs still going (they are recorded as cancelled) and stop the workers."""
        for handle in list(self._runs.values()):
            handle.cancel()
        for handle in list(self._runs.values()):
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(handle.wait(), CANCEL_WAIT)
        if self._warming is not None:
            with contextlib.suppress(Exception):
                await self._warming
        if self._pool is not None and self._owns_pool:
            await self._pool.close()

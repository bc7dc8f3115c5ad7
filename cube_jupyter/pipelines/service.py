"""Notebook pipelines as users see them: graphs, runs, their history, cancel, executed notebooks.

REST handlers and the CLI call this. Paths are relative to the Jupyter root dir (the server's
`root_dir`; the CLI's working directory) and never leave it. Runs belong to the user who started
them: a user sees and cancels only their own, admins everyone's. Local runs share one pool of
kernel-warm workers, bounded by the admin's `CubePipelines.max_*` limits (a run asking for more
`parallel` than one run may is refused; a user's runs together wait for their turn); cluster runs
(kubernetes backend) are Argo Workflows followed through an informer, recorded in the same history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
from nbformat import NotebookNode

from cube_jupyter import access
from cube_jupyter.config import Settings
from cube_jupyter.errors import Conflict, CubeError, InvalidInput, NotFound
from cube_jupyter.pipelines.dag import build_pipeline, load_notebook
from cube_jupyter.pipelines.history import ACTIVE_RUN, RunHistory, RunRecord, StepRecord, now
from cube_jupyter.pipelines.model import Pipeline, PipelineError, pipeline_from_dict
from cube_jupyter.pipelines.stepnb import validate_parameters
from cube_jupyter.pipelines.tags import vocabulary as tag_vocabulary
from cube_jupyter.storage import ArtifactStore, CubeStorage, open_store

if TYPE_CHECKING:
    from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns, WorkflowRun
    from cube_jupyter.pipelines.local.executor import Observer, RunHandle
    from cube_jupyter.pipelines.local.workers import WorkerPool

LOG = logging.getLogger(__name__)
TARGETS = ("local", "cluster")
CANCEL_WAIT = 30.0  # seconds `cancel` waits for a local run to settle


class PipelineService:
    def __init__(
        self,
        settings: Settings,
        root_dir: str | Path,
        *,
        storage: CubeStorage | None = None,
        history: RunHistory | None = None,
        pool: WorkerPool | None = None,
        cluster: ClusterPipelineRuns | None = None,
        pool_size: int | None = None,
        multi_user: bool = False,
    ) -> None:
        self.settings = settings
        # A workbench many users reach (trusted-header identity): each reads only their own files
        # (`access.readable_file`) and runs code here only as `access.require_local_execution` allows.
        self.multi_user = multi_user
        self.root_dir = Path(root_dir).expanduser().resolve()
        self.storage = storage or settings.storage
        self.history = history or RunHistory.in_state_dir(settings.state_dir)
        recovered = self.history.recover()
        if recovered:
            LOG.warning(
                "%d pipeline run(s) were interrupted (the process running them exited); they can be "
                "resumed: %s",
                len(recovered),
                ", ".join(recovered),
            )
        self._pool = pool
        self._owns_pool = pool is None
        self._warming: asyncio.Task[None] | None = None  # a worker started ahead of a run
        self.limits = settings.pipelines.pipelines
        self.pool_size = pool_size or self.limits.max_workers
        self.cluster = cluster
        self._runs: dict[str, RunHandle] = {}
        self._user_slots: dict[str, asyncio.Semaphore] = {}  # each user's steps running at once

    def config(self) -> dict[str, Any]:
        targets = ["local", "cluster"] if self.cluster is not None else ["local"]
        return {"backend": self.settings.workbench.backend, "targets": targets, "tags": tag_vocabulary()}

    # -- notebooks ---------------------------------------------------------------------------------

    def resolve(self, caller: str, path: object) -> Path:
        """The notebook file `path` names among the files `caller` may read (field "path")."""
        return access.readable_file(
            self.settings, caller, self.root_dir, path, "path", multi_user=self.multi_user
        )

    def load(self, caller: str, path: object) -> Pipeline:
        full = self.resolve(caller, path)
        assert isinstance(path, str)
        return build_pipeline(load_notebook(full), path)

    def graph(self, caller: str, path: object) -> Pipeline:
        pipeline = self.load(caller, path)
        self._warm_for(caller, pipeline)
        return pipeline

    def graph_of_content(self, caller: str, path: object, notebook: object) -> Pipeline:
        """The pipeline of unsaved notebook content (the Lab panel's view of what is on screen)."""
        access.file_path(path, "path")  # only names the content: nothing is read from the disk
        assert isinstance(path, str)
        pipeline = _pipeline_of_content(path, notebook)
        self._warm_for(caller, pipeline)
        return pipeline

    def _warm_for(self, caller: str, pipeline: Pipeline) -> None:
        """Start the local worker and its next kernels for this notebook while its graph is looked at
        (the Lab panel asks for it before the user presses Run), so a server's first run does not
        wait for them. Only in a server (a running loop), and only for a caller who may run here."""
        try:
            asyncio.get_running_loop()
            access.require_local_execution(self.settings, caller, self.multi_user, "run here", "path")
            folder = self.resolve(caller, pipeline.path).parent
            store = open_store(None, self.storage, check=False)  # the default store: no request made
        except (RuntimeError, CubeError):
            return
        pool = self._pool_for(pipeline, str(folder), store, self.limits.max_parallel_per_run)
        if pool.worker_count == 0:
            self.start_workers()

    # -- runs --------------------------------------------------------------------------------------

    async def start_run(
        self,
        caller: str,
        path: object,
        parameters: object = None,
        target: object = "local",
        store: object = None,
        parallel: object = None,
        no_cache: object = False,
        notebook: object = None,
        *,
        observer: Observer | None = None,
    ) -> RunRecord:
        """Validate and start a run; it goes on in the background (local) or on the cluster.

        With `notebook` (nbformat JSON: the editor's unsaved content) the run executes that content
        as the notebook at `path`, which must still be one of the caller's files (its folder is the
        steps' working directory); the file itself is neither read nor written."""
        if target not in TARGETS:
            raise InvalidInput(f"target must be one of {', '.join(TARGETS)}, not {target!r}", field="target")
        if not isinstance(no_cache, bool):
            raise InvalidInput("no_cache must be true or false", field="no_cache")
        if parallel is not None and (
            isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1
        ):
            raise InvalidInput("parallel must be a whole number of at least 1", field="parallel")
        if store is not None and not isinstance(store, str):
            raise InvalidInput("store must be a URL string (a path, file:// or s3://)", field="store")
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, Mapping):
            raise InvalidInput("parameters must be an object of name: value", field="parameters")
        if target == "local":
            access.require_local_execution(
                self.settings, caller, self.multi_user, "run pipelines on the workbench itself", "target"
            )
            if parallel is not None and parallel > self.limits.max_parallel_per_run:
                raise InvalidInput(
                    f"parallel {parallel} is over CubePipelines.max_parallel_per_run "
                    f"({self.limits.max_parallel_per_run})",
                    field="parallel",
                )
        full = self.resolve(caller, path)  # read or not, the caller's file: the steps run in its folder
        pipeline = self.load(caller, path) if notebook is None else _pipeline_of_content(str(path), notebook)
        if not pipeline.steps:
            raise PipelineError(
                f"{pipeline.path}: the notebook has no steps; tag a cell 'step:NAME'", field="path"
            )
        values = validate_parameters(pipeline, dict(parameters))
        if target == "cluster":
            return await self._start_cluster(caller, pipeline, values, store, parallel)
        if store:
            store = access.local_store(self.settings, caller, self.root_dir, store, self.multi_user, "store")
        # Reached by the run, not here: a slow or broken store fails the run, never the request.
        opened = await asyncio.to_thread(open_store, store or None, self.storage, check=False)
        notebook_dir = str(full.parent)
        parallel = parallel or min(self.limits.max_parallel_per_run, self._local_pool().size)
        self._pool_for(pipeline, notebook_dir, opened, parallel)
        spec = {
            "pipeline": pipeline.to_dict(),
            "parallel": parallel,
            "no_cache": no_cache,
            "cwd": notebook_dir,
        }
        record = self._record(caller, pipeline, values, "local", opened.url(), spec=spec)
        return self._drive(record, pipeline, opened, spec, observer)

    async def resume_run(self, caller: str, run_id: object, *, observer: Observer | None = None) -> RunRecord:
        """Run a failed, cancelled or interrupted local run again from where it stopped: the same
        pipeline, parameters and store; completed steps kept (their outputs are in the store), the
        rest run. The run becomes this process's to drive."""
        run = self.get_run(caller, run_id)
        if run.target != "local":
            raise Conflict(
                f"run {run.id!r} is an Argo Workflow: it goes on whatever happens to the workbench; "
                "retry it with Argo",
                field="id",
            )
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
        opened = await asyncio.to_thread(open_store, run.store, self.storage, check=False)
        record = self.history.claim_for_resume(run.id)
        LOG.info("resuming pipeline run %s for %s", run.id, caller)
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
            storage=self.storage,
            user_slots=user_slots,
        )
        handle = LocalExecutor(self._pool, self.history).start(record, pipeline, store, options, observer)
        self._runs[record.id] = handle
        handle.task.add_done_callback(lambda _t: self._runs.pop(record.id, None))
        return record

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
        kernel = KernelSpec(pipeline.kernel_name, cwd, tuple(sorted(store.kernel_env().items())))
        pool.warm(kernel, min(parallel, len(pipeline.steps)))
        return pool

    async def _start_cluster(
        self, caller: str, pipeline: Pipeline, values: dict[str, Any], store: str | None, parallel: int | None
    ) -> RunRecord:
        if self.cluster is None:
            raise InvalidInput(
                "target 'cluster' needs the kubernetes backend (c.CubeWorkbench.backend = 'kubernetes')",
                field="target",
            )
        run_id = _run_id(pipeline)
        store_url = store or self.storage.url
        name = await self.cluster.submit(
            pipeline, caller, run_id, store_url or None, values, parallel=parallel
        )
        return self._record(caller, pipeline, values, "cluster", store_url, run_id=run_id, external=name)

    def _record(
        self,
        caller: str,
        pipeline: Pipeline,
        values: dict[str, Any],
        target: str,
        store_url: str,
        run_id: str | None = None,
        external: str | None = None,
        spec: dict[str, Any] | None = None,
    ) -> RunRecord:
        """Add a new run, its steps pending, to the history."""
        run = RunRecord(
            id=run_id or _run_id(pipeline),
            user=caller,
            path=pipeline.path,
            pipeline=pipeline.name,
            status="queued",
            target=target,
            parameters=values,
            store=store_url,
            created=now(),
            external=external,
        )
        return self.history.create(run, [step.name for step in pipeline.steps], spec)

    def list_runs(self, caller: str) -> list[RunRecord]:
        """The caller's runs, newest first; an admin's lists everyone's."""
        runs = self.history.list(None if self.settings.is_admin(caller) else caller)
        return [self._with_cluster_state(run) for run in runs]

    def get_run(self, caller: str, run_id: object) -> RunRecord:
        if not isinstance(run_id, str) or not run_id:
            raise InvalidInput("run id must be a string", field="id")
        try:
            run = self.history.get(run_id)
        except NotFound:
            run = None
        if run is None or not access.may_read(self.settings, caller, run.user):
            raise NotFound(f"user {caller!r} has no pipeline run {run_id!r}", field="id")
        return self._with_cluster_state(run)

    async def wait(self, caller: str, run_id: str) -> RunRecord:
        """Until a local run driven here has settled; the final record."""
        run = self.get_run(caller, run_id)
        handle = self._runs.get(run.id)
        if handle is not None:
            await handle.wait()
        return self.get_run(caller, run_id)

    async def cancel(self, caller: str, run_id: object) -> RunRecord:
        """Stop a run: kill its running steps' kernels (local) or terminate its Workflow (cluster)."""
        run = self.get_run(caller, run_id)
        if run.status not in ACTIVE_RUN:
            raise Conflict(f"run {run.id!r} already {run.status}; there is nothing to cancel", field="id")
        if run.target == "cluster":
            assert self.cluster is not None
            await self.cluster.cancel(run.user, run.id)
            return self.get_run(caller, run.id)
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
        return self.get_run(caller, run.id)

    def executed_notebook(self, caller: str, run_id: object, step: object) -> NotebookNode:
        """The executed step notebook from the run's artifact store, as Jupyter's contents API
        serves a notebook: each multi-line string one string (the file splits them into lists of
        lines, which JupyterLab's notebook model would show joined by commas)."""
        run = self.get_run(caller, run_id)
        if not isinstance(step, str):
            raise InvalidInput("step must be a step name", field="step")
        record = run.step(step)
        if not record.notebook:
            raise NotFound(
                f"step {step!r} of run {run.id!r} has no executed notebook ({record.status})", field="step"
            )
        return nbformat.reads(open_store(run.store, self.storage).get(record.notebook), as_version=4)

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
        if self.cluster is not None:
            await self.cluster.close()

    # -- cluster runs: their state is the Workflow's, read from the informer cache ----------------

    def _with_cluster_state(self, run: RunRecord) -> RunRecord:
        if run.target != "cluster" or self.cluster is None:
            return run
        try:
            workflow = self.cluster.get(run.user, run.id)
        except NotFound:
            return run
        return _merge_workflow(run, workflow)


def _pipeline_of_content(path: str, notebook: object) -> Pipeline:
    """The pipeline of notebook content sent in a request, named by `path`."""
    if not isinstance(notebook, Mapping):
        raise InvalidInput("notebook must be nbformat JSON (an object)", field="notebook")
    return build_pipeline(notebook, path)


def _merge_workflow(run: RunRecord, workflow: WorkflowRun) -> RunRecord:
    steps = []
    for step in run.steps:
        state = workflow.steps.get(step.name)
        if state is None:
            steps.append(step)
            continue
        steps.append(
            StepRecord(
                name=step.name,
                status=state.status,
                started=state.started,
                finished=state.finished,
                duration=_seconds_between(state.started, state.finished),
                attempts=state.attempts,
                error={"message": state.message} if state.message and state.status == "failed" else None,
                notebook=f"runs/{run.id}/steps/{step.name}.ipynb" if state.finished else None,
            )
        )
    return run.evolve(
        status=workflow.status,
        started=workflow.started,
        finished=workflow.finished,
        error=workflow.message if workflow.status == "failed" else None,
        steps=tuple(steps),
    )


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    try:
        parse = [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in (start, end)]
    except ValueError:
        return None
    return (parse[1] - parse[0]).total_seconds()


def _run_id(pipeline: Pipeline) -> str:
    """Unique, sortable, and a valid Workflow label / store key segment."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{pipeline.name[:40].rstrip('-')}-{stamp}-{secrets.token_hex(3)}"

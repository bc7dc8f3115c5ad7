"""Notebook pipelines as users see them: graphs, runs, their history, cancel, executed notebooks.

REST handlers and the CLI call this. Paths are relative to the Jupyter root dir (the server's
`root_dir`; the CLI's working directory) and never leave it. Runs belong to the user who started
them: a user sees and cancels only their own, admins everyone's. A run executes on a target behind
one protocol (`targets.RunTarget`): this machine (`local.target`, always here) or a cluster
(`kubernetes.target`, Argo Workflows, and `kubernetes.kfp_target`, Kubeflow Pipelines, given on the
kubernetes backend); all are recorded in the same history.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
from nbformat import NotebookNode

from cube_jupyter import access
from cube_jupyter.errors import BackendUnavailable, Conflict, CubeError, InvalidInput, NotFound
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.dag import build_pipeline, load_notebook
from cube_jupyter.pipelines.history import ACTIVE_RUN, RunHistory, RunRecord, now
from cube_jupyter.pipelines.local.target import LocalRunTarget
from cube_jupyter.pipelines.model import Pipeline, PipelineError
from cube_jupyter.pipelines.stepnb import validate_parameters
from cube_jupyter.pipelines.tags import vocabulary as tag_vocabulary
from cube_jupyter.pipelines.targets import LOGICAL_DATE, NewRun, Observer, RunRequest, RunTarget, new_run_id
from cube_jupyter.storage import open_store

if TYPE_CHECKING:
    from cube_jupyter.pipelines.local.gpus import StepGpus
    from cube_jupyter.pipelines.local.workers import WorkerPool

LOG = logging.getLogger(__name__)


class PipelineService:
    def __init__(
        self,
        settings: PipelineSettings,
        root_dir: str | Path,
        *,
        history: RunHistory | None = None,
        pool: WorkerPool | None = None,
        pool_size: int | None = None,
        cluster: RunTarget | None = None,
        kfp: RunTarget | None = None,
        multi_user: bool = False,
        gpus: StepGpus | None = None,
    ) -> None:
        """`cluster` and `kfp` are the cluster targets (Argo's, KFP's: the composition root's, on the
        kubernetes backend).
        `multi_user`: a workbench many users reach (trusted-header identity), where each reads only
        their own files (`access.readable_file`) and runs code here only as
        `access.require_local_execution` allows."""
        self.settings = settings
        self.multi_user = multi_user
        self.root_dir = Path(root_dir).expanduser().resolve()
        self.history = history or RunHistory.in_state_dir(settings.state_dir)
        recovered = self.history.recover()
        if recovered:
            LOG.warning(
                "%d pipeline run(s) were interrupted (the process running them exited); they can be "
                "resumed: %s",
                len(recovered),
                ", ".join(recovered),
            )
        self.local = LocalRunTarget(
            settings,
            self.history,
            self.root_dir,
            pool=pool,
            pool_size=pool_size,
            multi_user=multi_user,
            gpus=gpus,
        )
        self.targets: dict[str, RunTarget] = {"local": self.local}
        if cluster is not None:
            self.targets["cluster"] = cluster
        if kfp is not None:
            self.targets["kfp"] = kfp
        self.off: dict[str, str] = {}  # why a target that did not start is off

    async def start(self) -> None:
        """Start each target; one that cannot start (a cluster without Argo) is left out, said why in
        the log, and the rest serve on."""
        for name, target in list(self.targets.items()):
            try:
                await target.start()
            except CubeError as exc:
                LOG.error("cube-jupyter: %s pipeline runs are off: %s", name, exc.message)
                del self.targets[name]
                self.off[name] = exc.message

    def target_names(self) -> tuple[str, ...]:
        """Every target configured here, those that did not start included (a run asking for one is
        told why it is off)."""
        return (*self.targets, *self.off)

    def config(self) -> dict[str, Any]:
        return {
            "backend": self.settings.workbench.backend,
            "targets": list(self.targets),
            "tags": tag_vocabulary(),
        }

    # -- notebooks ---------------------------------------------------------------------------------

    def resolve(self, caller: str, path: object) -> Path:
        """The notebook file `path` names among the files `caller` may read (field "path")."""
        return access.readable_file(
            self.settings, caller, self.root_dir, path, "path", multi_user=self.multi_user
        )

    def load(self, caller: str, path: object) -> Pipeline:
        return self._load(self.resolve(caller, path), path)

    def _load(self, full: Path, path: object) -> Pipeline:
        assert isinstance(path, str)
        return build_pipeline(load_notebook(full), path)

    def graph(self, caller: str, path: object) -> Pipeline:
        full = self.resolve(caller, path)
        pipeline = self._load(full, path)
        self.local.warm_for(caller, pipeline, full.parent)
        return pipeline

    def graph_of_content(self, caller: str, path: object, notebook: object) -> Pipeline:
        """The pipeline of unsaved notebook content (the Lab panel's view of what is on screen)."""
        access.file_path(path, "path")  # only names the content: nothing is read from the disk
        assert isinstance(path, str)
        pipeline = _pipeline_of_content(path, notebook)
        try:
            folder = self.resolve(caller, path).parent
        except CubeError:
            return pipeline  # a notebook not saved yet: nothing to warm a worker in
        self.local.warm_for(caller, pipeline, folder)
        return pipeline

    # -- runs --------------------------------------------------------------------------------------

    async def start_run(
        self, caller: str, request: RunRequest, *, observer: Observer | None = None
    ) -> RunRecord:
        """Check and start a run; it goes on in the background (local) or on the cluster."""
        target = self._target(request.target)
        target.admit(caller, request)
        full = self.resolve(caller, request.path)  # read or not, the caller's: the steps run in its folder
        pipeline = (
            self._load(full, request.path)
            if request.notebook is None
            else _pipeline_of_content(request.path, request.notebook)
        )
        _require_steps(pipeline)
        given = dict(request.parameters)
        if request.logical_date is not None and any(p.name == LOGICAL_DATE for p in pipeline.parameters):
            given.setdefault(LOGICAL_DATE, request.logical_date)
        values = validate_parameters(pipeline, given)

        def record(
            store_url: str,
            *,
            run_id: str | None = None,
            external: str | None = None,
            spec: dict[str, Any] | None = None,
        ) -> RunRecord:
            run = RunRecord(
                id=run_id or new_run_id(pipeline),
                user=caller,
                path=pipeline.path,
                pipeline=pipeline.name,
                status="queued",
                target=request.target,
                parameters=values,
                store=store_url,
                created=now(),
                external=external,
                schedule=request.schedule,
                logical_date=request.logical_date,
            )
            return self.history.create(run, [step.name for step in pipeline.steps], spec)

        return await target.launch(NewRun(caller, request, pipeline, values, full.parent, record), observer)

    def snapshot(self, caller: str, request: RunRequest) -> Mapping[str, Any]:
        """The notebook at `request.path` (or `request.notebook`, a snapshot taken before), checked
        now as `start_run` will check each scheduled run of it (the target admits the caller, the
        file is still theirs, it is a pipeline, the parameters fit): what a schedule saves and its
        runs execute, so an edit in progress never runs."""
        self._target(request.target).admit(caller, request)
        full = self.resolve(caller, request.path)
        notebook = load_notebook(full) if request.notebook is None else request.notebook
        pipeline = build_pipeline(notebook, request.path)
        _require_steps(pipeline)
        validate_parameters(pipeline, dict(request.parameters))
        return notebook

    async def resume_run(self, caller: str, run_id: object, *, observer: Observer | None = None) -> RunRecord:
        """Run a failed, cancelled or interrupted local run again from where it stopped (its
        completed steps kept); the run becomes this process's to drive."""
        run = self.get_run(caller, run_id)
        if run.target != "local":
            raise Conflict(
                f"run {run.id!r} is an Argo Workflow: it goes on whatever happens to the workbench; "
                "retry it with Argo",
                field="id",
            )
        return await self.local.resume(caller, run, observer)

    def _target(self, name: str) -> RunTarget:
        target = self.targets.get(name)
        if name in self.off:
            raise BackendUnavailable(f"{name} pipeline runs are off: {self.off[name]}")
        if target is None:
            raise InvalidInput(
                f"target {name!r} is not offered here ({', '.join(self.targets)}); target 'cluster' "
                "needs the kubernetes backend (c.CubeWorkbench.backend = 'kubernetes') with Argo Workflows, "
                "target 'kfp' that backend with Kubeflow Pipelines (c.CubePipelines.cluster_target)",
                field="target",
            )
        return target

    def list_runs(self, caller: str) -> list[RunRecord]:
        """The caller's runs, newest first; an admin's lists everyone's."""
        runs = self.history.list(None if self.settings.is_admin(caller) else caller)
        return [self._current(run) for run in runs]

    def get_run(self, caller: str, run_id: object) -> RunRecord:
        if not isinstance(run_id, str) or not run_id:
            raise InvalidInput("run id must be a string", field="id")
        try:
            run = self.history.get(run_id)
        except NotFound:
            run = None
        if run is None or not access.may_read(self.settings, caller, run.user):
            raise NotFound(f"user {caller!r} has no pipeline run {run_id!r}", field="id")
        return self._current(run)

    def _current(self, run: RunRecord) -> RunRecord:
        target = self.targets.get(run.target)
        return run if target is None else target.current(run)

    async def wait(self, caller: str, run_id: str) -> RunRecord:
        """Until a local run driven here has settled; the final record."""
        await self.local.wait(self.get_run(caller, run_id))
        return self.get_run(caller, run_id)

    async def cancel(self, caller: str, run_id: object) -> RunRecord:
        """Stop a run: kill its running steps' kernels (local) or terminate its Workflow (cluster)."""
        run = self.get_run(caller, run_id)
        if run.status not in ACTIVE_RUN:
            raise Conflict(f"run {run.id!r} already {run.status}; there is nothing to cancel", field="id")
        await self._target(run.target).cancel(run)
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
        return nbformat.reads(open_store(run.store, self.settings.storage).get(record.notebook), as_version=4)

    async def close(self) -> None:
        """Stop every target: local runs still going are recorded as cancelled."""
        for target in self.targets.values():
            await target.close()


def _require_steps(pipeline: Pipeline) -> None:
    if not pipeline.steps:
        raise PipelineError(
            f"{pipeline.path}: the notebook has no steps; tag a cell 'step:NAME'", field="path"
        )


def _pipeline_of_content(path: str, notebook: object) -> Pipeline:
    """The pipeline of notebook content sent in a request, named by `path`."""
    if not isinstance(notebook, Mapping):
        raise InvalidInput("notebook must be nbformat JSON (an object)", field="notebook")
    return build_pipeline(notebook, path, content_field="notebook")

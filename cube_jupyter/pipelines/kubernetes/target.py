"""Runs on the cluster, as Argo Workflows: launched by `ClusterPipelineRuns`, followed through its
informer, and recorded in the same history as local runs, their steps' states merged in as Argo
reports them. A run goes on whatever happens to the workbench."""

from __future__ import annotations

from cube_jupyter.errors import NotFound
from cube_jupyter.fields import seconds_between
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.labels import LOGICAL_DATE_LABEL, SCHEDULE_LABEL, logical_date_label
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.history import RunRecord, StepRecord
from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns, WorkflowRun
from cube_jupyter.pipelines.targets import NewRun, Observer, RunRequest, new_run_id


class ArgoRunTarget:
    def __init__(self, settings: PipelineSettings, cluster: Cluster | None = None) -> None:
        self.settings = settings
        self.runs = ClusterPipelineRuns(settings, cluster)

    async def start(self) -> None:
        await self.runs.start()

    async def close(self) -> None:
        await self.runs.close()

    def admit(self, caller: str, request: RunRequest) -> None:
        """Every user runs in their own namespace, as their Profile or the template says."""

    async def launch(self, run: NewRun, observer: Observer | None = None) -> RunRecord:
        run_id = new_run_id(run.pipeline)
        store_url = run.request.store or self.settings.storage.url
        name = await self.runs.submit(
            run.pipeline,
            run.caller,
            run_id,
            store_url or None,
            run.values,
            parallel=run.request.parallel,
            labels=_scheduled_labels(run.request),
        )
        return run.record(store_url, run_id=run_id, external=name)

    async def cancel(self, run: RunRecord) -> None:
        """Terminate the run's Workflow, as `argo terminate` does."""
        await self.runs.cancel(run.user, run.id)

    def current(self, run: RunRecord) -> RunRecord:
        try:
            workflow = self.runs.get(run.user, run.id)
        except NotFound:
            return run
        return _merge_workflow(run, workflow)


def _scheduled_labels(request: RunRequest) -> dict[str, str]:
    """A scheduled run's schedule and logical time, as the Workflows Argo's CronWorkflow starts carry
    them too: the run for one logical time of a schedule is found by label, whoever started it."""
    labels = {}
    if request.schedule is not None:
        labels[SCHEDULE_LABEL] = request.schedule
    if request.logical_date is not None:
        labels[LOGICAL_DATE_LABEL] = logical_date_label(request.logical_date)
    return labels


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
                duration=seconds_between(state.started, state.finished),
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

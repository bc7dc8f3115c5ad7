"""Runs on Kubeflow Pipelines (target `kfp`): the notebook compiled to KFP's IR, uploaded as a version
of the notebook's KFP pipeline, run in the user's namespace through KFP's API as that user, and
recorded in the same history as local and Argo runs, KFP's run and task states merged in as it is read.

One KFP pipeline per notebook (named after its path); one version per compiled snapshot, named by the
IR's content hash, so running the same snapshot again reuses its version. KFP is asked about a run at
most once per `POLL_SECONDS` (a run view polls often), and never again once the run has ended.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

from cube_jupyter.errors import Conflict, CubeError, NotServed
from cube_jupyter.fields import seconds_between
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.discovery import missing_crd
from cube_jupyter.kube.namespaces import UserNamespaces
from cube_jupyter.kube.resources import ResourceType, register_resource_type
from cube_jupyter.pipelines.config import PIPELINE_ROOT_SCHEMES, PipelineSettings
from cube_jupyter.pipelines.history import RunRecord, StepRecord
from cube_jupyter.pipelines.kubernetes.kfp import compile_kfp
from cube_jupyter.pipelines.kubernetes.kfp_api import KfpApi, Obj, run_spec
from cube_jupyter.pipelines.model import Pipeline
from cube_jupyter.pipelines.stepnb import validate_parameters
from cube_jupyter.pipelines.targets import LOGICAL_DATE, NewRun, Observer, RunRequest, new_run_id

log = logging.getLogger(__name__)

# The CRD only KFP installs: a cluster serving it has KFP (`cluster_target = "auto"`).
SCHEDULED_WORKFLOWS = ResourceType("kubeflow.org/v1beta1", "ScheduledWorkflow", "scheduledworkflows")
register_resource_type(SCHEDULED_WORKFLOWS)
EXPERIMENT = "Default"  # where runs go in each namespace, as KFP's SDK puts runs without one
POLL_SECONDS = 5.0
# KFP's RuntimeState → the history's run and step statuses.
RUN_STATUS = {
    "PENDING": "queued",
    "RUNNING": "running",
    "PAUSED": "running",
    "SUCCEEDED": "succeeded",
    "SKIPPED": "succeeded",
    "FAILED": "failed",
    "CANCELING": "cancelled",  # nothing more will run, whatever is still being stopped
    "CANCELED": "cancelled",
}
TASK_STATUS = {**RUN_STATUS, "PENDING": "pending", "SKIPPED": "skipped"}
FINAL_STATES = {"SUCCEEDED", "SKIPPED", "FAILED", "CANCELED"}
# `compile_kfp` names each step's component `step_<name>`, whose task KFP shows as `step-<name>`.
TASK_PREFIX = "step-"
# KFP's unset timestamps.
EPOCH = "1970-01-01T00:00:00Z"


@dataclass(frozen=True)
class _Polled:
    at: float  # the clock's time of the read
    run: Obj | None  # KFP's run, None when never read


class KfpRunTarget:
    def __init__(
        self,
        settings: PipelineSettings,
        cluster: Cluster,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` times the reads of KFP (monotonic seconds)."""
        self.settings = settings
        self.config = settings.pipelines
        self.cluster = cluster
        self.api = KfpApi.from_settings(self.config)
        self.namespaces = UserNamespaces(settings, cluster)
        self.clock = clock
        self._polled: dict[str, _Polled] = {}  # by history run id
        self._reading: dict[str, asyncio.Task[None]] = {}  # background reads of KFP, by run id

    async def start(self) -> None:
        """With `cluster_target = "auto"`, only on a cluster with KFP; wait for the Profiles cache."""
        if self.config.cluster_target == "auto":
            api_version, kind = SCHEDULED_WORKFLOWS.api_version, SCHEDULED_WORKFLOWS.kind
            served = await self.cluster.discover([api_version])
            if not served.serves(api_version, kind):
                raise NotServed(
                    f"Kubeflow Pipelines runs need KFP ({missing_crd(api_version, kind)}); "
                    "CubePipelines.cluster_target is 'auto', so cluster runs are Argo's (target 'cluster')"
                )
        await self.cluster.start(self.namespaces.informers, 30.0, " (Kubeflow Profiles)")

    async def close(self) -> None:
        for reading in self._reading.values():
            reading.cancel()
        self.api.close()

    def admit(self, caller: str, request: RunRequest) -> None:
        """Every user runs in their own namespace, as KFP's multi-user mode checks on each call."""

    async def launch(self, run: NewRun, observer: Observer | None = None) -> RunRecord:
        namespace = await asyncio.to_thread(self.namespaces.require, run.caller)
        package = await asyncio.to_thread(compile_kfp, run.pipeline, self.settings, parameters=run.values)
        run_id = new_run_id(run.pipeline)
        store_url = run.request.store or self.settings.storage.url
        created = await asyncio.to_thread(self._create, run, namespace, package, run_id, store_url)
        record = run.record(store_url, run_id=run_id, external=created["run_id"])
        self._polled[run_id] = _Polled(self.clock(), created)
        return self._merged(record, created)

    def _create(self, run: NewRun, namespace: str, package: str, run_id: str, store_url: str) -> Obj:
        spec = upload(
            self.api, self.settings, run.caller, namespace, run.pipeline, package, run.values, store_url
        )
        return self.api.create_run(run.caller, run_id, spec)

    async def cancel(self, run: RunRecord) -> None:
        """Terminate the KFP run, then read it: the caller sees it cancelling."""
        if run.external is None:
            raise Conflict(f"run {run.id!r} has no KFP run to terminate", field="id")
        await asyncio.to_thread(self.api.terminate_run, run.user, run.external)
        polled = self._polled.get(run.id)
        self._polled[run.id] = _Polled(self.clock(), await asyncio.to_thread(self._read, run, polled))

    def current(self, run: RunRecord) -> RunRecord:
        """The run as KFP last said, read again when older than POLL_SECONDS: in the background where
        an event loop runs (the workbench: a slow KFP never holds a request up), else now (the CLI)."""
        if run.external is None:
            return run
        polled = self._polled.get(run.id)
        ended = polled is not None and polled.run is not None and polled.run.get("state") in FINAL_STATES
        if polled is None or (not ended and self.clock() - polled.at >= POLL_SECONDS):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._polled[run.id] = _Polled(self.clock(), self._read(run, polled))
            else:
                if run.id not in self._reading:
                    self._reading[run.id] = loop.create_task(self._read_later(run, polled))
            polled = self._polled.get(run.id)
        return run if polled is None or polled.run is None else self._merged(run, polled.run)

    async def _read_later(self, run: RunRecord, polled: _Polled | None) -> None:
        try:
            read = await asyncio.to_thread(self._read, run, polled)
            self._polled[run.id] = _Polled(self.clock(), read)
        finally:
            self._reading.pop(run.id, None)

    def _read(self, run: RunRecord, polled: _Polled | None) -> Obj | None:
        """KFP's run now; when KFP cannot say, what it said last (the next read asks again)."""
        assert run.external is not None
        try:
            return self.api.get_run(run.user, run.external)
        except CubeError as exc:
            log.warning("cube-jupyter: reading KFP run %s of %s: %s", run.external, run.id, exc.message)
            return None if polled is None else polled.run

    def _merged(self, run: RunRecord, kfp_run: Obj) -> RunRecord:
        link = f"{self.config.kfp_ui_url}/#/runs/details/{run.external}" if self.config.kfp_ui_url else None
        return merge_run(run, kfp_run).evolve(link=link)


def upload(
    api: KfpApi,
    settings: PipelineSettings,
    user: str,
    namespace: str,
    pipeline: Pipeline,
    package: str,
    values: dict[str, Any],
    store_url: str,
) -> Obj:
    """Upload what is not in KFP yet (the notebook's pipeline, the version of `package`, the
    namespace's experiment); the `run_spec` a run or a recurring run of it gives KFP."""
    name = pipeline_name(pipeline)
    found = _get_or_create(
        lambda: api.find_pipeline(user, namespace, name),
        lambda: api.upload_pipeline(user, namespace, name, package),
    )
    version_name = f"{name[:40]}-{hashlib.sha256(package.encode()).hexdigest()[:16]}"
    version = _get_or_create(
        lambda: api.find_version(user, found["pipeline_id"], version_name),
        lambda: api.upload_version(user, found["pipeline_id"], version_name, package),
    )
    experiment = _get_or_create(
        lambda: api.find_experiment(user, namespace, EXPERIMENT),
        lambda: api.create_experiment(user, namespace, EXPERIMENT),
    )
    declared = root_parameters(package)
    return run_spec(
        version,
        {key: value for key, value in values.items() if key in declared},
        pipeline_root=settings.pipelines.pipeline_root or _object_store(store_url),
        experiment_id=experiment["experiment_id"],
    )


def scheduled_spec(
    api: KfpApi,
    settings: PipelineSettings,
    user: str,
    namespace: str,
    pipeline: Pipeline,
    parameters: dict[str, Any],
    logical_date: str,
) -> Obj:
    """The `run_spec` of a recurring run of `pipeline` (a schedule's snapshot), uploaded as `user`:
    its `logical_date` parameter, when the notebook has one, is `logical_date` (KFP's placeholder for
    the time it scheduled each run for)."""
    given = dict(parameters)
    if any(p.name == LOGICAL_DATE for p in pipeline.parameters):
        given[LOGICAL_DATE] = logical_date
    values = validate_parameters(pipeline, given)
    package = compile_kfp(pipeline, settings, parameters=values)
    return upload(api, settings, user, namespace, pipeline, package, values, settings.storage.url)


def pipeline_name(pipeline: Pipeline) -> str:
    """One KFP pipeline per notebook: its name and a hash of its path (same-named notebooks in two
    folders are two pipelines)."""
    digest = hashlib.sha256(pipeline.path.encode()).hexdigest()[:8]
    return f"{pipeline.name[:50].rstrip('-')}-{digest}"


def root_parameters(package: str) -> set[str]:
    """The parameters the IR's pipeline takes: KFP refuses a run giving any other."""
    spec = next(yaml.safe_load_all(package))
    inputs = ((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}
    return set(inputs)


def _object_store(url: str) -> str | None:
    """The run's store as KFP's pipeline root, when KFP can write there (else KFP's own default)."""
    return url if urlsplit(url).scheme in PIPELINE_ROOT_SCHEMES else None


def _get_or_create(find: Callable[[], Obj | None], create: Callable[[], Obj]) -> Obj:
    """What `find` finds, else what `create` makes; made meanwhile by another launch, found again."""
    found = find()
    if found is not None:
        return found
    try:
        return create()
    except Conflict:
        again = find()
        if again is None:
            raise
        return again


def merge_run(run: RunRecord, kfp_run: Obj) -> RunRecord:
    """The history's record with KFP's run state and each step's task state (a task is named after
    its step; a retried task has several details, the latest one counts)."""
    state = str(kfp_run.get("state") or "PENDING")
    tasks: dict[str, list[Obj]] = {}
    for task in (kfp_run.get("run_details") or {}).get("task_details") or []:
        tasks.setdefault(str(task.get("display_name")), []).append(task)
    steps = []
    for step in run.steps:
        attempts = sorted(tasks.get(TASK_PREFIX + step.name, []), key=lambda t: str(t.get("create_time")))
        steps.append(step if not attempts else _step(step.name, attempts))
    status = RUN_STATUS.get(state, "queued")
    return run.evolve(
        status=status,
        started=_stamp(kfp_run.get("scheduled_at")) if status != "queued" else None,
        finished=_stamp(kfp_run.get("finished_at")) if state in FINAL_STATES else None,
        error=_error(kfp_run) if status == "failed" else None,
        steps=tuple(steps),
    )


def _step(name: str, attempts: list[Obj]) -> StepRecord:
    task = attempts[-1]
    status = TASK_STATUS.get(str(task.get("state") or "PENDING"), "pending")
    started, finished = _stamp(task.get("start_time")), _stamp(task.get("end_time"))
    message = _error(task)
    return StepRecord(
        name=name,
        status=status,
        started=started,
        finished=finished,
        duration=seconds_between(started, finished),
        attempts=len(attempts),
        error={"message": message} if message and status == "failed" else None,
    )


def _stamp(value: object) -> str | None:
    return str(value) if value and value != EPOCH else None


def _error(obj: Obj) -> str | None:
    return str((obj.get("error") or {}).get("message") or "") or None

"""The composition root: the one place the workbench's services are built from `Settings` and wired
to each other, for the Jupyter server extension and for every CLI command alike.

Features never import each other; what one needs of another is handed to it here: the GPU ledger
counts the notebook backend's servers and the job backend's jobs (one ledger, one per-user lock,
shared with the workbench server, its notebook servers and the CLI through the state directory), the
GPU report names pods and kernels after the notebook backend's servers, pipelines get the cluster
targets on the kubernetes backend (Argo's, and KFP's as `CubePipelines.cluster_target` says), and
schedules the clusters that fire them (Argo's CronWorkflows, KFP's recurring runs of what the pipelines
feature compiles and uploads). Every feature on the cluster shares one API client and one informer
registry (`kube.cluster.Cluster`).

A service is built when first asked for, complete (nothing is patched into it afterwards), so a CLI
command builds, and imports, only what it uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cube_jupyter.config import Settings
from cube_jupyter.errors import CubeError, InvalidInput
from cube_jupyter.ledger import GpuLedger

if TYPE_CHECKING:
    from cube_jupyter.gpu.attribution import KernelProcess
    from cube_jupyter.gpu.model import QueuedGpuJob
    from cube_jupyter.gpu.service import ChildServer, GpuService, JobRef, ServerRef
    from cube_jupyter.jobs.backend import JobBackend
    from cube_jupyter.jobs.service import JobService
    from cube_jupyter.kube.cluster import Cluster
    from cube_jupyter.local.admission import QueuePolicy, QueueSide
    from cube_jupyter.notebooks.backend import NotebookBackend
    from cube_jupyter.notebooks.service import NotebookService
    from cube_jupyter.pipelines.history import RunHistory
    from cube_jupyter.pipelines.kubernetes.kfp_api import KfpApi
    from cube_jupyter.pipelines.model import Pipeline
    from cube_jupyter.pipelines.service import PipelineService
    from cube_jupyter.pipelines.targets import RunRequest
    from cube_jupyter.process_owners import OwnerSource
    from cube_jupyter.schedules.scheduler import Launcher, Outcome, ScheduledRun
    from cube_jupyter.schedules.service import ClusterMirror, ScheduleService
    from cube_jupyter.schedules.store import Schedule

log = logging.getLogger(__name__)


class Workbench:
    """The services of one process, built on first use from one `Settings`.

    `root_dir` is where requests' paths are relative to (the Jupyter root, or the CLI's working
    directory); `base_url` the Jupyter server's (local notebook servers are routed under it);
    `multi_user` whether a trusted header names many callers; `kernels` lists the server's own kernels
    (for the GPU report); `pool_size` bounds the local pipeline workers; `cluster_runs` offers the
    cluster target for pipeline runs (kubernetes backend); `cluster` is a connection to use instead of
    the one the settings name (the tests' API server); `one_command` says the process runs one CLI
    command (the cluster reads inline what a server reads in the background)."""

    def __init__(
        self,
        settings: Settings,
        *,
        root_dir: str | None = None,
        base_url: str = "/",
        multi_user: bool = False,
        kernels: Callable[[], list[KernelProcess]] | None = None,
        pool_size: int | None = None,
        cluster_runs: bool = True,
        cluster: Cluster | None = None,
        one_command: bool = False,
    ) -> None:
        self.settings = settings
        self.one_command = one_command
        self._cluster = cluster
        self.root_dir = root_dir
        self.base_url = base_url
        self.multi_user = multi_user
        self.kernels = kernels
        self.pool_size = pool_size
        self.cluster_runs = cluster_runs
        self._started: dict[str, Callable[[], Awaitable[None]]] = {}  # closed in reverse

    # -- shared infrastructure ---------------------------------------------------------------------

    @cached_property
    def cluster(self) -> Cluster | None:
        """The cluster every Kubernetes backend of this process shares; None on the local backend,
        which never loads the Kubernetes client."""
        if self.settings.workbench.backend != "kubernetes":
            return None
        if self._cluster is not None:
            return self._cluster
        from cube_jupyter.kube.cluster import Cluster

        return Cluster(self.settings, one_command=self.one_command)

    @cached_property
    def ledger(self) -> GpuLedger:
        """The one GPU ledger: servers, unfinished jobs and running local pipeline steps, under one
        per-user lock; on the local backend a file lock every process of this machine takes
        (workbench, user servers, CLI)."""
        from cube_jupyter.jobs.backend import gpu_holders as job_holders
        from cube_jupyter.notebooks.backend import gpu_holders as server_holders
        from cube_jupyter.pipelines.local.gpus import gpu_holders as step_holders

        lock_dir = self.settings.state_dir / "locks" if self.settings.local else None
        return GpuLedger(
            self.settings.gpu_quota,
            [
                server_holders(self.notebook_backend),
                job_holders(self.job_backend),
                step_holders(self.pipeline_history),
            ],
            lock_dir=lock_dir,
        )

    @cached_property
    def pipeline_history(self) -> RunHistory:
        """The pipeline runs of this machine's state directory (the GPU ledger reads their steps)."""
        from cube_jupyter.pipelines.history import RunHistory

        return RunHistory.in_state_dir(self.settings.state_dir)

    def _machine_queue(self, max_queued: int, *others: str) -> QueuePolicy:
        """The machine's one queue as a feature sees it: the rules every feature shares (`CubeJobs`,
        the GPU quota), its own bound, the one ledger's count and the other features' sides."""
        from cube_jupyter.jobs.local.backend import queue_rules
        from cube_jupyter.local.admission import QueuePolicy

        return QueuePolicy(
            queue_rules(self.settings.jobs),
            cpu_slots=self.settings.jobs.jobs.cpu_slots,
            max_queued=max_queued,
            gpus_held=lambda user: self.ledger.held(user),
            others=self._queue_sides(*others),
        )

    def _queue_sides(self, *features: str) -> list[QueueSide]:
        """The sides of this machine's one queue (`local.admission`) of the features named, read
        when a pass runs (the backends are built on first use, and read each other)."""
        from cube_jupyter.local.admission import deferred

        return [deferred(functools.partial(self._queue_side, feature)) for feature in features]

    def _queue_side(self, feature: str) -> QueueSide:
        """'notebooks' (GPU servers), 'jobs' (training) or 'steps' (GPU pipeline steps, waiting and
        running) as the machine's queue sees them; only the backend named is built, and a cluster
        backend has no side here (nothing of it is on this machine)."""
        from cube_jupyter.jobs.local.backend import LocalJobBackend
        from cube_jupyter.local.admission import QueueSide
        from cube_jupyter.notebooks.backend import QueueingBackend
        from cube_jupyter.pipelines.local.gpus import queue_side as step_queue_side

        if feature == "steps":
            return step_queue_side(self.pipeline_history)
        backend = self.notebook_backend if feature == "notebooks" else self.job_backend
        if isinstance(backend, (QueueingBackend, LocalJobBackend)):
            return backend.queue_side()
        return QueueSide(waiting=tuple, held=tuple)

    # -- feature backends --------------------------------------------------------------------------

    @cached_property
    def notebook_backend(self) -> NotebookBackend:
        """The notebook servers: the central workbench's to supervise; a user server's only to read
        (the GPU quota counts its owner's servers)."""
        settings = self.settings.notebooks
        if settings.workbench.backend == "kubernetes":
            from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend

            return KubernetesNotebookBackend(settings, self.cluster)
        from cube_jupyter.notebooks.local.backend import LocalNotebookBackend

        # Local servers are reached under the Jupyter server's base URL, through its path router. GPU
        # servers wait in the machine's one queue, by the rules the jobs' side applies too.
        queue = self._machine_queue(settings.spawner.max_queued_servers_per_user, "jobs", "steps")
        return LocalNotebookBackend(settings, base_url=self.base_url, queue=queue)

    @cached_property
    def job_backend(self) -> JobBackend:
        """Training, tuning and serving: local processes, or the operators' objects. Scripts and
        notebooks a spec names are found under `root_dir` (cluster jobs ship them to the store)."""
        settings = self.settings.jobs
        if settings.workbench.backend == "kubernetes":
            from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend

            return KubernetesJobBackend(settings, self.cluster, root_dir=self.root_dir)
        from cube_jupyter.jobs.local.backend import LocalJobBackend

        # The machine's one queue admits against the one ledger (read when it admits: the ledger
        # counts this backend), beside the servers and the running pipeline steps.
        return LocalJobBackend(
            settings,
            root_dir=self.root_dir,
            gpus_held=lambda user: self.ledger.held(user),
            others=self._queue_sides("notebooks", "steps"),
        )

    # -- services ----------------------------------------------------------------------------------

    @cached_property
    def notebooks(self) -> NotebookService:
        from cube_jupyter.notebooks.service import NotebookService

        return NotebookService(self.settings.notebooks, self.notebook_backend, self.ledger)

    @cached_property
    def jobs(self) -> JobService:
        from cube_jupyter.jobs.service import JobService

        return JobService(
            self.settings.jobs,
            self.job_backend,
            ledger=self.ledger,
            root_dir=self.root_dir,
            multi_user=self.multi_user,
        )

    @cached_property
    def pipelines(self) -> PipelineService:
        from cube_jupyter.pipelines.local.gpus import StepGpus
        from cube_jupyter.pipelines.service import PipelineService

        settings = self.settings.pipelines
        cluster = kfp = None
        if self.cluster is not None and self.cluster_runs:
            from cube_jupyter.pipelines.kubernetes.target import ArgoRunTarget

            cluster = ArgoRunTarget(settings, self.cluster)
            if settings.pipelines.cluster_target != "argo":  # "auto": when the cluster has KFP
                from cube_jupyter.pipelines.kubernetes.kfp_target import KfpRunTarget

                kfp = KfpRunTarget(settings, self.cluster)
        return PipelineService(
            settings,
            self.root_dir or Path.cwd(),
            pool_size=self.pool_size,
            cluster=cluster,
            kfp=kfp,
            multi_user=self.multi_user,
            history=self.pipeline_history,
            # GPU steps: the one ledger (quota, holders) and the machine's one queue (the jobs' and
            # servers' sides), asked for when a step first needs them
            gpus=StepGpus(
                self.pipeline_history,
                self.settings.state_dir,
                ledger=lambda: self.ledger,
                queue=lambda: self._machine_queue(0, "jobs", "notebooks"),
            ),
        )

    @cached_property
    def schedules(self) -> ScheduleService:
        """Schedules of notebooks (pipeline runs) and of training jobs; the workbench server runs
        their scheduler, a command only reads and writes them."""
        from cube_jupyter.schedules.service import ScheduleService
        from cube_jupyter.schedules.store import ScheduleStore

        launchers: dict[str, Launcher] = {
            "notebook": _ScheduledPipelines(self.pipelines),
            "training": _ScheduledTraining(self.jobs),
        }
        store = ScheduleStore.in_state_dir(self.settings.state_dir)
        mirrors: list[ClusterMirror] = []
        if self.cluster is not None and self.cluster_runs:  # Argo fires cluster notebook schedules
            from cube_jupyter.schedules.kubernetes.mirror import CronWorkflowMirror

            mirrors.append(
                CronWorkflowMirror(
                    self.settings.schedules, self.cluster, store, _ScheduledWorkflow(self.settings)
                )
            )
            if self.settings.pipelines.pipelines.cluster_target != "argo":  # and KFP those with target kfp
                from cube_jupyter.pipelines.kubernetes.kfp_api import KfpApi
                from cube_jupyter.schedules.kubernetes.recurring import RecurringRunMirror

                api = KfpApi.from_settings(self.settings.pipelines.pipelines)
                spec_of = _ScheduledKfpRun(self.settings, api)
                mirrors.append(RecurringRunMirror(self.settings.schedules, self.cluster, store, api, spec_of))
        renderer = functools.partial(_render_cron_workflow, self.settings)
        return ScheduleService(self.settings.schedules, store, launchers, mirrors=mirrors, renderer=renderer)

    @cached_property
    def gpu(self) -> GpuService:
        from cube_jupyter.gpu.service import GpuService

        # A user server reads its own GPUs, never its owner's other servers.
        servers = None if self.settings.user_server else _ServersForGpu(self.notebook_backend)
        notebooks = None if self.settings.user_server else self.notebook_backend
        queued = functools.partial(_queued_gpu_jobs, self.job_backend, notebooks)
        owners = self.process_owners()
        # The central workbench stops servers whose GPUs sit idle (CubeGPU.cull_idle_gpu_seconds), and
        # training jobs where the admin opted in (cull_idle_gpu_jobs).
        central = not self.settings.user_server
        return GpuService(
            self.settings.gpu,
            self.ledger,
            servers,
            self.kernels,
            queued=queued,
            owners=owners,
            stop_idle=self.notebooks.stop_idle if central else None,
            jobs=functools.partial(_running_training_jobs, self.job_backend) if central else None,
            stop_idle_job=self.jobs.stop_idle if central else None,
        )

    def process_owners(self) -> list[OwnerSource]:
        """Whose this machine's processes are, for the GPU report: local jobs' replicas, trials and
        model servers, and local pipeline runs' GPU steps (a cluster's are pods, named by DCGM)."""
        if not self.settings.local:
            return []
        from cube_jupyter.jobs.backend import process_owners as job_owners
        from cube_jupyter.pipelines.local.gpus import process_owners as step_owners

        return [job_owners(self.job_backend), step_owners(self.pipeline_history)]

    # -- for a short command -----------------------------------------------------------------------

    async def started_notebooks(self) -> NotebookService:
        """The notebook service for a command: the servers and the jobs the GPU quota counts too read,
        nothing supervised or culled (the workbench server does that)."""
        await self._start_backends(supervise_jobs=False)
        return self.notebooks

    async def started_jobs(self) -> JobService:
        """The job service for a command, its backend started (local training runs under the command
        that started it), and the servers the GPU quota counts read."""
        await self._start_backends(supervise_jobs=True)
        return self.jobs

    async def started_pipelines(self) -> PipelineService:
        await self._start("pipelines", self.pipelines.start, self.pipelines.close)
        return self.pipelines

    async def _start_backends(self, *, supervise_jobs: bool) -> None:
        servers, jobs = self.notebook_backend, self.job_backend
        await self._start("notebooks", lambda: servers.start(supervise=False), servers.close)
        await self._start("jobs", lambda: jobs.start(supervise=supervise_jobs), jobs.close)

    async def _start(
        self, part: str, start: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]]
    ) -> None:
        """Start `part` once; it is closed with the workbench."""
        if part not in self._started:
            await start()
            self._started[part] = close

    async def close(self) -> None:
        """Close what `started_*` started, in reverse, then the cluster connection; a failure is
        logged, never raised, so a command always ends."""
        for part, close in reversed(self._started.items()):
            try:
                await close()
            except Exception:  # closing must always complete
                log.exception("cube-jupyter: closing the %s failed", part)
        self._started.clear()
        if "cluster" in self.__dict__ and self.cluster is not None:
            await self.cluster.close()


@contextlib.asynccontextmanager
async def open_workbench(settings: Settings, **options: Any) -> AsyncIterator[Workbench]:
    """A `Workbench` for one command, closed when it is done."""
    workbench = Workbench(settings, one_command=True, **options)
    try:
        yield workbench
    finally:
        await workbench.close()


class _ServersForGpu:
    """The notebook backend as the GPU report reads it (`gpu.service.NotebookServers`)."""

    def __init__(self, backend: NotebookBackend) -> None:
        self.backend = backend

    def servers(self, user: str | None) -> list[ServerRef]:
        from cube_jupyter.gpu.service import ServerRef

        return [ServerRef(s.user, s.name, s.namespace) for s in self.backend.list_servers(user)]

    def running_children(self) -> list[ChildServer]:
        from cube_jupyter.gpu.service import ChildServer
        from cube_jupyter.local.processes import LOOPBACK
        from cube_jupyter.notebooks.local.backend import LocalNotebookBackend

        if not isinstance(self.backend, LocalNotebookBackend):
            return []
        return [
            ChildServer(r.user, r.name, f"http://{LOOPBACK}:{r.port}{r.base_url}", r.token or "", r.pid or 0)
            for r in self.backend.running_records()
        ]


def _running_training_jobs(backend: JobBackend) -> list[JobRef]:
    """Every user's running training jobs, with their pods and namespace on a cluster, as GPU culling
    finds them among DCGM's pods (`gpu.service.RunningJobs`)."""
    from cube_jupyter.gpu.service import JobRef

    return [
        JobRef(job.user, job.name, job.namespace, tuple(r.pod for r in job.replicas if r.pod))
        for job in backend.list(None)
        if job.kind == "training" and not job.finished and job.queue is None
    ]


def _queued_gpu_jobs(backend: JobBackend, servers: NotebookBackend | None, user: str) -> list[QueuedGpuJob]:
    """The job backend's queued jobs and the notebook backend's queued servers (None: not read) of
    `user` that ask for GPUs, as the GPU report shows them beside what the user holds
    (`gpu.service.QueuedGpuJobs`)."""
    from cube_jupyter.gpu.model import QueuedGpuJob
    from cube_jupyter.notebooks.spec import ServerStatus

    jobs = [
        QueuedGpuJob(job.name, job.gpus, job.queue.position, job.queue.reason)
        for job in backend.list(user)
        if job.queue is not None and job.gpus and not job.finished
    ]
    waiting = [] if servers is None else servers.list_servers(user)
    return jobs + [
        QueuedGpuJob(s.name, s.resources.gpu, s.queue_position, s.queue_reason or "", kind="notebook")
        for s in waiting
        if s.status == ServerStatus.QUEUED and s.resources.gpu
    ]


class _ScheduledPipelines:
    """Scheduled notebooks as pipeline runs (`schedules.scheduler.Launcher`): each run executes the
    schedule's snapshot of the notebook, as its owner, recorded with its logical time."""

    def __init__(self, pipelines: PipelineService) -> None:
        self.pipelines = pipelines
        self._watching: set[asyncio.Task[None]] = set()

    def prepare(self, owner: str, schedule: Schedule, snapshot: str | None) -> str | None:
        import json

        content = None if snapshot is None else json.loads(snapshot)
        notebook = self.pipelines.snapshot(owner, self._request(schedule, content))
        return json.dumps(notebook)

    async def launch(self, scheduled: ScheduledRun) -> str:
        import json

        from cube_jupyter.schedules.timing import iso

        schedule = scheduled.schedule
        if scheduled.snapshot is None:
            raise InvalidInput(f"schedule {schedule.name!r} has no notebook snapshot", field="path")
        request = self._request(schedule, json.loads(scheduled.snapshot), iso(scheduled.logical))
        run = await self.pipelines.start_run(schedule.owner, request)
        if run.target == "local":  # driven here: its end is known at once
            watch = asyncio.create_task(self._ended(schedule.owner, run.id, scheduled.on_end))
            self._watching.add(watch)
            watch.add_done_callback(self._watching.discard)
        return run.id

    async def _ended(self, owner: str, run_id: str, on_end: Callable[[str], None]) -> None:
        """Say when a local run has ended (a cluster run is read by the scheduler's passes)."""
        with contextlib.suppress(Exception):
            await self.pipelines.wait(owner, run_id)
            on_end(run_id)

    def outcome(self, owner: str, run_id: str) -> Outcome | None:
        from cube_jupyter.schedules.scheduler import Outcome

        run = self.pipelines.get_run(owner, run_id)
        if run.status in ("queued", "running"):
            return None
        return Outcome(run.status, run.error)

    async def cancel(self, owner: str, run_id: str) -> None:
        run = self.pipelines.get_run(owner, run_id)
        if run.status in ("queued", "running"):
            await self.pipelines.cancel(owner, run_id)

    @staticmethod
    def _request(schedule: Schedule, notebook: Any = None, logical_date: str | None = None) -> RunRequest:
        from cube_jupyter.pipelines.targets import RunRequest

        spec = schedule.spec
        assert spec.path is not None
        return RunRequest(
            path=spec.path,
            parameters=dict(spec.parameters),
            target=spec.target,
            notebook=notebook,
            schedule=spec.name,
            logical_date=logical_date,
        )


class _ScheduledWorkflow:
    """The Workflow a cluster notebook schedule's CronWorkflow runs (`schedules.kubernetes.mirror.
    WorkflowOf`): its notebook snapshot compiled for its owner's namespace, `{{workflow.name}}` as each
    run's id. A notebook with a `logical_date` parameter gets it as a workflow parameter, which the
    CronWorkflow fills with the time Argo scheduled the run for."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def __call__(self, schedule: Schedule, snapshot: str | None, namespace: str) -> dict[str, Any]:
        from cube_jupyter.pipelines.kubernetes.argo import compile_workflow
        from cube_jupyter.pipelines.targets import LOGICAL_DATE

        pipeline = _snapshot_pipeline(schedule, snapshot)
        parameters = dict(schedule.spec.parameters)
        if any(p.name == LOGICAL_DATE for p in pipeline.parameters):
            parameters.setdefault(LOGICAL_DATE, None)
        return compile_workflow(
            pipeline, self.settings.pipelines, parameters=parameters, user=schedule.owner, namespace=namespace
        )


class _ScheduledKfpRun:
    """What a kfp notebook schedule's recurring run runs (`schedules.kubernetes.recurring.RunSpecOf`):
    its notebook snapshot compiled for KFP and uploaded as its owner, the notebook's `logical_date`
    the time KFP scheduled each run for."""

    def __init__(self, settings: Settings, api: KfpApi) -> None:
        self.settings = settings
        self.api = api

    def __call__(self, schedule: Schedule, snapshot: str | None, namespace: str) -> dict[str, Any]:
        from cube_jupyter.pipelines.kubernetes.kfp_target import scheduled_spec
        from cube_jupyter.schedules.kubernetes.recurring import SCHEDULED_TIME

        pipeline = _snapshot_pipeline(schedule, snapshot)
        return scheduled_spec(
            self.api,
            self.settings.pipelines,
            schedule.owner,
            namespace,
            pipeline,
            dict(schedule.spec.parameters),
            SCHEDULED_TIME,
        )


def _snapshot_pipeline(schedule: Schedule, snapshot: str | None) -> Pipeline:
    """The pipeline of a notebook schedule's snapshot, as its cluster object runs it."""
    import json

    from cube_jupyter.pipelines.dag import build_pipeline

    if snapshot is None or schedule.spec.path is None:
        raise InvalidInput(f"schedule {schedule.name!r} has no notebook snapshot", field="path")
    return build_pipeline(json.loads(snapshot), schedule.spec.path)


def _render_cron_workflow(settings: Settings, schedule: Schedule, snapshot: str | None) -> dict[str, Any]:
    """The CronWorkflow a cluster would keep for a notebook schedule, in the namespace its owner's
    namespace template names (`schedule render`: no cluster asked)."""
    from datetime import UTC

    from cube_jupyter.schedules.kubernetes.cron import render_cron_workflow

    namespace = settings.namespace_for(schedule.owner)
    workflow = _ScheduledWorkflow(settings)(schedule, snapshot, namespace)
    return render_cron_workflow(
        schedule, workflow, namespace, settings.schedules.schedules, datetime.now(UTC)
    )


class _ScheduledTraining:
    """Scheduled training jobs (`schedules.scheduler.Launcher`): each run is a job named after the
    schedule's job and its logical time, with the logical time in `CUBE_LOGICAL_DATE`."""

    ENV = "CUBE_LOGICAL_DATE"

    def __init__(self, jobs: JobService) -> None:
        self.jobs = jobs

    def prepare(self, owner: str, schedule: Schedule, snapshot: str | None) -> str | None:
        try:
            self.jobs.parse_request(self._body(schedule, None, 1), owner)
        except CubeError as exc:  # named within the schedule: its `job`
            exc.field = f"job.{exc.field}" if exc.field else "job"
            raise
        return None

    async def launch(self, scheduled: ScheduledRun) -> str:
        body = self._body(scheduled.schedule, scheduled.logical, scheduled.attempt)
        job = await self.jobs.submit(scheduled.schedule.owner, body)
        return job.name

    def outcome(self, owner: str, run_id: str) -> Outcome | None:
        from cube_jupyter.errors import NotFound
        from cube_jupyter.schedules.scheduler import Outcome

        try:
            job = self.jobs.get(owner, run_id)
        except NotFound:
            return Outcome("failed", f"job {run_id!r} was deleted before it finished")
        if not job.finished:
            return None
        return Outcome("succeeded" if job.phase == "Succeeded" else "failed", job.message)

    async def cancel(self, owner: str, run_id: str) -> None:
        await self.jobs.delete(owner, run_id)

    def _body(self, schedule: Schedule, logical: datetime | None, attempt: int) -> dict[str, Any]:
        """The job spec with a name unique to the logical time and attempt (at most the jobs'
        name length: the schedule's job name is shortened to fit)."""
        from cube_jupyter.schedules.timing import iso

        spec = dict(schedule.spec.job or {})
        base = str(spec.get("name") or schedule.name)
        if logical is not None:
            suffix = logical.strftime("-%Y%m%d-%H%M%S") + (f"-{attempt}" if attempt > 1 else "")
            spec["name"] = base[: 45 - len(suffix)].rstrip("-") + suffix
            spec["env"] = {**dict(spec.get("env") or {}), self.ENV: iso(logical)}
        return {"kind": "training", "spec": spec}

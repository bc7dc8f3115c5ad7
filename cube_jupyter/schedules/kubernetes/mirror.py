"""Schedules Argo fires (`service.ClusterMirror`): a notebook schedule with target cluster is kept as a
CronWorkflow named after it in its owner's namespace, and the runs Argo starts from it are recorded
in the schedule's history by logical time.

The CronWorkflow is created when the schedule is saved and brought to the schedule on every change
(a JSON merge patch that also removes what the schedule no longer says); deleting the schedule
deletes it, its Workflows orphaned so runs already going finish, as the workbench's own do. The
Workflow to run comes from the composition root (`WorkflowOf`: the pipelines feature compiles the
notebook's snapshot), so schedules never import pipelines.

Argo's runs reach the history through one informer of the Workflows its CronWorkflows started
(`workflows.argoproj.io/cron-workflow`) that carry a schedule's label: each one becomes its
logical time's slot (origin `cluster`), inserted once whatever else asked for that time, running while
the Workflow runs (`fired.FiredRuns`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from cube_jupyter.errors import Conflict
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.labels import SCHEDULE_LABEL
from cube_jupyter.kube.namespaces import UserNamespaces
from cube_jupyter.kube.objects import Obj, labels_of, metadata_of, owner_of, uid_of
from cube_jupyter.schedules import timing
from cube_jupyter.schedules.config import ScheduleSettings
from cube_jupyter.schedules.kubernetes.cron import API_VERSION, KIND, logical_date_of, render_cron_workflow
from cube_jupyter.schedules.kubernetes.fired import FiredRuns
from cube_jupyter.schedules.scheduler import Clock, SystemClock
from cube_jupyter.schedules.store import Schedule, ScheduleStore, Slot

log = logging.getLogger(__name__)

# The Workflow a schedule runs: (schedule, its notebook snapshot, the owner's namespace) → Workflow.
WorkflowOf = Callable[[Schedule, str | None, str], dict[str, Any]]
WORKFLOW_API, WORKFLOW_KIND = "argoproj.io/v1alpha1", "Workflow"
CRON_WORKFLOW_LABEL = "workflows.argoproj.io/cron-workflow"
FIRED_SELECTOR = f"{CRON_WORKFLOW_LABEL},{SCHEDULE_LABEL}"
ENDED = {"Succeeded": "succeeded", "Failed": "failed", "Error": "failed"}


class CronWorkflowMirror:
    def __init__(
        self,
        settings: ScheduleSettings,
        cluster: Cluster,
        store: ScheduleStore,
        workflow_of: WorkflowOf,
        *,
        clock: Clock | None = None,
        sync_timeout: float = 30.0,
    ) -> None:
        self.settings = settings
        self.config = settings.schedules
        self.client = cluster.client
        self.cluster = cluster
        self.store = store
        self.workflow_of = workflow_of
        self.clock = clock or SystemClock()
        self.sync_timeout = sync_timeout
        self.user_namespaces = UserNamespaces(settings, cluster)
        self.fired = cluster.informer(WORKFLOW_API, WORKFLOW_KIND, label_selector=FIRED_SELECTOR)
        self.runs = FiredRuns(store)
        self._task: asyncio.Task[None] | None = None

    # -- service.ClusterMirror ---------------------------------------------------------------------

    def mirrors(self, schedule: Schedule) -> bool:
        return schedule.spec.kind == "notebook" and schedule.spec.target == "cluster"

    def missed_left(self, schedule: Schedule, missed: list[datetime]) -> list[datetime]:
        """Argo runs the latest missed fire time (`startingDeadlineSeconds`); `catchup: all`'s others
        are the workbench's to run."""
        return missed[:-1] if schedule.spec.catchup == "all" else []

    def check(self, schedule: Schedule, snapshot: str | None) -> None:
        """Refuse what a CronWorkflow cannot say, naming the field, before the schedule is saved."""
        self.render(schedule, snapshot, self.settings.namespace_for(schedule.owner))

    async def apply(self, schedule: Schedule, snapshot: str | None) -> None:
        namespace = await asyncio.to_thread(self.user_namespaces.require, schedule.owner)
        await asyncio.to_thread(self._create_or_update, self.render(schedule, snapshot, namespace))

    async def remove(self, schedule: Schedule) -> None:
        namespace = await asyncio.to_thread(self.user_namespaces.require, schedule.owner)
        await asyncio.to_thread(
            self.client.delete,
            API_VERSION,
            KIND,
            namespace,
            schedule.name,
            missing_ok=True,
            propagation="Orphan",
        )

    def render(self, schedule: Schedule, snapshot: str | None, namespace: str) -> dict[str, Any]:
        workflow = self.workflow_of(schedule, snapshot, namespace)
        return render_cron_workflow(schedule, workflow, namespace, self.config, self.clock.now())

    # -- the runs Argo starts ----------------------------------------------------------------------

    async def start(self) -> None:
        await self.cluster.start(
            [self.fired, *self.user_namespaces.informers],
            self.sync_timeout,
            " (is Argo Workflows installed?)",
        )
        self._task = asyncio.create_task(self._follow(), name="cube-cron-workflows")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _follow(self) -> None:
        while True:
            try:
                self.record_fired()
            except Exception:  # one bad pass never stops the recording for good
                log.exception("cube-jupyter: recording the runs Argo's CronWorkflows started failed")
            await self.clock.sleep(self.config.poll_seconds)

    def record_fired(self) -> int:
        """The Workflows the schedules' CronWorkflows started, from the informer's cache, into the
        history (`FiredRuns`); the number of slots written."""
        return self.runs.record(
            fired_slots(self.fired.list(predicate=lambda obj: self.runs.unsettled(uid_of(obj))))
        )

    # -- writes ------------------------------------------------------------------------------------

    def _create_or_update(self, cron: dict[str, Any]) -> None:
        meta = cron["metadata"]
        try:
            self.client.create(cron)
        except Conflict:
            current = self.client.get(API_VERSION, KIND, meta["namespace"], meta["name"])
            patch = {
                "metadata": {
                    key: merge_patch(metadata_of(current).get(key) or {}, meta[key])
                    for key in ("labels", "annotations")
                },
                "spec": merge_patch(current.get("spec") or {}, cron["spec"]),
            }
            self.client.patch(API_VERSION, KIND, meta["namespace"], meta["name"], patch)


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: what `new` lacks is removed."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            patch[key] = merge_patch(before, value)
        else:
            patch[key] = value
    return patch


def fired_slots(workflows: Iterable[Obj]) -> list[tuple[str, Slot]]:
    """The Workflows CronWorkflows started as (uid, slot) for `FiredRuns`."""
    return [(uid_of(obj), slot) for obj in workflows if (slot := _slot(obj)) is not None]


def _slot(obj: Obj) -> Slot | None:
    """A Workflow of a CronWorkflow as its logical time's slot: running until Argo says how it ended."""
    status = obj.get("status") or {}
    state = ENDED.get(str(status.get("phase") or ""), "running")
    logical = logical_date_of(obj)
    owner = owner_of(obj)
    if logical is None or not owner:
        return None
    return Slot(
        owner,
        labels_of(obj)[SCHEDULE_LABEL],
        logical,
        state,
        "cluster",
        run_id=metadata_of(obj).get("name"),
        reason=status.get("message") or None,
        created=metadata_of(obj).get("creationTimestamp") or timing.iso(timing.parse_iso(logical)),
        finished=status.get("finishedAt") or None,
    )

"""Schedules Kubeflow Pipelines fires (`service.ClusterMirror`): a notebook schedule with target `kfp` is
kept as a KFP recurring run named after it in its owner's namespace, and the runs KFP starts from it
are recorded in the schedule's history by logical time (origin `kfp`).

What it runs comes from the composition root (`RunSpecOf`: the pipelines feature compiles the
notebook's snapshot with `compile_kfp` and uploads it as a version of the notebook's KFP pipeline), and
KFP's API is handed over as `RecurringRunApi` (the pipelines feature's `KfpApi`), so schedules never
import pipelines. A recurring run cannot be edited: an edit creates the new one, then deletes the old
(the history is the workbench's, kept); pausing and resuming only disable and enable it, which the
description's fingerprint of everything else tells apart. Deleting the schedule deletes it; its runs
still going finish and are still recorded.

How the schedule maps, and where KFP has no word for it (refused naming the field, before saving):

- `cron` → `trigger.cron_schedule.cron`, `"0 "` + the 5 fields (KFP's robfig/cron has seconds first);
  a day of the week 7, `L`, `W` or `#` is refused (`cron`). `timezone`: KFP's controller runs every
  cron in one zone of its own (UTC unless its admin set another), so a cron schedule must say UTC.
- `interval_seconds` → `trigger.periodic_schedule.interval_second`.
- `start`/`end` → the trigger's `start_time`/`end_time`. KFP counts from `start_time` (its first run is
  the first fire time after it), so `start_time` is set just before the schedule's next fire time: an
  interval keeps its grid across edits, and a recurring run made anew never runs what passed before.
- `catchup` → `no_catchup`: `latest` is `no_catchup: true` (KFP runs only the latest missed fire
  time), `all` is `false` (KFP runs every one, with no `max_catchup_runs` bound). KFP always runs
  the latest missed one, so `none` is refused (`catchup`).
- `max_concurrency` → KFP's own (at most 10); `concurrency_policy` Allow only: KFP waits for a place,
  it neither skips (Forbid) nor cancels (Replace).
- `parameters` → `runtime_config.parameters`; the notebook's `logical_date` gets the time KFP
  scheduled the run for (`[[ScheduledTime...]]`, which KFP fills in as RFC 3339 in UTC).
- `paused` → `mode: DISABLE`; `retries` (a whole run again) and `depends_on` have no KFP word and are
  refused; steps' own `retries:` are KFP task retries.
- Run now and backfills are plain KFP runs of the snapshot (target `kfp`), started by the workbench's
  scheduler, which retries nothing of a KFP schedule since `retries` is 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from cube_jupyter.errors import CubeError, InvalidInput, NotFound
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.namespaces import UserNamespaces
from cube_jupyter.schedules import timing
from cube_jupyter.schedules.config import ScheduleSettings
from cube_jupyter.schedules.kubernetes.cron import weekdays
from cube_jupyter.schedules.kubernetes.fired import FiredRuns
from cube_jupyter.schedules.scheduler import Clock, SystemClock
from cube_jupyter.schedules.store import Schedule, ScheduleStore, Slot

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ORIGIN = "kfp"
# What KFP's controller puts in a run's parameter: its scheduled time, in UTC, as Go formats it.
SCHEDULED_TIME = "[[ScheduledTime.2006-01-02T15:04:05Z]]"
# A recurring run the workbench keeps says so in its description, with the fingerprint of its body.
MARK = "cube-jupyter schedule "
MAX_CONCURRENCY = 10  # KFP's range is [1, 10]
# KFP is read at most this often (the schedules' loop may turn every second), newest runs first.
POLL_SECONDS = 10.0
PAGE = 50
# KFP's RuntimeState of an ended run → the slot's state (CANCELING: nothing more will run).
ENDED = {
    "SUCCEEDED": "succeeded",
    "SKIPPED": "succeeded",
    "FAILED": "failed",
    "CANCELING": "cancelled",
    "CANCELED": "cancelled",
}
EPOCH = "1970-01-01T00:00:00Z"
GONE = {"message": "the KFP run is gone (deleted in KFP)"}


class RecurringRunApi(Protocol):
    """KFP's v2beta1 calls the mirror makes, each as the schedule's owner."""

    def create_recurring_run(self, user: str, body: Obj) -> Obj: ...

    def list_recurring_runs(self, user: str, namespace: str, name: str | None = None) -> list[Obj]: ...

    def delete_recurring_run(self, user: str, recurring_run_id: str) -> None: ...

    def enable_recurring_run(self, user: str, recurring_run_id: str, enabled: bool = True) -> None: ...

    def list_runs(self, user: str, namespace: str, recurring_run_id: str, page_size: int) -> list[Obj]: ...

    def get_run(self, user: str, run_id: str) -> Obj: ...

    def close(self) -> None: ...


# What a schedule's recurring run runs: (schedule, notebook snapshot, namespace) → the run spec
# (`pipeline_version_reference`, `runtime_config`, `experiment_id`), uploaded to KFP as its owner.
RunSpecOf = Callable[[Schedule, str | None, str], Obj]


class RecurringRunMirror:
    def __init__(
        self,
        settings: ScheduleSettings,
        cluster: Cluster,
        store: ScheduleStore,
        api: RecurringRunApi,
        spec_of: RunSpecOf,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.config = settings.schedules
        self.cluster = cluster
        self.store = store
        self.api = api
        self.spec_of = spec_of
        self.clock = clock or SystemClock()
        self.user_namespaces = UserNamespaces(settings, cluster)
        self.runs = FiredRuns(store)
        self._polled_at: datetime | None = None
        self._task: asyncio.Task[None] | None = None

    # -- service.ClusterMirror ---------------------------------------------------------------------

    def mirrors(self, schedule: Schedule) -> bool:
        return schedule.spec.kind == "notebook" and schedule.spec.target == ORIGIN

    def missed_left(self, schedule: Schedule, missed: list[datetime]) -> list[datetime]:
        """KFP catches up itself, as `no_catchup` says."""
        return []

    def check(self, schedule: Schedule, snapshot: str | None) -> None:
        refuse(schedule)

    async def apply(self, schedule: Schedule, snapshot: str | None) -> None:
        namespace = await asyncio.to_thread(self.user_namespaces.require, schedule.owner)
        await asyncio.to_thread(self._apply, schedule, snapshot, namespace)

    async def remove(self, schedule: Schedule) -> None:
        namespace = await asyncio.to_thread(self.user_namespaces.require, schedule.owner)
        for found in await asyncio.to_thread(self._kept, schedule.owner, namespace, schedule.name):
            await asyncio.to_thread(self.api.delete_recurring_run, schedule.owner, found["recurring_run_id"])

    def _apply(self, schedule: Schedule, snapshot: str | None, namespace: str) -> None:
        """The same body but its mode: enable or disable it; anything else: create the new recurring
        run, then delete the old (a failure deletes the new one: the old stays as it was)."""
        body = render_recurring_run(
            schedule, self.spec_of(schedule, snapshot, namespace), namespace, self.clock.now()
        )
        kept = self._kept(schedule.owner, namespace, schedule.name)
        if len(kept) == 1 and kept[0].get("description") == body["description"]:
            enabled = body["mode"] == "ENABLE"
            if (kept[0].get("status") == "ENABLED") != enabled:
                self.api.enable_recurring_run(schedule.owner, kept[0]["recurring_run_id"], enabled)
            return
        made = self.api.create_recurring_run(schedule.owner, body)
        try:
            for old in kept:
                self.api.delete_recurring_run(schedule.owner, old["recurring_run_id"])
        except CubeError:
            with contextlib.suppress(CubeError):
                self.api.delete_recurring_run(schedule.owner, made["recurring_run_id"])
            raise

    def _kept(self, owner: str, namespace: str, name: str) -> list[Obj]:
        """The recurring runs the workbench keeps for schedule `name` (one, but for a failed edit)."""
        found = self.api.list_recurring_runs(owner, namespace, name)
        return [r for r in found if str(r.get("description") or "").startswith(f"{MARK}{name} ")]

    # -- the runs KFP starts -----------------------------------------------------------------------

    async def start(self) -> None:
        await self.cluster.start(self.user_namespaces.informers, 30.0, " (Kubeflow Profiles)")
        self._task = asyncio.create_task(self._follow(), name="cube-kfp-recurring-runs")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.api.close()

    async def _follow(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.poll)
            except Exception:  # one bad pass never stops the recording for good
                log.exception("cube-jupyter: recording the runs KFP's recurring runs started failed")
            await self.clock.sleep(self.config.poll_seconds)

    def poll(self) -> int:
        """The runs each KFP schedule's recurring run started, into the history (`FiredRuns`), at most
        once per POLL_SECONDS; the number of slots written. A schedule KFP cannot be asked about now
        is asked again next time."""
        now = self.clock.now()
        if self._polled_at is not None and (now - self._polled_at).total_seconds() < POLL_SECONDS:
            return 0
        self._polled_at = now
        written = 0
        for schedule in self.store.list():
            if self.mirrors(schedule):
                try:
                    written += self.runs.record(self._fired(schedule))
                except CubeError as exc:
                    log.warning("cube-jupyter: KFP runs of schedule %s: %s", schedule.name, exc.message)
        return written

    def _fired(self, schedule: Schedule) -> list[tuple[str, Slot]]:
        """(KFP run id, slot) of the newest runs of the schedule's recurring runs, and of its slots
        still running that are older (or of a recurring run an edit replaced)."""
        owner = schedule.owner
        namespace = self.user_namespaces.require(owner)
        runs = [
            run
            for kept in self._kept(owner, namespace, schedule.name)
            for run in self.api.list_runs(owner, namespace, kept["recurring_run_id"], PAGE)
        ]
        listed = {run.get("run_id") for run in runs}
        for slot in self.store.slots(owner, schedule.name, limit=PAGE):
            if (slot.origin, slot.state) == (ORIGIN, "running") and slot.run_id not in listed:
                try:
                    runs.append(self.api.get_run(owner, slot.run_id or ""))
                except NotFound:
                    runs.append(
                        {
                            "run_id": slot.run_id,
                            "state": "FAILED",
                            "scheduled_at": slot.logical,
                            "error": GONE,
                        }
                    )
        fired = [(str(run.get("run_id")), _slot(schedule, run)) for run in runs]
        return [(key, slot) for key, slot in fired if slot is not None and self.runs.unsettled(key)]


def render_recurring_run(schedule: Schedule, spec: Obj, namespace: str, now: datetime) -> Obj:
    """The recurring run (V2beta1RecurringRun) of `schedule` running `spec`; its description carries
    a fingerprint of all but its mode and start, so an edit is told from a pause."""
    refuse(schedule)
    settings = schedule.spec
    body: Obj = {
        "display_name": schedule.name,
        "namespace": namespace,
        **spec,
        "trigger": _trigger(schedule, now),
        "max_concurrency": str(settings.max_concurrency),
        "no_catchup": settings.catchup == "latest",
    }
    fixed = json.loads(json.dumps(body))
    for schedule_kind in fixed["trigger"].values():
        schedule_kind.pop("start_time", None)
    digest = hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:16]
    return {
        **body,
        "description": f"{MARK}{schedule.name} ({digest}), kept by the workbench: edit it there",
        "mode": "DISABLE" if settings.paused else "ENABLE",
    }


def refuse(schedule: Schedule) -> None:
    """InvalidInput naming the field for what a KFP recurring run cannot say (module docstring)."""
    spec = schedule.spec
    if spec.cron is not None:
        if "7" in weekdays(spec.cron) or re.search(r"[LW#]", spec.cron):
            raise InvalidInput(
                f"cron {spec.cron!r}: Kubeflow Pipelines' cron has days of the week 0-6 (Sunday 0) and "
                "no L, W or #",
                field="cron",
            )
        if spec.timezone != "UTC":
            raise InvalidInput(
                f"timezone {spec.timezone!r}: Kubeflow Pipelines runs a recurring run's cron in its "
                "controller's one zone (UTC), not per schedule; give the cron in UTC",
                field="timezone",
            )
    refusals = {
        "catchup": (
            spec.catchup == "none",
            "catchup 'none': Kubeflow Pipelines always runs the latest missed fire time; use 'latest' "
            "(no_catchup) or 'all'",
        ),
        "max_concurrency": (
            spec.max_concurrency > MAX_CONCURRENCY,
            f"max_concurrency {spec.max_concurrency}: Kubeflow Pipelines allows at most {MAX_CONCURRENCY}",
        ),
        "concurrency_policy": (
            spec.concurrency_policy != "Allow",
            f"concurrency_policy {spec.concurrency_policy!r}: Kubeflow Pipelines waits for a place "
            "(Allow); it neither skips nor replaces runs",
        ),
        "retries": (
            spec.retries > 0,
            "retries: Kubeflow Pipelines cannot run a whole run again; tag the steps `retries:N` "
            "(KFP task retries) instead",
        ),
        "depends_on": (
            spec.depends_on is not None,
            "depends_on: Kubeflow Pipelines cannot wait for another schedule's run; use target "
            "'local' or 'cluster'",
        ),
    }
    for field, (refused, message) in refusals.items():
        if refused:
            raise InvalidInput(message, field=field)


def _trigger(schedule: Schedule, now: datetime) -> Obj:
    """KFP's trigger: its first run the schedule's next fire time after `now` (module docstring)."""
    spec = schedule.spec
    upcoming = spec.timing(timing.parse_iso(schedule.created)).next_after(now)
    lead = spec.interval_seconds or 1
    bounds: Obj = {"start_time": timing.iso(now if upcoming is None else upcoming - timedelta(seconds=lead))}
    if spec.end is not None:
        bounds["end_time"] = spec.end
    if spec.cron is not None:
        return {"cron_schedule": {"cron": f"0 {spec.cron}", **bounds}}
    return {"periodic_schedule": {"interval_second": str(spec.interval_seconds), **bounds}}


def _slot(schedule: Schedule, run: Obj) -> Slot | None:
    """A run KFP started as its logical time's slot (KFP's `scheduled_at`): running until it ends."""
    logical = _utc(run.get("scheduled_at"))
    if logical is None:
        return None
    state = ENDED.get(str(run.get("state") or ""), "running")
    finished = run.get("finished_at")
    return Slot(
        schedule.owner,
        schedule.name,
        logical,
        state,
        ORIGIN,
        run_id=str(run.get("run_id")),
        reason=((run.get("error") or {}).get("message") or None) if state != "succeeded" else None,
        created=str(run.get("created_at") or logical),
        finished=str(finished) if state != "running" and finished and finished != EPOCH else None,
    )


def _utc(stamp: object) -> str | None:
    """KFP's RFC 3339 time as a logical time (UTC, whole seconds)."""
    if not stamp or stamp == EPOCH:
        return None
    try:
        return timing.iso(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).astimezone(UTC))
    except ValueError:
        return None

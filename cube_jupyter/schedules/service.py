"""Schedules as users see them: save, edit, pause, delete, run now, backfill, and their runs by
logical time. REST handlers and the CLI call this; the scheduler (`scheduler.Scheduler`, in the
central workbench) does the running.

A schedule belongs to its owner: a user sees and changes only their own, admins anyone's (`?user=`).
What it runs is checked as its owner when it is saved (the notebook readable and a pipeline, the job
spec valid, local execution allowed), and a notebook is snapshotted then: runs execute the snapshot,
never a half-edited file, until the owner refreshes it. The file must stay where it is (its folder is
the steps' working directory, and it must still be the owner's), but its content is not read again.
An edit is checked as a new schedule is, against the snapshot it keeps.

On the kubernetes backend a cluster may fire a notebook schedule itself (`ClusterMirror`: an Argo
CronWorkflow, a KFP recurring run). Its object is written after the schedule is saved, and a failure
there undoes the save (a new schedule is not kept, an edit is reverted), so the history and the
cluster never disagree about what is scheduled.
"""

from __future__ import annotations

import builtins
import contextlib
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from cube_jupyter import access, fields
from cube_jupyter.errors import Conflict, InvalidInput, NotFound
from cube_jupyter.schedules import timing
from cube_jupyter.schedules.config import ScheduleSettings
from cube_jupyter.schedules.scheduler import Clock, Launcher, Scheduler, SystemClock
from cube_jupyter.schedules.spec import ScheduleSpec
from cube_jupyter.schedules.store import Schedule, ScheduleStore, Slot

MAX_PREVIEW = 50
BACKFILL_FIELDS = ("start", "end", "parallel", "dry_run", "rerun")


class ClusterMirror(Protocol):
    """Keeps a schedule's cluster object (an Argo CronWorkflow, a KFP recurring run) as the schedule
    says."""

    def mirrors(self, schedule: Schedule) -> bool:
        """Whether this cluster fires the schedule (a notebook schedule with its target)."""
        ...

    def missed_left(self, schedule: Schedule, missed: list[datetime]) -> list[datetime]:
        """Of the fire times missed (found late), those the workbench must run itself."""
        ...

    def check(self, schedule: Schedule, snapshot: str | None) -> None:
        """Refuse (InvalidInput naming the field) what the cluster object cannot say, before saving."""

    async def start(self) -> None:
        """Follow the runs the cluster starts by itself, into the schedules' history."""

    async def close(self) -> None: ...

    async def apply(self, schedule: Schedule, snapshot: str | None) -> None: ...

    async def remove(self, schedule: Schedule) -> None: ...


# The cluster object a notebook schedule is on the kubernetes backend: (schedule, snapshot) -> object.
Renderer = Callable[[Schedule, str | None], dict[str, Any]]


class ScheduleService:
    def __init__(
        self,
        settings: ScheduleSettings,
        store: ScheduleStore,
        launchers: Mapping[str, Launcher],
        *,
        clock: Clock | None = None,
        mirrors: Sequence[ClusterMirror] = (),
        renderer: Renderer | None = None,
    ) -> None:
        """`renderer` makes the CronWorkflow of a notebook schedule (asking no cluster), `mirrors`
        keep the schedules clusters fire (kubernetes backend); both come from the composition root."""
        self.renderer = renderer
        self.settings = settings
        self.config = settings.schedules
        self.store = store
        self.launchers = launchers
        self.clock = clock or SystemClock()
        self.mirrors = tuple(mirrors)
        self.scheduler = Scheduler(
            store, launchers, self.config, self.clock, cluster_fired=self._cluster_fired
        )
        self.default_target = "cluster" if settings.workbench.backend == "kubernetes" else "local"

    async def start(self) -> None:
        """Run the scheduler here: the central workbench's job, never a user server's."""
        for mirror in self.mirrors:
            await mirror.start()
        self.scheduler.start()

    async def close(self) -> None:
        await self.scheduler.close()
        self.store.close()
        for mirror in self.mirrors:
            await mirror.close()

    # -- reads -------------------------------------------------------------------------------------

    def list(self, caller: str, user: str | None = None, *, all_users: bool = False) -> list[dict[str, Any]]:
        owner = access.listed_user(self.settings, caller, user, all_users, "schedules")
        return [self.view(schedule) for schedule in self.store.list(owner)]

    def get(self, caller: str, name: object, user: str | None = None) -> Schedule:
        owner = access.owner(self.settings, caller, user, "schedules")
        if not isinstance(name, str) or not name:
            raise InvalidInput("name must be a schedule's name", field="name")
        schedule = self.store.get(owner, name)
        if schedule is None:
            raise NotFound(f"user {owner!r} has no schedule named {name!r}", field="name")
        return schedule

    def view(self, schedule: Schedule) -> dict[str, Any]:
        """The schedule with its words, state, and latest runs (what the list and the panel show)."""
        recent = self.store.slots(schedule.owner, schedule.name, limit=50)
        finished = [slot for slot in recent if slot.state not in ("pending", "running")]
        ended = schedule.next_fire is None and not schedule.spec.paused
        return {
            **schedule.to_dict(),
            "describe": schedule.spec.timing(timing.parse_iso(schedule.created)).describe(),
            "state": "paused" if schedule.spec.paused else "ended" if ended else "active",
            "last_run": finished[0].to_dict() if finished else None,
            "running": sum(slot.state == "running" for slot in recent),
            "pending": sum(slot.state == "pending" for slot in recent),
        }

    def runs(
        self, caller: str, name: object, user: str | None = None, limit: int = 500
    ) -> builtins.list[Slot]:
        schedule = self.get(caller, name, user)
        return self.store.slots(schedule.owner, schedule.name, limit=limit)

    def preview(self, query: Mapping[str, str]) -> dict[str, Any]:
        """The next `count` fire times of a cron (or interval) and its words, as the form types."""
        fields.reject_unknown(query, ("cron", "interval_seconds", "timezone", "count", "start"), "query")
        raw: dict[str, Any] = {
            "name": "preview",
            "path": "preview.ipynb",
            "timezone": query.get("timezone", "UTC"),
        }
        if "cron" in query:
            raw["cron"] = query["cron"]
        if "interval_seconds" in query:
            raw["interval_seconds"] = _query_int(query["interval_seconds"], "interval_seconds")
        if "start" in query:
            raw["start"] = query["start"]
        count = _query_int(query.get("count", "5"), "count")
        if not 1 <= count <= MAX_PREVIEW:
            raise InvalidInput(f"count must be between 1 and {MAX_PREVIEW}, got {count}", field="count")
        spec = ScheduleSpec.from_dict(raw)
        now = self.clock.now()
        when = spec.timing(now)
        times = when.between(now, now + timedelta(days=366 * 10), count)
        return {
            "describe": when.describe(),
            "cron": spec.cron,
            "timezone": spec.timezone,
            "next": [timing.iso(moment) for moment in times],
        }

    def render(self, caller: str, name: object, user: str | None = None) -> dict[str, Any]:
        """The Argo CronWorkflow the kubernetes backend keeps for a notebook schedule."""
        schedule = self.get(caller, name, user)
        if schedule.spec.kind != "notebook":
            raise InvalidInput(
                f"schedule {schedule.name!r} runs a training job: the workbench's scheduler starts each "
                "run (a CronWorkflow runs notebooks only)",
                field="kind",
            )
        if self.renderer is None:
            raise InvalidInput("this installation renders no CronWorkflows", field="name")
        return self.renderer(schedule, self.store.snapshot(schedule.owner, schedule.name))

    # -- writes ------------------------------------------------------------------------------------

    async def create(self, caller: str, body: object, user: str | None = None) -> Schedule:
        owner = access.owner(self.settings, caller, user, "schedules")
        spec = ScheduleSpec.from_dict(body, default_target=self.default_target)
        self._check_dependency(owner, spec)
        stamp = timing.iso(self.clock.now())
        schedule = Schedule(owner, spec, created=stamp, updated=stamp, watermark=stamp, next_fire=None)
        snapshot = self.launchers[spec.kind].prepare(owner, schedule, None)
        schedule = replace(
            schedule,
            next_fire=self._next_fire(schedule),
            snapshot_taken=stamp if snapshot is not None else None,
        )
        self._check_mirror(schedule, snapshot)
        self.store.create(schedule, snapshot, limit=self.config.max_schedules_per_user)
        mirror = self._mirror_of(schedule)
        if mirror is not None:
            try:
                await mirror.apply(schedule, snapshot)
            except Exception:
                self.store.delete(owner, spec.name)  # not saved: the cluster has nothing of it
                raise
        self.scheduler.wake()
        return schedule

    async def patch(self, caller: str, name: object, changes: object, user: str | None = None) -> Schedule:
        """Edit any field but the name; `refresh_snapshot: true` takes the notebook anew (a changed
        `path` always does). Fire times missed while paused are caught up per `catchup` on resume."""
        schedule = self.get(caller, name, user)
        body = fields.mapping(changes, "body")
        refresh = fields.boolean(body.pop("refresh_snapshot", False), "refresh_snapshot")
        spec = schedule.spec.patched(body)
        self._check_dependency(schedule.owner, spec)
        stamp = timing.iso(self.clock.now())
        updated = replace(schedule, spec=spec, updated=stamp)
        retake = refresh or spec.path != schedule.spec.path or spec.kind != schedule.spec.kind
        kept = None if retake else self.store.snapshot(schedule.owner, schedule.name)
        # Checked as a new schedule is (parameters, target, the job), against the snapshot it keeps.
        current = self.launchers[spec.kind].prepare(schedule.owner, updated, kept)
        snapshot = current if retake else None
        if retake:
            updated = replace(updated, snapshot_taken=stamp if snapshot is not None else None)
        updated = replace(updated, next_fire=self._next_fire(updated))
        self._check_mirror(updated, current)
        previous = self.store.snapshot(schedule.owner, schedule.name) if retake else None
        self.store.update(updated, snapshot)
        try:
            await self._remirror(schedule, updated, current)
        except Exception:
            self.store.update(schedule, previous)  # reverted: the cluster still has the schedule as it was
            raise
        self.scheduler.wake()
        return updated

    async def delete(self, caller: str, name: object, user: str | None = None) -> None:
        """Delete the schedule and its run history by logical time; runs already going finish."""
        schedule = self.get(caller, name, user)
        dependents = self.store.dependents(schedule.owner, schedule.name)
        if dependents:
            raise Conflict(
                f"schedule(s) {', '.join(map(repr, dependents))} depend on {schedule.name!r} "
                "(depends_on); change or delete them first",
                field="name",
            )
        mirror = self._mirror_of(schedule)
        if mirror is not None:
            await mirror.remove(schedule)
        self.store.delete(schedule.owner, schedule.name)

    def run_now(self, caller: str, name: object, user: str | None = None) -> Slot:
        """A run for the logical time now, within the schedule's concurrency."""
        schedule = self.get(caller, name, user)
        waiting = [
            s
            for s in self.store.slots(schedule.owner, schedule.name, limit=200)
            if s.state == "pending" and s.origin == "manual"
        ]
        if waiting:
            raise Conflict(
                f"the run of {schedule.name!r} asked for at {waiting[0].logical} has not started yet "
                f"(it waits for a place: max_concurrency {schedule.spec.max_concurrency})",
                field="name",
            )
        stamp = timing.iso(self.clock.now())
        slot = Slot(schedule.owner, schedule.name, stamp, "pending", "manual", created=stamp)
        if not self.store.add_slots([slot]):
            raise Conflict(f"schedule {schedule.name!r} already has a run for {stamp}", field="name")
        self.scheduler.wake()
        return slot

    def backfill(self, caller: str, name: object, body: object, user: str | None = None) -> dict[str, Any]:
        """The logical times in [start, end], at most `parallel` at once; those already succeeded are
        skipped (unless `rerun`), those failed, skipped or cancelled run again. `dry_run` lists them."""
        schedule = self.get(caller, name, user)
        raw = fields.mapping(body, "body")
        fields.reject_unknown(raw, BACKFILL_FIELDS, "")
        start = timing.instant(raw.get("start"), "start", schedule.spec.timezone)
        end = timing.instant(raw.get("end"), "end", schedule.spec.timezone, end_of_day=True)
        if end < start:
            raise InvalidInput(f"end {raw['end']!r} is before start {raw['start']!r}", field="end")
        parallel = fields.integer(
            raw.get("parallel", 1), "parallel", minimum=1, maximum=self.config.max_backfill_parallel
        )
        rerun = fields.boolean(raw.get("rerun", False), "rerun")
        dry_run = fields.boolean(raw.get("dry_run", False), "dry_run")
        when = schedule.spec.timing(timing.parse_iso(schedule.created))
        limit = self.config.max_backfill_runs
        moments = when.between(start - timedelta(microseconds=1), end, limit + 1)
        if len(moments) > limit:
            raise InvalidInput(
                f"the range holds more than {limit} fire times (c.CubeSchedules.max_backfill_runs); "
                "backfill a shorter range",
                field="end",
            )
        unanchored = schedule.spec.interval_seconds is not None and schedule.spec.start is None
        if not moments and unanchored and end < timing.parse_iso(schedule.created):
            raise InvalidInput(
                f"an interval counts from the schedule's start, and {schedule.name!r} has none: it "
                f"fires from when it was made ({schedule.created}); set `start` to backfill earlier",
                field="start",
            )
        logicals = [timing.iso(moment) for moment in moments]
        existing = {
            slot.logical: slot
            for slot in self.store.slots(schedule.owner, schedule.name, logicals, len(logicals) or 1)
        }
        done = [t for t in logicals if t in existing and existing[t].state == "succeeded" and not rerun]
        going = [t for t in logicals if t in existing and existing[t].state in ("pending", "running")]
        chosen = [t for t in logicals if t not in done and t not in going]
        result = {
            "logical_dates": logicals,
            "to_run": chosen,
            "already_succeeded": done,
            "in_progress": going,
            "dry_run": dry_run,
        }
        if dry_run or not chosen:
            return result
        batch, stamp = secrets.token_hex(4), timing.iso(self.clock.now())
        slots = [
            Slot(
                schedule.owner,
                schedule.name,
                t,
                "pending",
                "backfill",
                batch=batch,
                parallel=parallel,
                created=stamp,
            )
            for t in chosen
        ]
        self.store.add_slots(slot for slot in slots if slot.logical not in existing)
        self.store.rerun([slot for slot in slots if slot.logical in existing])
        self.scheduler.wake()
        return {**result, "batch": batch}

    # -- helpers -----------------------------------------------------------------------------------

    def _check_dependency(self, owner: str, spec: ScheduleSpec) -> None:
        """`depends_on` names another schedule of the same owner, and no chain leads back."""
        chain = [spec.name]
        upstream = spec.depends_on
        while upstream is not None:
            if upstream in chain:
                raise InvalidInput(
                    f"depends_on {spec.depends_on!r} makes a cycle: {' -> '.join([*chain, upstream])}",
                    field="depends_on",
                )
            chain.append(upstream)
            other = self.store.get(owner, upstream)
            if other is None:
                raise InvalidInput(
                    f"depends_on {upstream!r}: user {owner!r} has no schedule by that name (a schedule "
                    "depends only on its owner's own)",
                    field="depends_on",
                )
            upstream = other.spec.depends_on

    def _next_fire(self, schedule: Schedule) -> str | None:
        when = schedule.spec.timing(timing.parse_iso(schedule.created))
        upcoming = when.next_after(timing.parse_iso(schedule.watermark))
        return None if upcoming is None else timing.iso(upcoming)

    def _mirror_of(self, schedule: Schedule) -> ClusterMirror | None:
        """The mirror of the cluster that fires `schedule`; None when the workbench fires it."""
        return next((mirror for mirror in self.mirrors if mirror.mirrors(schedule)), None)

    def _cluster_fired(
        self, schedule: Schedule, missed: builtins.list[datetime]
    ) -> builtins.list[datetime] | None:
        mirror = self._mirror_of(schedule)
        return None if mirror is None else mirror.missed_left(schedule, missed)

    def _check_mirror(self, schedule: Schedule, snapshot: str | None) -> None:
        mirror = self._mirror_of(schedule)
        if mirror is not None:
            mirror.check(schedule, snapshot)

    async def _remirror(self, old: Schedule, new: Schedule, snapshot: str | None) -> None:
        """The edited schedule on its cluster; when its target moved, off the former one (after the
        new object is made: a failure leaves the former as it was)."""
        before, after = self._mirror_of(old), self._mirror_of(new)
        if after is not None:
            await after.apply(new, snapshot)
        if before is None or before is after:
            return
        try:
            await before.remove(old)
        except Exception:
            if after is not None:
                with contextlib.suppress(Exception):
                    await after.remove(new)
            raise


def _query_int(value: str, field: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(f"{field} must be a whole number, got {value!r}", field=field) from None

"""The scheduler: turns fire times into slots and slots into runs, one `tick` at a time.

A tick (1) plans: for each due schedule, the fire times since its watermark become slots, those found
late (missed while the workbench was down or the schedule paused) kept only as `catchup` says;
(2) settles: each running slot's run is read, and a failed one is retried after its backoff while
`retries` last; (3) dispatches: pending slots whose time has come start, within the schedule's
`max_concurrency` (a backfill within its own `parallel`), after the run of `depends_on` for the same
logical time has succeeded. Runs go through a `Launcher` per kind, which the composition root builds
from the pipelines and jobs features; the clock is injected, so tests step time instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from cube_jupyter.errors import CubeError, NotFound
from cube_jupyter.schedules.config import CubeSchedules
from cube_jupyter.schedules.store import Schedule, ScheduleStore, Slot
from cube_jupyter.schedules.timing import iso, parse_iso

LOG = logging.getLogger(__name__)
# Slots of fire times (on time, caught up): held while their schedule is paused, unlike those a user
# asked for (run now, a backfill).
FIRED = ("schedule", "catchup")
PAUSED = "waiting: the schedule is paused"
# The origins of runs a cluster started by itself (Argo's CronWorkflow, KFP's recurring run).
FIRED_ELSEWHERE = ("cluster", "kfp")
# How often the running scheduler says so in the store (`cube-jupyter schedule` reads it).
BEAT_SECONDS = 10.0


class Clock(Protocol):
    def now(self) -> datetime: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(frozen=True)
class Outcome:
    """How a run ended: succeeded, failed or cancelled, and the run's own message."""

    state: str
    message: str | None = None


@dataclass(frozen=True)
class ScheduledRun:
    """One attempt at one logical time: what a launcher starts. `snapshot` is what the schedule saved
    to run (a notebook's JSON); `on_end` is called when the run ends, where the launcher learns of it
    (a run driven in this process), so the next one starts then rather than at the next poll."""

    schedule: Schedule
    snapshot: str | None
    logical: datetime
    attempt: int
    on_end: Callable[[str], None]  # called with the run's id


class Launcher(Protocol):
    """Starts and reads the runs of one kind of schedule (`notebook`: pipeline runs; `training`: jobs)."""

    def prepare(self, owner: str, schedule: Schedule, snapshot: str | None) -> str | None:
        """Check what the schedule runs, as its owner (InvalidInput, Forbidden naming the field):
        against `snapshot` when given (an edit that keeps it), else taking one. The snapshot its runs
        execute (a notebook's JSON), if the kind has one."""
        ...

    async def launch(self, run: ScheduledRun) -> str:
        """Start the run, as the schedule's owner; its id."""
        ...

    def outcome(self, owner: str, run_id: str) -> Outcome | None:
        """How the run ended; None while it goes on."""
        ...

    async def cancel(self, owner: str, run_id: str) -> None: ...


# Of a schedule a cluster fires itself, the missed fire times (found late) the workbench still runs;
# None for a schedule the workbench fires.
ClusterFired = Callable[[Schedule, list[datetime]], list[datetime] | None]


class Scheduler:
    def __init__(
        self,
        store: ScheduleStore,
        launchers: Mapping[str, Launcher],
        config: CubeSchedules,
        clock: Clock | None = None,
        cluster_fired: ClusterFired | None = None,
    ) -> None:
        """`cluster_fired` says which schedules a cluster fires itself (an Argo CronWorkflow, a KFP
        recurring run): for those the scheduler adds only the missed fire times the cluster does not
        run."""
        self.cluster_fired = cluster_fired or (lambda schedule, missed: None)
        self.store = store
        self.launchers = launchers
        self.config = config
        self.clock = clock or SystemClock()
        self._task: asyncio.Task[None] | None = None
        self._last_beat: datetime | None = None
        self._ended: set[str] = set()
        self._read_all_at: datetime | None = None
        self._wake = asyncio.Event()

    # -- the loop ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="cube-scheduler")

    def wake(self) -> None:
        """Tick now (a schedule was saved, a run asked for): no wait for the next poll."""
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        woken = False
        while True:
            self._wake.clear()  # before the pass: a run that ends during it wakes the next one
            try:
                await self.tick(woken=woken)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad pass never stops the schedules for good
                LOG.exception("cube-jupyter: a scheduler pass failed")
            woken = await self._pause()

    async def _pause(self) -> bool:
        """Until the next fire or retry time, at most `poll_seconds`, or until woken (True)."""
        wait = self.config.poll_seconds
        earliest = self.store.earliest()
        if earliest is not None:
            wait = min(wait, max(0.0, (parse_iso(earliest) - self.clock.now()).total_seconds()))
        sleeper = asyncio.ensure_future(self.clock.sleep(wait))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waker.cancel()
        return not sleeper.done() or sleeper.cancelled()

    async def tick(self, *, woken: bool = False) -> None:
        now = self.clock.now()
        if self._last_beat is None or (now - self._last_beat).total_seconds() >= BEAT_SECONDS:
            self.store.beat(os.getpid(), iso(now))
            self._last_beat = now
        for schedule in self.store.due(iso(now)):
            self.plan(schedule, now)
        # A pass a run's end woke reads the runs said to have ended; any other pass, and one at least
        # every poll, reads them all (runs on a cluster or jobs say nothing when they end).
        last = self._read_all_at
        read_all = not woken or last is None or (now - last).total_seconds() >= self.config.poll_seconds
        ended, self._ended = self._ended, set()
        for slot in self.store.active():
            if slot.state != "running" or slot.origin in FIRED_ELSEWHERE:  # the mirrors write them
                continue
            if read_all or slot.run_id is None or slot.run_id in ended:
                await self._settle(slot, now)
        if read_all:
            self._read_all_at = now
        await self._dispatch(now)

    def _run_ended(self, run_id: str) -> None:
        self._ended.add(run_id)
        self.wake()

    # -- planning ----------------------------------------------------------------------------------

    def plan(self, schedule: Schedule, now: datetime) -> int:
        """Slots for the fire times in (watermark, now]; the watermark moves to now. The number added."""
        spec = schedule.spec
        timing = spec.timing(parse_iso(schedule.created))
        fires = timing.latest(parse_iso(schedule.watermark), now, self.config.max_catchup_runs + 1)
        late = now - timedelta(seconds=self.config.on_time_seconds)
        on_time = [moment for moment in fires if moment >= late]
        missed = [moment for moment in fires if moment < late]
        left = self.cluster_fired(schedule, missed)
        if left is not None:  # the cluster starts these, and what it catches up
            on_time, missed = [], left
        if spec.catchup == "none" or (spec.catchup == "latest" and on_time):
            missed = []
        elif spec.catchup == "latest":
            missed = missed[-1:]
        else:
            missed = missed[-self.config.max_catchup_runs :]
        stamp = iso(now)
        slots = [
            Slot(schedule.owner, spec.name, iso(moment), "pending", origin, created=stamp)
            for moments, origin in ((missed, "catchup"), (on_time, "schedule"))
            for moment in moments
        ]
        if spec.concurrency_policy == "Forbid":
            slots = self._forbidden(schedule, slots, stamp)
        added = self.store.add_slots(slots)
        upcoming = timing.next_after(now)
        self.store.advance(schedule.owner, spec.name, stamp, None if upcoming is None else iso(upcoming))
        return added

    def _forbidden(self, schedule: Schedule, slots: list[Slot], stamp: str) -> list[Slot]:
        """Argo's Forbid: a fire time that comes while `max_concurrency` runs go on is skipped."""
        busy = [s for s in self.store.active() if (s.owner, s.schedule) == (schedule.owner, schedule.name)]
        free = schedule.spec.max_concurrency - len(busy)
        kept: list[Slot] = []
        for slot in slots:
            if free > 0:
                kept.append(slot)
                free -= 1
                continue
            reason = (
                f"skipped: concurrency_policy Forbid and {schedule.spec.max_concurrency} run(s) "
                f"were still going (logical time {', '.join(s.logical for s in busy) or 'earlier'})"
            )
            kept.append(Slot(**{**slot.__dict__, "state": "skipped", "reason": reason, "finished": stamp}))
        return kept

    # -- settling ----------------------------------------------------------------------------------

    async def _settle(self, slot: Slot, now: datetime) -> None:
        schedule = self.store.get(slot.owner, slot.schedule)
        if schedule is None:
            return
        if slot.run_id is None:
            outcome: Outcome | None = Outcome(
                "failed", "interrupted: the workbench stopped before the run had started"
            )
        else:
            try:
                outcome = self.launchers[schedule.spec.kind].outcome(slot.owner, slot.run_id)
            except NotFound as exc:
                outcome = Outcome("failed", f"run {slot.run_id!r} is gone: {exc.message}")
            except CubeError as exc:  # not readable now (a backend starting): asked again next pass
                LOG.warning("cube-jupyter: run %s of %s: %s", slot.run_id, slot.schedule, exc.message)
                return
        if outcome is None:
            return
        self._record(schedule, slot, outcome, now)

    def _record(self, schedule: Schedule, slot: Slot, outcome: Outcome, now: datetime) -> None:
        if outcome.state == "failed" and slot.attempts <= schedule.spec.retries:
            delay = schedule.spec.retry_backoff_seconds * 2 ** (slot.attempts - 1)
            retry_at = iso(now + timedelta(seconds=delay))
            reason = (
                f"attempt {slot.attempts} failed: {outcome.message or 'the run failed'}; retry at {retry_at}"
            )
            self.store.settle(slot, state="pending", reason=reason, not_before=retry_at)
            return
        self.store.settle(slot, state=outcome.state, reason=outcome.message, finished=iso(now))

    # -- dispatching -------------------------------------------------------------------------------

    async def _dispatch(self, now: datetime) -> None:
        stamp = iso(now)
        slots = self.store.active()
        running: dict[tuple[str, str, str | None], list[Slot]] = {}
        for slot in slots:
            if slot.state == "running":
                running.setdefault((slot.owner, slot.schedule, slot.batch), []).append(slot)
        schedules: dict[tuple[str, str], Schedule | None] = {}
        for slot in slots:
            if slot.state != "pending" or (slot.not_before is not None and slot.not_before > stamp):
                continue
            key = (slot.owner, slot.schedule)
            if key not in schedules:
                schedules[key] = self.store.get(*key)
            schedule = schedules[key]
            if schedule is None:
                continue
            if schedule.spec.paused and slot.origin in FIRED:  # what was asked for still runs
                if slot.reason != PAUSED:
                    self.store.settle(slot, reason=PAUSED)
                continue
            if not self._dependency_met(schedule, slot, now):
                continue
            busy = running.setdefault((slot.owner, slot.schedule, slot.batch), [])
            limit = slot.parallel if slot.parallel is not None else schedule.spec.max_concurrency
            if len(busy) >= limit:
                if schedule.spec.concurrency_policy != "Replace" or slot.batch is not None:
                    continue
                await self._replace(schedule, busy, slot, now)
            started = await self._launch(schedule, slot, now)
            if started is not None:
                busy.append(started)

    def _dependency_met(self, schedule: Schedule, slot: Slot, now: datetime) -> bool:
        """Whether the slot may start as far as `depends_on` goes; skips it when it never will."""
        upstream = schedule.spec.depends_on
        if upstream is None:
            return True
        other = self.store.slot(slot.owner, upstream, slot.logical)
        if other is not None and other.state == "succeeded":
            return True
        if other is not None and other.state in ("failed", "skipped", "cancelled"):
            why = f"skipped: depends_on {upstream!r}, whose run for {slot.logical} {other.state}"
            self.store.settle(slot, state="skipped", reason=why, finished=iso(now))
            return False
        waited = (now - parse_iso(slot.created)).total_seconds()
        if waited >= schedule.spec.depends_timeout_seconds:
            state = "no run" if other is None else f"a run still {other.state}"
            why = (
                f"skipped: waited {waited:.0f} s (depends_timeout_seconds) for {upstream!r} to succeed "
                f"for {slot.logical}; it has {state}"
            )
            self.store.settle(slot, state="skipped", reason=why, finished=iso(now))
            return False
        waiting = f"waiting for {upstream!r} to succeed for {slot.logical} (depends_on)"
        if slot.reason != waiting:
            self.store.settle(slot, reason=waiting)
        return False

    async def _replace(self, schedule: Schedule, busy: list[Slot], slot: Slot, now: datetime) -> None:
        """Argo's Replace: the oldest running runs are cancelled to make room for the new one."""
        launcher = self.launchers[schedule.spec.kind]
        while len(busy) >= schedule.spec.max_concurrency:
            old = busy.pop(0)
            if old.run_id is not None:
                try:
                    await launcher.cancel(old.owner, old.run_id)
                except CubeError as exc:
                    LOG.warning("cube-jupyter: replacing run %s: %s", old.run_id, exc.message)
            why = f"cancelled: replaced by the run for {slot.logical} (concurrency_policy Replace)"
            self.store.settle(old, state="cancelled", reason=why, finished=iso(now))

    async def _launch(self, schedule: Schedule, slot: Slot, now: datetime) -> Slot | None:
        claimed = self.store.claim(slot, iso(now))
        if claimed is None:
            return None
        launcher = self.launchers[schedule.spec.kind]
        try:
            snapshot = self.store.snapshot(schedule.owner, schedule.name)
            run_id = await launcher.launch(
                ScheduledRun(schedule, snapshot, parse_iso(slot.logical), claimed.attempts, self._run_ended)
            )
        except CubeError as exc:
            self._record(schedule, claimed, Outcome("failed", f"the run did not start: {exc.message}"), now)
            return None
        except Exception as exc:  # a launch that breaks must not leave the slot running forever
            LOG.exception("cube-jupyter: launching %s/%s for %s", slot.owner, slot.schedule, slot.logical)
            self._record(schedule, claimed, Outcome("failed", f"the run did not start: {exc}"), now)
            return None
        return self.store.settle(claimed, run_id=run_id)

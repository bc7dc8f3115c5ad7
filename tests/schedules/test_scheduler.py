"""The scheduler's rules with an injected clock (no sleeps): fire times on time and missed, catch-up
none/latest/all, exactly once per logical time, concurrency policies, retries with backoff,
dependencies with their timeout, pause and resume, and backfill.

Runs go through a launcher the test drives (it records each launch and ends runs when told): what is
tested here is when runs start, not how; `test_scheduled_runs.py` runs real pipelines and jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import Conflict, Forbidden, InvalidInput, NotFound, PayloadTooLarge
from cube_jupyter.schedules.scheduler import Outcome, ScheduledRun
from cube_jupyter.schedules.service import ScheduleService
from cube_jupyter.schedules.store import Schedule, ScheduleStore
from cube_jupyter.schedules.timing import iso
from tests.schedules.clocks import SteppedClock

T0 = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)


@dataclass
class DrivenLauncher:
    """Starts nothing: records each launch as `{name}@{logical}#{attempt}` and reports the outcome the
    test set for it (None: still running)."""

    launches: list[str] = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    refuse: str | None = None
    ends: dict[str, Any] = field(default_factory=dict)

    def prepare(self, owner: str, schedule: Schedule, snapshot: str | None) -> str | None:
        return '{"cells": []}'

    async def launch(self, run: ScheduledRun) -> str:
        schedule, logical, attempt = run.schedule, run.logical, run.attempt
        if self.refuse:
            raise Forbidden(self.refuse, field="resources.gpu")
        run_id = f"{schedule.name}@{iso(logical)}#{attempt}"
        self.launches.append(run_id)
        self.ends[run_id] = run.on_end
        return run_id

    def outcome(self, owner: str, run_id: str) -> Outcome | None:
        return self.outcomes.get(run_id)

    async def cancel(self, owner: str, run_id: str) -> None:
        self.cancelled.append(run_id)
        self.outcomes[run_id] = Outcome("cancelled")

    def finish(self, state: str = "succeeded", message: str | None = None) -> None:
        """End every run still going, saying so as a launcher that drives its runs does."""
        for run_id in self.launches:
            if run_id not in self.outcomes:
                self.outcomes[run_id] = Outcome(state, message)
                self.ends[run_id](run_id)


@dataclass
class Env:
    service: ScheduleService
    clock: SteppedClock
    launcher: DrivenLauncher
    loop: asyncio.AbstractEventLoop

    def create(self, caller: str = "alice", **body: Any) -> Schedule:
        body.setdefault("path", "nightly.ipynb")
        return self.loop.run_until_complete(self.service.create(caller, body))

    def patch(self, name: str, caller: str = "alice", **changes: Any) -> Schedule:
        return self.loop.run_until_complete(self.service.patch(caller, name, changes))

    def at(self, seconds: float) -> None:
        """Move the clock to T0 + seconds and let the scheduler take one pass."""
        self.clock.moment = T0
        self.clock.advance(seconds)
        self.loop.run_until_complete(self.service.scheduler.tick())

    def states(self, name: str, owner: str = "alice") -> dict[str, str]:
        return {slot.logical[11:19]: slot.state for slot in self.service.store.slots(owner, name)}


def settings(root: Path, **schedules: Any):  # type: ignore[no-untyped-def]
    config = {
        "CubeWorkbench": {"state_dir": str(root / "state"), "default_user": "alice", "admin_users": ["boss"]},
        "CubeSchedules": {"on_time_seconds": 30, **schedules},
    }
    return load_settings(Config(config)).schedules


def make_env(root: Path, **schedules: Any) -> Env:
    """A schedule service at T0 on the stepped clock, its runs started by a `DrivenLauncher`."""
    clock = SteppedClock(T0)
    launcher = DrivenLauncher()
    launchers = {"notebook": launcher, "training": launcher}
    service = ScheduleService(
        settings(root, **schedules), ScheduleStore.in_state_dir(root / "state"), launchers, clock=clock
    )
    return Env(service, clock, launcher, asyncio.new_event_loop())


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    made = make_env(tmp_path)
    yield made
    made.loop.close()


def test_an_interval_fires_each_time_once_and_records_it(env: Env) -> None:
    env.create(name="every-minute", interval_seconds=60)
    env.at(59)
    assert env.launcher.launches == []
    env.at(60)
    env.at(60.5)  # the same second again: nothing new
    assert env.launcher.launches == ["every-minute@2026-11-28T12:01:00Z#1"]
    env.launcher.finish()
    env.at(61)
    assert env.states("every-minute") == {"12:01:00": "succeeded"}
    runs = env.service.runs("alice", "every-minute")
    assert runs[0].to_dict()["logical_date"] == "2026-11-28T12:01:00Z" and runs[0].run_id


def test_a_cron_fires_in_its_timezone(env: Env) -> None:
    # 13:05 in Berlin is 12:05 UTC in November.
    env.create(name="berlin", cron="5 13 * * *", timezone="Europe/Berlin")
    schedule = env.service.get("alice", "berlin")
    assert schedule.next_fire == "2026-11-28T12:05:00Z"
    env.at(5 * 60)
    assert env.launcher.launches == ["berlin@2026-11-28T12:05:00Z#1"]
    assert env.service.get("alice", "berlin").next_fire == "2026-11-29T12:05:00Z"


@pytest.mark.parametrize(
    ("catchup", "expected"),
    [
        ("none", ["12:10:00"]),
        ("latest", ["12:10:00"]),
        ("all", [f"12:{minute:02d}:00" for minute in range(1, 11)]),
    ],
)
def test_missed_fire_times_run_as_catchup_says(env: Env, catchup: str, expected: list[str]) -> None:
    """Down from 12:00 to 12:04:45 (four fire times missed), paused until 12:10 (five more), then
    12:10 on time."""
    env.create(name="c", interval_seconds=60, catchup=catchup, max_concurrency=10)
    env.at(4 * 60 + 45)
    if catchup == "latest":
        assert [launch[13:21] for launch in env.launcher.launches] == ["12:04:00"]
    env.clock.moment = T0
    env.loop.run_until_complete(env.service.patch("alice", "c", {"paused": True}))
    env.at(9 * 60)  # paused: nothing new
    env.patch("c", paused=False)
    env.at(10 * 60)  # resumed at 12:10: the paused fire times are missed ones, 12:10 is on time
    on_time_and_caught_up = sorted(launch[13:21] for launch in env.launcher.launches)
    if catchup == "latest":
        expected = ["12:04:00", "12:10:00"]
    assert on_time_and_caught_up == expected


def test_catchup_all_is_bounded_and_runs_at_most_max_concurrency(tmp_path: Path) -> None:
    made = make_env(tmp_path, max_catchup_runs=5)
    service, clock, launcher, loop = made.service, made.clock, made.launcher, made.loop
    loop.run_until_complete(
        service.create(
            "alice",
            {"name": "c", "path": "a.ipynb", "interval_seconds": 60, "catchup": "all", "max_concurrency": 2},
        )
    )
    clock.advance(3600)
    loop.run_until_complete(service.scheduler.tick())
    slots = service.store.slots("alice", "c")
    # 13:00 on time, and the newest five of the 59 missed before it.
    assert [s.logical[11:16] for s in slots] == ["13:00", "12:59", "12:58", "12:57", "12:56", "12:55"]
    assert [s.origin for s in slots] == ["schedule"] + ["catchup"] * 5
    assert [launch[13:18] for launch in launcher.launches] == ["12:55", "12:56"]
    launcher.finish()
    loop.run_until_complete(service.scheduler.tick())
    assert len(launcher.launches) == 4
    loop.close()


def test_a_logical_time_runs_once_however_it_is_asked_for(env: Env) -> None:
    env.create(name="once", interval_seconds=60, catchup="all", max_concurrency=5)
    env.at(180)  # 12:01-12:03 missed, caught up
    env.launcher.finish()
    env.at(181)
    result = env.service.backfill(
        "alice", "once", {"start": "2026-11-28T12:00:00Z", "end": "2026-11-28T12:04:00Z", "parallel": 2}
    )
    assert result["already_succeeded"] == [
        "2026-11-28T12:01:00Z",
        "2026-11-28T12:02:00Z",
        "2026-11-28T12:03:00Z",
    ]
    assert result["to_run"] == ["2026-11-28T12:00:00Z", "2026-11-28T12:04:00Z"]
    env.at(240)  # 12:04 is also a scheduled fire time now: it is the backfill's slot, run once
    assert sorted(env.launcher.launches) == sorted(f"once@2026-11-28T12:0{m}:00Z#1" for m in range(5))
    rerun = env.service.backfill(
        "alice", "once", {"start": "2026-11-28T12:01:00Z", "end": "2026-11-28T12:01:00Z", "rerun": True}
    )
    assert rerun["to_run"] == ["2026-11-28T12:01:00Z"]
    env.launcher.finish()
    env.at(241)
    assert env.launcher.launches.count("once@2026-11-28T12:01:00Z#1") == 2


def test_backfill_dry_run_lists_and_parallel_bounds(env: Env) -> None:
    env.create(name="daily", cron="0 2 * * *")
    plan = env.service.backfill(
        "alice", "daily", {"start": "2026-11-01", "end": "2026-11-10", "parallel": 3, "dry_run": True}
    )
    assert plan["to_run"][0] == "2026-11-01T02:00:00Z" and len(plan["to_run"]) == 10  # the 10th included
    assert env.service.store.slots("alice", "daily") == []
    env.service.backfill("alice", "daily", {"start": "2026-11-01", "end": "2026-11-10", "parallel": 3})
    env.at(1)
    assert len(env.launcher.launches) == 3
    env.launcher.finish()
    env.at(2)
    assert len(env.launcher.launches) == 6
    with pytest.raises(InvalidInput) as bad:
        env.service.backfill("alice", "daily", {"start": "2026-11-10", "end": "2026-11-01"})
    assert bad.value.field == "end"
    with pytest.raises(InvalidInput) as bad:
        env.service.backfill("alice", "daily", {"start": "2026-11-01", "end": "2026-11-02", "parallel": 0})
    assert bad.value.field == "parallel"


def test_forbid_skips_a_fire_time_while_a_run_goes_on(env: Env) -> None:
    env.create(name="f", interval_seconds=60, concurrency_policy="Forbid")
    env.at(60)
    env.at(120)
    states = env.states("f")
    assert states == {"12:01:00": "running", "12:02:00": "skipped"}
    reason = env.service.store.slot("alice", "f", "2026-11-28T12:02:00Z").reason  # type: ignore[union-attr]
    assert "Forbid" in reason and "12:01:00" in reason


def test_allow_waits_for_a_free_place_and_replace_cancels_the_old_run(env: Env) -> None:
    env.create(name="a", interval_seconds=60)  # Allow, max_concurrency 1: the second waits
    env.create(name="r", interval_seconds=60, concurrency_policy="Replace")
    env.at(60)
    env.at(120)
    assert env.states("a") == {"12:01:00": "running", "12:02:00": "pending"}
    assert env.states("r") == {"12:01:00": "cancelled", "12:02:00": "running"}
    assert env.launcher.cancelled == ["r@2026-11-28T12:01:00Z#1"]
    env.launcher.outcomes["a@2026-11-28T12:01:00Z#1"] = Outcome("succeeded")
    env.at(121)
    assert env.states("a") == {"12:01:00": "succeeded", "12:02:00": "running"}


def test_a_failed_run_is_retried_after_its_backoff_then_fails(env: Env) -> None:
    env.create(name="flaky", interval_seconds=3600, retries=2, retry_backoff_seconds=30)
    env.at(3600)
    env.launcher.finish("failed", "ZeroDivisionError: division by zero")
    env.at(3601)
    slot = env.service.store.slot("alice", "flaky", "2026-11-28T13:00:00Z")
    assert slot is not None and slot.state == "pending" and slot.attempts == 1
    assert "ZeroDivisionError" in (slot.reason or "") and slot.to_dict()["retry_at"] == "2026-11-28T13:00:31Z"
    env.at(3630)
    assert len(env.launcher.launches) == 1  # not before its backoff
    env.at(3631)
    assert env.launcher.launches[-1] == "flaky@2026-11-28T13:00:00Z#2"
    env.launcher.finish("failed", "again")
    env.at(3632)
    env.at(3632 + 60)  # the second backoff doubles
    assert env.launcher.launches[-1] == "flaky@2026-11-28T13:00:00Z#3"
    env.launcher.finish("failed", "for good")
    env.at(3700)
    slot = env.service.store.slot("alice", "flaky", "2026-11-28T13:00:00Z")
    assert slot is not None and (slot.state, slot.attempts, slot.reason) == ("failed", 3, "for good")


def test_a_run_that_cannot_start_is_a_failed_attempt_with_the_cause(env: Env) -> None:
    env.create(name="gpu", interval_seconds=60)
    env.launcher.refuse = "user 'alice' holds 1 GPU, the quota"
    env.at(60)
    slot = env.service.store.slot("alice", "gpu", "2026-11-28T12:01:00Z")
    assert (
        slot is not None
        and slot.state == "failed"
        and "the run did not start: user 'alice' holds" in (slot.reason or "")
    )


def test_depends_on_waits_for_the_same_logical_time_then_skips_with_the_reason(env: Env) -> None:
    env.create(name="extract", interval_seconds=60)
    env.create(name="train", interval_seconds=60, depends_on="extract", depends_timeout_seconds=90)
    env.at(60)
    assert env.launcher.launches == ["extract@2026-11-28T12:01:00Z#1"]
    slot = env.service.store.slot("alice", "train", "2026-11-28T12:01:00Z")
    assert slot is not None and "waiting for 'extract'" in (slot.reason or "")
    env.launcher.finish()
    env.at(61)
    env.at(62)
    assert "train@2026-11-28T12:01:00Z#1" in env.launcher.launches
    # extract's 12:02 run fails: train's 12:02 is skipped, saying why.
    env.at(120)
    env.launcher.outcomes["extract@2026-11-28T12:02:00Z#1"] = Outcome("failed", "boom")
    env.at(121)
    env.at(122)
    slot = env.service.store.slot("alice", "train", "2026-11-28T12:02:00Z")
    assert slot is not None and slot.state == "skipped" and "'extract'" in (slot.reason or "")
    # extract paused: train waits its timeout, then skips.
    env.patch("extract", paused=True)
    env.at(180)
    env.at(180 + 91)
    slot = env.service.store.slot("alice", "train", "2026-11-28T12:03:00Z")
    assert slot is not None and slot.state == "skipped" and "depends_timeout_seconds" in (slot.reason or "")


def test_bad_schedules_are_refused_naming_the_field(env: Env) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "x", "cron": "61 * * * *"}, "cron"),
        ({"name": "x", "cron": "* * * *"}, "cron"),
        ({"name": "x", "cron": "0 2 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"name": "x", "cron": "0 2 * * *", "start": "2026-12-02", "end": "2026-12-01"}, "end"),
        ({"name": "x"}, "cron"),
        ({"name": "x", "cron": "0 2 * * *", "interval_seconds": 60}, "cron"),
        ({"name": "x", "cron": "0 2 * * *", "depends_on": "nope"}, "depends_on"),
        ({"name": "x", "cron": "0 2 * * *", "catchup": "some"}, "catchup"),
        ({"name": "x", "cron": "0 2 * * *", "concurrency_policy": "Queue"}, "concurrency_policy"),
        ({"name": "X!", "cron": "0 2 * * *"}, "name"),
        ({"name": "x", "cron": "0 2 * * *", "retries": -1}, "retries"),
        ({"name": "x", "cron": "0 2 * * *", "colour": "red"}, "colour"),
        ({"name": "x", "cron": "0 2 * * *", "path": "../outside.ipynb"}, "path"),
        ({"name": "x", "kind": "training", "cron": "0 2 * * *", "path": None}, "job"),
        ({"name": "x", "cron": "0 2 * * *", "start": "0999-01-01T00:00:00Z"}, "start"),
        ({"name": "x", "cron": "0 2 * * *", "end": "9999-12-31"}, "end"),
        ({"name": "x", "cron": "0 2 * * *", "timezone": "localtime"}, "timezone"),
        ({"name": "x", "cron": "0 2 * * *", "parameters": []}, "parameters"),
        ({"name": "x", "cron": "0 2 * * *", "parameters": {"blob": "x" * 70_000}}, "parameters"),
        ({"name": "x", "cron": ",".join(["1"] * 200) + " * * * *"}, "cron"),
    ]
    for body, field_name in cases:
        with pytest.raises((InvalidInput, Forbidden, PayloadTooLarge)) as refused:
            env.create(**body)
        assert refused.value.field == field_name, body
    env.create(name="a", cron="0 2 * * *")
    env.create(name="b", cron="0 2 * * *", depends_on="a")
    with pytest.raises(InvalidInput) as cycle:
        env.patch("a", depends_on="b")
    assert cycle.value.field == "depends_on" and "makes a cycle: a -> b -> a" in cycle.value.message
    env.create(caller="bob", name="theirs", cron="0 2 * * *")
    with pytest.raises(InvalidInput) as other:
        env.create(name="c", cron="0 2 * * *", depends_on="theirs")
    assert other.value.field == "depends_on"
    with pytest.raises(Conflict):
        env.create(name="a", cron="0 2 * * *")
    with pytest.raises(Conflict) as used:
        env.loop.run_until_complete(env.service.delete("alice", "a"))
    assert used.value.field == "name" and "'b'" in used.value.message


def test_owners_only_admins_by_user(env: Env) -> None:
    env.create(name="mine", cron="0 2 * * *")
    with pytest.raises(NotFound):
        env.service.get("bob", "mine")
    with pytest.raises(Forbidden):
        env.service.get("bob", "mine", user="alice")
    assert env.service.get("boss", "mine", user="alice").owner == "alice"
    assert [s["name"] for s in env.service.list("bob")] == []
    assert [s["name"] for s in env.service.list("boss", all_users=True)] == ["mine"]
    with pytest.raises(Forbidden):
        env.service.list("bob", all_users=True)


def test_preview_and_words(env: Env) -> None:
    preview = env.service.preview({"cron": "30 2 * * 1-5", "timezone": "America/New_York", "count": "3"})
    assert preview["describe"] == "At 02:30 on Monday through Friday (America/New_York)"
    assert preview["next"] == ["2026-11-30T07:30:00Z", "2026-12-01T07:30:00Z", "2026-12-02T07:30:00Z"]
    with pytest.raises(InvalidInput) as bad:
        env.service.preview({"cron": "x"})
    assert bad.value.field == "cron"
    with pytest.raises(InvalidInput) as bad:
        env.service.preview({"cron": "* * * * *", "count": "500"})
    assert bad.value.field == "count"


def test_the_loop_wakes_at_the_next_fire_time(env: Env) -> None:
    """The loop sleeps until the next fire time (never a whole poll past it), and ends on close."""
    env.create(name="soon", interval_seconds=60)
    env.clock.moment = T0
    env.clock.advance(59.75)

    async def one_pass() -> None:
        await env.service.start()
        for _ in range(3):
            await asyncio.sleep(0)
        await env.service.close()

    env.loop.run_until_complete(one_pass())
    assert env.clock.sleeps and env.clock.sleeps[0] == pytest.approx(0.25)


def test_a_run_unreadable_for_now_stays_running_and_a_gone_one_fails(env: Env) -> None:
    from cube_jupyter.errors import BackendUnavailable

    env.create(name="job", interval_seconds=60)
    env.at(60)
    reads: list[Exception] = [BackendUnavailable("jobs are starting"), NotFound("no job", field="name")]

    def outcome(owner: str, run_id: str) -> Outcome | None:
        raise reads.pop(0)

    env.launcher.outcome = outcome  # type: ignore[method-assign]
    env.at(61)
    assert env.states("job") == {"12:01:00": "running"}
    env.at(62)
    slot = env.service.store.slot("alice", "job", "2026-11-28T12:01:00Z")
    assert slot is not None and slot.state == "failed" and "is gone" in (slot.reason or "")


def test_a_long_catch_up_runs_every_logical_time_in_order(tmp_path: Path) -> None:
    """More pending slots than one pass reads (it reads as many as could start): all run, oldest first."""
    made = make_env(tmp_path, max_catchup_runs=150)
    service, clock, launcher, loop = made.service, made.clock, made.launcher, made.loop
    body = {"name": "c", "path": "a.ipynb", "interval_seconds": 60, "catchup": "all", "max_concurrency": 3}
    loop.run_until_complete(service.create("alice", body))
    clock.advance(150 * 60 + 30)
    for _ in range(60):
        loop.run_until_complete(service.scheduler.tick())
        launcher.finish()
    logicals = [launch.split("@")[1].split("#")[0] for launch in launcher.launches]
    assert len(logicals) == 150 and logicals == sorted(logicals) and len(set(logicals)) == 150
    loop.close()


def test_paused_holds_fire_times_but_runs_what_was_asked_for(env: Env) -> None:
    env.create(name="p", interval_seconds=60, paused=True)
    slot = env.service.run_now("alice", "p")
    with pytest.raises(Conflict) as twice:
        env.service.run_now("alice", "p")  # the first has not started yet
    assert twice.value.field == "name" and slot.logical in twice.value.message
    env.service.backfill(
        "alice", "p", {"start": "2026-11-28T12:01:00Z", "end": "2026-11-28T12:02:00Z", "parallel": 2}
    )
    env.at(1)
    assert sorted(run.split("#")[0] for run in env.launcher.launches) == [
        "p@2026-11-28T12:00:00Z",
        "p@2026-11-28T12:01:00Z",
        "p@2026-11-28T12:02:00Z",
    ]
    env.launcher.finish()
    env.patch("p", paused=False, catchup="all")
    env.patch("p", paused=True)
    env.at(3 * 60 + 1)  # nothing fires while paused
    assert len(env.launcher.launches) == 3


def test_a_long_downtime_of_a_frequent_cron_is_planned_at_once(env: Env) -> None:
    """A minutely cron paused for 18 months: the plan walks back from now (a few steps), not
    forward through 777,600 minutes, and keeps what `catchup: latest` keeps."""
    import cronsim

    steps = 0
    forward = cronsim.CronSim.__next__

    def counted(self: cronsim.CronSim) -> datetime:
        nonlocal steps
        steps += 1
        return forward(self)

    env.create(name="minutely", cron="* * * * *", catchup="latest", paused=True)
    env.clock.advance(540 * 86400)
    env.patch("minutely", paused=False)
    cronsim.CronSim.__next__ = counted  # type: ignore[method-assign]
    try:
        env.loop.run_until_complete(env.service.scheduler.tick())
    finally:
        cronsim.CronSim.__next__ = forward  # type: ignore[method-assign]
    assert steps < 2000
    assert [run.split("@")[1][:16] for run in env.launcher.launches] == ["2028-05-21T12:00"]


def test_edits_are_checked_as_a_new_schedule_is(env: Env) -> None:
    env.create(name="e", cron="0 2 * * *")
    refusal = Forbidden("the target refuses", field="target")

    def prepare(owner: str, schedule: Schedule, snapshot: str | None) -> str | None:
        assert snapshot == '{"cells": []}'  # checked against the snapshot it keeps, not a new one
        if schedule.spec.target == "cluster":
            raise refusal
        return snapshot

    env.launcher.prepare = prepare  # type: ignore[method-assign]
    with pytest.raises(Forbidden):
        env.patch("e", target="cluster")
    assert env.service.get("alice", "e").spec.target == "local"  # nothing changed


def test_compact_dates_and_backfills_before_an_interval_began(env: Env) -> None:
    env.create(name="d", cron="0 2 * * *", end="20261231")
    assert env.service.get("alice", "d").spec.end == "2026-12-31T23:59:59Z"
    env.create(name="i", interval_seconds=3600)
    with pytest.raises(InvalidInput) as before:
        env.service.backfill("alice", "i", {"start": "2026-11-01", "end": "2026-11-02"})
    assert before.value.field == "start" and "set `start`" in before.value.message

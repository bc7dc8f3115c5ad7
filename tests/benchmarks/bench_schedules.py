"""Scheduler figures, each beside a baseline run in the same process:

1. fire-time lateness over 200 fires with an injected clock (sleeping costs nothing, the scheduler's
   own work counts): 50 interval schedules, beside a bare timer that only wakes at each fire time;
2. fire-time lateness over 60 real-time fires (an every-second schedule, the real clock), beside an
   asyncio timer sleeping to each fire time;
3. CPU of an idle scheduler holding 500 daily schedules over 20 s, beside an empty 1 Hz asyncio loop;
4. catching up 1,000 missed fire times (`catchup: all`, max_concurrency 4) as real pipeline runs of a
   one-step notebook (cached after the first), beside the same 1,000 runs started straight through
   `PipelineService`, four at a time.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from traitlets.config import Config

from cube_jupyter.config import Settings, load_settings
from cube_jupyter.schedules.scheduler import Outcome, ScheduledRun
from cube_jupyter.schedules.service import ScheduleService
from cube_jupyter.schedules.store import Schedule, ScheduleStore
from cube_jupyter.schedules.timing import iso
from cube_jupyter.services import Workbench
from tests.benchmarks.timing import print_table
from tests.pipelines.notebooks import code, notebook, write

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


class CompressedClock:
    """Virtual time that skips every sleep but runs on with real time while work is done: lateness
    measured on it is the scheduler's own delay, not the timer's."""

    def __init__(self, start: datetime) -> None:
        self.virtual = start
        self.real = time.perf_counter()

    def now(self) -> datetime:
        return self.virtual + timedelta(seconds=time.perf_counter() - self.real)

    async def sleep(self, seconds: float) -> None:
        self.virtual = self.now() + timedelta(seconds=seconds)
        self.real = time.perf_counter()
        await asyncio.sleep(0)


class TimedLauncher:
    """Records how late each launch came (the clock's now minus the logical time); runs end at once."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.lateness: list[float] = []

    def prepare(self, owner: str, schedule: Schedule, snapshot: str | None) -> str | None:
        return None

    async def launch(self, run: ScheduledRun) -> str:
        self.lateness.append((self.clock.now() - run.logical).total_seconds())
        return f"{run.schedule.name}@{iso(run.logical)}"

    def outcome(self, owner: str, run_id: str) -> Outcome | None:
        return Outcome("succeeded")

    async def cancel(self, owner: str, run_id: str) -> None:
        return None


def _settings(root: Path, **schedules: Any) -> Settings:
    return load_settings(
        Config(
            {
                "CubeWorkbench": {"state_dir": str(root / "state"), "default_user": "bench"},
                "CubeStorage": {"url": str(root / "artifacts")},
                "CubeSchedules": schedules,
            }
        )
    )


async def _until(service: ScheduleService, enough: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not enough() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def injected_clock_lateness(root: Path) -> tuple[list[float], list[float]]:
    clock = CompressedClock(T0)
    launcher = TimedLauncher(clock)
    settings = _settings(root)
    service = ScheduleService(
        settings.schedules, ScheduleStore.in_state_dir(root / "state"), {"notebook": launcher}, clock=clock
    )
    for index in range(50):
        await service.create(
            "bench", {"name": f"s{index}", "path": "x.ipynb", "interval_seconds": 60 + index}
        )
    await service.start()
    await _until(service, lambda: len(launcher.lateness) >= 200, 120)
    await service.close()
    # The baseline: a timer on the same clock that only wakes at each of 200 fire times.
    baseline: list[float] = []
    timer = CompressedClock(T0)
    moment = T0
    for _ in range(200):
        moment += timedelta(seconds=60)
        await timer.sleep((moment - timer.now()).total_seconds())
        baseline.append((timer.now() - moment).total_seconds())
    return launcher.lateness[:200], baseline


async def real_time_lateness(root: Path) -> tuple[list[float], list[float]]:
    settings = _settings(root, poll_seconds=1.0)
    store = ScheduleStore.in_state_dir(root / "state")

    class Real:
        def now(self) -> datetime:
            return datetime.now(UTC)

        async def sleep(self, seconds: float) -> None:
            await asyncio.sleep(seconds)

    launcher = TimedLauncher(Real())
    service = ScheduleService(settings.schedules, store, {"notebook": launcher}, clock=Real())
    await service.create("bench", {"name": "every-second", "path": "x.ipynb", "interval_seconds": 1})
    await service.start()
    await _until(service, lambda: len(launcher.lateness) >= 60, 90)
    await service.close()
    baseline = []
    for _ in range(60):
        target = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        await asyncio.sleep((target - datetime.now(UTC)).total_seconds())
        baseline.append((datetime.now(UTC) - target).total_seconds())
    return launcher.lateness[:60], baseline


async def idle_cpu(root: Path, seconds: float = 20.0) -> tuple[float, float]:
    settings = _settings(root, max_schedules_per_user=500)
    service = ScheduleService(
        settings.schedules,
        ScheduleStore.in_state_dir(root / "state"),
        {"notebook": TimedLauncher(None)},
    )
    for index in range(500):
        minute, hour = index % 60, (index // 60) % 24
        await service.create(
            "bench", {"name": f"daily-{index}", "path": "x.ipynb", "cron": f"{minute} {hour} * * *"}
        )
    # Not one of them due within the measurement: move every next fire a day out.
    for schedule in service.store.list("bench"):
        service.store.advance("bench", schedule.name, schedule.watermark, iso(T0 + timedelta(days=400)))
    await service.start()
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    scheduler_share = (time.process_time() - cpu) / (time.perf_counter() - wall)
    await service.close()

    async def empty() -> None:
        while True:
            await asyncio.sleep(1.0)

    task = asyncio.create_task(empty())
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    empty_share = (time.process_time() - cpu) / (time.perf_counter() - wall)
    task.cancel()
    return scheduler_share, empty_share


async def catch_up(root: Path, count: int = 1000) -> tuple[float, float]:
    (root / "work").mkdir(parents=True)
    write(notebook(code("total = sum(range(1000))", "step:only")), root / "work" / "one.ipynb")
    settings = _settings(root, max_catchup_runs=count)
    workbench = Workbench(settings, root_dir=str(root / "work"), pool_size=4)
    service = workbench.schedules
    await workbench.started_pipelines()
    stamp = datetime.now(UTC).replace(microsecond=0)
    await service.create(
        "bench",
        {
            "name": "catchup",
            "path": "one.ipynb",
            "interval_seconds": 60,
            "catchup": "all",
            "max_concurrency": 4,
            "start": iso(stamp - timedelta(minutes=count)),
        },
    )
    # As if the workbench had been down since the schedule began.
    schedule = service.store.get("bench", "catchup")
    assert schedule is not None
    service.store.advance("bench", "catchup", iso(stamp - timedelta(minutes=count, seconds=1)), iso(stamp))
    started = time.perf_counter()
    await service.start()

    def done() -> bool:
        return (
            sum(s.state == "succeeded" for s in service.store.slots("bench", "catchup", limit=count + 5))
            >= count
        )

    await _until(service, done, 1800)
    through_scheduler = time.perf_counter() - started
    await service.close()
    # The baseline: the same runs straight through the pipeline service, four at a time.
    from cube_jupyter.pipelines.targets import RunRequest

    pipelines = workbench.pipelines
    gate = asyncio.Semaphore(4)

    async def one(index: int) -> None:
        async with gate:
            run = await pipelines.start_run("bench", RunRequest("one.ipynb"))
            await pipelines.wait("bench", run.id)

    started = time.perf_counter()
    await asyncio.gather(*(one(index) for index in range(count)))
    direct = time.perf_counter() - started
    await workbench.close()
    await pipelines.close()
    return through_scheduler, direct


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        ours, timer = await injected_clock_lateness(Path(folder))
    print_table(
        "Fire-time lateness, 200 fires of 50 interval schedules, injected clock",
        [("bare timer on the same clock", timer), ("scheduler", ours)],
        unit="ms",
        baseline="bare timer on the same clock",
    )
    _p99("scheduler (injected clock)", ours)
    with tempfile.TemporaryDirectory() as folder:
        ours, timer = await real_time_lateness(Path(folder))
    print_table(
        "Fire-time lateness, 60 real-time fires (every second)",
        [("asyncio timer to each fire time", timer), ("scheduler", ours)],
        unit="ms",
        baseline="asyncio timer to each fire time",
    )
    _p99("scheduler (real time)", ours)
    with tempfile.TemporaryDirectory() as folder:
        scheduler_share, empty_share = await idle_cpu(Path(folder))
    print("\nIdle CPU over 20 s (share of one core)")
    print(f"  empty 1 Hz asyncio loop            {empty_share * 100:.3f} %")
    print(f"  scheduler with 500 schedules       {scheduler_share * 100:.3f} %")
    with tempfile.TemporaryDirectory() as folder:
        through_scheduler, direct = await catch_up(Path(folder))
    print("\nCatching up 1,000 missed fire times (catchup: all, 4 at a time, cached after the first)")
    print(f"  1,000 runs straight through PipelineService   {direct:.1f} s")
    ratio = through_scheduler / direct
    print(f"  through the scheduler                         {through_scheduler:.1f} s ({ratio:.2f}x)")


def _p99(name: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    print(f"  {name}: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")

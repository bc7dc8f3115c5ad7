"""The `cube-jupyter schedule` handlers, named by the parsers in `schedule.py`: each builds the schedule
service through the composition root and calls it, in the workbench's shared schedule store."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from cube_jupyter.cli.jobs_commands import read_spec_file
from cube_jupyter.cli.pipeline_commands import parameter_values
from cube_jupyter.cli.table import print_rows
from cube_jupyter.config import Settings
from cube_jupyter.errors import InvalidInput
from cube_jupyter.schedules.service import ScheduleService
from cube_jupyter.schedules.timing import parse_iso
from cube_jupyter.services import open_workbench

INVALID = 2
# A scheduler that has not said so for this long is taken for stopped (it beats every 10 s).
STALE_BEAT_SECONDS = 30.0
WAIT_POLL_SECONDS = 0.5
FINISHED = ("succeeded", "failed", "skipped", "cancelled")


def _user(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.user or settings.workbench.default_user)


def _with_service(
    args: argparse.Namespace, settings: Settings, act: Callable[[ScheduleService, str], Awaitable[int]]
) -> int:
    """Run `act(service, caller)`; a refused request is exit 2 (bad input) or 1, with its message."""

    async def go() -> int:
        async with open_workbench(settings, root_dir=str(Path.cwd()), cluster_runs=True) as workbench:
            try:
                return await act(workbench.schedules, settings.workbench.default_user)
            except InvalidInput as exc:
                print(f"error: {exc.message}", file=sys.stderr)
                return INVALID

    return asyncio.run(go())


def create(args: argparse.Namespace, settings: Settings) -> int:
    body: dict[str, Any] = {
        "name": args.name,
        "timezone": args.timezone,
        "catchup": args.catchup,
        "max_concurrency": args.max_concurrency,
        "concurrency_policy": args.concurrency_policy,
        "retries": args.retries,
        "retry_backoff_seconds": args.retry_backoff,
        "depends_timeout_seconds": args.depends_timeout,
        "paused": args.paused,
        "parameters": parameter_values(args.parameter),
    }
    for key, value in (
        ("cron", args.cron),
        ("interval_seconds", args.every),
        ("start", args.start),
        ("end", args.end),
        ("depends_on", args.depends_on),
        ("target", args.target),
    ):
        if value is not None:
            body[key] = value

    async def act(service: ScheduleService, caller: str) -> int:
        if args.notebook:
            body["path"] = _relative(args.notebook)
        else:
            body.update(kind="training", job=read_spec_file(args.job))
        schedule = await service.create(caller, body, args.user)
        view = service.view(schedule)
        print(f"schedule {schedule.name!r} saved: {view['describe']}; next run {view['next_fire'] or '-'}")
        _say_if_no_scheduler(service)
        return 0

    return _with_service(args, settings, act)


def list_schedules(args: argparse.Namespace, settings: Settings) -> int:
    async def act(service: ScheduleService, caller: str) -> int:
        views = service.list(caller, args.user)
        if args.json:
            print(json.dumps(views, indent=2))
            return 0
        header = ("NAME", "KIND", "SCHEDULE", "STATE", "NEXT", "LAST RUN")
        print_rows(
            header,
            [
                (
                    view["name"],
                    view["kind"],
                    view["describe"],
                    view["state"],
                    view["next_fire"] or "-",
                    _last(view["last_run"]),
                )
                for view in views
            ],
        )
        return 0

    return _with_service(args, settings, act)


def show(args: argparse.Namespace, settings: Settings) -> int:
    async def act(service: ScheduleService, caller: str) -> int:
        view = service.view(service.get(caller, args.name, args.user))
        runs = service.runs(caller, args.name, args.user, limit=50)
        if args.json:
            print(json.dumps({**view, "runs": [slot.to_dict() for slot in runs]}, indent=2))
            return 0
        what = view["path"] or f"training job {view['job'].get('name', '')!r}"
        print(f"{view['name']} ({view['kind']}: {what}), {view['state']}")
        print(
            f"  {view['describe']}; catchup {view['catchup']}; {view['concurrency_policy']} up to "
            f"{view['max_concurrency']}; retries {view['retries']}"
        )
        if view["depends_on"]:
            print(
                f"  after {view['depends_on']!r} succeeds (waits up to {view['depends_timeout_seconds']} s)"
            )
        print(f"  next run: {view['next_fire'] or '-'}")
        print_rows(
            ("LOGICAL DATE", "STATE", "ORIGIN", "ATTEMPTS", "RUN", "REASON"),
            [(s.logical, s.state, s.origin, str(s.attempts), s.run_id or "-", s.reason or "") for s in runs],
        )
        return 0

    return _with_service(args, settings, act)


def pause(args: argparse.Namespace, settings: Settings) -> int:
    return _patch(args, settings, {"paused": True}, "paused")


def resume(args: argparse.Namespace, settings: Settings) -> int:
    return _patch(args, settings, {"paused": False}, "resumed")


def snapshot(args: argparse.Namespace, settings: Settings) -> int:
    return _patch(args, settings, {"refresh_snapshot": True}, "snapshotted anew")


def _patch(args: argparse.Namespace, settings: Settings, changes: dict[str, Any], done: str) -> int:
    async def act(service: ScheduleService, caller: str) -> int:
        schedule = await service.patch(caller, args.name, changes, args.user)
        print(f"schedule {schedule.name!r} {done}")
        return 0

    return _with_service(args, settings, act)


def delete(args: argparse.Namespace, settings: Settings) -> int:
    async def act(service: ScheduleService, caller: str) -> int:
        await service.delete(caller, args.name, args.user)
        print(f"schedule {args.name!r} deleted")
        return 0

    return _with_service(args, settings, act)


def run(args: argparse.Namespace, settings: Settings) -> int:
    async def act(service: ScheduleService, caller: str) -> int:
        slot = service.run_now(caller, args.name, args.user)
        print(f"run of {args.name!r} for {slot.logical} queued")
        _say_if_no_scheduler(service)
        if not args.wait:
            return 0
        return await _wait(service, caller, args, [slot.logical])

    return _with_service(args, settings, act)


def backfill(args: argparse.Namespace, settings: Settings) -> int:
    body = {
        "start": args.start,
        "end": args.end,
        "parallel": args.parallel,
        "dry_run": args.dry_run,
        "rerun": args.rerun,
    }

    async def act(service: ScheduleService, caller: str) -> int:
        plan = service.backfill(caller, args.name, body, args.user)
        for logical in plan["logical_dates"]:
            note = (
                "already succeeded"
                if logical in plan["already_succeeded"]
                else "in progress"
                if logical in plan["in_progress"]
                else "to run"
            )
            print(f"{logical}  {note}")
        verb = "would run" if args.dry_run else "queued"
        print(
            f"{len(plan['to_run'])} of {len(plan['logical_dates'])} logical time(s) {verb}", file=sys.stderr
        )
        if args.dry_run or not plan["to_run"]:
            return 0
        _say_if_no_scheduler(service)
        return await _wait(service, caller, args, plan["to_run"]) if args.wait else 0

    return _with_service(args, settings, act)


def render(args: argparse.Namespace, settings: Settings) -> int:
    import yaml

    async def act(service: ScheduleService, caller: str) -> int:
        print(yaml.safe_dump(service.render(caller, args.name, args.user), sort_keys=False), end="")
        return 0

    return _with_service(args, settings, act)


async def _wait(service: ScheduleService, caller: str, args: argparse.Namespace, logicals: list[str]) -> int:
    """Until every run of `logicals` has ended, printing each as it ends; 0 if all succeeded."""
    shown: set[str] = set()
    while True:
        slots = service.store.slots(
            service.get(caller, args.name, args.user).owner, args.name, logicals, len(logicals)
        )
        for slot in slots:
            if slot.state in FINISHED and slot.logical not in shown:
                shown.add(slot.logical)
                print(f"{slot.logical}  {slot.state}  {slot.run_id or '-'}  {slot.reason or ''}".rstrip())
        if len(shown) == len(logicals):
            return 0 if all(slot.state == "succeeded" for slot in slots) else 1
        await asyncio.sleep(WAIT_POLL_SECONDS)


def _say_if_no_scheduler(service: ScheduleService) -> None:
    beat = service.store.last_beat()
    alive = beat is not None and psutil.pid_exists(beat[0])
    if alive and beat is not None:
        age = (datetime.now(UTC) - parse_iso(beat[1])).total_seconds()
        alive = age < STALE_BEAT_SECONDS
    if not alive:
        print(
            "note: no scheduler is running (it runs in the workbench: `make lab` or `jupyter lab`); "
            "runs start when it does",
            file=sys.stderr,
        )


def _last(run: dict[str, Any] | None) -> str:
    return "-" if run is None else f"{run['state']} ({run['logical_date']})"


def _relative(notebook: str) -> str:
    """The notebook as a path under the working directory (the directory the workbench serves)."""
    full = Path(notebook).expanduser().resolve()
    cwd = Path.cwd().resolve()
    if not full.is_relative_to(cwd):
        raise InvalidInput(
            f"notebook {notebook!r} is not under the working directory: run the command from the "
            "directory the workbench serves",
            field="--notebook",
        )
    return full.relative_to(cwd).as_posix()

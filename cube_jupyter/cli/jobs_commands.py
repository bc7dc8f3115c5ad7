"""The `cube-jupyter train|tune|serve` handlers (parsers in `jobs.py`): specs read from YAML files,
then one request to the job service on the configured backend, started for the command only."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import IO

from cube_jupyter.cli.jobs import COMMANDS
from cube_jupyter.cli.table import print_rows
from cube_jupyter.config import Settings
from cube_jupyter.errors import CubeError, InvalidInput, NotFound
from cube_jupyter.jobs.model import Job, QueuePlace, describe_progress
from cube_jupyter.jobs.render import render_job
from cube_jupyter.jobs.service import JobService
from cube_jupyter.jobs.spec_files import read_spec_file
from cube_jupyter.jobs.specs import parse_kind

INVALID = 2
INTERRUPTED = 130
# The spec fields that name a file on this machine (NotFound when it is not there).
SPEC_FILES = frozenset({"script", "notebook", "trial.notebook", "storage_uri"})


def _user(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.user or settings.workbench.default_user)


def _invalid(exc: CubeError) -> int:
    print(f"error: {exc.message}", file=sys.stderr)
    return INVALID


def render(args: argparse.Namespace, settings: Settings) -> int:
    import yaml

    try:
        raw = read_spec_file(args.file)
        objects = render_job(settings.jobs, args.kind, raw, _user(args, settings))
    except InvalidInput as exc:
        return _invalid(exc)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False))
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        raw = read_spec_file(args.file)
        parse_kind(args.kind)
    except InvalidInput as exc:
        return _invalid(exc)

    async def submit_and_follow(service: JobService) -> int:
        user = _user(args, settings)
        body = {"kind": args.kind, "spec": raw}
        try:  # a script, notebook or model the spec names that is not there: a bad spec too
            job = await service.submit(user, body)
        except InvalidInput as exc:
            return _invalid(exc)
        except NotFound as exc:
            if exc.field not in SPEC_FILES:
                raise
            return _invalid(exc)
        print(f"{job.kind} job {job.name} submitted ({job.backend} backend)", file=sys.stderr)
        if not args.wait and job.backend == "local" and job.kind == "training":
            # Local replicas are supervised by the process that started them: this command follows
            # its job (restarts, deadline, clean-up) to the end, and Ctrl-C stops it.
            print("local training runs under this command: following it to the end", file=sys.stderr)
            args.wait = True
        if not args.wait:
            print(job.name)
            return 0
        job = await follow_job(service, user, job, ProgressDisplay(sys.stderr), args.timeout)
        _print_outcome(job)
        return 0 if job.phase in ("Succeeded", "Ready") else 1

    async def run(service: JobService) -> int:
        following = asyncio.ensure_future(submit_and_follow(service))
        loop = asyncio.get_running_loop()
        # Ctrl-C stops what this command runs, as `pipeline run`'s does, even when it was started
        # with SIGINT ignored (asyncio.run then installs no handler of its own).
        loop.add_signal_handler(signal.SIGINT, following.cancel)
        try:
            return await following
        except asyncio.CancelledError:
            await _stop_local_training(service)
            print("interrupted", file=sys.stderr)
            return INTERRUPTED
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    return with_job_service(settings, run)


async def _stop_local_training(service: JobService) -> None:
    """A local training job runs under the `train run` that started it: interrupted, it fails and its
    replicas stop (SupervisorStopped). Cluster jobs, and a workbench's jobs, go on."""
    from cube_jupyter.jobs.local.backend import LocalJobBackend

    if isinstance(service.backend, LocalJobBackend):
        await service.backend.training.abandon()


def list_jobs(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: JobService) -> int:
        jobs = service.list_jobs(_user(args, settings), kind=args.kind)
        if args.json:
            print(json.dumps([job.to_dict() for job in jobs], indent=2))
        else:
            print_table(jobs)
        return 0

    return with_job_service(settings, run)


def _require_kind(service: JobService, args: argparse.Namespace, settings: Settings) -> None:
    """`train delete iris` must not delete the served model `iris`: the command names the kind."""
    job = service.get(_user(args, settings), args.name)
    if job.kind != args.kind:
        command = next(c for c, (kind, _) in COMMANDS.items() if kind == job.kind)
        raise NotFound(
            f"{args.name!r} is a {job.kind} job, not a {args.kind} one: use `cube-jupyter {command}`",
            field="name",
        )


def logs(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: JobService) -> int:
        _require_kind(service, args, settings)
        try:
            stream = service.logs(
                _user(args, settings), args.name, args.replica, follow=args.follow, tail=args.tail
            )
        except InvalidInput as exc:
            return _invalid(exc)
        async for chunk in stream:
            sys.stdout.write(chunk)
            sys.stdout.flush()
        return 0

    return with_job_service(settings, run)


def delete(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: JobService) -> int:
        _require_kind(service, args, settings)
        await service.delete(_user(args, settings), args.name)
        print(f"deleted {args.name}")
        return 0

    return with_job_service(settings, run)


def with_job_service(settings: Settings, run: Callable[[JobService], Awaitable[int]]) -> int:
    """The job service of the composition root for one command: the configured backends started
    (jobs, and notebook servers read for the GPU quota, whose lock the workbench server shares)."""
    from cube_jupyter.services import open_workbench

    async def go() -> int:
        async with open_workbench(settings) as workbench:
            return await run(await workbench.started_jobs())

    return asyncio.run(go())


async def follow_job(
    service: JobService,
    user: str,
    job: Job,
    display: ProgressDisplay,
    timeout: float | None = None,
    interval: float = 0.25,
) -> Job:
    """Poll the job, showing each change, until it has finished (or a served model is Ready)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        display.update(job)
        if job.finished or (job.kind == "serving" and job.phase == "Ready"):
            return job
        if deadline is not None and time.monotonic() > deadline:
            print(f"still {job.phase} after {timeout:.0f}s; it keeps running", file=sys.stderr)
            return job
        await asyncio.sleep(interval)
        job = service.get(user, job.name)


class ProgressDisplay:
    """One line per change of the job's phase, replica states or trial count."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.last = ""

    def update(self, job: Job) -> None:
        line = describe_progress(job)
        if line != self.last:
            self.last = line
            elapsed = time.monotonic() - self.started
            print(f"[{elapsed:6.1f}s] {line}", file=self.stream, flush=True)


def _print_outcome(job: Job) -> None:
    print(f"{job.name}: {job.phase}")
    if job.kind == "serving" and job.endpoint:
        print(f"endpoint: {job.endpoint}")
    if job.kind == "tuning" and job.best_trial:
        best = next((t for t in job.trials if t.name == job.best_trial), None)
        if best is not None:
            print(
                f"best trial: {best.name} objective={best.objective} parameters={json.dumps(best.parameters)}"
            )
    if job.phase == "Failed" and job.message:
        print(job.message, file=sys.stderr)  # the cause first (`tracebacks`), when its log had one
    if job.phase == "Failed" and job.error is not None and job.error.replica:
        command = next(c for c, (kind, _) in COMMANDS.items() if kind == job.kind)
        print(
            f"the whole traceback: cube-jupyter {command} logs {job.name} --replica {job.error.replica}",
            file=sys.stderr,
        )


def _age(created: float) -> str:
    seconds = max(0, int(time.time() - created))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def queue_place(place: QueuePlace) -> str:
    """`#2: waiting for 1 GPU...` locally; on the cluster Kueue's LocalQueue, and its place if known."""
    where = " ".join(part for part in (f"#{place.position}" if place.position else "", place.queue) if part)
    return f"{where}: {place.reason}" if where else place.reason


def print_table(jobs: list[Job]) -> None:
    header = ("NAME", "KIND", "FRAMEWORK", "PHASE", "REPLICAS", "GPUS", "AGE", "ENDPOINT", "QUEUE")
    print_rows(
        header,
        [
            (
                job.name,
                job.kind,
                job.framework or "-",
                job.phase,
                f"{sum(r.state in ('Running', 'Succeeded') for r in job.replicas)}/{len(job.replicas)}",
                str(job.gpus),
                _age(job.created),
                job.endpoint or "-",
                queue_place(job.queue) if job.queue else "-",
            )
            for job in jobs
        ],
    )

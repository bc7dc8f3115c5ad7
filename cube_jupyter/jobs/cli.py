"""`cube-jupyter train|tune|serve render|run|list|logs|delete`: jobs from a shell, specs as YAML files.

    cube-jupyter train render job.yaml          the Kubernetes objects, as YAML (like `helm template`)
    cube-jupyter train run job.yaml [--wait]    submit; with --wait, follow it until it finishes
    cube-jupyter train list [--json]
    cube-jupyter train logs NAME [--replica worker-0] [-f] [--tail N]
    cube-jupyter train delete NAME

`tune` and `serve` take the same actions for tuning and serving specs. `render` asks no cluster: a
training job is rendered with the API `CubeJobs.training_api` pins, or with `auto` as a cluster
serving both gets it (a Trainer v2 TrainJob when its nodes are alike, else the Training Operator's
kind). `run` runs on the configured backend: here, as processes (local), or as operator objects
(kubernetes), on the APIs the cluster serves. Exit codes: 0 done (with
--wait: Succeeded, or Ready for a served model), 1 the job failed or the request was refused, 2 the
spec or an argument is invalid (the message names the field), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

import yaml

from cube_jupyter.config import Settings
from cube_jupyter.errors import InvalidInput, NotFound
from cube_jupyter.jobs.model import Job, JobKind
from cube_jupyter.jobs.render import render_job
from cube_jupyter.jobs.service import JobService
from cube_jupyter.jobs.specs import parse_kind

INVALID = 2
COMMANDS: dict[str, tuple[JobKind, str]] = {
    "train": ("training", "distributed training jobs (TFJob, PyTorchJob, XGBoostJob, MPIJob)"),
    "tune": ("tuning", "hyperparameter tuning experiments (Katib)"),
    "serve": ("serving", "served models (KServe InferenceService)"),
}


def add_job_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for command, (kind, help_text) in COMMANDS.items():
        parser = commands.add_parser(command, help=help_text)
        parser.set_defaults(kind=kind)  # the actions' namespaces inherit it
        actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)

        def action(name: str, help_text: str, parent: Any = actions) -> argparse.ArgumentParser:
            sub: argparse.ArgumentParser = parent.add_parser(name, help=help_text)
            sub.add_argument(
                "--config", metavar="FILE", help="a jupyter_server_config.py with c.Cube* settings"
            )
            sub.add_argument("--user", help="whose jobs (default: CubeWorkbench.default_user)")
            return sub

        render = action("render", "print the Kubernetes objects of a spec as YAML")
        render.add_argument("file", metavar="FILE", help="the spec, as YAML")
        render.set_defaults(run=_render)

        run = action("run", "submit a spec to the configured backend")
        run.add_argument("file", metavar="FILE", help="the spec, as YAML")
        run.add_argument("--wait", action="store_true", help="follow the job until it has finished")
        run.add_argument("--timeout", type=float, default=None, help="seconds to wait with --wait")
        run.set_defaults(run=_run)

        listing = action("list", "list jobs")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        listing.set_defaults(run=_list)

        logs = action("logs", "print a replica's log")
        logs.add_argument("name", metavar="NAME")
        logs.add_argument("--replica", help="which replica, e.g. worker-0 (default: the first)")
        logs.add_argument("-f", "--follow", action="store_true", help="keep printing until it finishes")
        logs.add_argument("--tail", type=int, help="only the last N lines")
        logs.set_defaults(run=_logs)

        delete = action("delete", "stop a job and remove it")
        delete.add_argument("name", metavar="NAME")
        delete.set_defaults(run=_delete)


def _user(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.user or settings.workbench.default_user)


def _invalid(exc: InvalidInput) -> int:
    print(f"error: {exc.message}", file=sys.stderr)
    return INVALID


def read_spec_file(path: str) -> Any:
    """The YAML document in `path`; InvalidInput naming the file when it cannot be read or parsed."""
    file = Path(path)
    if not file.is_file():
        raise InvalidInput(f"spec file {path!r} does not exist", field="FILE")
    try:
        documents = [d for d in yaml.safe_load_all(file.read_text(encoding="utf-8")) if d is not None]
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"spec file {path!r} is not valid YAML: {exc}", field="FILE") from None
    if len(documents) != 1:
        raise InvalidInput(
            f"spec file {path!r} must hold one YAML document, got {len(documents)}", field="FILE"
        )
    return documents[0]


def _render(args: argparse.Namespace, settings: Settings) -> int:
    try:
        raw = read_spec_file(args.file)
        objects = render_job(settings, args.kind, raw, _user(args, settings))
    except InvalidInput as exc:
        return _invalid(exc)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False))
    return 0


def _run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        raw = read_spec_file(args.file)
        parse_kind(args.kind)
    except InvalidInput as exc:
        return _invalid(exc)

    async def submit_and_follow(service: JobService) -> int:
        user = _user(args, settings)
        try:
            job = await service.submit(user, {"kind": args.kind, "spec": raw})
        except InvalidInput as exc:
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
        try:
            return await submit_and_follow(service)
        except asyncio.CancelledError:  # Ctrl-C
            await _stop_local_training(service)
            raise

    return with_job_service(settings, run)


async def _stop_local_training(service: JobService) -> None:
    """A local training job runs under the `train run` that started it: interrupted, it fails and its
    replicas stop (SupervisorStopped). Cluster jobs, and a workbench's jobs, go on."""
    from cube_jupyter.jobs.local.backend import LocalJobBackend

    if isinstance(service.backend, LocalJobBackend):
        await service.backend.training.abandon()


def _list(args: argparse.Namespace, settings: Settings) -> int:
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


def _logs(args: argparse.Namespace, settings: Settings) -> int:
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


def _delete(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: JobService) -> int:
        _require_kind(service, args, settings)
        await service.delete(_user(args, settings), args.name)
        print(f"deleted {args.name}")
        return 0

    return with_job_service(settings, run)


def with_job_service(settings: Settings, run: Callable[[JobService], Awaitable[int]]) -> int:
    """Start the configured backends (jobs, and notebooks for the GPU quota) for one command, on one
    cluster connection when the backend is kubernetes."""
    from cube_jupyter.jobs.backend import make_job_backend
    from cube_jupyter.kube import cluster_for
    from cube_jupyter.ledger import GpuLedger
    from cube_jupyter.notebooks.backend import make_notebook_backend

    async def go() -> int:
        cluster = cluster_for(settings)
        notebooks = make_notebook_backend(settings, cluster=cluster)
        backend = make_job_backend(settings, cluster=cluster)
        try:
            # The workbench server supervises and culls servers; a short command only reads them.
            await notebooks.start(supervise=False)
            await backend.start()
            return await run(JobService(settings, backend, ledger=GpuLedger(settings, notebooks)))
        finally:
            await backend.close()
            await notebooks.close()
            if cluster is not None:
                await cluster.close()

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


def describe_progress(job: Job) -> str:
    parts = [f"{job.name} {job.phase}"]
    if job.kind == "tuning":
        done = sum(1 for t in job.trials if t.state in ("Succeeded", "Failed", "Pruned"))
        parts.append(f"trials {done}/{len(job.trials)} done")
        best = next((t for t in job.trials if t.name == job.best_trial), None)
        if best is not None and best.objective is not None:
            parts.append(f"best {best.name} = {best.objective:g}")
    else:
        parts.append(", ".join(f"{r.name} {r.state}" for r in job.replicas))
    return "  ".join(p for p in parts if p)


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
        print(job.message, file=sys.stderr)


def _age(created: float) -> str:
    seconds = max(0, int(time.time() - created))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def print_table(jobs: list[Job]) -> None:
    header = ("NAME", "KIND", "FRAMEWORK", "PHASE", "REPLICAS", "GPUS", "AGE", "ENDPOINT")
    rows = [header] + [
        (
            job.name,
            job.kind,
            job.framework or "-",
            job.phase,
            f"{sum(r.state in ('Running', 'Succeeded') for r in job.replicas)}/{len(job.replicas)}",
            str(job.gpus),
            _age(job.created),
            job.endpoint or "-",
        )
        for job in jobs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())

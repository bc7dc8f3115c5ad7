"""The `cube-jupyter pipeline` handlers, named by the parsers in `pipeline.py` and imported only when a
pipeline action runs: graph, run and resume through the composition root's `PipelineService`,
compile to an Argo Workflow."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import nbformat

from cube_jupyter.config import Settings
from cube_jupyter.errors import CubeError, InvalidInput
from cube_jupyter.pipelines.history import ACTIVE_RUN, COMPLETED_STEP, DONE_STEP, RunRecord, StepRecord
from cube_jupyter.pipelines.model import Pipeline, pipeline_from_dict
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter.pipelines.stepnb import notebook_key
from cube_jupyter.pipelines.targets import RunRequest
from cube_jupyter.services import Workbench, open_workbench
from cube_jupyter.storage import ArtifactStore, open_store
from cube_jupyter.storage.local import LocalStore

if TYPE_CHECKING:
    from tqdm import tqdm

INVALID = 2
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def parameter_values(pairs: list[list[str]]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, text in pairs:
        try:
            values[name] = json.loads(text)
        except ValueError:
            values[name] = text  # like papermill's -p: what is not a number, bool or JSON is a string
    return values


def _locate(notebook: str) -> tuple[Path, str]:
    """(root dir, path relative to it): the working directory when the notebook is below it, as a
    Jupyter server rooted here would see it; else the notebook's own folder."""
    full = Path(notebook).expanduser().resolve()
    cwd = Path.cwd().resolve()
    if full.is_relative_to(cwd):
        return cwd, full.relative_to(cwd).as_posix()
    return full.parent, full.name


def _invalid(exc: CubeError) -> int:
    print(f"error: {exc.message}", file=sys.stderr)
    return INVALID


def graph(args: argparse.Namespace, settings: Settings) -> int:
    root, path = _locate(args.notebook)
    service = Workbench(settings, root_dir=str(root), cluster_runs=False).pipelines
    try:
        pipeline = service.graph(settings.workbench.default_user, path)
    except CubeError as exc:  # a bad, hidden or missing path
        return _invalid(exc)
    for warning in pipeline.warnings:
        print(f"warning: {warning.message}", file=sys.stderr)
    print(json.dumps(pipeline.to_dict(), indent=2))
    return 0


def compile_pipeline(args: argparse.Namespace, settings: Settings) -> int:
    import yaml

    from cube_jupyter.pipelines.kubernetes.argo import compile_workflow
    from cube_jupyter.pipelines.kubernetes.kfp import compile_kfp

    root, path = _locate(args.notebook)
    try:
        service = Workbench(settings, root_dir=str(root), cluster_runs=False).pipelines
        pipeline = service.load(settings.workbench.default_user, path)
        parameters = parameter_values(args.parameter)
        if args.target == "kfp":
            if args.store or args.run_id:
                raise InvalidInput(
                    "--store and --run-id are Argo's: on KFP, artifacts go under the pipeline root "
                    "and the run id is KFP's",
                    field="store" if args.store else "run_id",
                )
            text = compile_kfp(pipeline, settings.pipelines, parameters=parameters)
        else:
            workflow = compile_workflow(
                pipeline, settings.pipelines, run_id=args.run_id, store_url=args.store, parameters=parameters
            )
            text = yaml.safe_dump(workflow, sort_keys=False, default_flow_style=False)
    except CubeError as exc:
        return _invalid(exc)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.parallel is not None and args.parallel < 1:
        print("error: --parallel must be at least 1", file=sys.stderr)
        return INVALID
    return asyncio.run(_run_async(args, settings))


async def _run_async(args: argparse.Namespace, settings: Settings) -> int:
    root, path = _locate(args.notebook)
    parallel = args.parallel or min(os.cpu_count() or 1, settings.pipelines.pipelines.max_parallel_per_run)
    cluster = args.target != "local"
    options = {"root_dir": str(root), "pool_size": parallel, "cluster_runs": cluster}
    async with open_workbench(settings, **options) as workbench:
        service = workbench.pipelines
        user = args.user or settings.workbench.default_user
        if args.no_cache and not cluster:
            service.local.start_workers()  # every step will run: no need to wait to know
        try:
            await workbench.started_pipelines()
            pipeline = service.load(user, path)
        except CubeError as exc:  # a bad, hidden or missing path; a cluster without Argo
            return _invalid(exc)
        for warning in pipeline.warnings:
            print(f"warning: {warning.message}", file=sys.stderr)
        display = StepDisplay(pipeline, sys.stderr)
        started = time.perf_counter()
        request = RunRequest(
            path,
            parameter_values(args.parameter),
            target=args.target,
            store=args.store,
            parallel=parallel,
            no_cache=args.no_cache,
        )
        try:
            run = await service.start_run(user, request, observer=display.update)
        except CubeError as exc:
            display.close()
            if isinstance(exc, InvalidInput):
                return _invalid(exc)
            raise
        return await _follow(service, user, run, display, started, args)


def resume(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_resume_async(args, settings))


async def _resume_async(args: argparse.Namespace, settings: Settings) -> int:
    # A resume runs from the spec the run recorded (its pipeline, its folder): no root of its own.
    async with open_workbench(settings, root_dir=str(Path.cwd()), cluster_runs=False) as workbench:
        args.target = "local"
        return await _resume(
            args, await workbench.started_pipelines(), args.user or settings.workbench.default_user
        )


async def _resume(args: argparse.Namespace, service: PipelineService, user: str) -> int:
    run_id = args.run_id or _newest_resumable(service, user)
    if run_id is None:
        print(f"error: user {user!r} has no failed, cancelled or interrupted run to resume", file=sys.stderr)
        return INVALID
    display: StepDisplay | None = None
    try:
        spec = service.history.spec(service.get_run(user, run_id).id)
        display = StepDisplay(pipeline_from_dict(spec["pipeline"]), sys.stderr) if spec else None
        started = time.perf_counter()
        run = await service.resume_run(user, run_id, observer=display.update if display else None)
    except CubeError as exc:
        if display:
            display.close()
        return _invalid(exc)
    kept = [step.name for step in run.steps if step.status in COMPLETED_STEP]
    print(f"resuming run {run.id}: kept {', '.join(kept) or 'no step'}", file=sys.stderr)
    return await _follow(service, user, run, display, started, args)


def _newest_resumable(service: PipelineService, user: str) -> str | None:
    return next((run.id for run in service.history.list(user) if run.resumable), None)


async def _follow(
    service: PipelineService,
    user: str,
    run: RunRecord,
    display: StepDisplay | None,
    started: float,
    args: argparse.Namespace,
) -> int:
    """Follow a started run to its end (Ctrl-C cancels it), print the summary; the exit code."""
    interrupted = _cancel_on_ctrl_c(service, user, run.id)
    try:
        if args.target != "local":
            assert display is not None
            run = await _follow_cluster_run(service, user, run.id, display)
        else:
            run = await service.wait(user, run.id)
    finally:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
        if display:
            display.close()
    store = open_store(run.store, service.settings.storage, check=False)
    _print_summary(run, time.perf_counter() - started, store)
    if args.output_dir:
        _write_notebooks(service, user, run, Path(args.output_dir))
    if interrupted.is_set() or run.status == "cancelled":
        return 130
    return 0 if run.status == "succeeded" else 1


async def _follow_cluster_run(
    service: PipelineService, user: str, run_id: str, display: StepDisplay, interval: float = 1.0
) -> RunRecord:
    """Show each step's state as the cluster (Argo, KFP) reports it, until the run has finished."""
    shown: dict[str, str] = {}
    while True:
        run = service.get_run(user, run_id)
        for step in run.steps:
            text = _status_text(step)
            if shown.get(step.name) != text:
                shown[step.name] = text
                display.update(step)
        if run.status not in ACTIVE_RUN:
            return run
        await asyncio.sleep(interval)


def _cancel_on_ctrl_c(service: PipelineService, user: str, run_id: str) -> asyncio.Event:
    """First Ctrl-C cancels the run (kernels killed, run recorded); a second one stops at once."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    cancelling: set[asyncio.Task[RunRecord]] = set()

    def on_sigint() -> None:
        if interrupted.is_set():
            loop.remove_signal_handler(signal.SIGINT)
            raise KeyboardInterrupt
        interrupted.set()
        print("\ncancelling: stopping running steps (Ctrl-C again to quit at once)", file=sys.stderr)
        task = loop.create_task(service.cancel(user, run_id))
        cancelling.add(task)
        task.add_done_callback(cancelling.discard)

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    return interrupted


class StepDisplay:
    """Progress per step: one tqdm bar each on a terminal, a line per change otherwise."""

    def __init__(self, pipeline: Pipeline, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.width = max((len(step.name) for step in pipeline.steps), default=4)
        self.bars: dict[str, tqdm[Any]] = {}
        if self.tty:
            from tqdm import tqdm  # bars only on a terminal

            for position, step in enumerate(pipeline.steps):
                self.bars[step.name] = tqdm(
                    total=1,
                    position=position,
                    desc=step.name.ljust(self.width),
                    bar_format="{desc} |{bar:12}| {postfix}",
                    file=stream,
                    leave=True,
                    dynamic_ncols=True,
                    postfix="pending",
                )

    def update(self, step: StepRecord) -> None:
        text = _status_text(step)
        if not self.tty:
            print(f"{step.name.ljust(self.width)}  {text}", file=self.stream, flush=True)
            return
        bar = self.bars[step.name]
        bar.set_postfix_str(text, refresh=False)
        if step.status in DONE_STEP and bar.n == 0:
            bar.update(1)
        elif step.status not in DONE_STEP and bar.n:
            bar.reset(total=1)
        bar.refresh()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()


def _status_text(step: StepRecord) -> str:
    """A step's state for the progress display: a queued step says why it waits (GPUs, the GPU
    quota), a running one which GPUs it holds."""
    text = step.status
    if step.status == "queued" and step.reason:
        text += f": {step.reason}"
    if step.status == "running" and step.gpus:
        text += f" on {_gpu_text(step.gpus)}"
    if step.attempts > 1:
        text += f" (attempt {step.attempts})"
    if step.status in ("succeeded", "failed") and step.duration is not None:
        text += f" in {step.duration:.2f}s"
    return text


def _gpu_text(gpus: list[str]) -> str:
    return ("GPU " if len(gpus) == 1 else "GPUs ") + ", ".join(gpus)


def _notebook_text(run: RunRecord, step: StepRecord, store: ArtifactStore) -> str:
    """Where the user opens a step's executed notebook: its file on a local store, else its URL; a
    cached step's is the notebook of the run that made it, which the text names."""
    if not step.notebook:
        return "-"
    where = str(store.root / step.notebook) if isinstance(store, LocalStore) else store.url(step.notebook)
    source = [*step.notebook.split("/"), ""][1]  # runs/RUN/steps/STEP.ipynb
    if source != run.id and notebook_key(source, step.name) == step.notebook:
        where += f" (cached from {source})"
    return where


def _print_summary(run: RunRecord, elapsed: float, store: ArtifactStore) -> None:
    header = ("STEP", "STATUS", "ATTEMPTS", "DURATION", "CACHED", "NOTEBOOK")
    rows = [header] + [
        (
            s.name,
            s.status,
            str(s.attempts),
            f"{s.duration:.2f}s" if s.duration is not None else "-",
            "yes" if s.cache_hit else "no",
            _notebook_text(run, s, store),
        )
        for s in run.steps
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print(f"run {run.id} {run.status} in {elapsed:.2f}s (store {run.store})")
    for name, value in run.metrics.items():  # Katib's StdOut collector reads `name=value` lines
        print(f"{name}={value}")
    failed = [(step.name, step.error) for step in run.steps if step.status == "failed" and step.error]
    if run.status == "failed" and run.error and not failed:  # the run itself failed: its store, say
        print(f"\nerror: {run.error}", file=sys.stderr)
    for name, error in failed:
        print(f"\n{error.get('message') or f'step {name!r} failed'}", file=sys.stderr)
        traceback = error.get("traceback") or ""
        if traceback:
            print(traceback if sys.stderr.isatty() else ANSI.sub("", traceback), file=sys.stderr)


def _write_notebooks(service: PipelineService, user: str, run: RunRecord, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for step in run.steps:
        if step.notebook:
            executed = service.executed_notebook(user, run.id, step.name)
            nbformat.write(executed, directory / f"{step.name}.ipynb")
    print(f"executed step notebooks in {directory}", file=sys.stderr)

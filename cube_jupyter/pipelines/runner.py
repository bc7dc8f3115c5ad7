"""The one step runner: build a step's notebook, run it with papermill, store what it produced.

The local executor calls `run_step` in its workers (with a kernel started ahead, `kernel_manager=`);
a cluster pod runs the same thing as

    python -m cube_jupyter.pipelines.runner --pipeline pipeline.json --step train --run-id R \
        --store s3://bucket/prefix [-p NAME JSON_VALUE]...

which prints the StepResult as JSON and exits 0 (succeeded), 1 (the step failed) or 2 (bad input).
On Kubeflow Pipelines, inputs and outputs are files the launcher moves (`kfp_io.py`):

    python -m cube_jupyter.pipelines.runner --pipeline-json JSON --step train --run-id R \
        --input-file X PATH --output-file model PATH URI --executor-output PATH [--text-parameter N V]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from queue import Empty
from typing import TYPE_CHECKING, Any

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_core.utils import ensure_async

from cube_jupyter.errors import CubeError, InvalidInput
from cube_jupyter.installation import IMPORT_ROOT
from cube_jupyter.pipelines.model import Pipeline, PipelineError, pipeline_from_dict
from cube_jupyter.pipelines.runtime import OUTPUTS_MIME
from cube_jupyter.pipelines.stepnb import (
    META,
    StepContext,
    build_step_notebook,
    input_keys,
    notebook_key,
    validate_parameters,
)
from cube_jupyter.startup import skip_unused_schema_formats
from cube_jupyter.storage import ArtifactStore, CubeStorage, open_store, validate_key

if TYPE_CHECKING:  # nbformat loads where it is used: `main` first keeps jsonschema's unused formats out
    from nbformat import NotebookNode

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
STEP_ENGINE = "cube-step"
INTERRUPT_GRACE = 5.0  # seconds a timed-out step gets to stop on SIGINT before its kernel is killed
Log = Callable[[str], None]


@dataclass(frozen=True)
class OutputRef:
    key: str
    sha256: str  # of the stored bytes: what a downstream cache key uses
    kind: str
    size: int


@dataclass(frozen=True)
class StepError:
    message: str  # one line for the user: step, cell, exception
    cell: int | None  # index of the failing cell in the SOURCE notebook; None outside the user's cells
    phase: str  # parameters | imports | functions | load-inputs | cell | save-outputs | kernel
    ename: str
    evalue: str
    traceback: str  # plain text, ANSI colours stripped


@dataclass(frozen=True)
class StepResult:
    step: str
    status: str  # "succeeded" | "failed"
    duration: float  # seconds, kernel start included when the runner started it
    notebook: str | None  # store key of the executed step notebook
    outputs: dict[str, OutputRef] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    error: StepError | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or "/" in run_id:
        raise InvalidInput(f"run id {run_id!r} must be one path segment", field="run_id")
    try:
        validate_key(run_id)
    except InvalidInput:
        raise InvalidInput(
            f"run id {run_id!r} may use only letters, digits and '_.=+@,-'", field="run_id"
        ) from None
    return run_id


def run_step(
    pipeline: Pipeline,
    step: str,
    run_id: str,
    store: ArtifactStore | str,
    parameters: Mapping[str, Any],
    *,
    kernel_manager: Any = None,
    cwd: str | Path | None = None,
    timeout: float | None = None,
    log: Log | None = None,
    inputs: Mapping[str, str] | None = None,
    storage: CubeStorage | None = None,
    on_cells: Callable[[], None] | None = None,
) -> StepResult:
    """Run one step in a fresh kernel and store its executed notebook and outputs.

    `kernel_manager`: a started `jupyter_client.KernelManager` to use (and leave to the caller);
    it must run in `cwd` with `kernel_env(store)` added to its environment. Without one the runner starts
    and shuts down its own. `inputs` overrides where inputs are read ({variable: store key}, e.g.
    an upstream step's outputs cached from an earlier run); by default, this run's upstream outputs.
    `timeout` (default: the step's `timeout:` tag) interrupts, then kills, a step that runs too long.
    `on_cells` is called as the step's own first cell starts (its kernel and generated cells done),
    never if the step fails before.
    Bad arguments raise CubeError; a failure inside the step is a "failed" StepResult.
    """
    started = time.monotonic()
    _check_run_id(run_id)
    if isinstance(store, str):
        store = open_store(store, storage)
    params = validate_parameters(pipeline, parameters)
    try:
        spec = pipeline.step(step)
    except KeyError:
        known = ", ".join(s.name for s in pipeline.steps)
        raise InvalidInput(
            f"pipeline {pipeline.name!r} has no step {step!r}; steps: {known}", field="step"
        ) from None
    keys = input_keys(pipeline, spec, run_id)
    keys.update({name: validate_key(key) for name, key in (inputs or {}).items() if name in keys})
    nb = build_step_notebook(pipeline, step, StepContext(store.url(), run_id, keys))
    workdir = str(Path(cwd or Path(pipeline.path).parent or ".").resolve())
    limit = timeout if timeout is not None else spec.options.timeout
    say = log or (lambda _line: None)

    km = kernel_manager
    if km is None:
        say(f"[{step}] starting kernel {pipeline.kernel_name!r}")
        try:
            km = _start_kernel(pipeline.kernel_name, workdir, kernel_env(store))
        except Exception as exc:
            error = StepError(
                f"step {step!r}: kernel {pipeline.kernel_name!r} did not start: {exc}",
                None,
                "kernel",
                type(exc).__name__,
                str(exc),
                "",
            )
            key = _store_notebook(store, run_id, step, nb, pipeline)
            return StepResult(step, "failed", time.monotonic() - started, key, error=error)
    try:
        executed, failure, timed_out = _execute(
            nb, params, pipeline.kernel_name, km, step, limit, say, on_cells or (lambda: None)
        )
    finally:
        if kernel_manager is None:
            _stop_kernel(km)
    key = _store_notebook(store, run_id, step, executed, pipeline)
    duration = time.monotonic() - started
    if failure is not None:
        error = _error_of(executed, failure, pipeline, step, limit if timed_out else None)
        say(f"[{step}] failed after {duration:.2f}s: {error.message}")
        return StepResult(step, "failed", duration, key, error=error)
    manifest = _manifest(executed)
    outputs = {name: OutputRef(**ref) for name, ref in manifest.get("outputs", {}).items()}
    say(f"[{step}] succeeded in {duration:.2f}s")
    return StepResult(step, "succeeded", duration, key, outputs, dict(manifest.get("metrics", {})))


def kernel_env(store: ArtifactStore) -> dict[str, str]:
    """Env vars a step's kernel needs on top of the runner's own: the store's (S3 endpoint and
    credentials) and, when cube_jupyter runs from a source checkout rather than an installed package,
    that checkout on PYTHONPATH, so the kernel imports the same runtime helpers as the runner."""
    env = dict(store.kernel_env())
    root = IMPORT_ROOT
    if root.name not in ("site-packages", "dist-packages"):
        current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(root) not in current:
            env["PYTHONPATH"] = os.pathsep.join([str(root), *current])
    return env


def _start_kernel(kernel_name: str, cwd: str, env: Mapping[str, str]) -> Any:
    """A kernel of the runner's own (a step pod's): over Unix sockets, as the local workers' are."""
    from jupyter_client.manager import KernelManager

    from cube_jupyter.local.kernel_sockets import kernel_transport

    km = KernelManager(kernel_name=kernel_name, **kernel_transport())
    km.start_kernel(cwd=cwd, env={**os.environ, **env})
    return km


def _stop_kernel(km: Any) -> None:
    try:
        km.shutdown_kernel(now=True)
    except Exception:  # already dead (killed on timeout): nothing left to stop
        km.cleanup_resources()


class _ReadyClient(AsyncKernelClient):
    """An async kernel client that is ready as soon as the kernel answers on shell and IOPub.

    jupyter_client's `wait_for_ready` then drains IOPub until it has been quiet for 0.2 s, a fixed
    cost on every step; nbclient ignores IOPub messages that are not replies to its own requests,
    so there is nothing to drain.
    """

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        limit = timeout or 60.0
        deadline = time.monotonic() + limit
        # A reply to any request sent here will do: a kernel slower than the 1 s poll (a busy host)
        # answers each request after the next one went out, so waiting for the latest never ends.
        sent: set[str] = set()
        while True:
            sent.add(self.kernel_info())
            try:
                reply = await ensure_async(self.shell_channel.get_msg(timeout=1))
                if reply["parent_header"].get("msg_id") in sent:
                    await ensure_async(self.iopub_channel.get_msg(timeout=0.2))  # IOPub is connected
                    self._handle_kernel_info_reply(reply)
                    return
            except Empty:
                pass
            if not await self._async_is_alive():
                raise RuntimeError("the kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the kernel did not reply in {limit:g} s")


class _KernelView:
    """A started KernelManager as nbclient sees it, except that it hands out an async client.

    With the blocking client a sync KernelManager gives, nbclient waits forever for the reply of a
    cell whose kernel died (killed on timeout or cancel); with an async one it notices within a
    second. The client is kept so its channels are closed after the run: nbclient leaves them open
    (a heartbeat thread each) on a kernel it does not own.
    """

    def __init__(self, km: Any) -> None:
        self._km = km
        self._clients: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._km, name)

    def client(self, **kwargs: Any) -> Any:
        options = {
            **self._km.get_connection_info(session=True),
            "connection_file": self._km.connection_file,
            "parent": self._km,
            **kwargs,
        }
        client = _ReadyClient(**options)
        self._clients.append(client)
        return client

    def close(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.stop_channels()


class _StreamToLog:
    """A file-like papermill writes the kernel's stdout/stderr to, line by line into `log`."""

    def __init__(self, say: Log, prefix: str) -> None:
        self.say, self.prefix, self.pending = say, prefix, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self.say(f"{self.prefix}{line}")
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.say(f"{self.prefix}{self.pending}")
            self.pending = ""


def _execute(
    nb: NotebookNode,
    params: dict[str, Any],
    kernel_name: str,
    km: Any,
    step: str,
    limit: float | None,
    say: Log,
    on_cells: Callable[[], None],
) -> tuple[NotebookNode, BaseException | None, bool]:
    """(executed notebook, the exception that stopped it or None, whether the step timed out);
    the notebook is as far as it got on failure."""
    import nbformat
    import papermill

    fired = threading.Event()
    timers = _watchdog(km, limit, fired)
    stream = _StreamToLog(say, f"[{step}] ")
    under_way = False

    def on_cell_start(cell: NotebookNode, cell_index: int) -> None:
        nonlocal under_way
        meta = cell.metadata.get(META, {"role": "injected-parameters"})
        where = f"cell {meta['source_index']}" if "source_index" in meta else meta["role"]
        say(f"[{step}] running {where}")
        if meta["role"] == "cell" and not under_way:
            under_way = True
            on_cells()

    with tempfile.TemporaryDirectory(prefix="cube-step-") as tmp:
        out = os.path.join(tmp, f"{step}.ipynb")
        for timer in timers:
            timer.start()
        view = _KernelView(km)
        try:
            executed = papermill.execute_notebook(
                nb,
                out,
                parameters=params,
                engine_name=_register_step_engine(),
                request_save_on_cell_execute=False,
                kernel_name=kernel_name,
                km=view,
                progress_bar=False,
                log_output=False,
                stdout_file=stream,
                stderr_file=stream,
                on_cell_start=on_cell_start,
            )
            return executed, None, False
        except _ExecutionStopped as stopped:  # the kernel died, or was killed on timeout or cancel
            stream.flush()
            return stopped.notebook, stopped.__cause__ or stopped, fired.is_set()
        except Exception as exc:  # a cell raised: papermill wrote the notebook, error marked, first
            stream.flush()
            partial = nbformat.read(out, as_version=4) if os.path.exists(out) else nb
            return partial, exc, fired.is_set()
        finally:
            for timer in timers:
                timer.cancel()
            view.close()


class _ExecutionStopped(Exception):
    """Execution ended before the last cell (its cause chained); `notebook` is as far as it got."""

    def __init__(self, notebook: NotebookNode) -> None:
        super().__init__("execution stopped")
        self.notebook = notebook


def _register_step_engine() -> str:
    """papermill's nbclient engine, run without `request_save_on_cell_execute`: papermill would
    otherwise serialise, validate and write the whole notebook at every cell's start and end, most
    of a short step's cost. What that saving was for (the cells done when the kernel dies or is
    killed on timeout) comes with the exception instead."""
    from papermill.engines import NBClientEngine, papermill_engines

    class StepEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
            try:
                return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
            except Exception as exc:  # a cell's error is not raised here: papermill marks it later
                raise _ExecutionStopped(nb_man.nb) from exc

    if STEP_ENGINE not in papermill_engines._engines:
        papermill_engines.register(STEP_ENGINE, StepEngine)
    return STEP_ENGINE


def _watchdog(km: Any, limit: float | None, fired: threading.Event) -> list[threading.Timer]:
    """Timers that interrupt the kernel at `limit` and kill it INTERRUPT_GRACE seconds later."""
    if not limit:
        return []

    def interrupt() -> None:
        fired.set()
        with contextlib.suppress(Exception):  # the kernel ended on its own meanwhile
            km.interrupt_kernel()

    def kill() -> None:
        with contextlib.suppress(Exception):
            km.shutdown_kernel(now=True)

    timers = [threading.Timer(limit, interrupt), threading.Timer(limit + INTERRUPT_GRACE, kill)]
    for timer in timers:
        timer.daemon = True
    return timers


def _store_notebook(
    store: ArtifactStore, run_id: str, step: str, nb: NotebookNode, pipeline: Pipeline
) -> str:
    import nbformat

    papermill_meta = nb.metadata.get("papermill")
    if papermill_meta is not None:  # temp paths of this run mean nothing to a reader
        papermill_meta["input_path"] = pipeline.path
        papermill_meta["output_path"] = notebook_key(run_id, step)
    key = notebook_key(run_id, step)
    store.put(key, nbformat.writes(nb).encode())
    return key


def _manifest(nb: NotebookNode) -> dict[str, Any]:
    for cell in reversed(nb.cells):
        if cell.metadata.get(META, {}).get("role") == "save-outputs":
            for output in cell.get("outputs", []):
                if OUTPUTS_MIME in output.get("data", {}):
                    return dict(output["data"][OUTPUTS_MIME])
    raise PipelineError("the step finished but its outputs were not recorded", field="outputs")


def _error_of(
    nb: NotebookNode, failure: BaseException, pipeline: Pipeline, step: str, limit: float | None
) -> StepError:
    """Which cell failed, mapped back to the source notebook, and how."""
    failed = None
    ename, evalue, tb = type(failure).__name__, str(failure), ""
    for cell in nb.cells:
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            failed = cell
            ename, evalue, tb = errors[0]["ename"], errors[0]["evalue"], "\n".join(errors[0]["traceback"])
            break
    if failed is None:  # no error output: the kernel died (or was killed) in the last cell started
        started = [c for c in nb.cells if c.metadata.get("papermill", {}).get("start_time")]
        failed = started[-1] if started else None
    if limit:  # the watchdog fired: whatever the cell shows, the cause is the timeout
        ename, evalue = "TimeoutError", f"step {step!r} ran past its timeout of {limit:g} s"
    meta = failed.metadata.get(META, {}) if failed is not None else {}
    cell = meta.get("source_index")
    phase = meta.get("role", "kernel")
    where = f"cell {cell} of {pipeline.path}" if cell is not None else f"its {phase} cell"
    if failed is None:
        where = "its kernel"
    first = (evalue.splitlines() or [""])[0]
    return StepError(
        f"step {step!r} failed in {where}: {ename}: {first}".rstrip(": "),
        cell,
        phase,
        ename,
        evalue,
        ANSI.sub("", tb),
    )


def _parse_value(text: str) -> Any:
    """A -p value: JSON when it parses (0.1, true, [1,2], "s"), else the text itself (like papermill)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    skip_unused_schema_formats()
    parser = argparse.ArgumentParser(
        prog="python -m cube_jupyter.pipelines.runner", description="Run one pipeline step with papermill."
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--pipeline", help="the pipeline JSON file (`cube-jupyter pipeline graph` output)")
    source.add_argument("--pipeline-json", help="the pipeline JSON itself")
    parser.add_argument("--step", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--store", default="", help="artifact store URL (default: CubeStorage.url / local)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument(
        "--input", nargs=2, action="append", default=[], metavar=("VAR", "KEY"), help="read VAR from KEY"
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds (default: the step's tag)")
    parser.add_argument(
        "--text-parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="VALUE as text",
    )
    parser.add_argument(
        "--input-file",
        nargs=2,
        action="append",
        default=[],
        metavar=("VAR", "PATH"),
        help="read VAR from PATH",
    )
    parser.add_argument(
        "--output-file",
        nargs=3,
        action="append",
        default=[],
        metavar=("NAME", "PATH", "URI"),
        help="write output NAME to PATH (URI: where it is uploaded to)",
    )
    parser.add_argument("--executor-output", help="write KFP's executor output (artifact metadata) here")
    parser.add_argument("--code-hash", help="the step's code hash (part of KFP's cache key); not read")
    parser.add_argument("--cwd", default=None, help="the kernel's working directory")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        if args.pipeline:
            try:
                raw = json.loads(Path(args.pipeline).read_text())
            except (OSError, ValueError) as exc:
                raise PipelineError(
                    f"cannot read pipeline {args.pipeline!r}: {exc}", field="pipeline"
                ) from None
        else:
            try:
                raw = json.loads(args.pipeline_json)
            except ValueError as exc:
                raise PipelineError(f"--pipeline-json is not JSON: {exc}", field="pipeline") from None
        parameters = {name: _parse_value(value) for name, value in args.parameter}
        parameters |= dict(args.text_parameter)
        pipeline, cwd = pipeline_from_dict(raw), args.cwd or os.getcwd()
        if args.input_file or args.output_file or args.executor_output:
            from cube_jupyter.pipelines.kfp_io import OutputFile, StepFiles

            files = StepFiles(
                pipeline,
                args.step,
                args.run_id,
                dict(args.input_file),
                [OutputFile(*output) for output in args.output_file],
                args.executor_output,
            )
            with files:
                result = run_step(
                    pipeline,
                    args.step,
                    args.run_id,
                    files.store,
                    parameters,
                    cwd=cwd,
                    timeout=args.timeout,
                    log=say,
                )
                files.export(result)
        else:
            result = run_step(
                pipeline,
                args.step,
                args.run_id,
                args.store,
                parameters,
                cwd=cwd,
                timeout=args.timeout,
                log=say,
                inputs=dict(args.input) if args.input else None,
            )
    except CubeError as exc:
        say(f"error: {exc.message}")
        return 2
    finally:
        from cube_jupyter.local.kernel_sockets import socket_dir

        shutil.rmtree(socket_dir(os.getpid()), ignore_errors=True)
    print(json.dumps(result.to_dict(), indent=2))
    if result.error is not None:
        say(result.error.message)
        say(result.error.traceback)
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())

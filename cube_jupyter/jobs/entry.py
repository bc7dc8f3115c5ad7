"""The entrypoint of every training replica, on the cluster and on this machine alike:

    python -m cube_jupyter.jobs.entry [--package URI] --kind script|notebook|function --target T -- ARGS

On a Kubeflow Trainer v2 node it first sets the Training Operator's rendezvous names from the
runtime's and enters the working directory (`trainer_env`). It fetches and unpacks the package (when
given), puts it first on `sys.path`, and runs the script (as `__main__`, with ARGS as `sys.argv[1:]`),
the notebook (papermill; ARGS are `-p NAME VALUE` parameters) or the `module:function` (called with
ARGS). The exit status is the replica's result: 0 when the code finished, 1 when it raised, the
code's own status for `sys.exit(n)`, 2 for a bad invocation. It prints only what the user's code
prints, which step failed and its traceback, last (`cube_jupyter.tracebacks` reads the cause from
it): never the environment, where credentials may be.
"""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import shutil
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cube_jupyter.errors import CubeError, InvalidInput
from cube_jupyter.jobs.trainer_env import WORKDIR_ENV, operator_env
from cube_jupyter.startup import skip_unused_schema_formats

EXIT_FAILED = 1
EXIT_USAGE = 2
KERNEL_START_TIMEOUT = 180  # seconds


def parse_value(text: str) -> Any:
    """A `-p` value as papermill's CLI reads it: int, float, bool, None, else the string."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "true": True, "False": False, "false": False, "None": None}.get(text, text)


def notebook_parameters(args: Sequence[str]) -> dict[str, Any]:
    """`-p NAME VALUE` (or `--parameters NAME VALUE`, or `NAME=VALUE`) pairs → parameters."""
    params: dict[str, Any] = {}
    items = list(args)
    while items:
        word = items.pop(0)
        if word in ("-p", "--parameters"):
            if len(items) < 2:
                raise InvalidInput(f"{word} needs a NAME and a VALUE", field="args")
            name, value = items.pop(0), items.pop(0)
        elif "=" in word and not word.startswith("-"):
            name, _, value = word.partition("=")
        else:
            raise InvalidInput(
                f"notebook argument {word!r} is not '-p NAME VALUE' or 'NAME=VALUE'", field="args"
            )
        if not name.isidentifier():
            raise InvalidInput(f"notebook parameter {name!r} is not a Python name", field="args")
        params[name] = parse_value(value)
    return params


def _exit_code(status: object) -> int:
    """What `sys.exit(status)` would exit with."""
    if status is None:
        return 0
    if isinstance(status, int):
        return status
    print(status, file=sys.stderr)
    return EXIT_FAILED


def run_script(path: Path, args: Sequence[str]) -> int:
    sys.argv = [str(path), *args]
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc.code)
    return 0


def run_function(target: str, args: Sequence[str]) -> int:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise InvalidInput(f"function {target!r} must be 'module:function'", field="function")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise InvalidInput(f"{target!r} is not callable", field="function")
    sys.argv = [target, *args]
    try:
        obj(*args)
    except SystemExit as exc:
        return _exit_code(exc.code)
    return 0


def run_notebook(path: Path, args: Sequence[str], package_dir: Path | None) -> int:
    import papermill
    from traitlets.config import Config

    from cube_jupyter.local.kernel_sockets import kernel_transport, socket_dir

    parameters = notebook_parameters(args)
    if package_dir is not None:
        # The kernel is another process: it finds the shipped modules through PYTHONPATH.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(package_dir), os.environ.get("PYTHONPATH")])
        )
    output = Path.cwd() / f"{path.stem}.{os.environ.get('CUBE_REPLICA', 'output')}.ipynb"
    try:
        papermill.execute_notebook(
            str(path),
            str(output),
            parameters=parameters,
            kernel_name="python3",
            language="python",
            cwd=str(Path.cwd()),
            progress_bar=False,
            # papermill's 60 s is short for a kernel starting beside other trials on a busy node.
            start_timeout=KERNEL_START_TIMEOUT,
            log_output=True,
            stdout_file=sys.stdout,
            stderr_file=sys.stderr,
            # Trials start side by side: over TCP two kernels may be handed the same free port.
            config=Config({"KernelManager": kernel_transport()}),
        )
    finally:
        shutil.rmtree(socket_dir(os.getpid()), ignore_errors=True)
    return 0


def _target_path(target: str, package_dir: Path | None) -> Path:
    path = Path(target)
    if not path.is_absolute():
        path = (package_dir or Path.cwd()) / path
    if not path.is_file():
        where = "the package" if package_dir is not None else str(Path.cwd())
        raise InvalidInput(f"{target!r} is not a file in {where}", field="target")
    return path


def run(kind: str, target: str, args: Sequence[str], package_dir: Path | None) -> int:
    if kind == "script":
        return run_script(_target_path(target, package_dir), args)
    if kind == "notebook":
        return run_notebook(_target_path(target, package_dir), args, package_dir)
    return run_function(target, args)


def enter_node() -> None:
    """Set what a Trainer v2 node lacks and the Training Operator gives (`trainer_env`)."""
    os.environ.update(operator_env(os.environ))
    workdir = os.environ.get(WORKDIR_ENV)
    if workdir:
        try:
            os.chdir(workdir)
        except OSError as exc:
            raise InvalidInput(
                f"{WORKDIR_ENV} {workdir!r} cannot be entered: {exc.strerror}", field=WORKDIR_ENV
            ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cube_jupyter.jobs.entry", description=__doc__)
    parser.add_argument("--package", help="artifact-store URI of the code package (tar.gz)")
    parser.add_argument("--kind", required=True, choices=("script", "notebook", "function"))
    parser.add_argument("--target", required=True, help="script or notebook path, or module:function")
    parser.add_argument("--keep", action="store_true", help="keep the unpacked package directory")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="after --: the code's arguments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    skip_unused_schema_formats()
    options = build_parser().parse_args(argv)
    args = list(options.args)
    if args[:1] == ["--"]:
        args = args[1:]
    package_dir: Path | None = None
    try:
        enter_node()
        if options.package:
            from cube_jupyter.jobs.package import fetch_package, new_package_dir

            package_dir = new_package_dir(os.environ.get("CUBE_PACKAGE_DIR") or None)
            fetch_package(options.package, package_dir)
            sys.path.insert(0, str(package_dir))
        return run(options.kind, options.target, args, package_dir)
    except CubeError as exc:
        print(f"cube-jupyter entry: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:
        # The traceback comes last: its exception is what `tracebacks.last_failure` reads as the cause.
        print(f"cube-jupyter entry: {options.kind} {options.target!r} failed:", file=sys.stderr)
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if package_dir is not None and not options.keep:
            shutil.rmtree(package_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""The package's IPython extension: the workbench's magics in every kernel started from the
"Python 3 (cube-jupyter)" kernelspec (`--ext=cube_jupyter.ipython`), or after
`%load_ext cube_jupyter.ipython`.

A magic is one function decorated with `@magic("line"|"cell", name)`; `load_ipython_extension` registers
them all. Arguments are parsed with argparse, and a mistake is an IPython `UsageError`: the usage text,
not a traceback.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from typing import Any, Literal, NoReturn, TypeVar

from IPython.core.error import UsageError

from cube_jupyter.errors import CubeError

MagicKind = Literal["line", "cell"]
_MAGICS: list[tuple[MagicKind, str, Callable[..., Any]]] = []


def magic(kind: MagicKind, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(line)` (line magic) or `fn(line, cell)` (cell magic) as `%name` / `%%name`."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        _MAGICS.append((kind, name, fn))
        return fn

    return register


def load_ipython_extension(ipython: Any) -> None:
    for kind, name, fn in _MAGICS:
        ipython.register_magic_function(fn, magic_kind=kind, magic_name=name)


class _HelpShown(Exception):
    """`--help` printed the help; the magic has nothing more to do."""


class MagicArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as a UsageError instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        name = self.prog if self.prog.startswith("%") else f"%{self.prog}"  # prog "%gpu" or "gpu"
        raise UsageError(f"{self.format_usage().strip()}\n{name}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message)
        raise _HelpShown()

    def parse_line(self, line: str) -> argparse.Namespace | None:
        """The parsed magic line, or None when `--help` was asked for (and printed)."""
        try:
            words = shlex.split(line)
        except ValueError as bad:
            self.error(str(bad))
        try:
            return self.parse_args(words)
        except _HelpShown:
            return None


N = TypeVar("N", int, float)


def _number(
    parse: Callable[[str], N], kind: str, fits: Callable[[N], bool], bound: str
) -> Callable[[str], N]:
    """An argparse `type`: the text parsed as a `kind` ("number of seconds") that `fits`, the bound
    it says ("more than 0 seconds")."""

    def number(text: str) -> N:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"{text!r} must be {bound}")
        return value

    return number


_positive_seconds = _number(float, "number of seconds", lambda value: value > 0, "more than 0 seconds")
_samples = _number(int, "whole number of samples", lambda value: value >= 2, "at least 2 samples")


GPU_PARSER = MagicArgumentParser(
    prog="%gpu",
    description="Show this kernel's GPUs live (utilization, memory, temperature, power, SM clock, "
    "and which notebooks hold their memory).",
    epilog="`%gpu stop` stops the running monitor; `%gpu --once` prints a table and returns.",
)
GPU_PARSER.add_argument("action", nargs="?", choices=("show", "stop"), default="show", help="default: show")
GPU_PARSER.add_argument("--interval", type=_positive_seconds, default=1.0, help="seconds between updates")
GPU_PARSER.add_argument("--history", type=_samples, default=60, help="samples kept for the sparkline")
GPU_PARSER.add_argument("--once", action="store_true", help="print the readings once as text")


@magic("line", "gpu")
def gpu_magic(line: str) -> None:
    """%gpu [--interval S] [--history N] | %gpu --once | %gpu stop"""
    args = GPU_PARSER.parse_line(line)
    if args is None:
        return
    if args.action == "stop":
        if args.once:
            GPU_PARSER.error("--once cannot be combined with stop")
        from cube_jupyter.gpu.widget import stop_current

        stopped = stop_current()
        print("GPU monitor stopped." if stopped is not None else "No GPU monitor is running.")
        return
    if args.once:
        print(gpu_text())
        return
    from cube_jupyter.gpu.widget import monitor

    try:
        monitor(interval=args.interval, history=args.history)
    except CubeError as bad:
        raise UsageError(bad.message) from None


def gpu_text() -> str:
    """The GPUs as a text table with the processes on each; a sentence when none can be read."""
    from cube_jupyter.gpu import describe
    from cube_jupyter.gpu.attribution import attribute, discover_kernels
    from cube_jupyter.gpu.sources import NoGpuVisible

    try:
        from cube_jupyter.gpu.nvml import NvmlSource

        devices = NvmlSource().read()
        devices, _ = attribute(devices, discover_kernels())
    except NoGpuVisible as gone:
        return gone.message
    except Exception as failure:  # a failing driver is shown, not raised into the user's kernel
        return f"Reading the GPUs failed: {type(failure).__name__}: {failure}"
    return describe.devices_table(devices, describe.own_pids(), describe.own_kernel_id())


@magic("cell", "cube_train")
def cube_train_magic(line: str, cell: str) -> Any:
    """%%cube_train --framework pytorch --workers 2 [--name N]: the cell as a distributed training job."""
    from cube_jupyter.jobs.magic import cube_train  # imported on use: kernels start without the jobs code

    return cube_train(line, cell)

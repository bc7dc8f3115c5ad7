"""What the workbench's IPython magics share: an argparse parser whose mistakes are IPython
`UsageError`s (the usage text, never a traceback or an exiting kernel), and number types for it."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from typing import NoReturn, TypeVar

from IPython.core.error import UsageError


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


def number_type(
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


_positive_seconds = number_type(float, "number of seconds", lambda value: value > 0, "more than 0 seconds")
_samples = number_type(int, "whole number of samples", lambda value: value >= 2, "at least 2 samples")

"""The CLI's one rule for handlers: a parser names its handler, the handler's module loads when it runs.

Each command's parser module declares its argparse parser with the standard library only and sets
`run=Command("cube_jupyter.cli.<command>_commands:<function>")`; the handlers live in that sibling
module. So `cube-jupyter --help` imports no feature, and a command imports only its own.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cube_jupyter.config import Settings

Handler = Callable[[argparse.Namespace, "Settings"], int]


@dataclass(frozen=True)
class Command:
    """A handler `(args, settings) -> exit code` named "package.module:function", imported on call."""

    target: str

    def resolve(self) -> Handler:
        module, _, name = self.target.partition(":")
        handler: Handler = getattr(importlib.import_module(module), name)
        return handler

    def __call__(self, args: argparse.Namespace, settings: Settings) -> int:
        return self.resolve()(args, settings)

"""The CLI's rule: parsers (`cube_jupyter/cli/<command>.py`) load the standard library only; each names
its handler in the sibling `<command>_commands.py`, loaded when that command runs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator

from cube_jupyter.cli import build_parser
from cube_jupyter.cli.command import Command

COMMANDS = ("notebook", "pipeline", "schedule", "jobs", "gpu")


def leaves(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield path, parser
    for action in actions:
        for name, sub in action.choices.items():
            yield from leaves(sub, f"{path} {name}")


def test_every_command_names_a_handler_in_its_commands_module() -> None:
    commands = dict(leaves(build_parser(), "cube-jupyter"))
    assert len(commands) >= 20  # notebook (6), pipeline (4), train/tune/serve (5 each), gpu
    for path, parser in commands.items():
        handler = parser.get_default("run")
        assert isinstance(handler, Command), path
        module, _, name = handler.target.partition(":")
        assert module in {f"cube_jupyter.cli.{command}_commands" for command in COMMANDS}, path
        assert callable(handler.resolve()) and not name.startswith("_"), path


def test_help_loads_no_feature_and_no_configuration() -> None:
    script = """
import json, sys
before = set(sys.modules)
from cube_jupyter.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in set(sys.modules) - before if sys.modules[m] is not None)))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout.splitlines()[-1]))
    ours = {"cube_jupyter", "cube_jupyter._version", "cube_jupyter.cli", "cube_jupyter.cli.command"}
    ours |= {"cube_jupyter.startup", *(f"cube_jupyter.cli.{command}" for command in COMMANDS)}
    others = {m for m in loaded - ours if m.split(".")[0] not in sys.stdlib_module_names}
    assert others == set(), "`cube-jupyter --help` imports more than the parsers"
    assert "cube_jupyter.cli" in loaded

"""The `cube-jupyter` command: the same core the server uses, from a shell.

    cube-jupyter notebook|pipeline|schedule|train|tune|serve|gpu ACTION ... [--config FILE]

Each command's parser is declared here with the standard library only (`notebook.py`, ...) and names
its handlers in a sibling `*_commands.py` (`command.Command`), imported only when that command runs:
`--help` loads no feature, nor the configuration. Handlers are thin, as the server's are: they build
what they use through the composition root (`cube_jupyter.services`) and call one service. Exit
codes: 0 done, 1 the request failed (the message names the field), 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from cube_jupyter.cli.gpu import add_gpu_commands
from cube_jupyter.cli.jobs import add_job_commands
from cube_jupyter.cli.notebook import add_notebook_commands
from cube_jupyter.cli.pipeline import add_pipeline_commands
from cube_jupyter.cli.schedule import add_schedule_commands
from cube_jupyter.startup import skip_schema_format_libraries


def main(argv: Sequence[str] | None = None) -> int:
    skip_schema_format_libraries()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return 2
    from traitlets.config import Config

    from cube_jupyter.config import load_config_file, load_settings
    from cube_jupyter.errors import CubeError

    try:
        settings = load_settings(load_config_file(args.config) if args.config else Config())
        for warning in settings.deprecations:
            print(f"warning: {warning}", file=sys.stderr)
        code = int(args.run(args, settings) or 0)
        sys.stdout.flush()  # a closed pipe fails here, where it is handled, not at exit
        return code
    except CubeError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `cube-jupyter ... | head`: the reader had enough, as with any Unix tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cube-jupyter", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    add_notebook_commands(commands)
    add_pipeline_commands(commands)
    add_schedule_commands(commands)
    add_job_commands(commands)
    add_gpu_commands(commands)
    return parser

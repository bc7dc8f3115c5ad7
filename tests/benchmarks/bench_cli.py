"""CLI start-up, side by side with a bare interpreter (medians): `--help` and the commands that execute
no notebook, each a fresh `cube-jupyter` process as a user starts it, on a fresh local state dir."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from tests.benchmarks.timing import print_table, time_call

RUNS = 5
EXAMPLE = Path(__file__).parents[2] / "examples" / "pipelines" / "fanout_ml.ipynb"
BASELINE = "python -c pass"
GRAPH = f"cube-jupyter pipeline graph {EXAMPLE.name}"


def _cube_jupyter() -> list[str]:
    """The installed console script next to this interpreter, else the module."""
    script = Path(sys.executable).with_name("cube-jupyter")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cube_jupyter.cli"]


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr}")


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-cli-") as tmp:
        config = Path(tmp) / "jupyter_server_config.py"
        config.write_text(f"c.CubeWorkbench.state_dir = {str(Path(tmp) / 'state')!r}\n")
        cli = _cube_jupyter()
        config_option = ["--config", str(config)]
        commands = {
            BASELINE: [sys.executable, "-c", "pass"],
            "cube-jupyter --help": [*cli, "--help"],
            "cube-jupyter pipeline --help": [*cli, "pipeline", "--help"],
            "cube-jupyter notebook list": [*cli, "notebook", "list", *config_option],
            "cube-jupyter train list": [*cli, "train", "list", *config_option],
            GRAPH: [*cli, "pipeline", "graph", str(EXAMPLE), *config_option],
        }
        for argv in commands.values():  # untimed: byte-compile, fill the page cache, create the state
            _run(argv)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(RUNS):  # interleaved, so a busy moment costs every row alike
            for name, argv in commands.items():
                samples[name].append(time_call(partial(_run, argv)))

    print_table(
        "CLI start: a fresh process per command, no notebook executed",
        list(samples.items()),
        baseline=BASELINE,
    )


if __name__ == "__main__":
    asyncio.run(main())

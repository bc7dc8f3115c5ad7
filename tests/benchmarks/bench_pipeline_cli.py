"""Pipelines from the terminal, cold, as a user runs them (`cube-jupyter pipeline run`, a new process
each time), side by side with the Elyra-style baseline run in the same invocation: each node its own
notebook, executed one after another by papermill in one fresh process (medians):

1. a 4-way fan-out of 2-second steps (`--parallel 4`): the physical limit is 2 s of sleeps;
2. an 8-step linear pipeline of trivial cells: per-step cost;
3. a fully cached re-run of the linear pipeline: nothing to execute.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nbformat import NotebookNode

from tests.benchmarks.timing import print_table
from tests.pipelines.notebooks import code, notebook, write

RUNS = 5
STEPS = 8
BRANCHES = 4
SLEEP = 2
CONFIG = (
    "c.CubeWorkbench.state_dir = {state!r}\n"
    "c.CubeStorage.url = {store!r}\n"
    'c.CubeWorkbench.default_user = "bench"\n'
)
# Elyra's local runner: every node a notebook of its own, run in order by papermill in one process.
ELYRA_STYLE = (
    "import sys, papermill\n"
    "for path in sys.argv[1:]:\n"
    "    papermill.execute_notebook(path, path + '.out', kernel_name='python3', progress_bar=False)\n"
)


def fanout_cells() -> list[NotebookNode]:
    cells = [code("import time", "imports"), code("seed = 1", "step:root")]
    cells += [code(f"time.sleep({SLEEP})\nb{i} = seed + {i}", f"step:branch{i}") for i in range(BRANCHES)]
    return cells


def linear_cells() -> list[NotebookNode]:
    cells = [code("x0 = 0", "step:s1")]
    return cells + [code(f"x{i} = {i}", f"step:s{i + 1}") for i in range(1, STEPS)]


def one_notebook_per_node(cells: list[NotebookNode], folder: Path) -> list[str]:
    """The pipeline as Elyra runs it: a notebook per node, each with the imports cell and the first
    node's (cheap) cell, which stands in for reading the first node's outputs from a file."""
    folder.mkdir()
    imports = [cell for cell in cells if "imports" in cell.metadata.get("tags", [])]
    nodes = [cell for cell in cells if cell not in imports]
    return [
        str(write(notebook(*imports, *nodes[: min(i, 1)], node), folder / f"node{i}.ipynb"))
        for i, node in enumerate(nodes)
    ]


def timed(argv: list[str], cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - started


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-pipeline-cli-") as tmp:
        root = Path(tmp)
        config = root / "config.py"
        config.write_text(CONFIG.format(state=str(root / "state"), store=str(root / "artifacts")))
        write(notebook(*fanout_cells()), root / "fanout.ipynb")
        write(notebook(*linear_cells()), root / "linear.ipynb")
        fanout_nodes = one_notebook_per_node(fanout_cells(), root / "fanout-nodes")
        linear_nodes = one_notebook_per_node(linear_cells(), root / "linear-nodes")
        cli = [sys.executable, "-m", "cube_jupyter.cli", "pipeline", "run", "--config", str(config)]
        elyra = [sys.executable, "-c", ELYRA_STYLE]

        rows: dict[str, list[float]] = {}
        for _ in range(RUNS):  # interleaved, so a busy moment of the host weighs on every row alike
            for name, argv in (
                ("fan-out: Elyra-style sequential papermill (baseline)", [*elyra, *fanout_nodes]),
                (
                    "fan-out: cube-jupyter pipeline run --parallel 4",
                    [*cli, "fanout.ipynb", "--parallel", "4", "--no-cache"],
                ),
                ("linear: Elyra-style sequential papermill", [*elyra, *linear_nodes]),
                ("linear: cube-jupyter pipeline run", [*cli, "linear.ipynb", "--no-cache"]),
            ):
                rows.setdefault(name, []).append(timed(argv, root))
        timed([*cli, "linear.ipynb"], root)  # fill the cache
        rows["linear: fully cached re-run"] = [timed([*cli, "linear.ipynb"], root) for _ in range(RUNS)]

    baseline = "fan-out: Elyra-style sequential papermill (baseline)"
    print_table(
        f"Pipelines from the terminal, cold: {BRANCHES}-way fan-out of {SLEEP} s steps "
        f"(limit {SLEEP} s), {STEPS}-step linear pipeline of trivial cells",
        [
            *rows.items(),
            (
                "linear: cube-jupyter pipeline run, per step",
                [t / STEPS for t in rows["linear: cube-jupyter pipeline run"]],
            ),
        ],
        baseline=baseline,
    )


if __name__ == "__main__":
    asyncio.run(main())

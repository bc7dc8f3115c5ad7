"""Steps of a notebook that imports torch, from the terminal, cold (`cube-jupyter pipeline run`, a
new process each time, with a state and store of its own: every step runs), side by side with the
same notebook without torch (medians): a 4-step linear pipeline of trivial cells whose `imports`
cell, run at the top of every step, imports torch or not.

Torch's kernels are forked from a fork server that imported it once, so the run pays one torch import
(its floor), not one per step. "Before" is the same notebook importing torch as
`__import__("torch")`, which no notebook reading recognises as an import: its kernels come from the
plain server, and each step imports torch itself, as every step did before torch was preloaded.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from nbformat import NotebookNode

from tests.benchmarks.bench_pipeline_cli import CONFIG, timed
from tests.benchmarks.timing import print_table
from tests.pipelines.notebooks import code, notebook, write

RUNS = 5
STEPS = 4
IMPORTS = {
    "no torch (baseline)": "import math",
    "torch, preloaded in the fork server": "import torch",
    "torch, imported by every step (before)": 'torch = __import__("torch")',
}


def cells(imports: str) -> list[NotebookNode]:
    steps = [code("x0 = 0", "step:s0")] + [
        code(f"x{i} = x{i - 1} + 1", f"step:s{i}") for i in range(1, STEPS)
    ]
    return [code(imports, "imports"), *steps]


def cold_run(root: Path, notebook_path: Path) -> float:
    """`cube-jupyter pipeline run` of the notebook with a state and store of its own: nothing cached."""
    run = Path(tempfile.mkdtemp(dir=root))
    config = run / "config.py"
    config.write_text(CONFIG.format(state=str(run / "state"), store=str(run / "artifacts")))
    return timed(
        [
            sys.executable,
            "-m",
            "cube_jupyter.cli",
            "pipeline",
            "run",
            "--config",
            str(config),
            str(notebook_path),
        ],
        root,
    )


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-torch-steps-") as tmp:
        root = Path(tmp)
        notebooks = {
            name: write(notebook(*cells(imports)), root / f"nb{i}.ipynb")
            for i, (name, imports) in enumerate(IMPORTS.items())
        }
        rows: dict[str, list[float]] = {name: [] for name in IMPORTS}
        for _ in range(RUNS):  # interleaved, so a busy moment of the host weighs on every row alike
            for name, path in notebooks.items():
                rows[name].append(cold_run(root, path))

    baseline, *with_torch = IMPORTS
    overhead = [
        (
            f"{name}: per-step overhead",
            [(t - b) / STEPS for t, b in zip(rows[name], rows[baseline], strict=True)],
        )
        for name in with_torch
    ]
    print_table(
        f"A {STEPS}-step notebook whose `imports` cell imports torch, from the terminal, cold "
        "(target: within 2.2x of the notebook without torch)",
        list(rows.items()),
        baseline=baseline,
    )
    print_table("What torch adds to each step (the run's time less the baseline's, per step)", overhead)


if __name__ == "__main__":
    asyncio.run(main())

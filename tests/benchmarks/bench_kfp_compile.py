"""Compiling a 30-step notebook for Kubeflow Pipelines, beside compiling it for Argo (the baseline),
both in this process (medians of repeated calls, the notebook's graph already built) and cold, as a
user runs `cube-jupyter pipeline compile NB --target kfp|argo -o FILE` (a new process each time,
KFP's SDK imported in it). Also the size of what each writes. Most of KFP's time is its own: each
task setter (`set_cpu_request`, ...) calls `inspect.stack()`, five per task.

The notebook: a parameters cell, imports, and 30 steps that each read the previous step's frame and
write a new one, with a metric at the end.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.pipelines.kubernetes.argo import compile_workflow
from cube_jupyter.pipelines.kubernetes.kfp import compile_kfp
from cube_jupyter.services import Workbench
from tests.benchmarks.timing import print_table, time_call
from tests.pipelines.notebooks import code, notebook, write

STEPS = 30
RUNS = 10
COLD_RUNS = 3
CONFIG = 'c.CubeStorage.url = "s3://bench/pipelines"\nc.CubeWorkbench.state_dir = {state!r}\n'


def thirty_steps(folder: Path) -> Path:
    cells = [
        code("import pandas as pd", "imports"),
        code("rows = 100\nscale = 0.5", "parameters"),
        code("frame0 = pd.DataFrame({'x': range(rows)})", "step:s0"),
    ]
    cells += [
        code(f"frame{i} = frame{i - 1}.assign(x=frame{i - 1}.x * scale)", f"step:s{i}")
        for i in range(1, STEPS)
    ]
    cells += [code(f"total = float(frame{STEPS - 1}.x.sum())", f"step:s{STEPS}"), code("total", "metrics")]
    return write(notebook(*cells), folder / "thirty.ipynb")


def cold(folder: Path, target: str) -> float:
    argv = [sys.executable, "-m", "cube_jupyter.cli", "pipeline", "compile", "thirty.ipynb"]
    argv += ["--target", target, "-o", f"{target}.yaml", "--config", str(folder / "config.py")]
    started = time.perf_counter()
    subprocess.run(argv, cwd=folder, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - started


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-kfp-") as name:
        folder = Path(name)
        thirty_steps(folder)
        (folder / "config.py").write_text(CONFIG.format(state=str(folder / "state")))
        config = Config()
        config.CubeStorage.url = "s3://bench/pipelines"
        config.CubeWorkbench.state_dir = str(folder / "state")
        settings = load_settings(config)
        pipeline = Workbench(settings, root_dir=str(folder), cluster_runs=False).pipelines.load(
            "bench", "thirty.ipynb"
        )
        assert len(pipeline.steps) == STEPS + 1
        kfp = [time_call(lambda: compile_kfp(pipeline, settings.pipelines)) for _ in range(RUNS)]
        argo = [time_call(lambda: compile_workflow(pipeline, settings.pipelines)) for _ in range(RUNS)]
        print_table(
            f"Compiling a {STEPS + 1}-step notebook, in process",
            [("Argo Workflow (baseline)", argo), ("KFP IR, through kfp.compiler", kfp)],
            unit="ms",
            baseline="Argo Workflow (baseline)",
        )
        argo_cold = [cold(folder, "argo") for _ in range(COLD_RUNS)]
        kfp_cold = [cold(folder, "kfp") for _ in range(COLD_RUNS)]
        print_table(
            f"`cube-jupyter pipeline compile` of the {STEPS + 1}-step notebook, a new process each time",
            [("--target argo (baseline)", argo_cold), ("--target kfp", kfp_cold)],
            baseline="--target argo (baseline)",
        )
        ir = (folder / "kfp.yaml").read_text()
        workflow = (folder / "argo.yaml").read_text()
        spec = next(yaml.safe_load_all(ir))
        print(f"\nWhat is written for {STEPS + 1} steps")
        executors = len(spec["deploymentSpec"]["executors"])
        print(f"  KFP IR          {len(ir.encode()) / 1024:8.1f} KiB, {executors} executors")
        print(f"  Argo Workflow   {len(workflow.encode()) / 1024:8.1f} KiB")


if __name__ == "__main__":
    asyncio.run(main())

"""Pipeline executor figures, side by side in one run (medians):

1. per-step orchestration overhead of an 8-step linear pipeline of trivial cells vs. papermill running
   the same notebook once (one kernel, all cells);
2. wall time of a 4-way fan-out of 2-second steps on a warm server, beside the first run on a freshly
   started one (with and without the graph request the Lab panel makes before Run);
3. a fully cached re-run of the 8-step pipeline.

Runs go through `PipelineService` as the server and the CLI drive them: a warm worker pool (a server)
and a pool started for the run (the CLI).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import papermill
from nbformat import NotebookNode
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.history import RunRecord
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter.pipelines.targets import RunRequest
from tests.benchmarks.timing import print_table, time_call
from tests.pipelines.notebooks import code, notebook, write

RUNS = 5
FANOUT_RUNS = 5
STEPS = 8


def _linear() -> list[NotebookNode]:
    cells = [code("x0 = 0", "step:s1")]
    cells += [code(f"x{i} = x{i - 1} + 1", f"step:s{i + 1}") for i in range(1, STEPS)]
    return cells


def _fanout() -> list[NotebookNode]:
    cells = [code("import time", "imports"), code("seed = 1", "step:root")]
    cells += [code(f"time.sleep(2)\nb{i} = seed + {i}", f"step:branch{i}") for i in range(4)]
    return cells


def _settings(root: Path) -> PipelineSettings:
    return load_settings(
        Config(
            {
                "CubeWorkbench": {"state_dir": str(root / "state"), "default_user": "bench"},
                "CubeStorage": {"url": str(root / "artifacts")},
            }
        )
    ).pipelines


async def _run(
    service: PipelineService, path: str, parallel: int | None = None, no_cache: bool = False
) -> tuple[float, RunRecord]:
    started = time.perf_counter()
    run = await service.start_run("bench", RunRequest(path, parallel=parallel, no_cache=no_cache))
    run = await service.wait("bench", run.id)
    elapsed = time.perf_counter() - started
    if run.status != "succeeded":
        raise RuntimeError(f"benchmark run {run.id} {run.status}: {run.error}")
    return elapsed, run


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-pipelines-") as tmp:
        root = Path(tmp)
        linear = write(notebook(*_linear()), root / "linear.ipynb")
        write(notebook(*_fanout()), root / "fanout.ipynb")
        settings = _settings(root)

        papermill_once = [
            time_call(
                lambda: papermill.execute_notebook(
                    str(linear), None, kernel_name="python3", progress_bar=False, cwd=str(root)
                )
            )
            for _ in range(RUNS)
        ]

        cold = []
        for _ in range(3):
            service = PipelineService(settings, root, pool_size=2)
            cold.append((await _run(service, "linear.ipynb", no_cache=True))[0])
            await service.close()

        service = PipelineService(settings, root, pool_size=2)
        try:
            await _run(service, "linear.ipynb", no_cache=True)  # start the pool and its kernels
            warm = [(await _run(service, "linear.ipynb", no_cache=True))[0] for _ in range(RUNS)]
            cached = []
            for _ in range(RUNS):
                elapsed, run = await _run(service, "linear.ipynb")
                assert all(s.status == "cached" for s in run.steps)
                cached.append(elapsed)
        finally:
            await service.close()

        first_after_graph, first_cold = [], []
        for shown in (True, False) * FANOUT_RUNS:
            service = PipelineService(settings, root, pool_size=4)  # a server just started
            try:
                started = time.perf_counter()
                if shown:  # as in Lab: the Pipeline panel shows the graph, then the user presses Run
                    service.graph("bench", "fanout.ipynb")
                await _run(service, "fanout.ipynb", parallel=4, no_cache=True)
                (first_after_graph if shown else first_cold).append(time.perf_counter() - started)
            finally:
                await service.close()

        service = PipelineService(settings, root, pool_size=4)  # a server's pool, four steps wide
        try:
            await _run(service, "fanout.ipynb", parallel=4, no_cache=True)  # start the pool, warm
            fan_wall, fan_sum = [], []
            for _ in range(FANOUT_RUNS):
                elapsed, run = await _run(service, "fanout.ipynb", parallel=4, no_cache=True)
                fan_wall.append(elapsed)
                fan_sum.append(sum(s.duration or 0.0 for s in run.steps if s.name.startswith("branch")))
        finally:
            await service.close()

    print_table(
        f"Pipelines: {STEPS}-step linear pipeline of trivial cells (per-step overhead = wall / {STEPS})",
        [
            ("papermill, the same notebook once (cold kernel)", papermill_once),
            ("pipeline, warm worker pool (server): whole run", warm),
            ("pipeline, warm worker pool (server): per step", [t / STEPS for t in warm]),
            ("pipeline, pool started for the run (CLI): whole run", cold),
            ("pipeline, pool started for the run (CLI): per step", [t / STEPS for t in cold]),
            ("pipeline, fully cached re-run", cached),
        ],
        baseline="papermill, the same notebook once (cold kernel)",
    )
    print_table(
        "Pipelines: 4-way fan-out of 2-second steps (parallel 4, warm pool of 4)",
        [
            ("sum of the four 2-second steps' durations", fan_sum),
            ("fan-out run, warm server: wall time (root step + 4 branches)", fan_wall),
            ("first run on a fresh server, right after the panel's graph request", first_after_graph),
            ("first run on a fresh server, no graph request (REST only)", first_cold),
        ],
        baseline="fan-out run, warm server: wall time (root step + 4 branches)",
    )


if __name__ == "__main__":
    asyncio.run(main())

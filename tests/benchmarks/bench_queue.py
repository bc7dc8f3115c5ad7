"""Admission latency of the local training queue (issue 25), through the workbench's job service.

With `c.CubeJobs.cpu_slots = 2` one 2-replica training job fills the machine, so a second one waits
Queued. Measured, over real replica processes:

1. admission: from the running job's end (the last of its replicas exiting, as they record it) to
   the queued job's replicas running (the last of them started, as they record it), and to the job's
   phase Running as the service reports it (`JobService.get`, what `GET /jobs/{name}` answers);
2. baseline: the same job submitted on an empty machine, from `submit` to the same two points.

The difference is what the queue costs: noticing the end (the supervisor's pass every
`AsyncLocalTraining.poll` seconds), the admission pass, and the start itself.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.jobs.service import JobService
from cube_jupyter.services import open_workbench
from tests.benchmarks.timing import print_table
from tests.waiting import wait_until_async

RUNS = 5
TIMEOUT = 120.0
# A replica: record when it started, wait for its gate file, record when it ends, exit 0.
REPLICA = """
import os, sys, time
out, gate = sys.argv[1], sys.argv[2]
rank = os.environ["RANK"]
with open(os.path.join(out, f"start-{rank}"), "w") as f:
    f.write(repr(time.time()))
while not os.path.exists(gate):
    time.sleep(0.005)
with open(os.path.join(out, f"end-{rank}"), "w") as f:
    f.write(repr(time.time()))
"""


def _spec(name: str, out: Path, gate: Path) -> dict[str, Any]:
    return {
        "kind": "training",
        "spec": {
            "name": name,
            "framework": "pytorch",
            "replicas": {"master": 1, "worker": 1},
            "command": [sys.executable, "-c", REPLICA, str(out), str(gate)],
        },
    }


def _stamps(out: Path, what: str, count: int = 2) -> list[float] | None:
    """The replicas' recorded times of `what` (start, end), once every one has written it."""
    found = sorted(out.glob(f"{what}-*"))
    texts = [p.read_text() for p in found]
    if len(found) < count or not all(texts):
        return None
    return [float(t) for t in texts]


async def _until(done: Callable[[], Any], what: str) -> Any:
    """Poll every 5 ms (fine-grained: timed) without blocking the loop the job supervisor runs on."""
    return await wait_until_async(done, TIMEOUT, what, interval=0.005)


async def _running(jobs: JobService, user: str, name: str) -> float:
    """When the service first reports `name` Running."""
    await _until(lambda: jobs.get(user, name).phase == "Running", f"{name} to be Running")
    return time.time()


async def _one_run(jobs: JobService, user: str, root: Path, run: int) -> tuple[float, float, float, float]:
    """(admission: end -> replicas started, end -> Running; baseline: submit -> started, -> Running)."""
    first_out, second_out, base_out = (root / f"{k}-{run}" for k in ("first", "second", "base"))
    for out in (first_out, second_out, base_out):
        out.mkdir()
    gate_first, gate_rest = root / f"gate-first-{run}", root / f"gate-rest-{run}"

    # Baseline: the job on an empty machine.
    submitted = time.time()
    await jobs.submit(user, _spec(f"base-{run}", base_out, gate_rest))
    base_running = await _running(jobs, user, f"base-{run}")
    base_started = max(await _until(lambda: _stamps(base_out, "start"), "the baseline's replicas"))
    await jobs.delete(user, f"base-{run}")

    # Admission: a running job fills the cpu slots, the second waits, then the first ends.
    await jobs.submit(user, _spec(f"first-{run}", first_out, gate_first))
    await _until(lambda: _stamps(first_out, "start"), "the first job's replicas")
    queued = await jobs.submit(user, _spec(f"second-{run}", second_out, gate_rest))
    if queued.phase != "Queued":
        raise RuntimeError(f"second-{run} is {queued.phase}, not Queued: is cpu_slots 2?")
    gate_first.touch()
    running = await _running(jobs, user, f"second-{run}")
    ended = max(await _until(lambda: _stamps(first_out, "end"), "the first job's replicas to end"))
    started = max(await _until(lambda: _stamps(second_out, "start"), "the second job's replicas"))
    gate_rest.touch()
    for name in (f"first-{run}", f"second-{run}"):
        await jobs.delete(user, name)
    return started - ended, running - ended, base_started - submitted, base_running - submitted


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-queue-") as tmp:
        root = Path(tmp)
        config = Config()
        config.CubeWorkbench.backend = "local"
        config.CubeWorkbench.state_dir = str(root / "state")
        config.CubeStorage.url = str(root / "artifacts")
        config.CubeJobs.cpu_slots = 2  # one 2-replica job fills the machine
        settings = load_settings(config)
        user = settings.workbench.default_user
        async with open_workbench(settings, root_dir=str(root)) as workbench:
            jobs = await workbench.started_jobs()
            runs = [await _one_run(jobs, user, root, run) for run in range(RUNS)]
        baseline = "baseline: empty machine, submit -> replicas started"
        print_table(
            "Local training queue: a queued 2-replica job admitted when the running one ends "
            "(CubeJobs.cpu_slots = 2)",
            [
                ("queued: running job's end -> replicas started", [r[0] for r in runs]),
                ("queued: running job's end -> phase Running (API)", [r[1] for r in runs]),
                (baseline, [r[2] for r in runs]),
                ("baseline: empty machine, submit -> phase Running", [r[3] for r in runs]),
            ],
            unit="ms",
            baseline=baseline,
        )

"""Local training figures, side by side in one run (medians):

1. launch-to-running latency of a 2-replica PyTorch job: from `start(spec)` until the Running
   condition, and until the shipped code's first line has run in every replica (package fetched and
   unpacked, Python started), next to two bare `python -c` starts one after the other (the floor);
2. DDP (gloo, CPU) throughput of the toy model with 2 replicas (Master + Worker) vs 1 (Master
   alone), in samples per second over all ranks (one thread per rank).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cube_jupyter.jobs.local.training import LocalTrainingRunner
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.storage.local import LocalStore
from tests.benchmarks.timing import print_table, time_call
from tests.waiting import wait_until

USER = "bench"
LAUNCH_RUNS = 7
DDP_RUNS = 3
# (steps, batch per rank): small batches measure gloo's per-step all-reduce, large ones the compute.
DDP_SHAPES = ((300, 64), (60, 2048))
REPLICAS_DIR = Path(__file__).parents[1] / "jobs" / "local" / "replicas"
READY_SCRIPT = "import time\nprint('cube-ready', flush=True)\ntime.sleep(60)\n"


def _spec(raw: dict[str, object]) -> TrainingSpec:
    return TrainingSpec.from_dict(raw, user=USER)


def _wait(runner: LocalTrainingRunner, name: str, done: Callable[[], bool], timeout: float = 120.0) -> None:
    wait_until(done, timeout, f"benchmark job {name} to get there", interval=0.02)  # fine-grained: timed


def launch_latency(runner: LocalTrainingRunner, code_dir: Path, run: int) -> tuple[float, float]:
    """Seconds from start() to the Running condition, and to the code's first line in both replicas."""
    name = f"launch-{run}"
    spec = _spec(
        {"name": name, "framework": "pytorch", "replicas": {"master": 1, "worker": 1}, "script": "ready.py"}
    )
    started = time.perf_counter()
    runner.start(spec, code_dir=code_dir)
    _wait(runner, name, lambda: runner.status(USER, name).phase == "Running")
    running = time.perf_counter() - started
    _wait(
        runner,
        name,
        lambda: all("cube-ready" in runner.logs(USER, name, r) for r in ("master-0", "worker-0")),
    )
    ready = time.perf_counter() - started
    runner.delete(USER, name)
    return running, ready


def ddp_throughput(
    runner: LocalTrainingRunner, out_root: Path, workers: int, steps: int, batch: int, run: int
) -> float:
    """Samples per second over all ranks: their samples over the slowest rank's training time."""
    name = f"ddp-{workers}-{batch}-{run}"
    out = out_root / name
    out.mkdir()
    replicas: dict[str, int] = {"master": 1, "worker": workers - 1} if workers > 1 else {"master": 1}
    spec = _spec(
        {
            "name": name,
            "framework": "pytorch",
            "replicas": replicas,
            "script": "ddp_train.py",
            "args": ["--out", str(out), "--steps", str(steps), "--batch", str(batch)],
        }
    )
    runner.start(spec, code_dir=REPLICAS_DIR)
    job = runner.wait(USER, name, 600)
    if job.phase != "Succeeded":
        raise RuntimeError(f"benchmark job {name} {job.phase}: {job.message}")
    runner.delete(USER, name)
    reports = [json.loads(p.read_text()) for p in out.glob("rank-*.json")]
    return sum(r["samples"] for r in reports) / max(r["seconds"] for r in reports)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-training-") as tmp:
        root = Path(tmp)
        code_dir = root / "code"
        code_dir.mkdir()
        (code_dir / "ready.py").write_text(READY_SCRIPT)
        runner = LocalTrainingRunner(root / "state", store=LocalStore(root / "store"), stop_grace_seconds=5)

        bare = [
            time_call(lambda: [subprocess.run([sys.executable, "-c", "pass"], check=True) for _ in range(2)])
            for _ in range(LAUNCH_RUNS)
        ]
        latencies = [launch_latency(runner, code_dir, run) for run in range(LAUNCH_RUNS)]
        print_table(
            "Local training: launch of a 2-replica PyTorch job",
            [
                ("start() -> Running condition", [r for r, _ in latencies]),
                ("start() -> shipped code running in both replicas", [c for _, c in latencies]),
                ("baseline: 2 x bare `python -c pass`", bare),
            ],
            unit="ms",
            baseline="baseline: 2 x bare `python -c pass`",
        )

        for steps, batch in DDP_SHAPES:
            one = [ddp_throughput(runner, root, 1, steps, batch, run) for run in range(DDP_RUNS)]
            two = [ddp_throughput(runner, root, 2, steps, batch, run) for run in range(DDP_RUNS)]
            print(f"\nDDP (gloo, CPU) toy model: {steps} steps of {batch} samples per rank, {DDP_RUNS} runs")
            print(
                f"  {'':32}" + "".join(f"{c:>20}" for c in ("median", "min", "max")) + f"{'vs 1 worker':>13}"
            )
            base = statistics.median(one)
            for label, samples in (("1 worker (Master)", one), ("2 workers (Master + Worker)", two)):
                stats = (statistics.median(samples), min(samples), max(samples))
                cells = "".join(f"{f'{v:,.0f} samples/s':>20}" for v in stats)
                print(f"  {label:32}{cells}{statistics.median(samples) / base:>12.2f}x")

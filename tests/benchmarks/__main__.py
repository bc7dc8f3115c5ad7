"""`python -m tests.benchmarks [NAME...]`: run the benchmarks (all by default) and print their figures."""

from __future__ import annotations

import asyncio
import importlib
import sys
import traceback

BENCHMARKS = [
    "bench_pipeline_cli",
    "bench_torch_steps",
    "bench_cli",
    "bench_local_spawn",
    "bench_notebook_list",
    "bench_pipelines",
    "bench_schedules",
    "bench_kfp_compile",
    "bench_pipeline_targets",
    "bench_training",
    "bench_queue",
    "bench_kueue_admission",
    "bench_gpu_monitor",
    "bench_gpu_api",
    "bench_reliability",
]


def main(names: list[str]) -> int:
    """Run each benchmark; one that fails is reported and the others still run (exit 1 at the end)."""
    failed = []
    for name in names or BENCHMARKS:
        try:
            module = importlib.import_module(f"tests.benchmarks.{name}")
            asyncio.run(module.main())
        except Exception:
            traceback.print_exc()
            failed.append(name)
    if failed:
        print(f"\nbenchmarks that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`python -m tests.benchmarks [NAME...]`: run the benchmarks (all by default) and print their figures."""

from __future__ import annotations

import asyncio
import importlib
import sys

BENCHMARKS = [
    "bench_pipeline_cli",
    "bench_cli",
    "bench_local_spawn",
    "bench_notebook_list",
    "bench_pipelines",
    "bench_training",
    "bench_gpu_monitor",
    "bench_gpu_api",
    "bench_reliability",
]


def main(names: list[str]) -> None:
    for name in names or BENCHMARKS:
        module = importlib.import_module(f"tests.benchmarks.{name}")
        asyncio.run(module.main())


if __name__ == "__main__":
    main(sys.argv[1:])

"""`cube-jupyter gpu`: GPU use from a shell, as a table or as the JSON `/gpu` answers.

    cube-jupyter gpu [--json] [--prometheus URL] [--config FILE] [--history SECONDS]

Without Prometheus it reads this machine's GPUs through NVML and names the kernel and notebook of
each process it can; with `--prometheus` (or `CubeGPU.prometheus_url` in `--config`) it shows the
cluster's GPUs by pod from DCGM exporter metrics. No GPU visible is an answer (exit 0), not a failure;
an unreachable Prometheus exits 1 with a message.
"""

from __future__ import annotations

import argparse

from cube_jupyter.cli.command import Command


def add_gpu_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gpu = commands.add_parser("gpu", help="GPU use: this machine's GPUs by kernel, or the cluster's by pod")
    gpu.add_argument("--json", action="store_true", help="print the report as JSON (as GET /gpu answers)")
    gpu.add_argument("--prometheus", metavar="URL", help="read DCGM metrics from this Prometheus")
    gpu.add_argument("--config", metavar="FILE", help="a jupyter_server_config.py with c.Cube* settings")
    gpu.add_argument(
        "--history",
        metavar="SECONDS",
        type=float,
        default=0.0,
        help="with Prometheus: include this much history (query_range) in the JSON",
    )
    gpu.set_defaults(run=Command("cube_jupyter.cli.gpu_commands:show"))

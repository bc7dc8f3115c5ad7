"""The `cube-jupyter gpu` handler (its parser is in `gpu.py`): a report from NVML or Prometheus,
printed as a table or as the JSON `/gpu` answers."""

from __future__ import annotations

import argparse
import json
import math

from cube_jupyter.config import Settings
from cube_jupyter.configurable import validate_prometheus_url
from cube_jupyter.errors import InvalidInput
from cube_jupyter.gpu.config import MAX_HISTORY_SECONDS
from cube_jupyter.gpu.report import cluster_report, local_report, render_table
from cube_jupyter.services import Workbench


def show(args: argparse.Namespace, settings: Settings) -> int:
    if not (math.isfinite(args.history) and 0 <= args.history <= MAX_HISTORY_SECONDS):
        raise InvalidInput(
            f"--history must be between 0 and {MAX_HISTORY_SECONDS:.0f} seconds, got {args.history}",
            field="--history",
        )
    url = settings.gpu.prometheus_url
    if args.prometheus:
        url = validate_prometheus_url(args.prometheus, "--prometheus", InvalidInput)
    timeout = settings.gpu.gpu.prometheus_timeout_seconds
    if url:
        report = cluster_report(url, timeout, args.history)
    else:
        owners = [owner for source in Workbench(settings).process_owners() for owner in source()]
        report = local_report(owners)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(render_table(report))
    return 0

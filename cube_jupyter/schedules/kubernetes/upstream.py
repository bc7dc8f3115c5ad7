"""The `depends_on` task of a CronWorkflow's run (`cron.py`): wait until the other schedule's run for
the same logical time has succeeded, exit 0; exit 1 as soon as every run of it for that time has
ended otherwise. Argo's `activeDeadlineSeconds` on the task is the timeout (depends_timeout_seconds).

    python -m cube_jupyter.schedules.kubernetes.upstream --schedule NAME --namespace NS \\
        --scheduled-time 2026-11-28T03:00:00+01:00

It runs in the step's pod, as the steps' ServiceAccount, and lists Workflows of its own namespace by
the labels every scheduled run carries, Argo's and the workbench's alike.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime

from cube_jupyter.kube.client import KubeClient, make_api_client
from cube_jupyter.kube.labels import LOGICAL_DATE_LABEL, SCHEDULE_LABEL, logical_date_label
from cube_jupyter.schedules.timing import iso

API_VERSION, KIND = "argoproj.io/v1alpha1", "Workflow"
POLL_SECONDS = 10.0
FAILED = ("Failed", "Error")


def verdict(phases: list[str]) -> bool | None:
    """True once one run succeeded; False when there are runs and all failed; None: wait."""
    if "Succeeded" in phases:
        return True
    if phases and all(phase in FAILED for phase in phases):
        return False
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedule", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--scheduled-time", required=True, help="RFC 3339, as Argo writes it")
    args = parser.parse_args(argv)
    logical = iso(datetime.fromisoformat(args.scheduled_time.replace("Z", "+00:00")).astimezone(UTC))
    selector = f"{SCHEDULE_LABEL}={args.schedule},{LOGICAL_DATE_LABEL}={logical_date_label(logical)}"
    client = KubeClient(make_api_client())
    print(f"waiting for schedule {args.schedule!r} to succeed for {logical}", flush=True)
    while True:
        found = client.list(API_VERSION, KIND, args.namespace, label_selector=selector)
        phases = [str((w.get("status") or {}).get("phase") or "") for w in found.items]
        outcome = verdict(phases)
        if outcome is not None:
            print(f"schedule {args.schedule!r} for {logical}: {', '.join(phases)}", flush=True)
            return 0 if outcome else 1
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())

"""The `depends_on` task of a CronWorkflow's run (`cron.py`): wait until the other schedule's run for
the same logical time has succeeded, exit 0; exit 1 as soon as every run of it for that time has
ended otherwise. Argo's `activeDeadlineSeconds` on the task is the timeout (depends_timeout_seconds).

    python -m cube_jupyter.schedules.kubernetes.upstream --schedule NAME --namespace NS \\
        --scheduled-time 2026-11-28T03:00:00+01:00

It runs in the step's pod, as the steps' ServiceAccount, and lists the other schedule's Workflows of
its own namespace (by the label every scheduled run carries), Argo's and the workbench's alike; a
run's logical time is `cron.logical_date_of`.
"""

from __future__ import annotations

import argparse
import sys
import time

from cube_jupyter.kube.client import KubeClient, make_api_client
from cube_jupyter.kube.labels import SCHEDULE_LABEL
from cube_jupyter.schedules.kubernetes.cron import API_VERSION, logical_date_of, scheduled_time_in_utc

KIND = "Workflow"
POLL_SECONDS = 10.0
FAILED = ("Failed", "Error")


def verdict(phases: list[str]) -> bool | None:
    """True once one run succeeded; False when there are runs and all failed; None: wait."""
    if "Succeeded" in phases:
        return True
    if phases and all(phase in FAILED for phase in phases):
        return False
    return None


def phases_for(client: KubeClient, namespace: str, schedule: str, logical: str) -> list[str]:
    """The phases of `schedule`'s runs for the logical time `logical`, in `namespace`."""
    found = client.list(API_VERSION, KIND, namespace, label_selector=f"{SCHEDULE_LABEL}={schedule}")
    return [
        str((w.get("status") or {}).get("phase") or "") for w in found.items if logical_date_of(w) == logical
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedule", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--scheduled-time", required=True, help="RFC 3339, as Argo writes it")
    args = parser.parse_args(argv)
    logical = scheduled_time_in_utc(args.scheduled_time)
    if logical is None:
        parser.error(f"--scheduled-time: {args.scheduled_time!r} is not an RFC 3339 time")
    client = KubeClient(make_api_client())
    print(f"waiting for schedule {args.schedule!r} to succeed for {logical}", flush=True)
    while True:
        phases = phases_for(client, args.namespace, args.schedule, logical)
        outcome = verdict(phases)
        if outcome is not None:
            print(f"schedule {args.schedule!r} for {logical}: {', '.join(phases)}", flush=True)
            return 0 if outcome else 1
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())

"""Admission latency of Kueue's own controller on the test control plane (tests/cluster/controlplane.py,
a plane of its own in a temporary folder, Kueue started on it as the `kueue` fixture starts it).

Measured per run, side by side, with room in the ClusterQueue's quota:

1. queued: a 2-replica Job created on a LocalQueue (Kueue's webhook suspends it, Kueue makes its
   Workload, admits it and unsuspends it, the Job controller makes its pods): from the create to the
   Job unsuspended with both pods made;
2. baseline: the same Job without the queue label (the Job controller alone): from the create to
   both pods made.

The difference is what admission through Kueue costs a job that does not have to wait.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import config as k8s_config

from cube_jupyter.kube.client import KubeClient
from tests.benchmarks.timing import print_table
from tests.cluster import controlplane
from tests.cluster.conftest import QUEUE_LABEL, Kubectl, kueue_queue
from tests.waiting import wait_until

RUNS = 20
TIMEOUT = 60.0
NAMESPACE = "default"
QUOTA = {"cpu": "8", "memory": "16Gi"}


def _job(name: str, queue: str = "") -> dict[str, Any]:
    container = {
        "name": "train",
        "image": "python:3.12-slim",
        "command": ["python", "train.py"],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: queue} if queue else {}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def _started(kube: KubeClient, name: str) -> bool:
    """Unsuspended, both pods made (kwok may have completed them already: they count)."""
    if kube.get("batch/v1", "Job", NAMESPACE, name)["spec"].get("suspend"):
        return False
    pods = kube.list("v1", "Pod", NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={name}")
    return len(pods.items) == 2


def _time_to_start(kube: KubeClient, job: dict[str, Any]) -> float:
    started = time.perf_counter()
    kube.create(job)
    name = job["metadata"]["name"]
    wait_until(lambda: _started(kube, name), TIMEOUT, f"job {name} started")
    return time.perf_counter() - started


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-kueue-") as tmp:
        directory = Path(tmp)
        state = controlplane.up(directory)
        try:
            controlplane.start_kueue(state)
            kubectl = Kubectl(controlplane.kubectl(), state.kubeconfig)
            kube = KubeClient(k8s_config.new_client_from_config(config_file=str(state.kubeconfig)))
            queued, plain = [], []
            with kueue_queue(kubectl, NAMESPACE, "bench", QUOTA) as queue:
                for run in range(RUNS):
                    queued.append(_time_to_start(kube, _job(f"queued-{run}", queue)))
                    plain.append(_time_to_start(kube, _job(f"plain-{run}")))
                kubectl("delete", "jobs.batch", "--all", f"--namespace={NAMESPACE}", "--wait=true")
        finally:
            controlplane.down(directory)
    baseline = "baseline: no queue label, create -> 2 pods made"
    print_table(
        "Kueue admission: a 2-replica Job on a LocalQueue with room in its quota",
        [("queued: create -> admitted, unsuspended, 2 pods made", queued), (baseline, plain)],
        unit="ms",
        baseline=baseline,
    )

"""Queue admission by Kueue's own controller (built with the plane, `kueue` fixture): a Job, or a
TrainJob, labelled with a LocalQueue is suspended by Kueue's webhook at create, waits as a whole while
its ClusterQueue's GPU quota is short, holding nothing, and runs once the quota admits it; among waiting
workloads the one of higher WorkloadPriorityClass goes first.

kwok completes a Job's pods as soon as they run, so a job meant to hold its quota gives its pods a
scheduling gate of the test's own: they exist, unplaced, and the Job stays active, as a long training
run's would. The queue's flavor places admitted pods on two GPU nodes of its own (2 GPUs each, added
for this module): the quota of 4 GPUs, not the nodes, is what a job waits for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.kube.client import KubeClient
from tests.cluster.conftest import (
    KUEUE_API,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    Kubectl,
    applied,
    kueue_queue,
    wait_for,
    workload_priority_class,
)
from tests.cluster.controlplane import GPU_RESOURCE, GPU_TAINT, FakeNode, State

NAMESPACE = "kueue-queues"
POOL = {"cube-jupyter.test/pool": "kueue"}  # the flavor's nodes
QUOTA = {"cpu": "8", "memory": "16Gi", GPU_RESOURCE: "4"}
HOLD = "cube-jupyter.test/hold"  # a scheduling gate nothing lifts
TOLERATE_GPUS = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}
TRAINER_API = "trainer.kubeflow.org/v1alpha1"


def pool_node(name: str) -> dict[str, Any]:
    node = FakeNode(name, "16", "128Gi", gpus=2).manifest()
    node["metadata"]["labels"] |= POOL
    return node


@pytest.fixture(scope="module")
def pool(kueue: State, kubectl: Kubectl) -> Iterator[None]:
    """The module's namespace and the flavor's two GPU nodes (kwok's), gone after it."""
    nodes = [pool_node("kueue-gpu-1"), pool_node("kueue-gpu-2")]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    with applied(kubectl, [*nodes, namespace]):
        kubectl("wait", "--for=condition=Ready", *(f"node/{n['metadata']['name']}" for n in nodes))
        yield


@pytest.fixture
def queue(pool: None, kubectl: Kubectl) -> Iterator[str]:
    """A LocalQueue onto 4 GPUs of the pool's flavor; the test's jobs deleted before it is."""
    with kueue_queue(
        kubectl, NAMESPACE, "gpus", QUOTA, node_labels=POOL, tolerations=[TOLERATE_GPUS]
    ) as name:
        yield name
        kubectl("delete", "jobs.batch,trainjobs.trainer.kubeflow.org", "--all", f"--namespace={NAMESPACE}")


def gpu_job(
    name: str, replicas: int, queue: str, *, hold: bool = False, priority: str = ""
) -> dict[str, Any]:
    """A Job of `replicas` pods of one GPU each, all at once, on `queue`; created without `suspend`."""
    labels = {QUEUE_LABEL: queue} | ({PRIORITY_LABEL: priority} if priority else {})
    container = {
        "name": "train",
        "image": "python:3.12-slim",
        "command": ["python", "train.py"],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {GPU_RESOURCE: "1"}},
    }
    pod = {"restartPolicy": "Never", "containers": [container]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "parallelism": replicas,
            "completions": replicas,
            "backoffLimit": 0,
            "template": {"spec": pod | ({"schedulingGates": [{"name": HOLD}]} if hold else {})},
        },
    }


class Queued:
    """A namespace's jobs, their pods and Kueue's Workloads for them, as the API server has them."""

    def __init__(self, admin: k8s.ApiClient) -> None:
        self.kube = KubeClient(admin)

    def job(self, name: str) -> dict[str, Any]:
        return self.kube.get("batch/v1", "Job", NAMESPACE, name)

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return self.kube.list("v1", "Pod", NAMESPACE, label_selector=selector).items

    def workload(self, owner: str) -> dict[str, Any]:
        """The Workload Kueue made for the object named `owner` (its owner reference), or {}."""
        for workload in self.kube.list(KUEUE_API, "Workload", NAMESPACE).items:
            if any(ref["name"] == owner for ref in workload["metadata"].get("ownerReferences", [])):
                return workload
        return {}

    def condition(self, owner: str, kind: str) -> dict[str, Any]:
        workload = self.workload(owner)
        found = [c for c in workload.get("status", {}).get("conditions", []) if c["type"] == kind]
        return found[0] if found else {}

    def admitted(self, owner: str) -> bool:
        return self.condition(owner, "Admitted").get("status") == "True"

    def waiting(self, owner: str) -> dict[str, Any]:
        """Its QuotaReserved=False condition, once Kueue has tried and failed to fit it."""
        reserved = self.condition(owner, "QuotaReserved")
        return reserved if reserved.get("status") == "False" and reserved.get("message") else {}

    def running_job(self, name: str, replicas: int) -> list[dict[str, Any]]:
        """Its pods, once the Job is unsuspended and all `replicas` of them exist."""
        pods = self.pods(f"batch.kubernetes.io/job-name={name}")
        return pods if not self.job(name)["spec"]["suspend"] and len(pods) == replicas else []

    def placed(self, selector: str, count: int) -> list[dict[str, Any]]:
        """The pods `selector` picks, once `count` of them are bound to a node."""
        pods = [pod for pod in self.pods(selector) if pod["spec"].get("nodeName")]
        return pods if len(pods) == count else []


def test_a_job_waits_whole_for_gpu_quota_then_runs_when_it_frees(admin: k8s.ApiClient, queue: str) -> None:
    """Two GPUs of four held by a 2-replica Job: a 4-replica Job is suspended by Kueue's webhook and
    waits, its Workload saying which quota it lacks, not one pod of it made; the first Job deleted, it
    is admitted whole, and its pods placed on the flavor's nodes with the flavor's toleration."""
    queued = Queued(admin)
    first = queued.kube.create(gpu_job("first", 2, queue, hold=True))
    assert first["spec"]["suspend"] is True  # Kueue's webhook: no job on a queue starts by itself
    wait_for("the first job admitted and its 2 pods made", lambda: queued.running_job("first", 2))
    assert queued.admitted("first")

    big = queued.kube.create(gpu_job("big", 4, queue))
    assert big["spec"]["suspend"] is True  # asked for nothing (`gpu_job` sets no `suspend`)
    waiting = wait_for("the 4-GPU job waiting for quota", lambda: queued.waiting("big"))
    assert f"insufficient unused quota for {GPU_RESOURCE}" in waiting["message"], waiting
    assert not queued.admitted("big")
    assert queued.job("big")["spec"]["suspend"] is True
    assert queued.pods("batch.kubernetes.io/job-name=big") == []  # gang: it holds nothing meanwhile

    queued.kube.delete("batch/v1", "Job", NAMESPACE, "first")
    wait_for("the 4-GPU job admitted and its 4 pods made", lambda: queued.running_job("big", 4))
    assert queued.admitted("big")
    placed = wait_for("its 4 pods placed", lambda: queued.placed("batch.kubernetes.io/job-name=big", 4))
    assert {p["spec"]["nodeName"] for p in placed} == {"kueue-gpu-1", "kueue-gpu-2"}  # the flavor's
    assert all(TOLERATE_GPUS in p["spec"]["tolerations"] for p in placed)


def test_a_higher_priority_workload_is_admitted_before_an_older_lower_one(
    admin: k8s.ApiClient, kubectl: Kubectl, queue: str
) -> None:
    """Both waiting for the quota a first Job holds, the later of higher WorkloadPriorityClass is
    admitted when it frees; the earlier, lower one keeps waiting behind it."""
    classes = [
        workload_priority_class("kueue-test-low", 10),
        workload_priority_class("kueue-test-high", 1000),
    ]
    queued = Queued(admin)
    with applied(kubectl, classes):
        queued.kube.create(gpu_job("holder", 4, queue, hold=True))
        wait_for("the holder admitted", lambda: queued.running_job("holder", 4))
        queued.kube.create(gpu_job("low", 4, queue, hold=True, priority="kueue-test-low"))
        wait_for("the low one waiting", lambda: queued.waiting("low"))
        queued.kube.create(gpu_job("high", 4, queue, hold=True, priority="kueue-test-high"))
        wait_for("the high one waiting", lambda: queued.waiting("high"))
        assert queued.workload("high")["spec"]["priority"] > queued.workload("low")["spec"]["priority"]

        queued.kube.delete("batch/v1", "Job", NAMESPACE, "holder")
        wait_for("the high one admitted", lambda: queued.running_job("high", 4))
        assert queued.waiting("low") and queued.job("low")["spec"]["suspend"] is True
        kubectl("delete", "jobs.batch", "--all", f"--namespace={NAMESPACE}", "--wait=true")


def test_a_trainjob_is_admitted_by_kueue_and_run_by_trainer(admin: k8s.ApiClient, queue: str) -> None:
    """Kueue's TrainJob integration: suspended at create, its Workload sized from the runtime (two
    nodes of one GPU), admitted, then Trainer makes its JobSet and the JobSet its pods, placed on the
    flavor's nodes."""
    queued = Queued(admin)
    trainjob = {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": "queued-ddp", "namespace": NAMESPACE, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "command": ["python", "train.py"],
                "numNodes": 2,
                "resourcesPerNode": {"limits": {GPU_RESOURCE: "1"}},
            },
        },
    }
    created = queued.kube.create(trainjob)
    assert created["spec"]["suspend"] is True
    wait_for("the TrainJob admitted", lambda: queued.admitted("queued-ddp"), timeout=120)
    workload = queued.workload("queued-ddp")
    assert sum(s["count"] for s in workload["spec"]["podSets"]) == 2
    selector = "jobset.sigs.k8s.io/jobset-name=queued-ddp"
    placed = wait_for("its 2 pods placed", lambda: queued.placed(selector, 2))
    assert {p["spec"]["nodeName"] for p in placed} <= {"kueue-gpu-1", "kueue-gpu-2"}
    assert queued.kube.get(TRAINER_API, "TrainJob", NAMESPACE, "queued-ddp")["spec"]["suspend"] is False

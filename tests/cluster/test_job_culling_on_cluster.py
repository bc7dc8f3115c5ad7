"""Stopping a training job whose GPUs sat idle (`CubeGPU.cull_idle_gpu_jobs`, found by
tests/gpu/test_gpu_culling.py) on the real control plane, with the workbench's ServiceAccount:

- a TrainJob Kueue admitted is stopped as Kueue stops one: its Workload deactivated. Kueue's own
  controller then evicts it and suspends the TrainJob, Kubeflow Trainer suspends its JobSet and the
  JobSet controller removes its pods (its node asks for more GPUs than the node has, so it stays
  unfinished, as a job holding idle GPUs does, rather than being completed by kwok at once);
- a PyTorchJob on no queue is suspended (`runPolicy.suspend`, which the Training Operator honours;
  no operator runs here, so the object is what is checked).

Both keep `cube-jupyter/stop-reason` and show Failed with reason IdleGPU, saying why; the GPU
ledger counts them no more."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from cube_jupyter.jobs.backend import gpu_holders
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.labels import STOP_REASON_ANNOTATION, STOPPED_AT_ANNOTATION
from tests.cluster.conftest import USERS, Kubectl, kueue_queue
from tests.cluster.controlplane import GPU_RESOURCE, State
from tests.cluster.servers import eventually
from tests.cluster.test_jobs_on_cluster import run_jobs, settings_for, until_job
from tests.kubernetes.conftest import make_settings

ALICE = "alice@example.com"
NAMESPACE = USERS[ALICE]
QUEUE = "alice-idle"
WHY = "stopped after its GPU memory sat at 0% utilization for 2.0 h (c.CubeGPU.cull_idle_gpu_seconds)"
KUEUE_API = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def four_gpu_queue(kueue: State, kubectl: Kubectl) -> Iterator[str]:
    """A LocalQueue in alice's namespace onto a ClusterQueue of four GPUs: more than any node has."""
    quota = {"cpu": "32", "memory": "128Gi", GPU_RESOURCE: "4"}
    with kueue_queue(kubectl, NAMESPACE, QUEUE, quota) as name:
        yield name
        kubectl(
            "delete", "trainjobs.trainer.kubeflow.org", "--all", f"--namespace={NAMESPACE}", "--wait=true"
        )


def spec(name: str, gpus: int) -> TrainingSpec:
    return TrainingSpec.from_dict(
        {
            "name": name,
            "framework": "pytorch",
            "replicas": {"worker": 1},
            "script": "train.py",
            "package": "s3://ml-artifacts/jobs/code.tar.gz",
            "resources": {"gpu": gpus, "cpu": "1", "memory": "1Gi"},
        },
        user=ALICE,
    )


def assert_stopped(job: Job) -> None:
    """As a local job stopped for the same reason reads."""
    assert job.phase == "Failed" and job.finished, job
    assert job.message is not None and job.message.endswith(f" failed: {WHY}")
    last = job.conditions[-1]
    assert (last.type, last.status, last.reason, last.message) == ("Failed", "True", "IdleGPU", WHY)
    assert last.last_transition_time > 0 and job.queue is None


def test_a_trainjob_kueue_admitted_is_stopped_by_deactivating_its_workload(
    four_gpu_queue: str, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    settings = make_settings(
        {"namespace_source": "kubeflow-profile"},
        jobs={"training_api": "trainer-v2"},
        storage={"url": "s3://ml-artifacts/jobs", "endpoint": "http://minio:9000"},
        queues={"queues": {"training": four_gpu_queue}},
    )
    kube = KubeClient(admin)

    async def scenario(backend: KubernetesJobBackend) -> None:
        await backend.submit("training", spec("idle-ddp", 4))
        admitted = await until_job(
            backend, "idle-ddp", lambda j: j.phase == "Admitted" and any(r.pod for r in j.replicas)
        )
        assert admitted.gpus == 4 and [h.gpus for h in gpu_holders(backend)(ALICE)] == [4]
        stopped = await backend.stop(ALICE, "idle-ddp", WHY)
        assert_stopped(stopped)
        assert gpu_holders(backend)(ALICE) == []  # it holds nothing from now on

        (workload,) = [
            w
            for w in kube.list(KUEUE_API, "Workload", NAMESPACE).items
            if [o["name"] for o in w["metadata"].get("ownerReferences", [])] == ["idle-ddp"]
        ]
        assert workload["spec"]["active"] is False  # the workbench's one write to Kueue
        suspended = await eventually(
            "Kueue suspending the TrainJob, and its pods gone",
            lambda: backend.get(ALICE, "idle-ddp"),
            lambda j: (
                all(r.pod is None for r in j.replicas)
                and any((c.type, c.status) == ("Suspended", "True") for c in j.conditions)
            ),
        )
        assert_stopped(suspended)
        trainjob = kube.get("trainer.kubeflow.org/v1alpha1", "TrainJob", NAMESPACE, "idle-ddp")
        assert trainjob["spec"]["suspend"] is True  # Kueue's doing, and it keeps it so
        annotations = trainjob["metadata"]["annotations"]
        assert annotations[STOP_REASON_ANNOTATION] == WHY and STOPPED_AT_ANNOTATION in annotations
        evicted = {
            c["type"]: c
            for c in kube.get(KUEUE_API, "Workload", NAMESPACE, workload["metadata"]["name"])["status"][
                "conditions"
            ]
        }
        assert evicted["Evicted"]["status"] == "True" and evicted["Evicted"]["reason"] in (
            "Deactivated",
            "InactiveWorkload",
        )
        await backend.delete(ALICE, "idle-ddp")

    run_jobs(workbench_kubeconfig, settings, scenario)


def test_a_pytorchjob_on_no_queue_is_suspended_saying_why(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    kube = KubeClient(admin)

    async def scenario(backend: KubernetesJobBackend) -> None:
        await backend.submit("training", spec("idle-v1", 1))
        stopped = await backend.stop(ALICE, "idle-v1", WHY)
        assert_stopped(stopped)
        job = kube.get("kubeflow.org/v1", "PyTorchJob", NAMESPACE, "idle-v1")
        assert job["spec"]["runPolicy"]["suspend"] is True
        assert job["metadata"]["annotations"][STOP_REASON_ANNOTATION] == WHY
        assert_stopped(await until_job(backend, "idle-v1", lambda j: j.phase == "Failed"))  # from the watch
        assert gpu_holders(backend)(ALICE) == []
        await backend.delete(ALICE, "idle-v1")

    run_jobs(workbench_kubeconfig, settings_for("training-operator-v1"), scenario)

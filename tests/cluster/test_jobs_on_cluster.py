"""Training, tuning and serving jobs on a real control plane, submitted, listed and deleted by the
workbench with its own ServiceAccount's token. The test plays the operators (no Kubeflow operator is
built here): it makes the replica pods in the Training Operator's shape, which kube-scheduler places
and kwok runs, and writes the job's conditions; the backend learns all of it from its watches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, NotFound
from cube_jupyter.jobs.backend import JobBackend
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.kubernetes.status import JOB_NAME_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.objects import is_deleting, metadata_of
from cube_jupyter.names import user_slug
from tests.cluster.conftest import USERS, Kubectl, api_client
from tests.cluster.controlplane import State
from tests.cluster.servers import eventually
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.test_jobs_k8s import DDP, SERVE, TUNE  # the specs both suites submit
from tests.upstream import trainer_runtimes

ALICE = "alice@example.com"
NAMESPACE = USERS[ALICE]


def settings_for(training_api: str) -> Settings:
    return make_settings(
        {"namespace_source": "kubeflow-profile"},
        jobs={"training_api": training_api},
        storage={"url": "s3://ml-artifacts/jobs", "endpoint": "http://minio:9000"},
    )


def run_jobs(kubeconfig: Path, settings: Settings, scenario: Callable[[KubernetesJobBackend], Any]) -> None:
    async def go() -> None:
        cluster = Cluster(settings, api_client(kubeconfig))
        backend = KubernetesJobBackend(settings.jobs, cluster, sync_timeout=60.0)
        await backend.start(supervise=False)
        try:
            await scenario(backend)
        finally:
            await backend.close()
            await cluster.close()

    asyncio.run(go())


async def until_job(backend: JobBackend, name: str, done: Callable[[Job], bool]) -> Job:
    return await eventually(f"job {name}", lambda: backend.get(ALICE, name), done)


async def gone(backend: KubernetesJobBackend, name: str) -> None:
    deadline = time.monotonic() + 90
    while backend.get(ALICE, name) is not None:
        assert time.monotonic() < deadline, f"job {name} is still there: {backend.get(ALICE, name)}"
        await asyncio.sleep(0.2)


def operator_pod(owner: dict[str, Any], role: str, index: int, gpus: int) -> dict[str, Any]:
    """A replica pod as the Training Operator makes it: `{job}-{role}-{index}`, with its labels, owned
    by the job (so the garbage collector deletes it with the job)."""
    job = owner["metadata"]["name"]
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": job,
        "uid": owner["metadata"]["uid"],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{role}-{index}",
            "namespace": NAMESPACE,
            "ownerReferences": [{**reference, "controller": True, "blockOwnerDeletion": True}],
            "labels": {
                "cube-jupyter/user": user_slug(ALICE),
                "cube-jupyter/job": job,
                JOB_NAME_LABEL: job,
                REPLICA_TYPE_LABEL: role,
                REPLICA_INDEX_LABEL: str(index),
            },
        },
        "spec": {
            "containers": [{"name": "pytorch", "image": "pytorch", "resources": resources}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never",
        },
    }


def test_a_training_job_is_submitted_run_and_deleted_through_rbac(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    operator = KubeClient(admin)
    settings = settings_for("training-operator-v1")

    async def scenario(backend: KubernetesJobBackend) -> None:
        job = await backend.submit("training", TrainingSpec.from_dict(DDP, user=ALICE))
        assert (job.name, job.phase) == ("mnist-ddp", "Created")
        owner = await asyncio.to_thread(operator.get, "kubeflow.org/v1", "PyTorchJob", NAMESPACE, "mnist-ddp")
        for role, index, gpus in (("master", 0, 0), ("worker", 0, 1), ("worker", 1, 1)):
            await asyncio.to_thread(operator.create, operator_pod(owner, role, index, gpus))
        condition = {"type": "Running", "status": "True", "reason": "JobRunning", "message": "running"}
        await asyncio.to_thread(
            operator.patch,
            "kubeflow.org/v1",
            "PyTorchJob",
            NAMESPACE,
            "mnist-ddp",
            {"status": {"conditions": [condition]}},
            subresource="status",
        )
        running = await until_job(
            backend,
            "mnist-ddp",
            lambda j: j.phase == "Running" and all(r.state == "Running" for r in j.replicas),
        )
        assert [r.pod for r in running.replicas] == [
            "mnist-ddp-master-0",
            "mnist-ddp-worker-0",
            "mnist-ddp-worker-1",
        ]
        assert running.gpus == 2
        # kwok runs no kubelet: the API server (after RBAC let the request through) finds none to ask
        with pytest.raises(BackendUnavailable) as no_kubelet:
            async for _line in backend.logs(running, "master-0"):
                pass
        assert "mnist-ddp-master-0" in no_kubelet.value.message, no_kubelet.value.message
        await backend.delete(ALICE, "mnist-ddp")  # foreground: it reads Deleting until the GC is done
        await gone(backend, "mnist-ddp")

    run_jobs(workbench_kubeconfig, settings, scenario)
    with pytest.raises(NotFound):
        operator.get("kubeflow.org/v1", "PyTorchJob", NAMESPACE, "mnist-ddp")
    pods = operator.list("v1", "Pod", NAMESPACE, label_selector=f"{JOB_NAME_LABEL}=mnist-ddp")
    assert [metadata_of(p)["name"] for p in pods.items if not is_deleting(p)] == []  # collected with it


def test_trainjobs_experiments_and_inference_services_are_accepted_and_followed(
    installed: State, kubectl: Kubectl, workbench_kubeconfig: Path
) -> None:
    """A TrainJob against Trainer's own preset runtimes (its CEL rules evaluated by the API server),
    a Katib Experiment and a KServe InferenceService: created, listed, deleted by the workbench."""
    for runtime in trainer_runtimes():
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(runtime))
    settings = settings_for("trainer-v2")
    trainjob = {**DDP, "name": "mnist-v2", "replicas": {"worker": {"replicas": 2, "resources": {"gpu": 1}}}}

    async def scenario(backend: KubernetesJobBackend) -> None:
        await backend.submit("training", TrainingSpec.from_dict(trainjob, user=ALICE))
        await backend.submit("tuning", TuningSpec.from_dict(TUNE, user=ALICE))
        await backend.submit("serving", ServingSpec.from_dict(SERVE, user=ALICE))
        listed = {(j.name, j.kind) for j in backend.list(ALICE)}
        assert {("mnist-v2", "training"), ("lr-search", "tuning"), ("iris", "serving")} <= listed
        for name in ("mnist-v2", "lr-search", "iris"):
            await backend.delete(ALICE, name)
            await gone(backend, name)

    run_jobs(workbench_kubeconfig, settings, scenario)

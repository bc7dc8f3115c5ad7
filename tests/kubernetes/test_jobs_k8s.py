"""Training, tuning and serving jobs on the cluster, over real HTTP against the KMock API emulator.

The tests play the Training Operator, Katib, KServe and the kubelet: they write the objects' status,
create the replica pods with the operators' labels and serve the pods' logs. The backend must learn
all of it through its informers' watches; every object it creates is checked against the CRD schemas.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound, QuotaExceeded
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.kubernetes.status import (
    EXPERIMENT_LABEL,
    JOB_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    TRIAL_LABEL,
)
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.service import JobService
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.services import Workbench
from tests.k8s_schemas import validate_object
from tests.kubernetes.conftest import StartOnEmulator, make_settings
from tests.kubernetes.emulator import ApiServerEmulator, now_rfc3339
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(60)

JOB_RESOURCES: dict[str, dict[str, Any]] = {
    "kubeflow.org/v1/pytorchjobs": {"kind": "PyTorchJob", "namespaced": True, "subresources": {"status"}},
    "kubeflow.org/v1/tfjobs": {"kind": "TFJob", "namespaced": True, "subresources": {"status"}},
    "kubeflow.org/v1/xgboostjobs": {"kind": "XGBoostJob", "namespaced": True, "subresources": {"status"}},
    "kubeflow.org/v1/mpijobs": {"kind": "MPIJob", "namespaced": True, "subresources": {"status"}},
    "kubeflow.org/v1beta1/experiments": {
        "kind": "Experiment",
        "namespaced": True,
        "subresources": {"status"},
    },
    "kubeflow.org/v1beta1/trials": {"kind": "Trial", "namespaced": True, "subresources": {"status"}},
    "serving.kserve.io/v1beta1/inferenceservices": {
        "kind": "InferenceService",
        "namespaced": True,
        "subresources": {"status"},
    },
}
PYTORCH = "kubeflow.org/v1/pytorchjobs"
NS = "cube-alice"
DDP = {
    "name": "mnist-ddp",
    "framework": "pytorch",
    "image": "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "replicas": {"master": 1, "worker": {"replicas": 2, "resources": {"gpu": 1}}},
    "command": ["python", "train.py", "--epochs", "3"],
}
TUNE = {
    "name": "lr-search",
    "objective": {"metric": "accuracy", "type": "maximize"},
    "algorithm": "random",
    "parameters": {"lr": {"type": "double", "min": 0.001, "max": 0.1}},
    "max_trials": 4,
    "parallel_trials": 2,
    "trial": {"training": {"framework": "pytorch", "replicas": {"worker": 1}, "command": ["python", "t.py"]}},
}
SERVE = {"name": "iris", "model_format": "sklearn", "storage_uri": "s3://models/iris"}


class Kubelet:
    """Serves `pods/{name}/log` as the kubelet does through the API server: the lines written so far,
    and with `follow=true` each new line as it is written, until the container has terminated."""

    def __init__(self) -> None:
        self.lines: dict[tuple[str, str], list[str]] = {}
        self.done: set[tuple[str, str]] = set()
        self.changed = asyncio.Event()
        self.requests: list[dict[str, str]] = []

    def write(self, namespace: str, pod: str, line: str) -> None:
        self.lines.setdefault((namespace, pod), []).append(line)
        self._notify()

    def terminate(self, namespace: str, pod: str) -> None:
        self.done.add((namespace, pod))
        self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def serve(self, request: kmock_lib.Request) -> AsyncIterator[bytes]:
        key = (request.namespace or "", request.name or "")
        params = dict(request.params)
        self.requests.append(params)
        lines = self.lines.get(key, [])
        if params.get("tailLines"):
            lines = lines[-int(params["tailLines"]) :]
        yield "".join(lines).encode()
        sent = len(self.lines.get(key, []))
        while params.get("follow") == "true" and key not in self.done:
            await self.changed.wait()
            fresh = self.lines.get(key, [])[sent:]
            sent += len(fresh)
            if fresh:
                yield "".join(fresh).encode()


@pytest.fixture
def kubelet() -> Kubelet:
    return Kubelet()


@pytest.fixture
def kmock(kmock: ApiServerEmulator, kubelet: Kubelet) -> ApiServerEmulator:
    return with_job_operators(kmock, kubelet)


def with_job_operators(kmock: ApiServerEmulator, kubelet: Kubelet) -> ApiServerEmulator:
    """The Kubeflow cluster of the shared fixture with the Training Operator, Katib and KServe CRDs,
    and a kubelet serving pod logs."""
    for name, info in JOB_RESOURCES.items():
        kmock.resources[name] = kmock_lib.ResourceInfo(**info)
    (
        kmock[kmock_lib.action.FETCH, kmock_lib.resource("v1/pods"), kmock_lib.subresource("log")]
        << kubelet.serve
    )
    return kmock


@pytest.fixture
def make_jobs(start_on_emulator: StartOnEmulator[Any]) -> Callable[..., Any]:
    return job_backends(start_on_emulator)


def job_backends(start_on_emulator: StartOnEmulator[Any]) -> Callable[..., Any]:
    """Start job backends against the emulator."""

    async def make(settings: Settings | None = None) -> KubernetesJobBackend:
        settings = settings or make_settings()
        return await start_on_emulator(
            settings, lambda cluster: KubernetesJobBackend(settings.jobs, cluster, sync_timeout=10.0)
        )

    return make


@pytest.fixture
def jobs(make_jobs: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> KubernetesJobBackend:
    backend: KubernetesJobBackend = loop.run_until_complete(make_jobs())
    return backend


# -- the operators and the kubelet, played over HTTP ----------------------------------------------


def condition(kind: str, status: str = "True", message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": f"Job{kind}",
        "message": message,
        "lastUpdateTime": now_rfc3339(),
        "lastTransitionTime": now_rfc3339(),
    }


async def set_status(
    kube: KubeClient, api_version: str, kind: str, name: str, status: dict[str, Any]
) -> None:
    await asyncio.to_thread(kube.patch, api_version, kind, NS, name, {"status": status}, subresource="status")


async def replica_pod(
    kube: KubeClient, job: str, role: str, index: int, phase: str, extra_labels: dict[str, str] | None = None
) -> str:
    """What the Training Operator creates: `{job}-{role}-{index}` with its labels and the template's."""
    name = f"{job}-{role}-{index}"
    labels = {
        "cube-jupyter/user": "alice",
        "cube-jupyter/job": job,
        JOB_NAME_LABEL: job,
        REPLICA_TYPE_LABEL: role,
        REPLICA_INDEX_LABEL: str(index),
        **(extra_labels or {}),
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "pytorch", "image": "x"}, {"name": "istio-proxy", "image": "y"}]},
    }
    await asyncio.to_thread(kube.create, pod)
    await pod_phase(kube, name, phase)
    return name


async def pod_phase(kube: KubeClient, pod: str, phase: str, exit_code: int | None = None) -> None:
    state: dict[str, Any] = {"running": {"startedAt": now_rfc3339()}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}}
    status = {"phase": phase, "containerStatuses": [{"name": "pytorch", "ready": True, "state": state}]}
    await asyncio.to_thread(kube.patch, "v1", "Pod", NS, pod, {"status": status}, subresource="status")


def training(raw: dict[str, Any] = DDP, user: str = "alice") -> TrainingSpec:
    return TrainingSpec.from_dict(raw, user=user)


# -- training ------------------------------------------------------------------------------------


async def test_a_training_job_is_created_valid_and_followed_to_success(
    jobs: KubernetesJobBackend, kmock: ApiServerEmulator, kube: KubeClient
) -> None:
    job = await jobs.submit("training", training())
    assert (job.name, job.kind, job.user, job.backend, job.phase) == (
        "mnist-ddp",
        "training",
        "alice",
        "kubernetes",
        "Created",
    )
    stored = kmock.find(PYTORCH, NS, "mnist-ddp")
    assert stored is not None
    validate_object(stored, strict=True)
    assert [r.name for r in job.replicas] == ["master-0", "worker-0", "worker-1"]
    assert job.gpus == 2 and all(r.state == "Pending" for r in job.replicas)

    await set_status(
        kube, "kubeflow.org/v1", "PyTorchJob", "mnist-ddp", {"conditions": [condition("Created")]}
    )
    for role, index in (("master", 0), ("worker", 0), ("worker", 1)):
        await replica_pod(kube, "mnist-ddp", role, index, "Running")
    await set_status(
        kube,
        "kubeflow.org/v1",
        "PyTorchJob",
        "mnist-ddp",
        {"conditions": [condition("Created"), condition("Running")]},
    )
    running = await wait_until_async(
        lambda: (
            (j := jobs.get("alice", "mnist-ddp"))
            and j.phase == "Running"
            and all(r.state == "Running" for r in j.replicas)
            and j
        )
    )
    assert [r.pod for r in running.replicas] == [
        "mnist-ddp-master-0",
        "mnist-ddp-worker-0",
        "mnist-ddp-worker-1",
    ]

    for pod in running.replicas:
        await pod_phase(kube, str(pod.pod), "Succeeded", exit_code=0)
    await set_status(
        kube,
        "kubeflow.org/v1",
        "PyTorchJob",
        "mnist-ddp",
        {
            "conditions": [condition("Created"), condition("Running", "False"), condition("Succeeded")],
            "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"succeeded": 2}},
            "completionTime": now_rfc3339(),
        },
    )
    done = await wait_until_async(lambda: (j := jobs.get("alice", "mnist-ddp")) and j.finished and j)
    assert done.phase == "Succeeded" and done.completed is not None
    assert {r.state for r in done.replicas} == {"Succeeded"} and {r.exit_code for r in done.replicas} == {0}
    assert [j.name for j in jobs.list("alice")] == ["mnist-ddp"]
    assert jobs.list("bob") == [] and jobs.get("bob", "mnist-ddp") is None


async def test_a_failed_job_says_why_and_replicas_without_pods_use_the_operator_counts(
    jobs: KubernetesJobBackend, kube: KubeClient
) -> None:
    await jobs.submit("training", training())
    await set_status(
        kube,
        "kubeflow.org/v1",
        "PyTorchJob",
        "mnist-ddp",
        {
            "conditions": [
                condition("Created"),
                condition(
                    "Failed", message="PyTorchJob mnist-ddp is failed because 1 Worker replica(s) failed."
                ),
            ],
            "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"succeeded": 1, "failed": 1}},
        },
    )
    job = await wait_until_async(lambda: (j := jobs.get("alice", "mnist-ddp")) and j.phase == "Failed" and j)
    assert "1 Worker replica(s) failed" in str(job.message)
    assert [(r.name, r.state) for r in job.replicas] == [
        ("master-0", "Succeeded"),
        ("worker-0", "Succeeded"),
        ("worker-1", "Failed"),
    ]


async def test_every_framework_renders_an_object_the_crds_accept(
    jobs: KubernetesJobBackend, kmock: ApiServerEmulator
) -> None:
    specs = {
        "kubeflow.org/v1/tfjobs": {
            "name": "tf-job",
            "framework": "tensorflow",
            "replicas": {"chief": 1, "worker": 2, "ps": 1},
        },
        # the cluster serves Trainer v2 too, so an XGBoost job whose nodes are alike is a TrainJob
        "trainer.kubeflow.org/v1alpha1/trainjobs": {
            "name": "xgb-job",
            "framework": "xgboost",
            "replicas": {"worker": 2},
        },
        "kubeflow.org/v1/xgboostjobs": {
            "name": "xgb-mixed",
            "framework": "xgboost",
            "replicas": {"master": {"replicas": 1, "resources": {"cpu": "2"}}, "worker": 2},
        },
        "kubeflow.org/v1/mpijobs": {"name": "mpi-job", "framework": "mpi", "replicas": {"worker": 2}},
    }
    for resource, raw in specs.items():
        job = await jobs.submit("training", training({**raw, "command": ["python", "train.py"]}))
        stored = kmock.find(resource, NS, job.name)
        assert stored is not None, resource
        validate_object(stored, strict=True)
    assert sorted(j.framework or "" for j in jobs.list("alice")) == [
        "mpi",
        "tensorflow",
        "xgboost",
        "xgboost",
    ]


async def test_a_duplicate_name_is_a_conflict_and_a_refused_create_leaves_nothing(
    jobs: KubernetesJobBackend, kmock: ApiServerEmulator
) -> None:
    await jobs.submit("training", training())
    with pytest.raises(Conflict) as duplicate:
        await jobs.submit("training", training())
    assert duplicate.value.field == "name"
    kmock.fail_next("create", "kubeflow.org/v1/tfjobs", 500, "etcd is down")
    with pytest.raises(BackendUnavailable):
        await jobs.submit(
            "training",
            training({**DDP, "name": "tf-two", "framework": "tensorflow", "replicas": {"worker": 1}}),
        )
    assert kmock.names("kubeflow.org/v1/tfjobs") == []
    assert jobs.get("alice", "tf-two") is None


async def test_delete_uses_foreground_propagation_and_the_cache_forgets_the_job(
    jobs: KubernetesJobBackend, kmock: ApiServerEmulator
) -> None:
    await jobs.submit("training", training())
    await jobs.delete("alice", "mnist-ddp")
    bodies = [json.loads(r.body) for r in kmock.requests_of("delete", PYTORCH)]
    assert [b["propagationPolicy"] for b in bodies] == ["Foreground"]
    assert kmock.find(PYTORCH, NS, "mnist-ddp") is None
    await wait_until_async(lambda: jobs.get("alice", "mnist-ddp") is None)
    with pytest.raises(NotFound):
        await jobs.delete("alice", "mnist-ddp")


async def test_reads_come_from_the_caches_not_from_api_lists(
    jobs: KubernetesJobBackend, kmock: ApiServerEmulator
) -> None:
    await jobs.submit("training", training())
    lists_before = len(kmock.requests_of("list", PYTORCH))
    for _ in range(20):
        assert jobs.get("alice", "mnist-ddp") is not None
        assert len(jobs.list("alice")) == 1
    assert len(kmock.requests_of("list", PYTORCH)) == lists_before


async def test_informers_relist_after_410_gone(
    jobs: KubernetesJobBackend, kmock: ApiServerEmulator, kube: KubeClient
) -> None:
    await jobs.submit("training", training())
    lists = jobs.kinds["PyTorchJob"].list_calls
    kmock.compact()
    await wait_until_async(lambda: jobs.kinds["PyTorchJob"].list_calls > lists)
    await set_status(
        kube, "kubeflow.org/v1", "PyTorchJob", "mnist-ddp", {"conditions": [condition("Running")]}
    )
    await wait_until_async(lambda: (j := jobs.get("alice", "mnist-ddp")) and j.phase == "Running")


# -- logs ----------------------------------------------------------------------------------------


def job_of(jobs: KubernetesJobBackend, name: str) -> Job:
    job = jobs.get("alice", name)
    assert job is not None
    return job


async def test_logs_come_from_the_replica_pod_and_follow_streams_until_it_ends(
    jobs: KubernetesJobBackend, kube: KubeClient, kubelet: Kubelet
) -> None:
    await jobs.submit("training", training())
    pod = await replica_pod(kube, "mnist-ddp", "worker", 1, "Running")
    await wait_until_async(lambda: (j := jobs.get("alice", "mnist-ddp")) and j.replicas[2].pod == pod)
    kubelet.write(NS, pod, "epoch 1 loss=0.9\n")
    kubelet.write(NS, pod, "epoch 2 loss=0.5\n")

    text = "".join([chunk async for chunk in jobs.logs(job_of(jobs, "mnist-ddp"), "worker-1")])
    assert text == "epoch 1 loss=0.9\nepoch 2 loss=0.5\n"
    assert kubelet.requests[-1]["container"] == "pytorch"  # never the sidecar
    tail = "".join([chunk async for chunk in jobs.logs(job_of(jobs, "mnist-ddp"), "worker-1", tail=1)])
    assert tail == "epoch 2 loss=0.5\n"

    received: list[str] = []

    async def follow() -> None:
        async for chunk in jobs.logs(job_of(jobs, "mnist-ddp"), "worker-1", follow=True):
            received.append(chunk)

    task = asyncio.ensure_future(follow())
    await wait_until_async(lambda: "".join(received).endswith("loss=0.5\n"))
    kubelet.write(NS, pod, "epoch 3 loss=0.2\n")
    await wait_until_async(lambda: "".join(received).endswith("loss=0.2\n"))
    assert not task.done()
    kubelet.terminate(NS, pod)
    await asyncio.wait_for(task, 10)
    assert "".join(received).count("epoch") == 3


async def test_closing_a_followed_log_stops_reading_it(
    jobs: KubernetesJobBackend, kube: KubeClient, kubelet: Kubelet
) -> None:
    await jobs.submit("training", training())
    pod = await replica_pod(kube, "mnist-ddp", "master", 0, "Running")
    await wait_until_async(lambda: (j := jobs.get("alice", "mnist-ddp")) and j.replicas[0].pod == pod)
    kubelet.write(NS, pod, "starting\n")
    stream = jobs.logs(job_of(jobs, "mnist-ddp"), None, follow=True)
    assert await stream.__anext__() == "starting\n"
    await stream.aclose()  # type: ignore[attr-defined]
    # The reading thread was blocked on the open response: closing the stream ends it.
    await wait_until_async(lambda: not any(t.name == "pod-log" for t in threading.enumerate()))


async def test_logs_of_a_replica_without_a_pod_say_so(jobs: KubernetesJobBackend) -> None:
    await jobs.submit("training", training())
    with pytest.raises(NotFound) as missing:
        jobs.logs(job_of(jobs, "mnist-ddp"), "worker-0")
    assert missing.value.field == "replica" and "no pod yet" in missing.value.message


# -- tuning and serving --------------------------------------------------------------------------


async def test_a_tuning_experiment_is_valid_and_its_trials_make_the_table(
    jobs: KubernetesJobBackend, kmock: ApiServerEmulator, kube: KubeClient
) -> None:
    job = await jobs.submit("tuning", TuningSpec.from_dict(TUNE, user="alice"))
    assert job.kind == "tuning" and job.trials == ()
    experiment = kmock.find("kubeflow.org/v1beta1/experiments", NS, "lr-search")
    assert experiment is not None
    validate_object(experiment, strict=True)

    for index, (lr, accuracy, state) in enumerate(((0.01, 0.91, "Succeeded"), (0.05, 0.95, "Succeeded"))):
        name = f"lr-search-trial{index}"
        trial = {
            "apiVersion": "kubeflow.org/v1beta1",
            "kind": "Trial",
            "metadata": {"name": name, "namespace": NS, "labels": {EXPERIMENT_LABEL: "lr-search"}},
            "spec": {"parameterAssignments": [{"name": "lr", "value": str(lr)}]},
        }
        await asyncio.to_thread(kube.create, trial)
        observation = {
            "metrics": [{"name": "accuracy", "latest": str(accuracy), "min": "0.5", "max": str(accuracy)}]
        }
        await set_status(
            kube,
            "kubeflow.org/v1beta1",
            "Trial",
            name,
            {"conditions": [condition("Created"), condition(state)], "observation": observation},
        )
        await replica_pod(kube, f"{name}-job", "worker", 0, "Succeeded", {TRIAL_LABEL: name})
    await set_status(
        kube,
        "kubeflow.org/v1beta1",
        "Experiment",
        "lr-search",
        {
            "conditions": [condition("Created"), condition("Succeeded")],
            "currentOptimalTrial": {"bestTrialName": "lr-search-trial1"},
        },
    )
    done = await wait_until_async(
        lambda: (j := jobs.get("alice", "lr-search")) and j.phase == "Succeeded" and len(j.trials) == 2 and j
    )
    assert [(t.parameters, t.objective, t.state) for t in done.trials] == [
        ({"lr": "0.01"}, 0.91, "Succeeded"),
        ({"lr": "0.05"}, 0.95, "Succeeded"),
    ]
    assert done.best_trial == "lr-search-trial1"
    assert [r.name for r in done.replicas] == ["trial-0", "trial-1"]


async def test_a_served_model_is_ready_with_its_endpoint(
    jobs: KubernetesJobBackend, kmock: ApiServerEmulator, kube: KubeClient
) -> None:
    job = await jobs.submit("serving", ServingSpec.from_dict(SERVE, user="alice"))
    assert (job.kind, job.phase, job.endpoint) == ("serving", "Created", None)
    isvc = kmock.find("serving.kserve.io/v1beta1/inferenceservices", NS, "iris")
    assert isvc is not None
    validate_object(isvc, strict=True)
    url = "http://iris.cube-alice.example.com"
    await set_status(
        kube,
        "serving.kserve.io/v1beta1",
        "InferenceService",
        "iris",
        {"url": url, "conditions": [condition("PredictorReady"), condition("Ready")]},
    )
    ready = await wait_until_async(lambda: (j := jobs.get("alice", "iris")) and j.phase == "Ready" and j)
    assert ready.endpoint == url and ready.framework == "sklearn"


async def test_a_second_serving_spec_rolls_out_a_canary_revision_in_place(
    make_jobs: Callable[..., Any], kmock: ApiServerEmulator
) -> None:
    settings = make_settings()
    service = JobService(settings.jobs, await make_jobs(settings))
    await service.submit("alice", {"kind": "serving", "spec": SERVE})
    first = kmock.find("serving.kserve.io/v1beta1/inferenceservices", NS, "iris")
    assert first is not None and "canaryTrafficPercent" not in first["spec"]["predictor"]
    assert json.loads(first["metadata"]["annotations"]["cube-jupyter/spec"])["name"] == "iris"

    canary = {**SERVE, "storage_uri": "s3://models/iris-v2", "canary_traffic_percent": 20}
    await service.submit("alice", {"kind": "serving", "spec": canary})
    second = kmock.find("serving.kserve.io/v1beta1/inferenceservices", NS, "iris")
    assert second is not None
    validate_object(second, strict=True)
    predictor = second["spec"]["predictor"]
    assert (predictor["canaryTrafficPercent"], predictor["model"]["storageUri"]) == (
        20,
        "s3://models/iris-v2",
    )

    await service.submit("alice", {"kind": "serving", "spec": {**canary, "canary_traffic_percent": 0}})
    promoted = kmock.find("serving.kserve.io/v1beta1/inferenceservices", NS, "iris")
    assert promoted is not None and promoted["spec"]["predictor"].get("canaryTrafficPercent") in (None, 0)
    with pytest.raises(Conflict):  # a training spec under a served model's name is still a conflict
        await service.submit("alice", {"kind": "training", "spec": {**DDP, "name": "iris"}})


async def test_the_service_counts_cluster_jobs_against_the_gpu_quota(
    make_jobs: Callable[..., Any],
) -> None:
    settings = make_settings(gpu_quota_per_user=2)
    backend = await make_jobs(settings)
    service = JobService(settings.jobs, backend)
    await service.submit("alice", {"kind": "training", "spec": DDP})  # 2 GPUs
    with pytest.raises(QuotaExceeded) as refused:
        await service.submit(
            "alice",
            {
                "kind": "training",
                "spec": {
                    **DDP,
                    "name": "more",
                    "replicas": {"worker": {"replicas": 1, "resources": {"gpu": 1}}},
                },
            },
        )
    assert refused.value.field == "resources.gpu"
    held = service.ledger.holders("alice")
    assert [h.to_dict() for h in held] == [{"kind": "job", "name": "mnist-ddp", "gpus": 2}]


async def test_jobs_on_a_gpu_resource_other_than_nvidias_count_in_the_ledger_and_the_report(
    workbench_on_emulator: Callable[[Settings], Workbench],
) -> None:
    """`CubeJobs.gpu_resource = "gpu.intel.com/i915"`: the replicas' GPUs are the configured name's,
    counted by the one rule (`kube.objects.gpu_request`), so the quota holds and the report shows them
    (reading only keys ending in `/gpu` counted none, and a user could pass the quota)."""
    settings = make_settings(gpu_quota_per_user=2, jobs={"gpu_resource": "gpu.intel.com/i915"})
    workbench = workbench_on_emulator(settings)
    service = await workbench.started_jobs()
    job = await service.submit("alice", {"kind": "training", "spec": DDP})
    assert job.gpus == 2 and [r.gpus for r in job.replicas] == [0, 1, 1]
    assert [h.to_dict() for h in workbench.ledger.holders("alice")] == [
        {"kind": "job", "name": "mnist-ddp", "gpus": 2}
    ]
    with pytest.raises(QuotaExceeded) as refused:
        await service.submit("alice", {"kind": "training", "spec": {**DDP, "name": "more"}})
    assert "2 in unfinished jobs" in refused.value.message
    quota = workbench.gpu.quota("alice")
    assert quota is not None and (quota.used, quota.limit) == (2, 2)


async def test_running_notebook_servers_count_against_the_job_gpu_quota(
    workbench_on_emulator: Callable[[Settings], Workbench],
) -> None:
    """The composition root's one ledger counts both."""
    workbench = workbench_on_emulator(make_settings(gpu_quota_per_user=2))
    notebooks = await workbench.started_notebooks()
    await notebooks.create("alice", {"name": "gpu-nb", "profile": "gpu"})  # holds 1 GPU
    service = await workbench.started_jobs()
    with pytest.raises(QuotaExceeded) as refused:
        await service.submit("alice", {"kind": "training", "spec": DDP})  # 2 more
    assert refused.value.field == "resources.gpu"
    assert "1 in running servers" in refused.value.message
    one_gpu = {**DDP, "replicas": {"worker": {"replicas": 1, "resources": {"gpu": 1}}}}
    job = await service.submit("alice", {"kind": "training", "spec": one_gpu})
    assert job.gpus == 1
    await notebooks.set_stopped("alice", "gpu-nb", True)
    with pytest.raises(QuotaExceeded):  # the job's GPU and this one's two are three
        await service.submit("alice", {"kind": "training", "spec": {**DDP, "name": "more"}})


async def test_a_gpu_server_is_refused_while_cluster_jobs_hold_the_quota(
    workbench_on_emulator: Callable[[Settings], Workbench],
) -> None:
    """The bug the one ledger fixed: a server's create counted only servers, not the user's jobs."""
    workbench = workbench_on_emulator(make_settings(gpu_quota_per_user=2))
    notebooks = await workbench.started_notebooks()
    jobs = await workbench.started_jobs()
    await jobs.submit("alice", {"kind": "training", "spec": DDP})  # 2 GPUs
    with pytest.raises(QuotaExceeded) as refused:
        await notebooks.create("alice", {"name": "gpu-nb", "profile": "gpu"})
    assert refused.value.field == "profile"
    assert "2 in unfinished jobs" in refused.value.message
    assert notebooks.list_servers("alice") == []
    await notebooks.create("alice", {"name": "cpu-nb", "profile": "cpu"})  # CPU servers need none


async def test_a_job_for_a_user_without_a_namespace_names_the_setting_that_makes_it(
    jobs: KubernetesJobBackend, make_jobs: Callable[..., Any], kmock: ApiServerEmulator
) -> None:
    with pytest.raises(NotFound) as missing:
        await jobs.submit("training", training(user="carol"))
    assert missing.value.field == "user"
    assert missing.value.message.startswith("namespace 'cube-carol' of user 'carol' does not exist")
    assert "CubeWorkbench.create_namespaces" in missing.value.message  # the notebook servers' own words
    # With create_namespaces the workbench makes the namespace first, as for a notebook server.
    creating = await make_jobs(make_settings(create_namespaces=True))
    await creating.submit("training", training(user="carol"))
    assert kmock.find("v1/namespaces", None, "cube-carol") is not None
    assert creating.get("carol", DDP["name"]) is not None

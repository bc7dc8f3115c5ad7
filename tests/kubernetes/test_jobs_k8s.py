"""Jobs' pod logs against the KMock API emulator: kwok's nodes run no kubelet, so the real control
plane (tests/cluster, where jobs are submitted, followed and deleted) has no log to give; here a
kubelet served through the emulator writes, streams and ends a replica's log. The operators' shapes
(specs, the emulated Kubeflow resources, replica pods and conditions) are shared with the trainer,
code-shipping and RBAC-tour modules."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.config import Settings
from cube_jupyter.errors import NotFound
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.kubernetes.status import (
    JOB_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
)
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.kube.client import KubeClient
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

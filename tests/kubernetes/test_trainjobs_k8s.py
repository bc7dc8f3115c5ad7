"""Kubeflow Trainer v2 against the KMock emulator, for what the real plane (tests/cluster, where
Trainer's and JobSet's own controllers run TrainJobs to success) does not give on demand: a node's
log (kwok runs no kubelet), a node that fails (kwok completes a Job's pods at once), and a cluster
serving only some operators, or an admin's pinned API (several CRDs missing at once). Trainer's part
is played here: node pods made from the runtime and our runtime patch, and its status."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from cube_jupyter.errors import InvalidInput, NotServed
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.service import JobService
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.jobs.vocabulary import form_vocabulary
from cube_jupyter.kube.client import KubeClient
from tests.k8s_schemas import validate_object
from tests.kubernetes.actors import trainer_creates_nodes, trainer_reports
from tests.kubernetes.conftest import StartOnEmulator, make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.kubernetes.test_jobs_k8s import (
    NS,
    TUNE,
    Kubelet,
    condition,
    job_backends,
    pod_phase,
    with_job_operators,
)
from tests.server.openapi import assert_response_matches
from tests.upstream import trainer_runtimes
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(60)

TRAINJOBS = "trainer.kubeflow.org/v1alpha1/trainjobs"
DDP = {
    "name": "ddp",
    "framework": "pytorch",
    "replicas": {"worker": {"replicas": 2, "resources": {"gpu": 1}}},
    "script": "train.py",
    "package": "s3://ml-artifacts/jobs/code.tar.gz",
}


@pytest.fixture
def kubelet() -> Kubelet:
    return Kubelet()


@pytest.fixture
def kmock(kmock: ApiServerEmulator, kubelet: Kubelet) -> ApiServerEmulator:
    """The shared Kubeflow cluster (Trainer v2 included) with the Training Operator, Katib and KServe,
    Trainer's preset ClusterTrainingRuntimes, and a kubelet serving pod logs."""
    presets = trainer_runtimes()
    kmock.preload([yaml.safe_load(path.read_text()) for path in presets])
    return with_job_operators(kmock, kubelet)


@pytest.fixture
def make_jobs(start_on_emulator: StartOnEmulator[Any]) -> Callable[..., Any]:
    """test_jobs_k8s's job backends, with `CubeJobs` settings as keywords and an S3 store."""
    start = job_backends(start_on_emulator)

    async def make(**jobs: Any) -> KubernetesJobBackend:
        storage = {"url": "s3://ml-artifacts/jobs", "credentials_secret": "minio-creds"}
        backend: KubernetesJobBackend = await start(make_settings(jobs=jobs, storage=storage))
        return backend

    return make


def spec(raw: dict[str, Any] = DDP) -> TrainingSpec:
    return TrainingSpec.from_dict(raw, user="alice")


async def test_a_pytorch_trainjob_is_created_followed_logged_and_deleted(
    make_jobs: Callable[..., Any], kmock: ApiServerEmulator, kube: KubeClient, kubelet: Kubelet
) -> None:
    jobs: KubernetesJobBackend = await make_jobs()
    job = await jobs.submit("training", spec())
    assert (job.kind, job.framework, job.phase, job.gpus) == ("training", "pytorch", "Created", 2)
    assert [(r.name, r.state) for r in job.replicas] == [("node-0", "Pending"), ("node-1", "Pending")]
    trainjob = kmock.find(TRAINJOBS, NS, "ddp")
    assert trainjob is not None
    validate_object(trainjob, strict=True)
    assert trainjob["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert trainjob["metadata"]["labels"]["cube-jupyter/user"] == "alice"

    # The Trainer makes the nodes from the runtime and our patch: valid pods, with our labels (found by
    # the one pod informer), the secret-referenced store env and the rendezvous env the runtime sets.
    nodes = await trainer_creates_nodes(kube, NS, "ddp")
    for node in nodes:
        validate_object(node, strict=True)
        assert node["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        env = {e["name"]: e for e in node["spec"]["containers"][0]["env"]}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "minio-creds"
        assert env["PET_NNODES"]["value"] == "2" and env["PET_NPROC_PER_NODE"]["value"] == "1"
    for node in nodes:
        await pod_phase(kube, node["metadata"]["name"], "Running")
    await trainer_reports(kube, NS, "ddp", [], active=1)
    running = await wait_until_async(
        lambda: (
            (j := jobs.get("alice", "ddp")) and j.phase == "Running" and all(r.pod for r in j.replicas) and j
        )
    )
    assert [r.pod for r in running.replicas] == ["ddp-node-0-0", "ddp-node-0-1"]

    kubelet.write(NS, "ddp-node-0-1", "rank 1 of 2\n")
    kubelet.terminate(NS, "ddp-node-0-1")
    assert [chunk async for chunk in jobs.logs(running, "node-1")] == ["rank 1 of 2\n"]
    assert kubelet.requests[-1]["container"] == "node"

    await trainer_reports(kube, NS, "ddp", [condition("Complete")], active=0)
    done = await wait_until_async(lambda: (j := jobs.get("alice", "ddp")) and j.finished and j)
    assert done.phase == "Succeeded" and done.completed is not None

    await jobs.delete("alice", "ddp")
    bodies = [json.loads(r.body) for r in kmock.requests_of("delete", TRAINJOBS)]
    assert [b["propagationPolicy"] for b in bodies] == ["Foreground"]
    await wait_until_async(lambda: jobs.get("alice", "ddp") is None)


async def test_an_xgboost_trainjob_runs_on_its_runtime_and_says_why_it_failed(
    make_jobs: Callable[..., Any], kmock: ApiServerEmulator, kube: KubeClient
) -> None:
    jobs: KubernetesJobBackend = await make_jobs()
    raw = {"name": "xgb", "framework": "xgboost", "replicas": {"worker": 2}, "command": ["python", "x.py"]}
    await jobs.submit("training", spec(raw))
    trainjob = kmock.find(TRAINJOBS, NS, "xgb")
    assert trainjob is not None and trainjob["spec"]["runtimeRef"]["name"] == "xgboost-distributed"
    assert trainjob["spec"]["trainer"]["numNodes"] == 3  # the master and two workers
    nodes = await trainer_creates_nodes(kube, NS, "xgb")
    assert {e["name"] for e in nodes[0]["spec"]["containers"][0]["env"]} >= {
        "DMLC_NUM_WORKER",
        "DMLC_TASK_ID",
    }
    await pod_phase(kube, nodes[0]["metadata"]["name"], "Failed", exit_code=1)
    for node in nodes[1:]:  # the failed JobSet's other pods are deleted
        await asyncio.to_thread(kube.delete_object, node)
    failed = condition("Failed", message="jobset failed: node-0 exceeded its backoff limit")
    await trainer_reports(kube, NS, "xgb", [failed], active=0)
    job = await wait_until_async(
        lambda: (j := jobs.get("alice", "xgb")) and j.phase == "Failed" and not j.replicas[1].pod and j
    )
    assert "backoff limit" in str(job.message)
    assert [(r.name, r.state, r.exit_code) for r in job.replicas] == [
        ("node-0", "Failed", 1),
        ("node-1", "Failed", None),  # no pod left: how the job ended says what became of it
        ("node-2", "Failed", None),
    ]


async def test_a_cluster_without_trainer_v2_trains_on_the_training_operator(
    make_jobs: Callable[..., Any], kmock: ApiServerEmulator
) -> None:
    del kmock.resources[TRAINJOBS]
    jobs: KubernetesJobBackend = await make_jobs()
    await jobs.submit("training", spec())
    assert kmock.find("kubeflow.org/v1/pytorchjobs", NS, "ddp") is not None
    assert "TrainJob" not in jobs.kinds
    training = jobs.availability()["training"]
    assert training["pytorch"] == {"available": True, "via": "PyTorchJob", "reason": None}


async def test_the_pinned_api_is_used_and_a_job_it_cannot_run_is_refused(
    make_jobs: Callable[..., Any], kmock: ApiServerEmulator
) -> None:
    v1 = await make_jobs(training_api="training-operator-v1")
    await v1.submit("training", spec())
    assert kmock.find("kubeflow.org/v1/pytorchjobs", NS, "ddp") is not None
    assert v1.availability()["training"]["pytorch"]["via"] == "PyTorchJob"

    v2 = await make_jobs(training_api="trainer-v2")
    uneven = {
        **DDP,
        "name": "uneven",
        "replicas": {"master": 1, "worker": {"replicas": 1, "resources": {"gpu": 1}}},
    }
    with pytest.raises(InvalidInput) as refused:
        await v2.submit("training", spec(uneven))
    assert refused.value.field == "replicas.worker" and "pinned to trainer-v2" in refused.value.message
    availability = v2.availability()
    assert availability["training_api"] == "trainer-v2"
    assert availability["training"]["tensorflow"]["available"] is False
    assert kmock.names(TRAINJOBS) == [] and kmock.names("kubeflow.org/v1/pytorchjobs") == ["ddp"]


async def test_a_kind_whose_operator_is_missing_is_refused_naming_its_crd_and_the_rest_works(
    make_jobs: Callable[..., Any], kmock: ApiServerEmulator
) -> None:
    for missing in ("kubeflow.org/v1beta1/experiments", "kubeflow.org/v1beta1/trials", TRAINJOBS):
        del kmock.resources[missing]
    del kmock.resources["kubeflow.org/v1/pytorchjobs"]
    jobs: KubernetesJobBackend = await make_jobs()
    service = JobService(jobs.settings, jobs)
    with pytest.raises(NotServed) as no_katib:
        await service.submit("alice", {"kind": "tuning", "spec": TUNE})
    assert no_katib.value.status == 409
    assert "Experiment needs the CRD experiments.kubeflow.org" in no_katib.value.message
    with pytest.raises(NotServed) as no_training:
        await jobs.submit("training", spec())
    assert "trainjobs.trainer.kubeflow.org" in no_training.value.message
    assert "pytorchjobs.kubeflow.org" in no_training.value.message
    # What the cluster serves still works: TensorFlow on the Training Operator, models on KServe.
    tf = {"name": "tf", "framework": "tensorflow", "replicas": {"worker": 2}, "command": ["python", "t.py"]}
    await service.submit("alice", {"kind": "training", "spec": tf})
    assert kmock.find("kubeflow.org/v1/tfjobs", NS, "tf") is not None
    availability = jobs.availability()
    assert (
        availability["discovered"] and availability["served"]["TFJob"] and not availability["served"]["Trial"]
    )
    assert (
        availability["tuning"]["reason"]
        == "Experiment needs the CRD experiments.kubeflow.org, which this cluster does not serve"
    )
    assert availability["serving"]["via"] == "InferenceService"
    assert availability["training"]["pytorch"]["available"] is False
    assert_response_matches("/jobs/config", "get", 200, {**form_vocabulary(), "availability": availability})
    with pytest.raises(NotServed):  # a tuning spec is refused before anything is shipped or made
        await jobs.submit("tuning", TuningSpec.from_dict(TUNE, user="alice"))
    assert kmock.requests_of("create", "kubeflow.org/v1beta1/experiments") == []

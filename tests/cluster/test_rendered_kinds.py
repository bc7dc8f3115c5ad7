"""Every kind the workbench renders, accepted by the real API server: created with
`fieldValidation=Strict` (as the workbench creates everything) against the upstream CRDs — so
structural schemas, defaulting, pruning and CEL rules (Trainer's, Istio's) are Kubernetes' own — then
read back with every field that was sent still there, unchanged (nothing pruned)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.jobs.render import render_job
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.namespace_objects import render_namespace_objects
from cube_jupyter.notebooks.render import render_notebook_objects
from cube_jupyter.notebooks.spec import NotebookSpec
from cube_jupyter.pipelines.kubernetes.argo import compile_workflow
from tests.jobs.helpers import make_config
from tests.kubernetes.conftest import make_settings
from tests.pipelines.test_argo import fan_out_fan_in
from tests.pipelines.test_argo import make_settings as pipeline_settings

NAMESPACE = "render-check"  # its own: the other tests' servers and quotas are in the users' namespaces
STORE = {
    "url": "s3://ml-artifacts/jobs",
    "endpoint": "http://minio:9000",
    "credentials_secret": "minio-creds",
}
CODE = {"script": "train.py", "package": "s3://ml-artifacts/jobs/code.tar.gz"}
TRAINING = {
    "pytorch": {"master": 1, "worker": 2},
    "tensorflow": {"chief": 1, "worker": 2},
    "xgboost": {"master": 1, "worker": 1},
    "mpi": {"launcher": 1, "worker": 2},
}
TUNING = {
    "name": "tune",
    "objective": {"metric": "accuracy", "type": "maximize", "goal": 0.98},
    "algorithm": "random",
    "parameters": {
        "lr": {"type": "double", "min": 0.0001, "max": 0.1},
        "optimizer": {"type": "categorical", "values": ["sgd", "adam"]},
    },
    "max_trials": 4,
    "parallel_trials": 2,
    "trial": {"training": {"framework": "pytorch", "replicas": {"master": 1}, "script": "train.py"}},
}


def missing(sent: Any, got: Any, path: str = "") -> list[str]:
    """The paths of what was sent but is not read back as sent (pruned, or changed)."""
    if isinstance(sent, dict):
        if not isinstance(got, dict):
            return [f"{path or '.'}: sent an object, got {type(got).__name__}"]
        return [
            m for key, value in sent.items() for m in missing(value, got.get(key, _ABSENT), f"{path}.{key}")
        ]
    if isinstance(sent, list):
        if not isinstance(got, list) or len(got) != len(sent):
            return [f"{path}: sent {len(sent)} items, got {got!r:.80}"]
        return [
            m for i, (a, b) in enumerate(zip(sent, got, strict=True)) for m in missing(a, b, f"{path}[{i}]")
        ]
    if got is _ABSENT:
        return [f"{path}: pruned"]
    return [] if sent == got else [f"{path}: sent {sent!r:.60}, got {got!r:.60}"]


_ABSENT = object()


def notebook_objects(kind: str, profile: str) -> list[dict[str, Any]]:
    settings = make_settings({"gpu_quota_per_user": 2}, resource_kind=kind)
    spec = NotebookSpec(
        "alice@example.com", f"nb-{kind.lower()}-{profile}", settings.notebooks.profile(profile)
    )
    return render_notebook_objects(spec, settings.notebooks, NAMESPACE)


def job_objects() -> list[dict[str, Any]]:
    objects = []
    v1 = make_config(CubeStorage=STORE, CubeJobs={"training_api": "training-operator-v1"})
    for framework, replicas in TRAINING.items():
        raw = {**CODE, "name": f"train-{framework}", "framework": framework, "replicas": replicas}
        objects += render_job(v1, "training", raw, "alice@example.com")
    trainer = make_config(CubeStorage=STORE, CubeJobs={"training_api": "trainer-v2"})
    raw = {**CODE, "name": "train-v2", "framework": "pytorch", "replicas": {"worker": 2}}
    objects += render_job(trainer, "training", raw, "alice@example.com")
    objects += render_job(v1, "tuning", TUNING, "alice@example.com")
    serving = {"name": "iris", "model_format": "sklearn", "storage_uri": "s3://models/iris/v1"}
    objects += render_job(v1, "serving", serving, "alice@example.com")
    return objects


def rendered() -> list[dict[str, Any]]:
    """One of each kind the workbench creates in a user's namespace."""
    quota_once = [o for o in notebook_objects("StatefulSet", "gpu") if o["kind"] != "ResourceQuota"]
    objects = notebook_objects("Notebook", "cpu") + quota_once  # one namespace has one GPU quota
    workflow = compile_workflow(fan_out_fan_in(), pipeline_settings(), run_id="r1", user="alice@example.com")
    objects.append(workflow)
    objects += job_objects()
    for obj in objects:
        obj["metadata"]["namespace"] = NAMESPACE
    return objects


@pytest.fixture(scope="module")
def kube(installed: Any, admin: k8s.ApiClient) -> KubeClient:
    client = KubeClient(admin)
    client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return client


def test_every_rendered_kind_is_created_strictly_and_read_back_whole(kube: KubeClient) -> None:
    objects = rendered()
    kinds = {obj["kind"] for obj in objects}
    assert kinds >= {
        "Notebook", "StatefulSet", "Service", "PersistentVolumeClaim", "VirtualService",
        "AuthorizationPolicy", "ResourceQuota", "ConfigMap", "Workflow", "TrainJob", "PyTorchJob", "TFJob",
        "XGBoostJob", "MPIJob", "Experiment", "InferenceService",
    }  # fmt: skip
    problems: dict[str, list[str]] = {}
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == "Workflow" and "generateName" in meta:
            meta["name"] = meta.pop("generateName") + "strict"
        created = kube.create(obj)
        back = kube.get(obj["apiVersion"], obj["kind"], NAMESPACE, created["metadata"]["name"])
        if obj["kind"] == "TrainJob":  # once Kueue runs, its webhook adds a runtime patch of its own
            ours = {patch["manager"] for patch in obj["spec"]["runtimePatches"]}
            patches = back["spec"]["runtimePatches"]
            back["spec"]["runtimePatches"] = [patch for patch in patches if patch["manager"] in ours]
        body = {key: value for key, value in obj.items() if key not in ("metadata", "status")}
        lost = missing(body, back) + missing(
            meta.get("labels", {}), back["metadata"].get("labels", {}), ".labels"
        )
        if lost:
            problems[f"{obj['kind']} {meta['name']}"] = lost
    assert problems == {}


def test_the_namespace_objects_of_create_namespaces_are_accepted(kube: KubeClient) -> None:
    settings = make_settings({"create_namespaces": True})
    objects = render_namespace_objects(settings, "carol@example.com", "cube-carol", {"accesskey": "YWJj"})
    assert {obj["kind"] for obj in objects} >= {"Namespace", "RoleBinding"}
    for obj in objects:
        created = kube.create(obj)
        assert missing(obj.get("metadata", {}).get("labels", {}), created["metadata"].get("labels", {})) == []

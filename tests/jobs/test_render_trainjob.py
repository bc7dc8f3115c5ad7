"""render_trainjob: Kubeflow Trainer v2 TrainJobs valid against Trainer's CRD in strict mode, on the
preset runtime of each framework, with what a v1 replica's pod has carried as the trainer and a
runtime patch; which API a training job gets (`training_api`); and TrainJob status, read purely."""

from __future__ import annotations

from typing import Any

import pytest

from cube_jupyter.errors import InvalidInput, NotServed
from cube_jupyter.jobs.kubernetes.status import trainjob_job
from cube_jupyter.jobs.render import render_job
from cube_jupyter.jobs.render.training_api import training_api
from cube_jupyter.jobs.render.trainjob import render_trainjob, trainjob_problem
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.kube.discovery import ServedApis
from tests.jobs.helpers import make_config
from tests.k8s_schemas import validate_object

STORE = {
    "url": "s3://ml-artifacts/jobs",
    "endpoint": "http://minio:9000",
    "credentials_secret": "minio-creds",
}
GPU_PLACEMENT = {
    "service_account": "default-editor",
    "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
    "gpu_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}
TRAINER = "trainer.kubeflow.org/v1alpha1"


def spec_of(framework: str = "pytorch", **overrides: Any) -> TrainingSpec:
    raw: dict[str, Any] = {
        "name": "mnist",
        "framework": framework,
        "replicas": {"worker": 2},
        "script": "train.py",
        "package": "s3://ml-artifacts/jobs/code.tar.gz",
    }
    raw.update(overrides)
    return TrainingSpec.from_dict(raw, user="Alice@Example.com")


def node_patch(obj: dict[str, Any]) -> dict[str, Any]:
    [patch] = obj["spec"]["runtimePatches"]
    [job] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert patch["manager"] == "cube-jupyter.io/workbench" and job["name"] == "node"
    template: dict[str, Any] = job["template"]["spec"]["template"]
    return template


@pytest.mark.parametrize(
    ("framework", "runtime"), [("pytorch", "torch-distributed"), ("xgboost", "xgboost-distributed")]
)
def test_each_framework_with_a_preset_runtime_renders_a_valid_trainjob(framework: str, runtime: str) -> None:
    config = make_config(CubeStorage=STORE, CubeJobs=GPU_PLACEMENT)
    spec = spec_of(
        framework,
        replicas={"worker": 3},
        resources={"cpu": "4", "memory": "16Gi", "gpu": 1},  # every node's, XGBoost's master's too
        env={"NCCL_DEBUG": "WARN"},
        volumes=[{"name": "data", "mount_path": "/data", "pvc": "datasets"}],
        workspace=True,
        active_deadline_seconds=3600,
    )
    [obj] = render_trainjob(spec, config)
    validate_object(obj, strict=True)
    assert (obj["apiVersion"], obj["kind"]) == (TRAINER, "TrainJob")
    meta = obj["metadata"]
    assert meta["labels"]["cube-jupyter/user"] == meta["labels"]["cube-jupyter/user"].lower()
    assert (meta["labels"]["cube-jupyter/job"], meta["annotations"]["cube-jupyter/user"]) == (
        "mnist",
        "Alice@Example.com",
    )
    assert obj["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": runtime,
    }
    assert obj["spec"]["activeDeadlineSeconds"] == 3600
    trainer = obj["spec"]["trainer"]
    expected_nodes = 3 + (framework == "xgboost")  # an XGBoost job always has its master
    assert trainer["numNodes"] == expected_nodes
    assert trainer["resourcesPerNode"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
    }
    argv = trainer["command"]
    assert argv[:3] == ["python", "-m", "cube_jupyter.jobs.entry"]
    assert argv[argv.index("--package") + 1] == "s3://ml-artifacts/jobs/code.tar.gz"
    env = {e["name"]: e for e in trainer["env"]}
    assert env["NCCL_DEBUG"]["value"] == "WARN" and env["CUBE_WORKDIR"]["value"] == "/home/jovyan"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "minio-creds"
    assert "value" not in env["AWS_SECRET_ACCESS_KEY"]  # credentials only as Secret references

    template = node_patch(obj)
    assert template["metadata"]["labels"] == {
        "cube-jupyter/user": meta["labels"]["cube-jupyter/user"],
        "cube-jupyter/job": "mnist",
    }
    assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    pod = template["spec"]
    assert pod["serviceAccountName"] == "default-editor"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert [v["name"] for v in pod["volumes"]] == ["workspace", "data"]
    [node] = pod["containers"]
    assert node["name"] == "node" and sorted(node) == ["name", "volumeMounts"]
    assert [m["mountPath"] for m in node["volumeMounts"]] == ["/home/jovyan", "/data"]


def test_a_pytorch_node_runs_one_process_and_a_command_runs_as_given() -> None:
    config = make_config()
    [obj] = render_trainjob(
        spec_of(command=["python", "train.py", "--epochs", "3"], package=None, script=None), config
    )
    validate_object(obj, strict=True)
    trainer = obj["spec"]["trainer"]
    assert trainer["command"] == ["python", "train.py", "--epochs", "3"] and trainer["numProcPerNode"] == 1
    assert "CUBE_WORKDIR" not in {e["name"] for e in trainer["env"]}
    assert "containers" not in node_patch(obj)["spec"]  # nothing to mount


@pytest.mark.parametrize(
    ("framework", "overrides", "field"),
    [
        ("tensorflow", {"replicas": {"worker": 2}}, "framework"),
        ("mpi", {"replicas": {"worker": 2}}, "framework"),
        (
            "pytorch",
            {"replicas": {"master": 1, "worker": {"replicas": 1, "resources": {"gpu": 1}}}},
            "replicas.worker",
        ),
        (
            "pytorch",
            {"replicas": {"master": 1, "worker": {"replicas": 1, "image": "x/y:1"}}},
            "replicas.worker",
        ),
        ("pytorch", {"restart_policy": "OnFailure"}, "restart_policy"),
        ("pytorch", {"backoff_limit": 2}, "backoff_limit"),
        ("pytorch", {"clean_pod_policy": "All"}, "clean_pod_policy"),
        ("pytorch", {"ttl_seconds_after_finished": 60}, "ttl_seconds_after_finished"),
        (
            "xgboost",
            {"replicas": {"worker": 1}, "resources": {"gpu": 2}},
            "replicas.master.resources.gpu",
        ),
        (
            "pytorch",
            {"command": ["python", "t.py"], "script": None, "package": None, "workspace": True},
            "workspace",
        ),
        ("pytorch", {"image": "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"}, "image"),
    ],
)
def test_what_a_trainjob_cannot_say_is_named(framework: str, overrides: dict[str, Any], field: str) -> None:
    config = make_config()
    spec = spec_of(framework, **overrides)
    problem = trainjob_problem(spec, config)
    assert problem is not None and problem.field == field, problem
    with pytest.raises(InvalidInput) as refused:
        render_trainjob(spec, config)
    assert refused.value.field == field


def test_an_image_without_the_runtime_fits_once_the_admin_says_it_has_it() -> None:
    image = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    config = make_config(CubeJobs={"images_with_runtime": ["docker.io/pytorch/pytorch"]})
    assert trainjob_problem(spec_of(image=image), config) is None


def served(*kinds: tuple[str, str]) -> ServedApis:
    return ServedApis(frozenset(kinds))


V2 = (TRAINER, "TrainJob")
PYTORCH_V1 = ("kubeflow.org/v1", "PyTorchJob")


def test_auto_prefers_trainer_v2_where_it_is_served_and_the_job_fits() -> None:
    config = make_config()
    uneven = spec_of(replicas={"master": 1, "worker": {"replicas": 1, "resources": {"gpu": 1}}})
    assert training_api(spec_of(), config, None) == "trainer-v2"  # no cluster asked: the current API
    assert training_api(spec_of("tensorflow"), config, None) == "training-operator-v1"
    assert training_api(uneven, config, None) == "training-operator-v1"
    assert training_api(spec_of(), config, served(V2, PYTORCH_V1)) == "trainer-v2"
    assert training_api(spec_of(), config, served(PYTORCH_V1)) == "training-operator-v1"
    assert training_api(uneven, config, served(V2, PYTORCH_V1)) == "training-operator-v1"
    with pytest.raises(InvalidInput) as unfit:  # only Trainer v2 is there: what keeps it off is named
        training_api(uneven, config, served(V2))
    assert unfit.value.field == "replicas.worker"
    with pytest.raises(NotServed) as neither:
        training_api(spec_of(), config, served())
    assert "trainjobs.trainer.kubeflow.org" in neither.value.message
    assert "pytorchjobs.kubeflow.org" in neither.value.message
    with pytest.raises(NotServed, match=r"TFJob needs the CRD tfjobs\.kubeflow\.org"):
        training_api(spec_of("tensorflow"), config, served(V2))


def test_a_pinned_api_is_kept() -> None:
    v1 = make_config(CubeJobs={"training_api": "training-operator-v1"})
    assert training_api(spec_of(), v1, served(V2, PYTORCH_V1)) == "training-operator-v1"
    v2 = make_config(CubeJobs={"training_api": "trainer-v2"})
    assert training_api(spec_of(), v2, served()) == "trainer-v2"  # the backend says what is missing
    with pytest.raises(InvalidInput, match="pinned to trainer-v2") as refused:
        training_api(spec_of("tensorflow"), v2, None)
    assert refused.value.field == "framework"


def test_render_without_a_cluster_shows_the_api_a_cluster_serving_both_would_get() -> None:
    settings = make_config()
    raw = {"name": "ddp", "framework": "pytorch", "replicas": {"worker": 2}, "command": ["python", "t.py"]}
    [trainjob] = render_job(settings, "training", raw, "alice")
    assert trainjob["kind"] == "TrainJob" and "cube-jupyter/spec" in trainjob["metadata"]["annotations"]
    pinned = make_config(CubeJobs={"training_api": "training-operator-v1"})
    assert [o["kind"] for o in render_job(pinned, "training", raw, "alice")] == ["PyTorchJob"]
    tf = {**raw, "framework": "tensorflow"}
    assert [o["kind"] for o in render_job(settings, "training", tf, "alice")] == ["TFJob"]


# -- status ----------------------------------------------------------------------------------------


GPUS = ("nvidia.com/gpu",)  # the configured GPU resource names


def trainjob(conditions: list[dict[str, Any]] = (), **meta: Any) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "apiVersion": TRAINER,
        "kind": "TrainJob",
        "metadata": {
            "name": "ddp",
            "namespace": "cube-alice",
            "annotations": {"cube-jupyter/user": "alice"},
            "creationTimestamp": "2026-05-01T10:00:00Z",
            **meta,
        },
        "spec": {"trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}}},
        "status": {"conditions": list(conditions)},
    }


def node(rank: int, phase: str, job: str = "ddp") -> dict[str, Any]:
    labels = {
        "jobset.sigs.k8s.io/jobset-name": job,
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-completion-index": str(rank),
    }
    return {"metadata": {"name": f"{job}-node-0-{rank}-x", "labels": labels}, "status": {"phase": phase}}


def true(kind: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": kind,
        "message": message,
        "lastTransitionTime": "2026-05-01T11:00:00Z",
    }


def test_trainjob_status_follows_its_conditions_and_node_pods() -> None:
    created = trainjob_job(trainjob(), [], GPUS, {"framework": "pytorch"})
    assert (created.phase, created.framework, created.gpus, created.backend) == (
        "Created",
        "pytorch",
        2,
        "kubernetes",
    )
    assert [(r.name, r.state) for r in created.replicas] == [("node-0", "Pending"), ("node-1", "Pending")]
    running = trainjob_job(
        trainjob(), [node(1, "Running"), node(0, "Pending"), node(0, "Running", job="other")], GPUS
    )
    assert running.phase == "Running" and [r.state for r in running.replicas] == ["Pending", "Running"]
    assert running.replicas[1].pod == "ddp-node-0-1-x"
    suspended = trainjob_job(trainjob([true("Suspended", "queued by Kueue")]), [node(0, "Pending")], GPUS)
    assert (suspended.phase, suspended.message) == ("Created", "queued by Kueue")
    done = trainjob_job(trainjob([true("Complete")]), [node(0, "Succeeded")], GPUS)
    assert done.phase == "Succeeded" and done.finished and done.completed is not None
    assert [r.state for r in done.replicas] == ["Succeeded", "Succeeded"]  # node-1's pod is gone
    failed = trainjob_job(trainjob([true("Failed", "DeadlineExceeded")]), [], GPUS)
    assert (failed.phase, failed.message) == ("Failed", "DeadlineExceeded")
    deleting = trainjob_job(trainjob([true("Complete")], deletionTimestamp="2026-05-01T12:00:00Z"), [], GPUS)
    assert deleting.phase == "Deleting"


def test_a_retried_nodes_new_pod_stands_for_it_in_whatever_order_the_cache_lists_them() -> None:
    def attempt(phase: str, name: str, created: str) -> dict[str, Any]:
        pod = node(0, phase)
        pod["metadata"].update(name=name, creationTimestamp=created)
        return pod

    failed = attempt("Failed", "ddp-node-0-0-zz", "2026-05-01T11:00:00Z")
    retried = attempt("Running", "ddp-node-0-0-aa", "2026-05-01T11:00:07Z")
    for pods in ([failed, retried], [retried, failed]):
        replica = trainjob_job(trainjob(), pods, GPUS).replicas[0]
        assert (replica.state, replica.pod) == ("Running", "ddp-node-0-0-aa")

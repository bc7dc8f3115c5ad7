"""render_training: kubeflow.org/v1 jobs valid against the Training Operator CRDs in strict mode, with
the replicas, containers, resources, volumes, policies and labels the spec asks for."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.render.training import render_training
from cube_jupyter.jobs.training_spec import FRAMEWORK_ROLES, TrainingSpec
from cube_jupyter.kube.pods import RUNTIME_MOUNT
from tests.jobs.helpers import make_config
from tests.k8s_schemas import validate_object

REPLICAS: dict[str, dict[str, Any]] = {
    "pytorch": {"master": 1, "worker": 2},
    "tensorflow": {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1},
    "xgboost": {"worker": 2},
    "mpi": {"worker": 2},
}
CONTAINERS = {"pytorch": "pytorch", "tensorflow": "tensorflow", "xgboost": "xgboost", "mpi": "mpi"}
KINDS = {"pytorch": "PyTorchJob", "tensorflow": "TFJob", "xgboost": "XGBoostJob", "mpi": "MPIJob"}
SPEC_KEYS = {
    "pytorch": "pytorchReplicaSpecs",
    "tensorflow": "tfReplicaSpecs",
    "xgboost": "xgbReplicaSpecs",
    "mpi": "mpiReplicaSpecs",
}


def spec_of(framework: str, user: str = "alice", **overrides: Any) -> TrainingSpec:
    raw: dict[str, Any] = {
        "name": "mnist",
        "framework": framework,
        "replicas": REPLICAS[framework],
        "script": "train.py",
    }
    raw.update(overrides)
    return TrainingSpec.from_dict(raw, user=user)


def replica_specs(obj: dict[str, Any]) -> dict[str, Any]:
    key = next(k for k in obj["spec"] if k.endswith("ReplicaSpecs"))
    specs: dict[str, Any] = obj["spec"][key]
    return specs


def container(obj: dict[str, Any], role: str) -> dict[str, Any]:
    result: dict[str, Any] = replica_specs(obj)[role]["template"]["spec"]["containers"][0]
    return result


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_ROLES))
def test_every_framework_renders_a_valid_job(framework: str) -> None:
    config = make_config()
    spec = spec_of(
        framework,
        user="Alice@Example.com",
        image="registry.example.com/ml/train:1",
        resources={"cpu": "2", "memory": "4Gi", "gpu": 1},
        env={"NCCL_DEBUG": "WARN"},
        volumes=[
            {"name": "data", "mount_path": "/data", "pvc": "datasets"},
            {"name": "cfg", "mount_path": "/etc/train", "config_map": "train-config"},
            {"name": "keys", "mount_path": "/keys", "secret": "api-keys"},
            {"name": "scratch", "mount_path": "/scratch", "empty_dir": True},
        ],
        workspace=True,
        restart_policy="OnFailure",
        backoff_limit=3,
        clean_pod_policy="All",
        ttl_seconds_after_finished=600,
        active_deadline_seconds=7200,
    )
    [obj] = render_training(spec, config)
    validate_object(obj, strict=True)
    assert obj["apiVersion"] == "kubeflow.org/v1" and obj["kind"] == KINDS[framework]
    meta = obj["metadata"]
    assert meta["name"] == "mnist" and meta["namespace"] == config.namespace_for(spec.user)
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "cube-jupyter"
    assert meta["labels"]["cube-jupyter/job"] == "mnist"
    assert meta["annotations"]["cube-jupyter/user"] == "Alice@Example.com"
    assert obj["spec"]["runPolicy"] == {
        "cleanPodPolicy": "All",
        "ttlSecondsAfterFinished": 600,
        "backoffLimit": 3,
        "activeDeadlineSeconds": 7200,
    }
    specs = obj["spec"][SPEC_KEYS[framework]]
    assert sorted(specs) == sorted(r.role for r in spec.roles)
    for role in spec.roles:
        replica = specs[role.role]
        assert replica["replicas"] == role.replicas and replica["restartPolicy"] == "OnFailure"
        pod = replica["template"]["spec"]
        assert "app.kubernetes.io/managed-by" not in replica["template"]["metadata"]["labels"]
        assert replica["template"]["metadata"]["labels"]["cube-jupyter/job"] == "mnist"
        main = pod["containers"][0]
        assert main["name"] == CONTAINERS[framework]
        assert main["image"] == "registry.example.com/ml/train:1"
        gpus = role.resources.gpu
        assert main["resources"]["limits"].get("nvidia.com/gpu") == (str(gpus) if gpus else None)
        assert main["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
        assert {"name": "NCCL_DEBUG", "value": "WARN"} in main["env"]
        assert [m["mountPath"] for m in main["volumeMounts"]] == [
            "/home/jovyan",
            "/data",
            "/etc/train",
            "/keys",
            "/scratch",
            RUNTIME_MOUNT,  # the image has no cube-jupyter: its init containers install it there
        ]
        assert main["workingDir"] == "/home/jovyan"
        claims = {v["name"]: v for v in pod["volumes"]}
        assert claims["workspace"]["persistentVolumeClaim"]["claimName"].endswith("-workspace")
        assert claims["data"]["persistentVolumeClaim"] == {"claimName": "datasets"}
        assert claims["cfg"]["configMap"] == {"name": "train-config"}
        assert claims["keys"]["secret"] == {"secretName": "api-keys"}
        assert claims["scratch"]["emptyDir"] == {}
        assert ("tolerations" in pod) == bool(gpus)


def test_container_names_and_ports_are_the_operators() -> None:
    config = make_config()
    names = {}
    for framework in FRAMEWORK_ROLES:
        [obj] = render_training(spec_of(framework), config)
        main = container(obj, "Worker")
        names[framework] = (main["name"], [p["name"] for p in main.get("ports", [])])
    assert names == {
        "pytorch": ("pytorch", ["pytorchjob-port"]),
        "tensorflow": ("tensorflow", ["tfjob-port"]),
        "xgboost": ("xgboost", ["xgboostjob-port"]),
        "mpi": ("mpi", []),
    }


def test_defaults_come_from_config() -> None:
    config = make_config(
        CubeJobs={
            "training_images": {"pytorch": "registry.example.com/torch:2.5"},
            "default_cpu": "3",
            "default_memory": "6Gi",
            "gpu_resource": "amd.com/gpu",
            "gpu_node_selector": {"gpu": "mi300"},
            "ttl_seconds_after_finished": 120,
            "service_account": "trainer",
            "images_with_runtime": ["registry.example.com/torch"],  # no runtime injection
        }
    )
    [obj] = render_training(
        spec_of("pytorch", replicas={"worker": {"replicas": 2, "resources": {"gpu": 2}}}), config
    )
    validate_object(obj, strict=True)
    pod = replica_specs(obj)["Worker"]["template"]["spec"]
    main = pod["containers"][0]
    assert main["image"] == "registry.example.com/torch:2.5"
    assert main["resources"]["limits"] == {"cpu": "3", "memory": "6Gi", "amd.com/gpu": "2"}
    assert pod["nodeSelector"] == {"gpu": "mi300"} and pod["serviceAccountName"] == "trainer"
    assert obj["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 120}
    assert "workingDir" not in main and "volumes" not in pod


def test_code_kinds_become_commands() -> None:
    config = make_config()
    entry = ["python", "-m", "cube_jupyter.jobs.entry"]
    cases: dict[str, tuple[dict[str, Any], list[str]]] = {
        "command": (
            {"script": None, "command": ["torchrun", "train.py"], "args": ["--epochs", "2"]},
            ["torchrun", "train.py", "--epochs", "2"],
        ),
        "script": (
            {"args": ["--epochs", "2"]},
            [*entry, "--kind", "script", "--target", "train.py", "--", "--epochs", "2"],
        ),
        "notebook": (
            {"script": None, "notebook": "train.ipynb", "args": ["-p", "epochs", "2"]},
            [*entry, "--kind", "notebook", "--target", "train.ipynb", "--", "-p", "epochs", "2"],
        ),
        "function": (
            {"script": None, "function": "train:main"},
            [*entry, "--kind", "function", "--target", "train:main", "--"],
        ),
    }
    for kind, (overrides, command) in cases.items():
        [obj] = render_training(spec_of("pytorch", **overrides), config)
        assert container(obj, "Worker")["command"] == command, kind
        assert container(obj, "Master")["command"] == command, kind


def test_role_command_and_image_override_the_job() -> None:
    config = make_config()
    spec = spec_of(
        "tensorflow",
        replicas={"worker": 2, "ps": {"replicas": 1, "command": "python ps.py", "image": "x/ps:1"}},
    )
    [obj] = render_training(spec, config)
    validate_object(obj, strict=True)
    assert container(obj, "PS")["command"] == ["python", "ps.py"]
    assert container(obj, "PS")["image"] == "x/ps:1"
    assert container(obj, "Worker")["command"][-5:] == ["--kind", "script", "--target", "train.py", "--"]
    assert container(obj, "Worker")["image"] == config.default_image


def test_mpi_launcher_runs_mpirun_over_every_worker_slot() -> None:
    config = make_config()
    spec = spec_of(
        "mpi", replicas={"worker": 3}, slots_per_worker=2, script=None, command=["python", "hvd.py"]
    )
    [obj] = render_training(spec, config)
    validate_object(obj, strict=True)
    launcher = container(obj, "Launcher")["command"]
    assert launcher[0] == "mpirun" and launcher[launcher.index("-np") + 1] == "6"
    assert launcher[-2:] == ["python", "hvd.py"]
    assert "command" not in container(obj, "Worker")  # the operator keeps workers alive for mpirun
    assert obj["spec"]["slotsPerWorker"] == 2 and obj["spec"]["mainContainer"] == "mpi"


def test_s3_package_gets_store_credentials_only_as_secret_refs() -> None:
    config = make_config(
        CubeStorage={
            "url": "s3://artifacts/jobs",
            "endpoint": "minio-service.kubeflow:9000",
            "secure": False,
            "access_key": "AKIAEXAMPLEKEY",
            "secret_key": "very-secret-value",
            "credentials_secret": "mlpipeline-minio-artifact",
        }
    )
    [obj] = render_training(spec_of("pytorch", package="s3://artifacts/jobs/code/abc.tar.gz"), config)
    validate_object(obj, strict=True)
    main = container(obj, "Worker")
    assert main["command"][3:5] == ["--package", "s3://artifacts/jobs/code/abc.tar.gz"]
    env = {e["name"]: e for e in main["env"]}
    assert env["MINIO_ENDPOINT"]["value"] == "http://minio-service.kubeflow:9000"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key] == {
            "name": key,
            "valueFrom": {"secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": key}},
        }
    text = repr(obj)
    assert "AKIAEXAMPLEKEY" not in text and "very-secret-value" not in text


def test_configmap_package_is_mounted() -> None:
    config = make_config()
    [obj] = render_training(spec_of("xgboost", package="configmap://mnist-code"), config)
    validate_object(obj, strict=True)
    main = container(obj, "Master")
    assert main["command"][3:5] == ["--package", "file:///var/run/cube-jupyter/package/package.tar.gz"]
    pod = replica_specs(obj)["Master"]["template"]["spec"]
    assert {
        "name": "cube-package",
        "configMap": {"name": "mnist-code", "items": [{"key": "package.tar.gz", "path": "package.tar.gz"}]},
    } in pod["volumes"]


def test_local_package_cannot_reach_the_cluster() -> None:
    config = make_config()
    with pytest.raises(InvalidInput) as caught:
        render_training(spec_of("pytorch", package="/tmp/code.tar.gz"), config)
    assert caught.value.field == "package"


def test_workspace_claim_can_be_named_by_the_caller() -> None:
    config = make_config()
    [obj] = render_training(spec_of("pytorch", workspace=True), config, workspace_claim="nb1-workspace")
    pod = replica_specs(obj)["Worker"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "workspace", "persistentVolumeClaim": {"claimName": "nb1-workspace"}}


def test_strict_validation_catches_a_misspelt_field() -> None:
    """The schema check these tests rely on is real: a field the CRD lacks fails."""
    config = make_config()
    [obj] = render_training(spec_of("pytorch"), config)
    broken = copy.deepcopy(obj)
    broken["spec"]["runPolicy"]["cleanupPolicy"] = "All"
    with pytest.raises(AssertionError, match="cleanupPolicy"):
        validate_object(broken, strict=True)
    broken = copy.deepcopy(obj)
    replica_specs(broken)["Worker"]["replicas"] = "2"
    with pytest.raises(AssertionError, match=r"Worker\.replicas: '2' is not of type 'integer'"):
        validate_object(broken, strict=True)

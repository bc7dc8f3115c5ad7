"""TrainingSpec: the raw spec users write parses once, with every bad input naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.resources import ResourceSpec
from cube_jupyter.jobs.training_spec import FRAMEWORK_ROLES, TrainingSpec


def raw(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "mnist",
        "framework": "pytorch",
        "replicas": {"worker": 2},
        "script": "train.py",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def parse(**overrides: Any) -> TrainingSpec:
    return TrainingSpec.from_dict(raw(**overrides), user="alice")


def field_of(**overrides: Any) -> str | None:
    with pytest.raises(InvalidInput) as caught:
        parse(**overrides)
    return caught.value.field


def test_pytorch_spec_with_roles_resources_and_defaults() -> None:
    spec = parse(
        framework="PyTorch",
        replicas={
            "Master": 1,
            "worker": {"replicas": 2, "resources": {"gpu": 1}, "env": {"NCCL_DEBUG": "INFO"}},
        },
        resources={"cpu": 2, "memory": "8Gi"},
        args="--epochs 3 --lr '0.1'",
        env={"OMP_NUM_THREADS": 1},
    )
    assert spec.framework == "pytorch"
    assert [(r.role, r.replicas) for r in spec.roles] == [("Master", 1), ("Worker", 2)]
    master, worker = spec.roles
    assert master.resources == ResourceSpec(cpu="2", memory="8Gi", gpu=0)
    assert worker.resources == ResourceSpec(cpu="2", memory="8Gi", gpu=1)  # role keys override the default
    assert worker.env == {"NCCL_DEBUG": "INFO"}
    assert spec.env == {"OMP_NUM_THREADS": "1"}
    assert spec.code.kind == "script" and spec.code.path == "train.py"
    assert spec.code.args == ("--epochs", "3", "--lr", "0.1")
    assert spec.total_gpus == 2
    assert sum(role.replicas for role in spec.roles) == 3
    assert spec.restart_policy == "Never" and spec.clean_pod_policy == "Running"


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_ROLES))
def test_to_dict_parses_back_to_the_same_spec(framework: str) -> None:
    replicas = {"tensorflow": {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1}}.get(
        framework, {"worker": 2}
    )
    spec = parse(
        framework=framework,
        replicas=replicas,
        script=None,
        function="train:main",
        package="s3://artifacts/code/abc.tar.gz",
        resources={"cpu": "500m", "gpu": 1},
        volumes=[
            {"name": "data", "mount_path": "/data", "pvc": "datasets"},
            {"name": "tmp", "mount_path": "/scratch", "empty_dir": True},
        ],
        workspace=True,
        restart_policy="onfailure",
        backoff_limit=2,
        ttl_seconds_after_finished=60,
        active_deadline_seconds=3600,
    )
    assert TrainingSpec.from_dict(spec.to_dict(), user="alice") == spec
    assert spec.restart_policy == "OnFailure"
    assert spec.code.package_uri == "s3://artifacts/code/abc.tar.gz"


def test_role_defaults_per_framework() -> None:
    xgb = parse(framework="xgboost", replicas={"worker": 2})
    assert [(r.role, r.replicas) for r in xgb.roles] == [("Master", 1), ("Worker", 2)]
    mpi = parse(framework="mpi", replicas={"worker": 2}, resources={"gpu": 1})
    assert [(r.role, r.replicas) for r in mpi.roles] == [("Launcher", 1), ("Worker", 2)]
    assert mpi.role("launcher") is not None and mpi.role("launcher").resources.gpu == 0  # type: ignore[union-attr]
    assert mpi.slots_per_worker == 1
    assert mpi.total_gpus == 2
    assert [r.role for r in parse(replicas={"master": 1}).roles] == ["Master"]  # a single-process job
    assert [r.role for r in parse(framework="tensorflow", replicas={"chief": 1}).roles] == ["Chief"]


def test_code_kinds() -> None:
    assert parse(script=None, command=["python", "-c", "print(1)"]).code.command == (
        "python",
        "-c",
        "print(1)",
    )
    assert parse(script=None, command="python train.py --x 'a b'").code.command == (
        "python",
        "train.py",
        "--x",
        "a b",
    )
    notebook = parse(script=None, notebook="nbs/train.ipynb")
    assert notebook.code.kind == "notebook" and notebook.code.target == "nbs/train.ipynb"
    assert parse(script=None, function="pkg.mod:fit").code.target == "pkg.mod:fit"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"framework": "jax"}, "framework"),
        ({"framework": None}, "framework"),
        ({"replicas": {"worker": 0}}, "replicas.worker"),
        ({"framework": "mpi", "replicas": {"worker": 0}}, "replicas.worker"),
        ({"framework": "tensorflow", "replicas": {"ps": 2}}, "replicas.worker"),
        ({"replicas": {}}, "replicas.worker"),
        ({"replicas": {"master": 2, "worker": 1}}, "replicas.master"),
        ({"framework": "tensorflow", "replicas": {"chief": 2}}, "replicas.chief"),
        ({"framework": "xgboost", "replicas": {"master": 2}}, "replicas.master"),
        ({"framework": "mpi", "replicas": {"launcher": 0, "worker": 2}}, "replicas.launcher"),
        ({"replicas": {"chief": 1}}, "replicas.chief"),  # not a PyTorch role
        ({"replicas": {"worker": -1}}, "replicas.worker"),
        ({"replicas": {"worker": True}}, "replicas.worker"),
        ({"replicas": {"worker": {"replicas": 2, "gpus": 1}}}, "replicas.worker.gpus"),
        ({"replicas": {"worker": {"replicas": "two"}}}, "replicas.worker.replicas"),
        ({"replicas": 2}, "replicas"),
        ({"resources": {"gpu": -1}}, "resources.gpu"),
        ({"resources": {"gpu": 1.5}}, "resources.gpu"),
        ({"resources": {"cpu": "two"}}, "resources.cpu"),
        ({"resources": {"memory": "8 GB"}}, "resources.memory"),
        ({"resources": {"cpu": "0"}}, "resources.cpu"),
        ({"replicas": {"worker": {"resources": {"memory": "lots"}}}}, "replicas.worker.resources.memory"),
        ({"name": "Bad_Name"}, "name"),
        ({"name": "1abc"}, "name"),
        ({"name": "a" * 41}, "name"),
        ({"name": None}, "name"),
        ({"gpus": 2}, "gpus"),
        ({"script": None}, "command"),
        ({"command": ["python", "x.py"]}, "script"),
        ({"script": "../outside.py"}, "script"),
        ({"script": None, "notebook": "train.py"}, "notebook"),
        ({"script": None, "function": "not a function"}, "function"),
        ({"script": None, "command": []}, "command"),
        ({"script": None, "command": "python", "package": "s3://b/k"}, "package"),
        ({"package": "https://example.com/code.tar.gz"}, "package"),
        ({"package": "configmap://Bad_Name"}, "package"),
        ({"package": "s3:///no-bucket"}, "package"),
        ({"args": {"a": 1}}, "args"),
        ({"script": None, "command": ["python", "a\x00b"]}, "command[1]"),
        ({"script": None, "command": "python '\ud800'"}, "command[1]"),
        ({"args": ["--x", "\x00"]}, "args[1]"),
        ({"env": {"A": "x\x00y"}}, "env.A"),
        ({"script": "tr\x00ain.py"}, "script"),
        ({"env": {"1BAD": "x"}}, "env.1BAD"),
        ({"env": {"RANK": "3"}}, "env.RANK"),
        ({"framework": "tensorflow", "env": {"TF_CONFIG": "{}"}}, "env.TF_CONFIG"),
        ({"env": {"A": ["list"]}}, "env.A"),
        ({"image": "has space:1"}, "image"),
        ({"replicas": {"worker": {"image": "bad image"}}}, "replicas.worker.image"),
        ({"volumes": [{"name": "data", "mount_path": "/data"}]}, "volumes[0].pvc"),
        (
            {"volumes": [{"name": "data", "mount_path": "/data", "pvc": "a", "secret": "b"}]},
            "volumes[0].secret",
        ),
        ({"volumes": [{"name": "data", "mount_path": "data", "pvc": "a"}]}, "volumes[0].mount_path"),
        ({"volumes": [{"name": "workspace", "mount_path": "/w", "pvc": "a"}]}, "volumes[0].name"),
        ({"volumes": [{"name": "d", "mount_path": "/d", "pvc": "Bad_Claim"}]}, "volumes[0].pvc"),
        (
            {"volumes": [{"name": "d", "mount_path": "/d", "pvc": "a", "readonly": True}]},
            "volumes[0].readonly",
        ),
        (
            {
                "volumes": [
                    {"name": "d", "mount_path": "/d", "pvc": "a"},
                    {"name": "d", "mount_path": "/e", "pvc": "b"},
                ]
            },
            "volumes[1].name",
        ),
        ({"volumes": {"name": "d"}}, "volumes"),
        ({"workspace": "yes"}, "workspace"),
        ({"restart_policy": "Sometimes"}, "restart_policy"),
        ({"clean_pod_policy": "Some"}, "clean_pod_policy"),
        ({"backoff_limit": -1}, "backoff_limit"),
        ({"ttl_seconds_after_finished": "1h"}, "ttl_seconds_after_finished"),
        ({"active_deadline_seconds": 0}, "active_deadline_seconds"),
        ({"slots_per_worker": 2}, "slots_per_worker"),
        ({"framework": "mpi", "slots_per_worker": 0}, "slots_per_worker"),
    ],
)
def test_bad_input_names_the_field(overrides: dict[str, Any], field: str) -> None:
    assert field_of(**overrides) == field


def test_unknown_framework_lists_the_four() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse(framework="jax")
    assert all(name in caught.value.message for name in FRAMEWORK_ROLES)


def test_unknown_keys_are_named_and_allowed_ones_listed() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse(workers=2)
    assert caught.value.field == "workers"
    assert "'workers'" in caught.value.message and "replicas" in caught.value.message


def test_spec_must_be_a_mapping_and_user_given() -> None:
    with pytest.raises(InvalidInput) as caught:
        TrainingSpec.from_dict(["not", "a", "dict"], user="alice")
    assert caught.value.field == "spec"
    with pytest.raises(InvalidInput) as caught:
        TrainingSpec.from_dict("x" * 100_000, user="alice", prefix="trial.training")
    assert caught.value.field == "trial.training" and len(caught.value.message) < 400
    with pytest.raises(InvalidInput) as caught:
        TrainingSpec.from_dict(raw(), user="")
    assert caught.value.field == "user"


def test_prefix_names_fields_inside_a_larger_spec() -> None:
    with pytest.raises(InvalidInput) as caught:
        TrainingSpec.from_dict(raw(replicas={"worker": 0}), user="alice", prefix="trial.training")
    assert caught.value.field == "trial.training.replicas.worker"

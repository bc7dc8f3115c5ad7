"""What every replica, trial and step pod carries beyond its code: the runtime for an image that lacks
cube-jupyter (init containers, a shared volume, the paths), and no Istio sidecar. Each rendered object
is valid strictly; tests/pods runs these pods."""

from __future__ import annotations

from typing import Any

import pytest

from cube_jupyter.images import RUNTIME_IMAGE
from cube_jupyter.jobs.render.training import render_training
from cube_jupyter.jobs.render.tuning import render_tuning
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.kube.pods import (
    NO_ISTIO_SIDECAR,
    RUNTIME_MOUNT,
    RUNTIME_SITE,
    RUNTIME_VOLUME,
    RUNTIME_WHEELS,
)
from cube_jupyter.pipelines.kubernetes.argo import compile_workflow, step_template_name
from cube_jupyter.wheelhouse import LOCK
from tests.jobs.helpers import make_config, substitute_trial_parameters
from tests.k8s_schemas import validate_object
from tests.pipelines.test_argo import fan_out_fan_in, make_settings, templates

USER_IMAGE = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


def pytorch_job(image: str, **sections: dict[str, Any]) -> dict[str, Any]:
    config = make_config(**sections)
    spec = TrainingSpec.from_dict(
        {
            "name": "ddp",
            "framework": "pytorch",
            "image": image,
            "replicas": {"master": 1, "worker": 1},
            "script": "train.py",
            "env": {"PYTHONPATH": "/opt/libs"},
            "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1},
        },
        user="alice",
    )
    [job] = render_training(spec, config)
    validate_object(job)
    return job


def master_pod(job: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    return template


def test_a_user_image_gets_the_runtime_from_the_wheelhouse_in_init_containers() -> None:
    pod = master_pod(pytorch_job(USER_IMAGE))["spec"]
    wheels, install = pod["initContainers"]
    # The runtime image hands its wheelhouse over; the user's own image installs it with its Python.
    assert (wheels["image"], install["image"]) == (RUNTIME_IMAGE, USER_IMAGE)
    assert wheels["command"] == ["python", "-m", "cube_jupyter.wheelhouse", "copy", RUNTIME_WHEELS]
    assert install["command"][:4] == ["python", "-m", "pip", "install"]
    assert {"--no-index", "--no-deps"} <= set(install["command"])  # nothing from the internet
    assert install["command"][-2:] == ["-r", f"{RUNTIME_WHEELS}/{LOCK}"]
    shared = [{"name": RUNTIME_VOLUME, "mountPath": RUNTIME_MOUNT}]
    assert wheels["volumeMounts"] == install["volumeMounts"] == shared
    # Init containers get the main container's CPU and memory, not its GPU.
    limits = {"cpu": "2", "memory": "4Gi"}
    assert wheels["resources"] == install["resources"] == {"requests": limits, "limits": limits}
    assert {"name": RUNTIME_VOLUME, "emptyDir": {}} in pod["volumes"]
    main = pod["containers"][0]
    assert {"name": RUNTIME_VOLUME, "mountPath": RUNTIME_MOUNT, "readOnly": True} in main["volumeMounts"]
    env = {var["name"]: var["value"] for var in main["env"] if "value" in var}
    assert env["PYTHONPATH"] == f"{RUNTIME_SITE}:/opt/libs"  # first, the spec's own path kept after it
    assert env["JUPYTER_PATH"] == f"{RUNTIME_SITE}/share/jupyter"
    assert [var["name"] for var in main["env"]].count("PYTHONPATH") == 1


@pytest.mark.parametrize(
    ("image", "sections"),
    [
        (RUNTIME_IMAGE, {}),
        ("ghcr.io/cube-jupyter/notebook-gpu:0.0.9", {}),
        (
            "mirror.example.com/cube/runtime:7",
            {"CubeWorkload": {"runtime_image": "mirror.example.com/cube/runtime:7"}},
        ),
        (
            "registry.example.com/ml/torch@sha256:" + "a" * 64,
            {"CubeJobs": {"images_with_runtime": ["registry.example.com/ml/"]}},
        ),
        (
            "registry.example.com/ml/torch:2",
            {"CubeJobs": {"images_with_runtime": ["registry.example.com/ml/torch"]}},
        ),
        (USER_IMAGE, {"CubeWorkload": {"runtime_injection": "never"}}),
    ],
)
def test_images_that_carry_the_runtime_get_nothing(image: str, sections: dict[str, Any]) -> None:
    pod = master_pod(pytorch_job(image, **sections))["spec"]
    assert "initContainers" not in pod and "volumes" not in pod
    env = {var["name"]: var.get("value") for var in pod["containers"][0]["env"]}
    assert env["PYTHONPATH"] == "/opt/libs"


def test_injection_can_be_forced_and_repositories_match_whole_names() -> None:
    forced = master_pod(pytorch_job(RUNTIME_IMAGE, CubeJobs={"runtime_injection": "always"}))["spec"]
    assert len(forced["initContainers"]) == 2
    # 'registry.example.com/ml/torch' is not 'registry.example.com/ml/torch-nightly'.
    other = pytorch_job(
        "registry.example.com/ml/torch-nightly:1",
        CubeJobs={"images_with_runtime": ["registry.example.com/ml/torch"]},
    )
    assert len(master_pod(other)["spec"]["initContainers"]) == 2


def test_replica_pods_keep_the_istio_sidecar_out() -> None:
    job = pytorch_job(RUNTIME_IMAGE)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"]["metadata"]["annotations"] == NO_ISTIO_SIDECAR


@pytest.mark.parametrize(
    "trial",
    [
        {"notebook": "train.ipynb", "image": USER_IMAGE},
        {
            "training": {
                "framework": "pytorch",
                "image": USER_IMAGE,
                "replicas": {"master": 1, "worker": 1},
                "script": "t.py",
            }
        },
    ],
)
def test_trials_get_the_runtime_and_no_sidecar(trial: dict[str, Any]) -> None:
    config = make_config()
    spec = TuningSpec.from_dict(
        {
            "name": "tune",
            "objective": {"metric": "loss", "type": "minimize"},
            "algorithm": "random",
            "parameters": {"lr": {"type": "double", "min": 0.01, "max": 0.1}},
            "max_trials": 2,
            "trial": trial,
        },
        user="alice",
    )
    [experiment] = render_tuning(spec, config)
    validate_object(experiment)
    trial_job = substitute_trial_parameters(experiment["spec"]["trialTemplate"]["trialSpec"])
    trial_job["metadata"] = {"name": "tune-x7k2p", "namespace": experiment["metadata"]["namespace"]}
    validate_object(trial_job)
    if trial_job["kind"] == "Job":
        pods = [trial_job["spec"]["template"]]
    else:
        pods = [replica["template"] for replica in trial_job["spec"]["pytorchReplicaSpecs"].values()]
    for pod in pods:
        assert pod["metadata"]["annotations"] == NO_ISTIO_SIDECAR
        assert [c["image"] for c in pod["spec"]["initContainers"]] == [RUNTIME_IMAGE, USER_IMAGE]


def test_argo_steps_get_the_runtime_where_their_image_lacks_it_and_no_sidecar() -> None:
    workflow = compile_workflow(fan_out_fan_in(), make_settings(), run_id="r", user="alice")
    validate_object(workflow)  # strict, against Argo's own schema
    steps = templates(workflow)
    for name in ("prepare", "train-a", "train-b", "evaluate", "report"):
        template = steps[step_template_name(name)]
        assert template["metadata"]["annotations"] == NO_ISTIO_SIDECAR
        injected = "initContainers" in template
        assert injected == (name == "train-b"), name  # only its image, xgb:1.7, lacks cube-jupyter
    train_b = steps[step_template_name("train-b")]
    assert [c["image"] for c in train_b["initContainers"]] == [
        RUNTIME_IMAGE,
        "registry.example.com/ml/xgb:1.7",
    ]
    assert train_b["volumes"] == [{"name": RUNTIME_VOLUME, "emptyDir": {}}]
    assert train_b["container"]["volumeMounts"][-1]["mountPath"] == RUNTIME_MOUNT

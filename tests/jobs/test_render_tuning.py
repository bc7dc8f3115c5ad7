"""render_tuning: a Katib Experiment whose spec is valid against Katib's swagger definitions (strict),
and whose trial template, with Katib's substitutions made, is a valid training job or batch Job."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from cube_jupyter.jobs.render.tuning import render_tuning
from cube_jupyter.jobs.training_spec import FRAMEWORK_ROLES
from cube_jupyter.jobs.tuning_spec import ALGORITHMS, TuningSpec
from tests.jobs.helpers import make_config, substitute_trial_parameters
from tests.k8s_schemas import validate_object

NUMERIC = {
    "lr": {"type": "double", "min": 0.001, "max": 0.1, "step": 0.001},
    "epochs": {"type": "int", "min": 1, "max": 9},
}
MIXED = {
    "lr": {"type": "double", "min": 0.0001, "max": 0.1, "log": True},
    "layers": {"type": "int", "min": 1, "max": 4, "step": 1},
    "optimizer": {"type": "categorical", "values": ["sgd", "adam"]},
    "batch": {"type": "discrete", "values": [16, 32, 64]},
}
TRAINING_REPLICAS: dict[str, dict[str, int]] = {
    "pytorch": {"master": 1, "worker": 1},
    "tensorflow": {"worker": 2},
    "xgboost": {"worker": 1},
    "mpi": {"worker": 2},
}


def spec_of(**overrides: Any) -> TuningSpec:
    raw: dict[str, Any] = {
        "name": "tune-mnist",
        "objective": {"metric": "accuracy", "type": "maximize", "goal": 0.98, "additional_metrics": ["loss"]},
        "algorithm": "random",
        "parameters": MIXED,
        "max_trials": 9,
        "parallel_trials": 3,
        "max_failed_trials": 2,
        "trial": {"notebook": "train.ipynb"},
    }
    raw.update(overrides)
    return TuningSpec.from_dict(raw, user="alice")


def trial_object(experiment: dict[str, Any]) -> dict[str, Any]:
    """The trial job Katib creates: placeholders substituted and a name given."""
    trial = substitute_trial_parameters(experiment["spec"]["trialTemplate"]["trialSpec"])
    trial["metadata"] = {"name": "tune-mnist-7x9k2pqz", "namespace": experiment["metadata"]["namespace"]}
    return trial


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_renders_a_valid_experiment(algorithm: str) -> None:
    config = make_config()
    settings_for = {
        "hyperband": {"resource_name": "epochs", "r_l": "3", "eta": "3"},
        "tpe": {"n_startup_trials": "3", "random_state": "7"},
        "bayesianoptimization": {"base_estimator": "GP", "acq_func": "EI"},
        "cmaes": {"sigma": "0.5", "restart_strategy": "ipop"},
        "random": {"random_state": "1"},
    }
    spec = spec_of(
        algorithm={"name": algorithm, "settings": settings_for.get(algorithm, {})},
        parameters=NUMERIC,
        early_stopping={"algorithm": "medianstop", "settings": {"min_trials_required": 2, "start_step": 1}},
    )
    [experiment] = render_tuning(spec, config)
    validate_object(experiment, strict=True)
    body = experiment["spec"]
    assert experiment["apiVersion"] == "kubeflow.org/v1beta1" and experiment["kind"] == "Experiment"
    assert experiment["metadata"]["labels"]["cube-jupyter/job-kind"] == "tuning"
    assert body["algorithm"]["algorithmName"] == algorithm
    assert {
        s["name"]: s["value"] for s in body["algorithm"].get("algorithmSettings", [])
    } == settings_for.get(algorithm, {})
    assert body["earlyStopping"] == {
        "algorithmName": "medianstop",
        "algorithmSettings": [
            {"name": "min_trials_required", "value": "2"},
            {"name": "start_step", "value": "1"},
        ],
    }
    assert (body["maxTrialCount"], body["parallelTrialCount"], body["maxFailedTrialCount"]) == (9, 3, 2)
    assert body["objective"] == {
        "type": "maximize",
        "objectiveMetricName": "accuracy",
        "goal": 0.98,
        "additionalMetricNames": ["loss"],
    }
    validate_object(trial_object(experiment), strict=True)


def test_parameters_become_feasible_spaces() -> None:
    config = make_config()
    [experiment] = render_tuning(spec_of(), config)
    validate_object(experiment, strict=True)
    assert experiment["spec"]["parameters"] == [
        {
            "name": "lr",
            "parameterType": "double",
            "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"},
        },
        {"name": "layers", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "4", "step": "1"}},
        {"name": "optimizer", "parameterType": "categorical", "feasibleSpace": {"list": ["sgd", "adam"]}},
        {"name": "batch", "parameterType": "discrete", "feasibleSpace": {"list": ["16", "32", "64"]}},
    ]
    template = experiment["spec"]["trialTemplate"]
    assert [p["name"] for p in template["trialParameters"]] == ["lr", "layers", "optimizer", "batch"]
    assert all(p["reference"] == p["name"] for p in template["trialParameters"])


def test_metrics_are_collected_from_stdout_name_value_lines() -> None:
    config = make_config()
    [experiment] = render_tuning(spec_of(), config)
    collector = experiment["spec"]["metricsCollectorSpec"]
    assert collector["collector"] == {"kind": "StdOut"}
    [pattern] = collector["source"]["filter"]["metricsFormat"]
    found = re.findall(pattern, "epoch 1\naccuracy=0.91\nloss = 1.5e-2\n")
    assert [(name, value) for name, value, *_ in found] == [("accuracy", "0.91"), ("loss", "1.5e-2")]


def test_notebook_trial_is_a_papermill_job() -> None:
    config = make_config()
    spec = spec_of(
        trial={
            "notebook": "nbs/train.ipynb",
            "resources": {"cpu": "2", "gpu": 1},
            "env": {"DATA": "/data"},
            "workspace": True,
            "image": "registry.example.com/nb:1",
        }
    )
    [experiment] = render_tuning(spec, config)
    validate_object(experiment, strict=True)
    template = experiment["spec"]["trialTemplate"]
    assert template["primaryContainerName"] == "trial"
    assert template["successCondition"] == 'status.conditions.#(type=="Complete")#|#(status=="True")#'
    assert template["failureCondition"] == 'status.conditions.#(type=="Failed")#|#(status=="True")#'
    job = template["trialSpec"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    [main] = pod["containers"]
    assert main["name"] == "trial" and main["image"] == "registry.example.com/nb:1"
    assert main["command"] == [
        *[
            "python",
            "-m",
            "cube_jupyter.jobs.entry",
            "--kind",
            "notebook",
            "--target",
            "nbs/train.ipynb",
            "--",
        ],
        *["-p", "lr", "${trialParameters.lr}", "-p", "layers", "${trialParameters.layers}"],
        *["-p", "optimizer", "${trialParameters.optimizer}", "-p", "batch", "${trialParameters.batch}"],
    ]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert main["workingDir"] == "/home/jovyan"
    assert {"name": "DATA", "value": "/data"} in main["env"]
    validate_object(trial_object(experiment), strict=True)


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_ROLES))
def test_training_trial_is_the_rendered_training_job(framework: str) -> None:
    config = make_config()
    training = {"framework": framework, "replicas": TRAINING_REPLICAS[framework], "script": "train.py"}
    spec = spec_of(trial={"training": training})
    [experiment] = render_tuning(spec, config)
    validate_object(experiment, strict=True)
    template = experiment["spec"]["trialTemplate"]
    job = template["trialSpec"]
    assert job["apiVersion"] == "kubeflow.org/v1" and "metadata" not in job  # Katib names each trial
    assert template["primaryContainerName"] == framework  # the operators' container names
    primary = {"pytorch": "master", "tensorflow": "worker", "xgboost": "master", "mpi": "launcher"}[framework]
    assert template["primaryPodLabels"] == {
        "training.kubeflow.org/replica-type": primary,
        "training.kubeflow.org/replica-index": "0",
    }
    assert template["successCondition"] == 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
    specs = next(v for k, v in job["spec"].items() if k.endswith("ReplicaSpecs"))
    role = {"pytorch": "Master", "tensorflow": "Worker", "xgboost": "Master", "mpi": "Launcher"}[framework]
    command = specs[role]["template"]["spec"]["containers"][0]["command"]
    assert command[-4:] == [
        "--lr=${trialParameters.lr}",
        "--layers=${trialParameters.layers}",
        "--optimizer=${trialParameters.optimizer}",
        "--batch=${trialParameters.batch}",
    ]
    validate_object(trial_object(experiment), strict=True)


def test_strict_validation_catches_a_misspelt_experiment_field() -> None:
    """The Experiment check is against Katib's real types, not its accept-anything CRD."""
    config = make_config()
    [experiment] = render_tuning(spec_of(), config)
    broken = copy.deepcopy(experiment)
    broken["spec"]["objective"]["metricName"] = "accuracy"
    with pytest.raises(AssertionError, match="metricName"):
        validate_object(broken, strict=True)
    broken = copy.deepcopy(experiment)
    broken["spec"]["maxTrialCount"] = "9"
    with pytest.raises(AssertionError, match="maxTrialCount"):
        validate_object(broken, strict=True)

"""TuningSpec: objective, algorithm, search space, budget and trial, each bad input naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.tuning_spec import ALGORITHMS, ParameterSpec, TuningSpec, trial_arguments

PARAMETERS: dict[str, Any] = {
    "lr": {"type": "double", "min": 0.0001, "max": 0.1, "log": True},
    "layers": {"type": "int", "min": 1, "max": 4},
    "optimizer": {"type": "categorical", "values": ["sgd", "adam"]},
    "batch": {"type": "discrete", "values": [16, 32, 64]},
}


def raw(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "tune-mnist",
        "objective": {"metric": "accuracy", "type": "maximize", "goal": 0.99},
        "algorithm": "random",
        "parameters": PARAMETERS,
        "max_trials": 8,
        "parallel_trials": 2,
        "trial": {"notebook": "train.ipynb"},
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def parse(**overrides: Any) -> TuningSpec:
    return TuningSpec.from_dict(raw(**overrides), user="alice")


def field_of(**overrides: Any) -> str | None:
    with pytest.raises(InvalidInput) as caught:
        parse(**overrides)
    return caught.value.field


def test_notebook_trial_spec() -> None:
    spec = parse(early_stopping={"algorithm": "medianstop", "settings": {"min_trials_required": 3}})
    assert spec.trial_kind == "notebook" and spec.trial_notebook == "train.ipynb"
    assert [p.name for p in spec.parameters] == ["lr", "layers", "optimizer", "batch"]
    assert spec.parameter("lr") == ParameterSpec(name="lr", type="double", min=0.0001, max=0.1, log=True)
    assert spec.parameter("batch").values == (16, 32, 64)  # type: ignore[union-attr]
    assert spec.objective.goal == 0.99 and spec.objective.type == "maximize"
    assert spec.early_stopping is not None and spec.early_stopping.settings == {"min_trials_required": "3"}
    assert spec.max_failed_trials == 3
    assert TuningSpec.from_dict(spec.to_dict(), user="alice") == spec


def test_training_trial_gets_arguments_and_the_experiment_name() -> None:
    spec = parse(
        trial={"training": {"framework": "pytorch", "replicas": {"worker": 2}, "script": "train.py"}}
    )
    assert spec.trial_kind == "training"
    assert spec.trial_training is not None and spec.trial_training.name == "tune-mnist"
    trial = spec.trial_training_with({"lr": 0.01, "layers": 2, "optimizer": "adam", "batch": 32})
    assert trial.code.args == ("--lr=0.01", "--layers=2", "--optimizer=adam", "--batch=32")
    assert TuningSpec.from_dict(spec.to_dict(), user="alice") == spec
    assert trial_arguments(spec.parameters[:1], {"lr": "${trialParameters.lr}"}) == (
        "--lr=${trialParameters.lr}",
    )


def test_types_are_inferred_when_left_out() -> None:
    spec = parse(
        parameters={
            "a": {"min": 1, "max": 3},
            "b": {"min": 0.1, "max": 1},
            "c": {"values": [1, 2]},
            "d": {"values": ["x"]},
        }
    )
    assert [p.type for p in spec.parameters] == ["int", "double", "discrete", "categorical"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_parses(algorithm: str) -> None:
    numeric = {
        "lr": {"type": "double", "min": 0.001, "max": 0.1, "step": 0.001},
        "epochs": {"type": "int", "min": 1, "max": 9},
    }
    settings = {"hyperband": {"resource_name": "epochs", "r_l": 9, "eta": 3}}.get(algorithm, {})
    spec = parse(
        algorithm={"name": algorithm.upper(), "settings": settings},
        parameters=numeric,
        parallel_trials=9,
        max_trials=9,
    )
    assert spec.algorithm.name == algorithm
    assert TuningSpec.from_dict(spec.to_dict(), user="alice") == spec


def test_grid_points() -> None:
    assert ParameterSpec("a", "int", min=1, max=7, step=3).grid == (1, 4, 7)
    assert ParameterSpec("b", "double", min=0.1, max=0.3, step=0.1).grid == (0.1, 0.2, 0.3)
    assert ParameterSpec("c", "double", min=0.1, max=0.3).grid is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"parameters": {"lr": {"type": "double", "min": 0.5, "max": 0.1}}}, "parameters.lr.max"),
        ({"parameters": {"n": {"type": "int", "min": 4, "max": 4}}}, "parameters.n.max"),
        ({"parameters": {"n": {"type": "int", "min": 1.5, "max": 4}}}, "parameters.n.min"),
        ({"parameters": {"n": {"type": "int", "max": 4}}}, "parameters.n.min"),
        ({"parameters": {"n": {"type": "int", "min": 1, "max": 4, "step": 0}}}, "parameters.n.step"),
        ({"parameters": {"n": {"type": "int", "min": 1, "max": 4, "step": 9}}}, "parameters.n.step"),
        ({"parameters": {"lr": {"type": "double", "min": 0, "max": 1, "log": True}}}, "parameters.lr.min"),
        (
            {"parameters": {"lr": {"type": "double", "min": 0.1, "max": 1, "log": True, "step": 0.1}}},
            "parameters.lr.step",
        ),
        ({"parameters": {"x": {"type": "float", "min": 0, "max": 1}}}, "parameters.x.type"),
        ({"parameters": {"x": {"type": "double", "min": 0, "max": 1, "scale": "log"}}}, "parameters.x.scale"),
        ({"parameters": {"x": {"type": "categorical", "values": []}}}, "parameters.x.values"),
        ({"parameters": {"x": {"type": "categorical", "values": ["a", "a"]}}}, "parameters.x.values"),
        ({"parameters": {"x": {"type": "discrete", "values": [1, "two"]}}}, "parameters.x.values"),
        ({"parameters": {"x": {"type": "categorical", "values": ["a"], "min": 1}}}, "parameters.x.min"),
        ({"parameters": {"x": {"type": "int", "min": 1, "max": 2, "values": [1]}}}, "parameters.x.values"),
        ({"parameters": {"bad-name": {"min": 1, "max": 2}}}, "parameters.bad-name"),
        ({"parameters": {"class": {"min": 1, "max": 2}}}, "parameters.class"),
        ({"parameters": {}}, "parameters"),
        ({"parameters": None}, "parameters"),
        ({"objective": None}, "objective"),
        ({"objective": {"metric": "acc uracy"}}, "objective.metric"),
        ({"objective": {"metric": "accuracy", "type": "best"}}, "objective.type"),
        ({"objective": {"metric": "accuracy", "goal": "high"}}, "objective.goal"),
        (
            {"objective": {"metric": "accuracy", "additional_metrics": ["accuracy"]}},
            "objective.additional_metrics",
        ),
        ({"objective": {"metric": "accuracy", "target": 1}}, "objective.target"),
        ({"algorithm": "annealing"}, "algorithm.name"),
        ({"algorithm": {"name": "tpe", "settings": {"n_startup": 5}}}, "algorithm.settings.n_startup"),
        (
            {"algorithm": {"name": "tpe", "settings": {"n_startup_trials": "many"}}},
            "algorithm.settings.n_startup_trials",
        ),
        (
            {"algorithm": {"name": "bayesianoptimization", "settings": {"acq_func": "best"}}},
            "algorithm.settings.acq_func",
        ),
        ({"algorithm": {"name": "grid"}}, "parameters.lr.step"),
        (
            {"algorithm": "grid", "parameters": {"n": {"type": "int", "min": 1, "max": 3}}, "max_trials": 4},
            "max_trials",
        ),
        ({"algorithm": "cmaes", "parameters": {"n": {"type": "int", "min": 1, "max": 3}}}, "parameters"),
        ({"algorithm": "cmaes"}, "parameters.optimizer.type"),
        ({"algorithm": "hyperband"}, "algorithm.settings.resource_name"),
        (
            {"algorithm": {"name": "hyperband", "settings": {"resource_name": "epochs", "r_l": 9}}},
            "algorithm.settings.resource_name",
        ),
        (
            {"algorithm": {"name": "hyperband", "settings": {"resource_name": "optimizer", "r_l": 9}}},
            "algorithm.settings.resource_name",
        ),
        (
            {"algorithm": {"name": "hyperband", "settings": {"resource_name": "layers"}}},
            "algorithm.settings.r_l",
        ),
        (
            {"algorithm": {"name": "hyperband", "settings": {"resource_name": "layers", "r_l": 9}}},
            "parallel_trials",
        ),
        ({"max_trials": 0}, "max_trials"),
        ({"parallel_trials": 9}, "parallel_trials"),
        ({"max_failed_trials": 9}, "max_failed_trials"),
        ({"max_failed_trials": -1}, "max_failed_trials"),
        ({"early_stopping": "patience"}, "early_stopping.algorithm"),
        (
            {"early_stopping": {"algorithm": "medianstop", "settings": {"min_trials": 3}}},
            "early_stopping.settings.min_trials",
        ),
        ({"name": "Tune"}, "name"),
        ({"trials": 3}, "trials"),
        ({"trial": None}, "trial.notebook"),
        ({"trial": {"notebook": "a.ipynb", "training": {"framework": "pytorch"}}}, "trial.training"),
        ({"trial": {"notebook": "train.py"}}, "trial.notebook"),
        ({"trial": {"notebook": "a.ipynb", "resources": {"gpu": "one"}}}, "trial.resources.gpu"),
        ({"trial": {"notebook": "a.ipynb", "image": "bad image"}}, "trial.image"),
        ({"trial": {"notebook": "a.ipynb", "package": "ftp://host/code"}}, "trial.package"),
        ({"trial": {"training": {"framework": "jax", "script": "t.py"}}}, "trial.training.framework"),
        (
            {"trial": {"training": {"framework": "pytorch", "replicas": {"worker": 0}, "script": "t.py"}}},
            "trial.training.replicas.worker",
        ),
        (
            {
                "trial": {
                    "training": {"framework": "pytorch", "replicas": {"worker": 1}, "script": "t.py"},
                    "image": "x",
                }
            },
            "trial.image",
        ),
    ],
)
def test_bad_input_names_the_field(overrides: dict[str, Any], field: str) -> None:
    assert field_of(**overrides) == field

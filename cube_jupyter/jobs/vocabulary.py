"""What the launch forms offer, from the very lists and rules the specs are checked against.

`GET /cube/api/v1/jobs/config` serves `form_vocabulary()`: the frameworks with their roles (which a job
needs, how many it may have, how many a new form starts with), the ways to give training code, restart
policies, tuning algorithms, objective and parameter types, model formats, scale metrics and serving
protocols. The Lab panel builds its forms from this, so a framework, role or format added here shows
up there without a second list to keep in step.

Lists come from the spec modules' constants; role counts and which parameter types take a list of
values are read off the spec parsers themselves (`TrainingSpec.from_dict`, `ParameterSpec.from_dict`),
so they say exactly what a submitted spec would be held to. Labels and a form's starting values are
presentation, and live only here.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.serving_spec import (
    DEFAULT_UTILIZATION_TARGET,
    MODEL_FORMATS,
    PERCENT_METRICS,
    PROTOCOL_VERSIONS,
    SCALE_METRICS,
    ServingSpec,
)
from cube_jupyter.jobs.training_spec import (
    CODE_KINDS,
    FRAMEWORK_ROLES,
    FRAMEWORKS,
    RESTART_POLICIES,
    TrainingSpec,
)
from cube_jupyter.jobs.tuning_spec import (
    ALGORITHMS,
    OBJECTIVE_TYPES,
    PARAMETER_TYPES,
    ObjectiveSpec,
    ParameterSpec,
)

FRAMEWORK_LABELS = {
    "pytorch": "PyTorch (PyTorchJob)",
    "tensorflow": "TensorFlow (TFJob)",
    "xgboost": "XGBoost (XGBoostJob)",
    "mpi": "MPI / Horovod (MPIJob)",
}
# The replicas a new form starts with, where not one (a parameter server or evaluator is optional;
# an MPI job is only worth running with more than one worker).
STARTING_REPLICAS: dict[str, dict[str, int]] = {
    "tensorflow": {"PS": 0, "Evaluator": 0},
    "mpi": {"Worker": 2},
}
IN_ROOT = "relative to the Jupyter root"
# Each way to give the code: its label, an example and a hint on how it is read.
CODE_KIND_LABELS = {
    "script": ("Script", "train.py", IN_ROOT),
    "command": ("Command", "python train.py --epochs 3", "split into words, never run by a shell"),
    "notebook": ("Notebook", "train.ipynb", IN_ROOT),
    "function": ("Function (module:function)", "train:main", IN_ROOT),
}
ALGORITHM_LABELS = {
    "random": "Random search",
    "grid": "Grid",
    "bayesianoptimization": "Bayesian optimization",
    "tpe": "TPE",
    "cmaes": "CMA-ES",
    "hyperband": "Hyperband",
}
SCALE_METRIC_LABELS = {
    "concurrency": "Concurrency (requests in flight)",
    "rps": "Requests per second",
    "cpu": "CPU utilization (%)",
    "gpu": "GPU utilization (%)",
}
PROTOCOL_LABELS = {"v1": "KServe V1", "v2": "KServe V2 (Open Inference)"}
# What a new form starts with where the spec has no default of its own.
FORM_DEFAULTS = {
    "framework": "pytorch",
    "code_kind": "script",
    "algorithm": "tpe",
    "parameter_type": "double",
    "model_format": "sklearn",
}

_PROBE = "probe"


def _spec_default(spec: type, name: str) -> Any:
    """A spec dataclass field's default: what the server uses when the key is left out."""
    return next(f.default for f in dataclasses.fields(spec) if f.name == name)


def _choices(values: tuple[str, ...], labels: dict[str, str]) -> list[dict[str, str]]:
    return [{"value": value, "label": labels.get(value, value)} for value in values]


def _valid_replicas(framework: str, counts: dict[str, int]) -> bool:
    """Whether a training job of `framework` with these replica counts passes the spec's checks."""
    raw = {
        "name": _PROBE,
        "framework": framework,
        "replicas": {role.lower(): count for role, count in counts.items()},
        "command": ["true"],
    }
    try:
        TrainingSpec.from_dict(raw, user=_PROBE)
    except InvalidInput:
        return False
    return True


def _roles(framework: str) -> list[dict[str, Any]]:
    """Each role of `framework` with the counts the spec allows, next to the form's starting counts:
    a role is required when a job without it is refused, and has a maximum of one when two are."""
    starting = {
        role: STARTING_REPLICAS.get(framework, {}).get(role, 1) for role in FRAMEWORK_ROLES[framework]
    }
    if not _valid_replicas(framework, starting):
        raise AssertionError(f"the starting replicas of {framework} are refused: {starting}")
    roles = []
    for role, count in starting.items():
        required = not _valid_replicas(framework, {**starting, role: 0})
        single = not _valid_replicas(framework, {**starting, role: 2})
        roles.append(
            {
                "name": role,
                "key": role.lower(),
                "default": count,
                "min": 1 if required else 0,
                "max": 1 if single else None,
                "required": required,
            }
        )
    return roles


def _accepts_values(kind: str, values: list[Any]) -> bool:
    try:
        ParameterSpec.from_dict("x", {"type": kind, "values": values}, "parameters.x")
    except InvalidInput:
        return False
    return True


def _value_types() -> dict[str, str]:
    """The tuning parameter types given as a list of values (the others are ranges), and what the
    values may be: `number`, or `any` (text as typed)."""
    return {
        kind: "any" if _accepts_values(kind, ["a", "b"]) else "number"
        for kind in PARAMETER_TYPES
        if _accepts_values(kind, [1, 2])
    }


@cache
def form_vocabulary() -> dict[str, Any]:
    """The vocabulary of the training, tuning and serving launch forms (see the module docstring)."""
    return {
        "training": {
            "frameworks": [
                {"value": name, "label": FRAMEWORK_LABELS.get(name, name), "roles": _roles(name)}
                for name in FRAMEWORKS
            ],
            "code_kinds": [
                {
                    "value": kind,
                    **dict(zip(("label", "example", "hint"), CODE_KIND_LABELS[kind], strict=True)),
                }
                for kind in CODE_KINDS
            ],
            "restart_policies": list(RESTART_POLICIES),
            "defaults": {
                "framework": FORM_DEFAULTS["framework"],
                "code_kind": FORM_DEFAULTS["code_kind"],
                "restart_policy": _spec_default(TrainingSpec, "restart_policy"),
            },
        },
        "tuning": {
            "algorithms": _choices(ALGORITHMS, ALGORITHM_LABELS),
            "objective_types": list(OBJECTIVE_TYPES),
            "parameter_types": list(PARAMETER_TYPES),
            "value_types": _value_types(),
            "defaults": {
                "algorithm": FORM_DEFAULTS["algorithm"],
                "objective_type": _spec_default(ObjectiveSpec, "type"),
                "parameter_type": FORM_DEFAULTS["parameter_type"],
            },
        },
        "serving": {
            "model_formats": list(MODEL_FORMATS),
            "scale_metrics": [
                {"value": m, "label": SCALE_METRIC_LABELS.get(m, m), "percent": m in PERCENT_METRICS}
                for m in SCALE_METRICS
            ],
            "protocols": _choices(PROTOCOL_VERSIONS, PROTOCOL_LABELS),
            "default_utilization_target": DEFAULT_UTILIZATION_TARGET,
            "defaults": {
                "model_format": FORM_DEFAULTS["model_format"],
                "scale_metric": _spec_default(ServingSpec, "scale_metric"),
                "protocol_version": _spec_default(ServingSpec, "protocol_version"),
            },
        },
    }

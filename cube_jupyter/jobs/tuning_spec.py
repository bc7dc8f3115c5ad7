"""The tuning spec: a hyperparameter search, run by Katib on the cluster (an `Experiment`) or by
Optuna on this machine, with the same objective, algorithm, search space and trial budget.

    name: tune-mnist
    objective: {metric: accuracy, type: maximize, goal: 0.99, additional_metrics: [loss]}
    algorithm: {name: tpe, settings: {n_startup_trials: 5}}
    parameters:
      lr: {type: double, min: 0.0001, max: 0.1, log: true}
      layers: {type: int, min: 1, max: 4}
      optimizer: {type: categorical, values: [sgd, adam]}
    max_trials: 12
    parallel_trials: 3
    early_stopping: {algorithm: medianstop, settings: {min_trials_required: 3}}
    trial:
      notebook: train.ipynb          # papermill -p lr ... ; or
      # training: {framework: pytorch, replicas: {worker: 2}, script: train.py}   # --lr=...

A trial prints its metrics as `name=value` lines (Katib's StdOut collector format). A notebook trial
gets each parameter with papermill's `-p NAME VALUE`; a training trial gets `--NAME=VALUE` arguments
(`trial_arguments`), the way Katib's examples pass them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from cube_jupyter import fields as f
from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.fields import PYTHON_KEYWORDS, job_name, package_uri, queue_choice, string_settings
from cube_jupyter.jobs.resources import ResourceSpec
from cube_jupyter.jobs.training_spec import CodeSpec, TrainingSpec

ParameterType = Literal["int", "double", "categorical", "discrete"]
PARAMETER_TYPES = ("int", "double", "categorical", "discrete")
OBJECTIVE_TYPES = ("maximize", "minimize")
ALGORITHMS = ("random", "grid", "bayesianoptimization", "tpe", "cmaes", "hyperband")
# The settings Katib's suggestion services accept for each algorithm (unknown ones fail there).
ALGORITHM_SETTINGS: dict[str, dict[str, str]] = {
    "random": {"random_state": "int"},
    "grid": {},
    "bayesianoptimization": {
        "base_estimator": "GP|RF|ET|GBRT",
        "n_initial_points": "int",
        "acq_func": "gp_hedge|LCB|EI|PI",
        "acq_optimizer": "auto|sampling|lbfgs",
        "random_state": "int",
    },
    "tpe": {"n_startup_trials": "int", "n_ei_candidates": "int", "random_state": "int"},
    "cmaes": {"random_state": "int", "sigma": "float", "restart_strategy": "None|ipop|bipop"},
    "hyperband": {"resource_name": "parameter", "r_l": "float", "eta": "int"},
}
EARLY_STOPPING_SETTINGS: dict[str, dict[str, str]] = {
    "medianstop": {"min_trials_required": "int", "start_step": "int"},
}
# Katib's StdOut collector filter: `name=value` lines, value a float.
METRICS_FORMAT = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"
METRIC_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
PARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a papermill parameter is a Python name
GRID_LIMIT = 100_000

TUNING_KEYS = (
    "name",
    "objective",
    "algorithm",
    "parameters",
    "max_trials",
    "parallel_trials",
    "max_failed_trials",
    "early_stopping",
    "trial",
    "queue",
    "priority",
)
OBJECTIVE_KEYS = ("metric", "type", "goal", "additional_metrics")
PARAMETER_KEYS = ("type", "min", "max", "step", "values", "log")
ALGORITHM_KEYS = ("name", "settings")
EARLY_STOPPING_KEYS = ("algorithm", "settings")
TRIAL_KEYS = ("notebook", "training", "package", "image", "resources", "env", "workspace")
NOTEBOOK_TRIAL_KEYS = ("notebook", "package", "image", "resources", "env", "workspace")

Value = str | int | float | bool


@dataclass(frozen=True)
class ParameterSpec:
    """One search dimension: a numeric range (int/double, optional step, log scale) or a list of
    values (categorical: any values; discrete: numbers)."""

    name: str
    type: ParameterType
    min: float | None = None
    max: float | None = None
    step: float | None = None
    values: tuple[Value, ...] = ()
    log: bool = False

    @property
    def grid(self) -> tuple[Value, ...] | None:
        """Every value a grid search tries, or None when the range is continuous (a double without step)."""
        if self.values:
            return self.values
        if self.min is None or self.max is None:
            return None
        if self.type == "int":
            step = int(self.step or 1)
            return tuple(range(int(self.min), int(self.max) + 1, step))
        if self.step is None:
            return None
        count = math.floor((self.max - self.min) / self.step + 1e-9) + 1
        return tuple(round(self.min + i * self.step, 12) for i in range(count))

    @classmethod
    def from_dict(cls, name: str, raw: object, where: str) -> ParameterSpec:
        if not PARAMETER_NAME.match(name) or name in PYTHON_KEYWORDS:
            raise InvalidInput(
                f"{where}: parameter name {name!r} must be a Python identifier (letters, digits, '_')",
                field=where,
            )
        body = f.mapping(raw, where)
        f.reject_unknown(body, PARAMETER_KEYS, where)
        kind = _parameter_type(body, where)
        if kind in ("categorical", "discrete"):
            for key in ("min", "max", "step", "log"):
                if key in body:
                    raise InvalidInput(
                        f"{where}.{key} does not apply to a {kind} parameter (give values)",
                        field=f"{where}.{key}",
                    )
            return cls(name=name, type=kind, values=_values(body.get("values"), kind, f"{where}.values"))
        if "values" in body:
            raise InvalidInput(
                f"{where}.values does not apply to a {kind} parameter", field=f"{where}.values"
            )
        return cls._range(name, kind, body, where)

    @classmethod
    def _range(cls, name: str, kind: ParameterType, body: dict[str, Any], where: str) -> ParameterSpec:
        read = f.integer if kind == "int" else f.number
        for key in ("min", "max"):
            if key not in body:
                raise InvalidInput(
                    f"{where}.{key} is required for a {kind} parameter", field=f"{where}.{key}"
                )
        low, high = float(read(body["min"], f"{where}.min")), float(read(body["max"], f"{where}.max"))
        if low >= high:
            raise InvalidInput(
                f"{where}.max ({body['max']}) must be greater than min ({body['min']})", field=f"{where}.max"
            )
        step = None
        if body.get("step") is not None:
            step = float(read(body["step"], f"{where}.step"))
            if step <= 0 or step > high - low:
                raise InvalidInput(
                    f"{where}.step must be > 0 and at most max - min, got {body['step']}",
                    field=f"{where}.step",
                )
        log = f.boolean(body.get("log", False), f"{where}.log")
        if log and low <= 0:
            raise InvalidInput(
                f"{where}.min must be > 0 on a log scale, got {body['min']}", field=f"{where}.min"
            )
        if log and step is not None and not (kind == "int" and step == 1):
            raise InvalidInput(f"{where}.step cannot be combined with log: true", field=f"{where}.step")
        return cls(name=name, type=kind, min=low, max=high, step=step, log=log)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"type": self.type}
        if self.values:
            body["values"] = list(self.values)
            return body
        cast_number = int if self.type == "int" else float
        body["min"], body["max"] = cast_number(cast(float, self.min)), cast_number(cast(float, self.max))
        if self.step is not None:
            body["step"] = cast_number(self.step)
        if self.log:
            body["log"] = True
        return body


@dataclass(frozen=True)
class ObjectiveSpec:
    """The metric a trial reports, which way is better, and an optional goal that ends the search."""

    metric: str
    type: Literal["maximize", "minimize"] = "maximize"
    goal: float | None = None
    additional_metrics: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: object) -> ObjectiveSpec:
        body = f.mapping(raw, "objective")
        f.reject_unknown(body, OBJECTIVE_KEYS, "objective")
        metric = _metric_name(body.get("metric"), "objective.metric")
        extra_raw = body.get("additional_metrics") or []
        if not isinstance(extra_raw, list):
            raise InvalidInput(
                "objective.additional_metrics must be a list of names", field="objective.additional_metrics"
            )
        extra = tuple(_metric_name(m, f"objective.additional_metrics[{i}]") for i, m in enumerate(extra_raw))
        if metric in extra or len(set(extra)) != len(extra):
            raise InvalidInput(
                "objective.additional_metrics repeats a name (or the objective metric)",
                field="objective.additional_metrics",
            )
        return cls(
            metric=metric,
            type=cast(Any, f.choice(body.get("type", "maximize"), "objective.type", OBJECTIVE_TYPES)),
            goal=None if body.get("goal") is None else f.number(body["goal"], "objective.goal"),
            additional_metrics=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"metric": self.metric, "type": self.type}
        if self.goal is not None:
            body["goal"] = self.goal
        if self.additional_metrics:
            body["additional_metrics"] = list(self.additional_metrics)
        return body


@dataclass(frozen=True)
class AlgorithmSpec:
    """The search algorithm, by Katib's name, and its settings (strings, as Katib keeps them)."""

    name: str = "random"
    settings: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: object) -> AlgorithmSpec:
        body = {"name": raw} if isinstance(raw, str) else f.mapping(raw, "algorithm")
        f.reject_unknown(body, ALGORITHM_KEYS, "algorithm")
        name = body.get("name")
        if not isinstance(name, str) or name.lower() not in ALGORITHMS:
            raise InvalidInput(
                f"algorithm.name {name!r} is not supported; choose one of: {', '.join(ALGORITHMS)}",
                field="algorithm.name",
            )
        name = name.lower()
        settings = _settings(body.get("settings") or {}, ALGORITHM_SETTINGS[name], "algorithm.settings", name)
        return cls(name=name, settings=settings)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "settings": dict(self.settings)} if self.settings else {"name": self.name}


@dataclass(frozen=True)
class EarlyStoppingSpec:
    """Stop trials early that do worse than the median of finished ones at the same step."""

    algorithm: str = "medianstop"
    settings: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: object) -> EarlyStoppingSpec:
        body = {"algorithm": raw} if isinstance(raw, str) else f.mapping(raw, "early_stopping")
        f.reject_unknown(body, EARLY_STOPPING_KEYS, "early_stopping")
        algorithm = f.choice(
            body.get("algorithm", "medianstop"), "early_stopping.algorithm", EARLY_STOPPING_SETTINGS
        )
        known = EARLY_STOPPING_SETTINGS[algorithm]
        return cls(
            algorithm, _settings(body.get("settings") or {}, known, "early_stopping.settings", algorithm)
        )

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"algorithm": self.algorithm}
        if self.settings:
            body["settings"] = dict(self.settings)
        return body


@dataclass(frozen=True)
class TuningSpec:
    """A validated tuning experiment; each trial is a notebook run or a training job."""

    name: str
    user: str
    objective: ObjectiveSpec
    algorithm: AlgorithmSpec
    parameters: tuple[ParameterSpec, ...]
    max_trials: int = 10
    parallel_trials: int = 2
    max_failed_trials: int = 3
    early_stopping: EarlyStoppingSpec | None = None
    trial_notebook: str | None = None  # run with papermill, one `-p` per parameter
    trial_training: TrainingSpec | None = None  # one training job per trial
    # Notebook trials only (a training trial carries its own):
    trial_package_uri: str | None = None
    trial_image: str | None = None
    trial_resources: ResourceSpec = field(default_factory=ResourceSpec)
    trial_env: dict[str, str] = field(default_factory=dict)
    trial_workspace: bool = False
    queue: str | None = None  # the trials' Kueue LocalQueue, as a training job's `queue`
    priority: str | None = None  # the trials' WorkloadPriorityClass

    @property
    def trial_kind(self) -> Literal["notebook", "training"]:
        return "notebook" if self.trial_notebook is not None else "training"

    @property
    def gpus_per_trial(self) -> int:
        if self.trial_training is not None:
            return self.trial_training.total_gpus
        return self.trial_resources.gpu

    def parameter(self, name: str) -> ParameterSpec | None:
        return next((p for p in self.parameters if p.name == name), None)

    def trial_training_with(self, values: dict[str, Any]) -> TrainingSpec:
        """The training job of one trial: the trial spec with `--NAME=VALUE` arguments appended."""
        spec = cast(TrainingSpec, self.trial_training)
        code: CodeSpec = replace(spec.code, args=(*spec.code.args, *trial_arguments(self.parameters, values)))
        return replace(spec, code=code)

    @classmethod
    def from_dict(cls, raw: object, user: str) -> TuningSpec:
        body = f.mapping(raw, "spec")
        f.reject_unknown(body, TUNING_KEYS, "")
        user = f.string(user, "user")
        name = job_name(body.get("name"))
        if body.get("objective") is None:
            raise InvalidInput("objective is required: {metric, type}", field="objective")
        objective = ObjectiveSpec.from_dict(body["objective"])
        algorithm = AlgorithmSpec.from_dict(body.get("algorithm", "random"))
        parameters = _parameters(body.get("parameters"))
        max_trials = f.integer(body.get("max_trials", 10), "max_trials", minimum=1)
        parallel = f.integer(body.get("parallel_trials", min(2, max_trials)), "parallel_trials", minimum=1)
        if parallel > max_trials:
            raise InvalidInput(
                f"parallel_trials ({parallel}) must not exceed max_trials ({max_trials})",
                field="parallel_trials",
            )
        failed = f.integer(body.get("max_failed_trials", min(3, max_trials)), "max_failed_trials", minimum=0)
        if failed > max_trials:
            raise InvalidInput(
                f"max_failed_trials ({failed}) must not exceed max_trials ({max_trials})",
                field="max_failed_trials",
            )
        early = (
            None
            if body.get("early_stopping") is None
            else EarlyStoppingSpec.from_dict(body["early_stopping"])
        )
        _check_algorithm(algorithm, parameters, max_trials, parallel)
        trial = _trial(body.get("trial"), name, user, parameters)
        queue, priority = queue_choice(body)
        return cls(
            name=name,
            user=user,
            objective=objective,
            algorithm=algorithm,
            parameters=parameters,
            max_trials=max_trials,
            parallel_trials=parallel,
            max_failed_trials=failed,
            early_stopping=early,
            **trial,
            queue=queue,
            priority=priority,
        )

    def to_dict(self) -> dict[str, Any]:
        """The normalized spec in the raw format: `from_dict` of it is equal."""
        body: dict[str, Any] = {
            "name": self.name,
            "objective": self.objective.to_dict(),
            "algorithm": self.algorithm.to_dict(),
            "parameters": {p.name: p.to_dict() for p in self.parameters},
            "max_trials": self.max_trials,
            "parallel_trials": self.parallel_trials,
            "max_failed_trials": self.max_failed_trials,
        }
        if self.early_stopping is not None:
            body["early_stopping"] = self.early_stopping.to_dict()
        body.update({key: getattr(self, key) for key in ("queue", "priority") if getattr(self, key)})
        if self.trial_training is not None:
            body["trial"] = {"training": self.trial_training.to_dict()}
            return body
        trial: dict[str, Any] = {"notebook": self.trial_notebook, "workspace": self.trial_workspace}
        if self.trial_package_uri is not None:
            trial["package"] = self.trial_package_uri
        if self.trial_image is not None:
            trial["image"] = self.trial_image
        if self.trial_resources.to_dict():
            trial["resources"] = self.trial_resources.to_dict()
        if self.trial_env:
            trial["env"] = dict(self.trial_env)
        body["trial"] = trial
        return body


def trial_arguments(parameters: tuple[ParameterSpec, ...], values: dict[str, Any]) -> tuple[str, ...]:
    """`--NAME=VALUE` for each parameter, in spec order: how a training trial receives its assignment
    (values may be Katib's `${trialParameters.NAME}` placeholders)."""
    return tuple(f"--{p.name}={values[p.name]}" for p in parameters)


def _parameter_type(body: dict[str, Any], where: str) -> ParameterType:
    if "type" in body:
        return cast(ParameterType, f.choice(body["type"], f"{where}.type", PARAMETER_TYPES))
    if "values" in body:
        values = body["values"] if isinstance(body["values"], list) else []
        numeric = values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        return "discrete" if numeric else "categorical"
    ints = all(isinstance(body.get(k), int) and not isinstance(body.get(k), bool) for k in ("min", "max"))
    return "int" if ints and not isinstance(body.get("step", 1), float) else "double"


def _values(raw: object, kind: str, where: str) -> tuple[Value, ...]:
    if not isinstance(raw, list) or not raw:
        raise InvalidInput(f"{where} must be a non-empty list", field=where)
    for i, value in enumerate(raw):
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind == "discrete" and not numeric:
            raise InvalidInput(
                f"{where}[{i}] must be a number in a discrete parameter, got {value!r}", field=where
            )
        if not isinstance(value, (str, int, float, bool)) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise InvalidInput(
                f"{where}[{i}] must be a string, number or boolean, got {value!r}", field=where
            )
    if len({str(v) for v in raw}) != len(raw):
        raise InvalidInput(f"{where} lists a value twice", field=where)
    return tuple(raw)


def _parameters(raw: object) -> tuple[ParameterSpec, ...]:
    body = f.mapping(raw if raw is not None else {}, "parameters")
    if not body:
        raise InvalidInput("parameters must name at least one parameter to search", field="parameters")
    return tuple(ParameterSpec.from_dict(name, value, f"parameters.{name}") for name, value in body.items())


def _metric_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not METRIC_NAME.match(value):
        raise InvalidInput(
            f"{where} {value!r} must be a metric name of letters, digits, '_' or '-' (printed as name=value)",
            field=where,
        )
    return value


def _settings(raw: object, known: dict[str, str], where: str, algorithm: str) -> dict[str, str]:
    """Check setting names against what the algorithm accepts and the values against their kind."""
    settings = string_settings(raw, where)
    for key, value in settings.items():
        at = f"{where}.{key}"
        if key not in known:
            allowed = ", ".join(sorted(known)) or "none"
            raise InvalidInput(f"{at}: {algorithm} has no setting {key!r}; it takes: {allowed}", field=at)
        kind = known[key]
        try:
            if kind == "int":
                ok = int(value) >= 0
            elif kind == "float":
                ok = float(value) > 0
            elif "|" in kind:
                ok = value in kind.split("|")
            else:
                ok = bool(value)
        except ValueError:
            ok = False
        if not ok:
            expected = {"int": "a whole number >= 0", "float": "a number > 0"}.get(
                kind, kind.replace("|", ", ")
            )
            raise InvalidInput(f"{at} {value!r} must be {expected}", field=at)
    return settings


def _check_algorithm(
    algorithm: AlgorithmSpec, parameters: tuple[ParameterSpec, ...], max_trials: int, parallel: int
) -> None:
    """What Katib's suggestion services reject at their validation step, named by field here."""
    if algorithm.name == "grid":
        size = 1
        for p in parameters:
            grid = p.grid
            if grid is None:
                raise InvalidInput(
                    f"parameters.{p.name}: grid search needs a step on a double parameter (or int, discrete, "
                    "categorical parameters)",
                    field=f"parameters.{p.name}.step",
                )
            size = min(size * len(grid), GRID_LIMIT + 1)
        if size > GRID_LIMIT:
            raise InvalidInput(
                f"the grid has more than {GRID_LIMIT} points; coarsen the steps", field="parameters"
            )
        if max_trials > size:
            raise InvalidInput(
                f"max_trials ({max_trials}) exceeds the {size} points of the grid", field="max_trials"
            )
    elif algorithm.name == "cmaes":
        if len(parameters) < 2:
            raise InvalidInput("cmaes needs at least two parameters", field="parameters")
        for p in parameters:
            if p.type not in ("int", "double"):
                raise InvalidInput(
                    f"parameters.{p.name}: cmaes searches only int and double parameters",
                    field=f"parameters.{p.name}.type",
                )
    elif algorithm.name == "hyperband":
        _check_hyperband(algorithm.settings, parameters, parallel)


def _check_hyperband(settings: dict[str, str], parameters: tuple[ParameterSpec, ...], parallel: int) -> None:
    """Katib's Hyperband: `resource_name` names the budget parameter (epochs, say), `r_l` its largest
    value, `eta` the reduction factor; it runs eta**s_max trials at once, so parallel_trials must allow it."""
    for key in ("resource_name", "r_l"):
        if key not in settings:
            raise InvalidInput(
                f"hyperband needs algorithm.settings.{key} (resource_name: the budget parameter, e.g. "
                "epochs; r_l: its largest value)",
                field=f"algorithm.settings.{key}",
            )
    resource = next((p for p in parameters if p.name == settings["resource_name"]), None)
    if resource is None or resource.type not in ("int", "double"):
        raise InvalidInput(
            f"algorithm.settings.resource_name {settings['resource_name']!r} must name an int or double "
            "parameter",
            field="algorithm.settings.resource_name",
        )
    r_l = float(settings["r_l"])
    eta = int(settings.get("eta", "3")) or 3
    if r_l < 1 or eta < 2:
        field = "algorithm.settings.r_l" if r_l < 1 else "algorithm.settings.eta"
        raise InvalidInput("hyperband needs r_l >= 1 and eta >= 2", field=field)
    s_max = int(math.log(r_l) / math.log(eta))
    needed = math.ceil(eta**s_max)
    if parallel < needed:
        raise InvalidInput(
            f"hyperband with r_l={settings['r_l']} and eta={eta} runs {needed} trials at once: set "
            f"parallel_trials to at least {needed}",
            field="parallel_trials",
        )


def _trial(raw: object, name: str, user: str, parameters: tuple[ParameterSpec, ...]) -> dict[str, Any]:
    body = f.mapping(raw if raw is not None else {}, "trial")
    f.reject_unknown(body, TRIAL_KEYS, "trial")
    given = [k for k in ("notebook", "training") if body.get(k) is not None]
    if len(given) != 1:
        raise InvalidInput(
            "trial needs exactly one of notebook (a notebook run with parameters) or training (a training "
            "job)",
            field="trial.training" if len(given) > 1 else "trial.notebook",
        )
    if given[0] == "training":
        extra = sorted(set(body) - {"training"})
        if extra:
            raise InvalidInput(
                f"trial.{extra[0]} applies to notebook trials; a training trial sets it in trial.training",
                field=f"trial.{extra[0]}",
            )
        training_raw = f.mapping(body["training"], "trial.training")
        training = TrainingSpec.from_dict({"name": name, **training_raw}, user, prefix="trial.training")
        return {"trial_training": training}
    return {
        "trial_notebook": f.relative_path(body["notebook"], "trial.notebook", suffix=".ipynb"),
        "trial_package_uri": package_uri(body.get("package"), "trial.package"),
        "trial_image": f.optional_image(body.get("image"), "trial.image"),
        "trial_resources": ResourceSpec.from_dict(body.get("resources"), "trial.resources"),
        "trial_env": f.env(body.get("env") or {}, "trial.env"),
        "trial_workspace": f.boolean(body.get("workspace", False), "trial.workspace"),
    }

"""Katib's algorithms as Optuna samplers and pruners, for the local tuner.

| Katib                  | Optuna                                                          |
|------------------------|-----------------------------------------------------------------|
| random                 | RandomSampler(seed=random_state)                                |
| grid                   | GridSampler over every parameter's grid (step or values)        |
| bayesianoptimization   | GPSampler (Gaussian process; n_initial_points random trials)    |
| tpe                    | TPESampler(n_startup_trials, n_ei_candidates, seed)              |
| cmaes                  | CmaEsSampler(sigma0=sigma, restart_strategy, seed)               |
| hyperband              | TPESampler + HyperbandPruner over the resource parameter         |
| early stopping medianstop | MedianPruner(n_startup_trials=min_trials_required, n_warmup_steps=start_step) |

Hyperband's resource parameter (`resource_name`, e.g. epochs) is not searched: every trial gets its
largest value `r_l` and reports the objective once per unit of it (per epoch); the pruner stops the
trials that fall behind at each rung, which is how Optuna runs Hyperband.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from cube_jupyter.jobs.tuning_spec import ParameterSpec, TuningSpec

MEDIANSTOP_DEFAULTS = {"min_trials_required": 3, "start_step": 4}


def _seed(settings: dict[str, str]) -> int | None:
    return int(settings["random_state"]) if "random_state" in settings else None


def distribution(parameter: ParameterSpec, grid: bool = False) -> BaseDistribution:
    """The Optuna distribution of one parameter (a grid search draws from the grid's values)."""
    if grid or parameter.type in ("categorical", "discrete"):
        values = parameter.grid if grid else parameter.values
        assert values is not None
        return CategoricalDistribution(list(values))
    low, high = float(parameter.min or 0), float(parameter.max or 0)
    if parameter.type == "int":
        step = int(parameter.step or 1)
        high_on_step = int(low) + (int(high) - int(low)) // step * step
        return IntDistribution(int(low), high_on_step, log=parameter.log, step=1 if parameter.log else step)
    if parameter.step is not None:
        count = int((high - low) / parameter.step + 1e-9)
        return FloatDistribution(low, low + count * parameter.step, step=parameter.step)
    return FloatDistribution(low, high, log=parameter.log)


def fixed_parameters(spec: TuningSpec) -> dict[str, Any]:
    """Parameters every trial gets as they are: hyperband's resource at its largest value."""
    if spec.algorithm.name != "hyperband":
        return {}
    name = spec.algorithm.settings["resource_name"]
    parameter = spec.parameter(name)
    r_l = float(spec.algorithm.settings["r_l"])
    return {name: int(r_l) if parameter is not None and parameter.type == "int" else r_l}


def search_space(spec: TuningSpec) -> dict[str, BaseDistribution]:
    fixed = fixed_parameters(spec)
    grid = spec.algorithm.name == "grid"
    return {p.name: distribution(p, grid) for p in spec.parameters if p.name not in fixed}


def sampler(spec: TuningSpec) -> optuna.samplers.BaseSampler:
    name, settings = spec.algorithm.name, spec.algorithm.settings
    seed = _seed(settings)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        grid = {p.name: list(p.grid or ()) for p in spec.parameters}
        return optuna.samplers.GridSampler(grid, seed=seed)
    if name == "bayesianoptimization":
        startup = int(settings.get("n_initial_points", "10"))
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    if name == "cmaes":
        options: dict[str, Any] = {"seed": seed}
        if "sigma" in settings:
            options["sigma0"] = float(settings["sigma"])
        if settings.get("restart_strategy", "None") != "None":
            options["restart_strategy"] = settings["restart_strategy"]
        return optuna.samplers.CmaEsSampler(**options)
    tpe: dict[str, Any] = {"seed": seed}
    if "n_startup_trials" in settings:
        tpe["n_startup_trials"] = int(settings["n_startup_trials"])
    if "n_ei_candidates" in settings:
        tpe["n_ei_candidates"] = int(settings["n_ei_candidates"])
    return optuna.samplers.TPESampler(**tpe)


def pruner(spec: TuningSpec) -> optuna.pruners.BasePruner:
    """Hyperband's pruner, else medianstop early stopping, else none."""
    if spec.algorithm.name == "hyperband":
        settings = spec.algorithm.settings
        resource = spec.parameter(settings["resource_name"])
        low = max(1, int(resource.min or 1)) if resource is not None else 1
        return optuna.pruners.HyperbandPruner(
            min_resource=low,
            max_resource=max(low, int(float(settings["r_l"]))),
            reduction_factor=int(settings.get("eta", "3")),
        )
    if spec.early_stopping is not None:
        settings = {**{k: str(v) for k, v in MEDIANSTOP_DEFAULTS.items()}, **spec.early_stopping.settings}
        return optuna.pruners.MedianPruner(
            n_startup_trials=int(settings["min_trials_required"]),
            n_warmup_steps=int(settings["start_step"]),
        )
    return optuna.pruners.NopPruner()


def create_study(spec: TuningSpec) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=spec.name,
        direction=spec.objective.type,
        sampler=sampler(spec),
        pruner=pruner(spec),
    )

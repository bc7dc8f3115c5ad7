"""The admin's bounds on how much one job may start (`CubeJobs.max_*`), checked where a spec enters,
before anything runs: a spec asking for 100,000 replicas is a 400 naming the field, not 100,000
processes or pods. Parsing checks what a spec is; this checks how much of the machine it may take."""

from __future__ import annotations

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.config import CubeJobs
from cube_jupyter.jobs.specs import Spec
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec


def check_bounds(spec: Spec, jobs: CubeJobs) -> None:
    """InvalidInput naming the field and the setting when `spec` asks for more than the admin allows."""
    if isinstance(spec, TrainingSpec):
        _training(spec, jobs, "")
    elif isinstance(spec, TuningSpec):
        _tuning(spec, jobs)


def _check(field: str, asked: int, what: str, setting: str, jobs: CubeJobs) -> None:
    limit = int(getattr(jobs, setting))
    if asked > limit:
        raise InvalidInput(
            f"{field}: {asked} {what} is over CubeJobs.{setting} ({limit}); ask your admin for more",
            field=field,
        )


def _training(spec: TrainingSpec, jobs: CubeJobs, prefix: str) -> None:
    for role in spec.roles:
        _check(
            f"{prefix}replicas.{role.role.lower()}", role.replicas, "replicas", "max_replicas_per_role", jobs
        )
    total = sum(role.replicas for role in spec.roles)
    _check(f"{prefix}replicas", total, "replicas in all", "max_replicas_per_job", jobs)


def _tuning(spec: TuningSpec, jobs: CubeJobs) -> None:
    _check("max_trials", spec.max_trials, "trials", "max_trials", jobs)
    _check("parallel_trials", spec.parallel_trials, "trials at once", "max_parallel_trials", jobs)
    if spec.trial_training is not None:
        _training(spec.trial_training, jobs, "trial.training.")
        # Trials run side by side: all their replicas at once count against one job's bound.
        at_once = spec.parallel_trials * sum(role.replicas for role in spec.trial_training.roles)
        what = "replicas at once (parallel trials times a trial's replicas)"
        _check("parallel_trials", at_once, what, "max_replicas_per_job", jobs)

"""The three job kinds and their typed specs, parsed at the edge (REST, CLI, notebook API)."""

from __future__ import annotations

from cube_jupyter.fields import choice
from cube_jupyter.jobs.model import JobKind
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec

KINDS: tuple[JobKind, ...] = ("training", "tuning", "serving")
Spec = TrainingSpec | TuningSpec | ServingSpec


def parse_kind(value: object) -> JobKind:
    kind = choice(value, "kind", KINDS)
    return kind  # type: ignore[return-value]


def parse_spec(kind: JobKind, raw: object, user: str, base_dir: str | None = None) -> Spec:
    """The typed spec of `kind`, validated; InvalidInput names the bad field (`spec.replicas.worker`).
    Relative local paths (a model's `storage_uri`) mean paths under `base_dir` (default: the cwd)."""
    if kind == "training":
        return TrainingSpec.from_dict(raw, user=user)
    if kind == "tuning":
        return TuningSpec.from_dict(raw, user=user)
    return ServingSpec.from_dict(raw, user=user, base_dir=base_dir)


def spec_gpus(spec: Spec) -> int:
    """GPUs the job holds at once: a tuning job's trials running in parallel, each with its own."""
    if isinstance(spec, TuningSpec):
        return spec.parallel_trials * spec.gpus_per_trial
    return int(spec.total_gpus)

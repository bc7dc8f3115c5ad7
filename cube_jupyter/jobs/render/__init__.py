"""Renderers: pure functions `spec + config -> list[dict]` giving the exact Kubernetes objects
the kubernetes backend creates (and `cube-jupyter train|tune|serve render` prints)."""

from __future__ import annotations

import json
from typing import Any

from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.model import JobKind
from cube_jupyter.jobs.render.pods import SPEC_ANNOTATION
from cube_jupyter.jobs.render.serving import render_serving
from cube_jupyter.jobs.render.training import render_training
from cube_jupyter.jobs.render.training_api import TRAINER_V2, training_api
from cube_jupyter.jobs.render.trainjob import render_trainjob
from cube_jupyter.jobs.render.tuning import render_tuning
from cube_jupyter.jobs.specs import Spec, parse_kind, parse_spec
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.kube.discovery import ServedApis

__all__ = [
    "render_job",
    "render_serving",
    "render_spec",
    "render_training",
    "render_trainjob",
    "render_tuning",
]

# The objects that are the job itself (the rest of a rendering are what they need, e.g. ConfigMaps).
JOB_OBJECT_KINDS = frozenset(
    {"TrainJob", "PyTorchJob", "TFJob", "XGBoostJob", "MPIJob", "Experiment", "InferenceService"}
)


def render_spec(
    kind: JobKind,
    spec: Spec,
    config: JobSettings,
    served: ServedApis | None = None,
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """The Kubernetes objects the kubernetes backend creates for `spec`, in creation order. A training
    job is a TrainJob or the Training Operator's kind, as `training_api` decides from the config and
    what the cluster serves (`served`; None: not known). The job object itself carries the normalized
    spec as an annotation, so the Jobs panel can show what a cluster job was submitted with (and which
    way a tuning goal points) from the informer cache. `namespace` is the user's namespace when the
    cluster decides it (a Kubeflow Profile's); None: the namespace templates'."""
    if isinstance(spec, TrainingSpec):
        if training_api(spec, config, served) == TRAINER_V2:
            objects = render_trainjob(spec, config)
        else:
            objects = render_training(spec, config)
    elif isinstance(spec, TuningSpec):
        objects = render_tuning(spec, config)
    else:
        objects = render_serving(spec, config)
    for obj in objects:
        if namespace is not None:
            obj["metadata"]["namespace"] = namespace
        if obj["kind"] in JOB_OBJECT_KINDS:
            annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[SPEC_ANNOTATION] = json.dumps(spec.to_dict(), sort_keys=True)
    return objects


def render_job(config: JobSettings, kind: str, raw: object, user: str) -> list[dict[str, Any]]:
    """What `cube-jupyter train|tune|serve render` prints: the objects the cluster would get. No
    cluster is asked, so `CubeJobs.training_api = "auto"` renders a training job as a cluster serving
    both APIs would get it: a TrainJob when it fits one, else the Training Operator's kind."""
    job_kind = parse_kind(kind)
    spec = parse_spec(job_kind, raw, user)
    return render_spec(job_kind, spec, config)

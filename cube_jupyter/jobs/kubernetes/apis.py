"""The operators' APIs jobs run on, and what a cluster serving only some of them can still do.

Kubeflow Trainer v2 (TrainJob), the Training Operator (PyTorchJob, TFJob, XGBoostJob, MPIJob), Katib
(Experiment, Trial) and KServe (InferenceService) are installed separately; the jobs backend asks
the cluster which it serves (`Cluster.discover`), follows those, and refuses a job that needs a
missing one with NotServed naming its CRD, before anything is shipped or created. A tuning job's
training trials are rendered as the Training Operator's kind (`render.tuning`), so they need it too.
"""

from __future__ import annotations

from typing import Any

from cube_jupyter.errors import NotServed
from cube_jupyter.jobs.availability import availability, usable
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.kubernetes.status import KATIB_API, KSERVE_API
from cube_jupyter.jobs.model import JobKind
from cube_jupyter.jobs.render import trainjob
from cube_jupyter.jobs.render.training import API_VERSION as V1_API_VERSION
from cube_jupyter.jobs.render.training import OPERATOR_KINDS
from cube_jupyter.jobs.render.training_api import OPERATOR_V1, TRAINER_V2, training_api
from cube_jupyter.jobs.training_spec import FRAMEWORKS, TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.kube.discovery import ServedApis, missing_crd
from cube_jupyter.kube.resources import ResourceType, register_resource_type

TRAINJOBS = ResourceType(trainjob.API_VERSION, trainjob.KIND, "trainjobs")
EXPERIMENTS = ResourceType(KATIB_API, "Experiment", "experiments")
TRIALS = ResourceType(KATIB_API, "Trial", "trials")
INFERENCE_SERVICES = ResourceType(KSERVE_API, "InferenceService", "inferenceservices")
# The Training Operator's kind of each framework.
V1_RESOURCES = {
    framework: ResourceType(V1_API_VERSION, operator.kind, f"{operator.kind.lower()}s")
    for framework, operator in OPERATOR_KINDS.items()
}
# The kinds whose objects are jobs, each followed by an informer when the cluster serves it.
JOB_RESOURCES = [TRAINJOBS, *V1_RESOURCES.values(), EXPERIMENTS, INFERENCE_SERVICES]
for _resource in [*JOB_RESOURCES, TRIALS]:
    register_resource_type(_resource)
GROUP_VERSIONS = sorted({r.api_version for r in [*JOB_RESOURCES, TRIALS]})
TUNING_KINDS = [EXPERIMENTS, TRIALS]


def require_served(kind: JobKind, spec: Any, config: JobSettings, served: ServedApis | None) -> None:
    """NotServed naming the CRD when a job of `spec` needs a kind `served` lacks (None: not known)."""
    if served is None:
        return
    if kind == "training":
        needed = [_training_kind(spec, config, served)]
    elif kind == "tuning":
        needed = list(TUNING_KINDS)
        if isinstance(spec, TuningSpec) and spec.trial_training is not None:
            needed.append(V1_RESOURCES[spec.trial_training.framework])
    else:
        needed = [INFERENCE_SERVICES]
    for resource in needed:
        if not served.serves(resource.api_version, resource.kind):
            raise NotServed(f"{kind} jobs: {missing_crd(resource.api_version, resource.kind)}", field="kind")


def _training_kind(spec: TrainingSpec, config: JobSettings, served: ServedApis) -> ResourceType:
    return TRAINJOBS if training_api(spec, config, served) == TRAINER_V2 else V1_RESOURCES[spec.framework]


def cluster_availability(config: JobSettings, served: ServedApis | None) -> dict[str, Any]:
    """What the launch forms may offer on a cluster serving `served` (None: not asked yet)."""
    if served is None:
        unknown = usable(None, "the cluster has not been asked yet which operators it serves")
        return availability(
            "kubernetes",
            config,
            served=None,
            training={framework: unknown for framework in FRAMEWORKS},
            tuning=unknown,
            serving=unknown,
        )
    missing = [r for r in TUNING_KINDS if not served.serves(r.api_version, r.kind)]
    return availability(
        "kubernetes",
        config,
        served={r.kind: served.serves(r.api_version, r.kind) for r in [*JOB_RESOURCES, TRIALS]},
        training={framework: _framework(framework, config, served) for framework in FRAMEWORKS},
        tuning=usable(None, missing_crd(missing[0].api_version, missing[0].kind))
        if missing
        else usable(EXPERIMENTS.kind),
        serving=usable(INFERENCE_SERVICES.kind)
        if served.serves(INFERENCE_SERVICES.api_version, INFERENCE_SERVICES.kind)
        else usable(None, missing_crd(INFERENCE_SERVICES.api_version, INFERENCE_SERVICES.kind)),
    )


def _framework(framework: str, config: JobSettings, served: ServedApis) -> dict[str, Any]:
    """How a `framework` job runs here: as a TrainJob where the pin and the runtimes allow it and the
    cluster serves it, else as its v1 kind (a job unfit for a TrainJob also falls back to that)."""
    pinned = config.jobs.training_api
    v1 = V1_RESOURCES[framework]
    if pinned != OPERATOR_V1 and framework in config.training_runtimes:
        if served.serves(TRAINJOBS.api_version, TRAINJOBS.kind):
            return usable(TRAINJOBS.kind)
        if pinned == TRAINER_V2:
            return usable(None, missing_crd(TRAINJOBS.api_version, TRAINJOBS.kind))
    if pinned == TRAINER_V2:
        return usable(None, f"{framework} has no Trainer v2 runtime and CubeJobs.training_api is trainer-v2")
    if served.serves(v1.api_version, v1.kind):
        return usable(v1.kind)
    return usable(None, missing_crd(v1.api_version, v1.kind))

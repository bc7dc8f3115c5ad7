"""Which Kubeflow API a training job is created with: Trainer v2's TrainJob or the Training
Operator's v1 kind, by `CubeJobs.training_api` and what the cluster serves.

`auto` prefers Trainer v2 (the current Kubeflow API; the v1 kinds are deprecated upstream) for a job
that fits a TrainJob (`trainjob_problem`), where the cluster serves it, and the v1 kind otherwise.
Without a cluster to ask (`cube-jupyter train render`), `auto` renders what it would on a cluster
serving both. A pinned API is used as pinned: a job it cannot run is refused, naming why.
"""

from __future__ import annotations

from typing import Final, Literal

from cube_jupyter.errors import InvalidInput, NotServed
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.render import trainjob
from cube_jupyter.jobs.render.training import API_VERSION as V1_API_VERSION
from cube_jupyter.jobs.render.training import OPERATOR_KINDS
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.kube.discovery import ServedApis, missing_crd
from cube_jupyter.kube.resources import resource_type

TRAINER_V2: Final = "trainer-v2"
OPERATOR_V1: Final = "training-operator-v1"
TrainingApi = Literal["trainer-v2", "training-operator-v1"]


def training_api(spec: TrainingSpec, config: JobSettings, served: ServedApis | None) -> TrainingApi:
    """The API `spec` is created with; InvalidInput when the pinned one cannot run it, NotServed
    when `served` (None: unknown) has no API that can."""
    pinned = config.jobs.training_api
    if pinned == OPERATOR_V1:
        return OPERATOR_V1
    problem = trainjob.trainjob_problem(spec, config)
    if pinned == TRAINER_V2:
        if problem is not None:
            pin = "CubeJobs.training_api is pinned to trainer-v2"
            raise InvalidInput(f"{problem.message} ({pin})", field=problem.field)
        return TRAINER_V2
    if served is None:
        return TRAINER_V2 if problem is None else OPERATOR_V1
    v2_served = served.serves(trainjob.API_VERSION, trainjob.KIND)
    if problem is None and v2_served:
        return TRAINER_V2
    v1_kind = OPERATOR_KINDS[spec.framework].kind
    if served.serves(V1_API_VERSION, v1_kind):
        return OPERATOR_V1
    if spec.framework not in config.training_runtimes:
        raise NotServed(missing_crd(V1_API_VERSION, v1_kind), field="framework")
    if v2_served and problem is not None:
        raise problem  # Trainer v2 is there: what keeps this job off it is the thing to fix
    v2_crd = resource_type(trainjob.API_VERSION, trainjob.KIND).describe()
    v1_crd = resource_type(V1_API_VERSION, v1_kind).describe()
    raise NotServed(
        f"{spec.framework} training needs Kubeflow Trainer v2 (the CRD {v2_crd}) or the Training "
        f"Operator (the CRD {v1_crd}); this cluster serves neither",
        field="framework",
    )

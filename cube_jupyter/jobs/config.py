"""How training, tuning and serving jobs are shaped on the cluster: the `CubeJobs` traitlets admins set.

    c.CubeJobs.training_images = {"pytorch": "registry.example.com/ml/torch:2.5-cuda12"}
    c.CubeJobs.service_account = "default-editor"
    c.CubeJobs.gpu_resource = "nvidia.com/gpu"

Where shipped code lives (and the Secret holding the store's credentials) is `CubeStorage`'s, shared
with pipelines; image, resources, GPU placement and service account are `CubeWorkload`'s, shared with
pipeline steps. `load_settings` checks all of it once at startup, so a bad value is a ConfigError
naming the field, never an object the cluster rejects later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from traitlets import CaselessStrEnum, Dict, Int, List, Unicode, default

from cube_jupyter import fields
from cube_jupyter.configurable import (
    CubeNamespaces,
    CubeWorkload,
    checked,
    dns_name,
    non_negative,
    not_empty,
    optional,
    positive,
    prometheus_base_url,
    user_namespace_template,
    username_template,
)
from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.serving_spec import MODEL_FORMATS
from cube_jupyter.jobs.training_spec import FRAMEWORKS
from cube_jupyter.jobs.tuning_spec import METRICS_FORMAT
from cube_jupyter.names import validate_dns_label
from cube_jupyter.workbench import WorkloadSettings

ENTRY_COMMAND = ["python", "-m", "cube_jupyter.jobs.entry"]
# CubeJobs.training_api: the Kubeflow API training jobs are created with. `auto` takes Trainer v2
# (trainer.kubeflow.org TrainJob) where the cluster serves it, else the Training Operator's v1 kinds.
TRAINING_APIS = ("auto", "trainer-v2", "training-operator-v1")
# The ClusterTrainingRuntime a framework's TrainJob runs on: Kubeflow Trainer's presets. TensorFlow and
# MPI have no preset a TrainJob of this spec fits (the MPI presets, deepspeed-distributed and
# mlx-distributed, bring their own launcher image): they run as TFJob / MPIJob.
TRAINING_RUNTIMES = {"pytorch": "torch-distributed", "xgboost": "xgboost-distributed"}
# Mean DCGM GPU utilization (percent) over an InferenceService's predictor pods. The labels depend on
# the scrape config: DCGM exporter pods scraped with honor_labels keep `namespace`/`pod`.
GPU_UTILIZATION_QUERY = 'avg(DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}",pod=~"{name}-predictor-.*"}})'


def _framework_images(value: dict[str, Any], field: str) -> dict[str, str]:
    images: dict[str, str] = {}
    for key, image in value.items():
        where = f"{field}.{key}"
        if key not in FRAMEWORKS:
            raise InvalidInput(f"{where}: {key!r} is not one of {', '.join(FRAMEWORKS)}", field=where)
        images[key] = fields.image_reference(image, where)
    return images


def _runtime_per_format(value: dict[str, Any], field: str) -> dict[str, str]:
    formats = [m for m in MODEL_FORMATS if m != "custom"]
    runtimes: dict[str, str] = {}
    for key, runtime in value.items():
        where = f"{field}.{key}"
        if key not in formats:
            raise InvalidInput(f"{where}: {key!r} is not one of {', '.join(formats)}", field=where)
        runtimes[key] = validate_dns_label(runtime, where, 253)
    return runtimes


def _runtime_per_framework(value: dict[str, Any], field: str) -> dict[str, str]:
    runtimes: dict[str, str] = {}
    for key, runtime in value.items():
        where = f"{field}.{key}"
        if key not in TRAINING_RUNTIMES:
            raise InvalidInput(
                f"{where}: {key!r} has no Trainer v2 rendering; frameworks: {', '.join(TRAINING_RUNTIMES)}",
                field=where,
            )
        # '' takes the framework off Trainer v2: its jobs run as the Training Operator's kind.
        runtimes[key] = runtime if runtime == "" else validate_dns_label(runtime, where, 253)
    return runtimes


def _claim_template(value: str, field: str) -> None:
    username_template(value, field, 253)


def _metrics_format(value: str, field: str) -> None:
    try:
        pattern = re.compile(value)
    except re.error as exc:
        raise InvalidInput(f"{field} is not a regular expression: {exc}", field=field) from None
    if pattern.groups < 2:
        raise InvalidInput(f"{field} needs two groups: the metric name, then its value", field=field)


def _utilization_query(value: str, field: str) -> None:
    try:
        value.format(namespace="ns", name="model")
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise InvalidInput(
            f"{field}: only {{namespace}} and {{name}} may be used; double other braces ({exc!r})",
            field=field,
        ) from None


def _priorities(value: dict[str, Any], field: str) -> None:
    for user, priority in value.items():
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise InvalidInput(f"{field}[{user!r}]: {priority!r} is not a whole number", field=field)


class CubeJobs(CubeWorkload, CubeNamespaces):
    """Training (Training Operator), tuning (Katib) and serving (KServe) on the cluster."""

    training_images = Dict(
        {},
        help="Default image per framework: {'pytorch': ..., 'tensorflow': ..., 'xgboost': ..., 'mpi': ...}.",
    )
    serving_runtimes = Dict(
        {},
        help="KServe ServingRuntime per model format, e.g. {'sklearn': 'kserve-sklearnserver'}; a format "
        "left out lets KServe pick the runtime that supports it.",
    )
    entry_command = List(
        Unicode(),
        default_value=ENTRY_COMMAND,
        help="Command that runs shipped code (a package from the artifact store) in a replica.",
    )
    serving_service_account = Unicode(
        "",
        help="Service account of InferenceServices. KServe's storage initializer reads S3 credentials from "
        "the Secrets attached to it (annotated with serving.kserve.io/s3-endpoint), so they are never "
        "inlined. '' uses service_account.",
    )
    ttl_seconds_after_finished = Int(
        86400,
        allow_none=True,
        help="Delete a finished training job (and its pods) this long after it ended, unless its spec "
        "says otherwise; None keeps them.",
    )
    workspace_claim_template = Unicode(
        "{username}-workspace",
        help="PVC mounted at /home/jovyan in every replica of a job with `workspace: true`; {username} is "
        "the escaped user name. Use a ReadWriteMany claim: replicas run on several nodes.",
    )
    katib_metrics_format = Unicode(
        METRICS_FORMAT,
        help="Regex with two groups (name, value) Katib's StdOut collector reads metrics with.",
    )
    katib_resume_policy = CaselessStrEnum(
        ["Never", "LongRunning", "FromVolume"],
        default_value="Never",
        help="Katib Experiment resumePolicy: whether its suggestion service is kept after it succeeds.",
    )
    serving_prometheus_url = Unicode(
        "",
        help="Prometheus KEDA queries for DCGM GPU utilization when an InferenceService scales on `gpu`; "
        "'' uses CubeGPU.prometheus_url / CubeWorkbench.prometheus_url.",
    )
    training_api = CaselessStrEnum(
        list(TRAINING_APIS),
        default_value="auto",
        help="The Kubeflow API training jobs use: 'trainer-v2' (TrainJob on a ClusterTrainingRuntime), "
        "'training-operator-v1' (PyTorchJob, TFJob, XGBoostJob, MPIJob) or 'auto': Trainer v2 where the "
        "cluster serves it and the job fits a TrainJob (every node alike), else v1. TensorFlow and MPI "
        "jobs always use v1.",
    )
    training_runtimes = Dict(
        {},
        help="ClusterTrainingRuntime per framework for TrainJobs, over the defaults "
        "{'pytorch': 'torch-distributed', 'xgboost': 'xgboost-distributed'}; '' runs that framework "
        "on the Training Operator (v1) instead.",
    )
    gpu_utilization_query = Unicode(
        GPU_UTILIZATION_QUERY,
        help="PromQL for an InferenceService's GPU utilization in percent; {namespace} and {name} are filled "
        "in (double any other braces). Use exported_namespace/exported_pod if Prometheus renames labels.",
    )

    max_replicas_per_role = Int(
        8, help="Most replicas one role of a training job (or of a tuning trial) may ask for."
    )
    max_replicas_per_job = Int(
        16,
        help="Most replicas one training job may ask for, all roles together; for a tuning job, the most "
        "replicas its parallel trials run at once. Locally each replica is a process.",
    )
    max_trials = Int(100, help="Most trials one tuning job may ask for (max_trials).")
    max_parallel_trials = Int(4, help="Most trials one tuning job may run at once (parallel_trials).")

    cpu_slots = Int(
        0,
        help="Local backend: CPU slots training and tuning jobs may use at once, a replica or trial "
        "taking its cpu rounded up (or 1); a job that does not fit waits in the queue. 0: no limit.",
    )
    max_running_jobs_per_user = Int(
        0, help="Local backend: jobs one user may run at once; more wait in the queue. 0: no limit."
    )
    max_queued_per_user = Int(
        10,
        help="Local backend: training and tuning jobs one user may have waiting in the queue; past it a 403.",
    )
    user_priorities = Dict(
        {},
        help="Local backend: priority per user in the machine's one queue (jobs, GPU servers, GPU steps), "
        "e.g. {'alice': 10}; higher goes first, the default 0. Within a priority, the user holding least "
        "of the machine goes first.",
    )

    @default("namespace_template")
    def _default_namespace_template(self) -> str:
        return ""  # the user's notebook servers' namespace

    _namespace_template_ok = checked(optional(user_namespace_template), "namespace_template")  # '' allowed
    _bounds_ok = checked(
        positive, "max_replicas_per_role", "max_replicas_per_job", "max_trials", "max_parallel_trials"
    )
    _queue_bounds_ok = checked(non_negative, "cpu_slots", "max_running_jobs_per_user", "max_queued_per_user")
    _user_priorities_ok = checked(_priorities, "user_priorities")
    _training_images_ok = checked(_framework_images, "training_images")
    _serving_runtimes_ok = checked(_runtime_per_format, "serving_runtimes")
    _entry_command_ok = checked(not_empty, "entry_command")
    _serving_service_account_ok = checked(optional(dns_name), "serving_service_account")
    _ttl_ok = checked(optional(non_negative), "ttl_seconds_after_finished")
    _workspace_claim_template_ok = checked(_claim_template, "workspace_claim_template")
    _katib_metrics_format_ok = checked(_metrics_format, "katib_metrics_format")
    _serving_prometheus_url_ok = checked(optional(prometheus_base_url), "serving_prometheus_url")
    _gpu_utilization_query_ok = checked(_utilization_query, "gpu_utilization_query")
    _training_runtimes_ok = checked(_runtime_per_framework, "training_runtimes")


@dataclass(frozen=True, kw_only=True)
class JobSettings(WorkloadSettings[CubeJobs]):
    """What the jobs feature reads: `CubeJobs` and the workbench-wide settings."""

    prometheus_url: str = ""  # serving's, else the GPU one; '' when none is set: GPU autoscaling is refused

    @property
    def jobs(self) -> CubeJobs:
        return self.workload

    @property
    def training_runtimes(self) -> dict[str, str]:
        """The ClusterTrainingRuntime of each framework a TrainJob can run (those mapped to '' left out)."""
        merged = {**TRAINING_RUNTIMES, **self.jobs.training_runtimes}
        return {framework: runtime for framework, runtime in merged.items() if runtime}

    @property
    def serving_runtimes(self) -> dict[str, str]:
        return dict(self.jobs.serving_runtimes)

    def image_for(self, framework: str) -> str:
        return self.jobs.training_images.get(framework) or self.default_image

    @property
    def serving_service_account(self) -> str:
        return self.jobs.serving_service_account or self.jobs.service_account

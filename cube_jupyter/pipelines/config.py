"""How pipeline runs are shaped and bounded: the `CubePipelines` traitlets admins set.

    c.CubePipelines.default_image = "registry.example.com/ml/step-runner:1.4"
    c.CubePipelines.service_account = "pipeline-runner"
    c.CubePipelines.max_parallel_per_user = 8

Local runs share one pool of worker processes, each holding a kernel: the `max_*` limits and the idle
time bound how much of the host's memory they may take, whoever asks.

Where artifacts live (and the Secret holding the store's credentials) is `CubeStorage`'s, shared with
local runs and jobs; image, resources, GPU placement and service account are `CubeWorkload`'s, shared
with jobs; this class only holds what the Argo compiler adds on top. `load_settings` checks all of it
once at startup, so a bad value is a ConfigError naming the field, never a Workflow the cluster
rejects.

Kubeflow Pipelines is a second cluster target (`kfp`, beside Argo's `cluster`), reached over its REST
API as the user: `cluster_target` says whether it is offered, the `kfp_*` traits how it is reached.

    c.CubePipelines.cluster_target = "kfp"
    c.CubePipelines.kfp_url = "http://ml-pipeline.kubeflow:8888"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from traitlets import CaselessStrEnum, Float, Int, List, Unicode

from cube_jupyter.configurable import (
    CubeWorkload,
    checked,
    is_http_url,
    non_negative,
    not_empty,
    optional,
    positive,
)
from cube_jupyter.errors import InvalidInput
from cube_jupyter.pipelines.model import PipelineError, StepOptions
from cube_jupyter.workbench import WorkloadSettings

RUNNER_COMMAND = ["python", "-m", "cube_jupyter.pipelines.runner"]
POD_GC_STRATEGIES = ["", "OnPodCompletion", "OnPodSuccess", "OnWorkflowCompletion", "OnWorkflowSuccess"]
CLUSTER_TARGETS = ["auto", "argo", "kfp"]
KFP_AUTH = ["userid-header", "service-account-token"]
# Where KFP keeps artifacts: the object stores its launcher writes to.
PIPELINE_ROOT_SCHEMES = ("s3", "gs", "minio")
# An HTTP header name (RFC 9110 token); a header value never holds a line break.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def http_url(value: str, field: str) -> str:
    """An http(s) base URL without query, kept without its trailing '/' (paths are added to it)."""
    if not is_http_url(value.strip()):
        raise InvalidInput(f"{field} {value!r} must be an http(s) URL with a host and no query", field=field)
    return value.strip().rstrip("/")


def header_name(value: str, field: str) -> None:
    if not HEADER_NAME.match(value):
        raise InvalidInput(
            f"{field} {value!r} must be an HTTP header name, e.g. 'kubeflow-userid'", field=field
        )


def header_value(value: str, field: str) -> None:
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise InvalidInput(f"{field} {value!r} must not hold control characters", field=field)


def absolute_path(value: str, field: str) -> None:
    if not value.startswith("/"):
        raise InvalidInput(f"{field} {value!r} must be an absolute path", field=field)


def object_store_url(value: str, field: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in PIPELINE_ROOT_SCHEMES or not parts.netloc:
        raise InvalidInput(
            f"{field} {value!r} must name a bucket in an object store KFP writes to "
            f"({', '.join(s + '://' for s in PIPELINE_ROOT_SCHEMES)}), e.g. 's3://ml-artifacts/pipelines'",
            field=field,
        )
    return value.strip().rstrip("/")


class CubePipelines(CubeWorkload):
    """Cluster runs of notebook pipelines (Argo Workflows): images, identity, resources, clean-up."""

    runner_command = List(
        Unicode(),
        default_value=RUNNER_COMMAND,
        help="Command that starts the step runner in step images; the runner's flags are its args.",
    )
    retry_backoff_seconds = Int(
        10, help="Wait before the first retry of a step with `retries:N`; doubled on each further retry."
    )
    pod_gc_strategy = CaselessStrEnum(
        POD_GC_STRATEGIES,
        default_value="OnPodSuccess",
        help="When Argo deletes step pods. The default keeps failed pods for `kubectl logs`; executed "
        "step notebooks are in the artifact store either way.",
    )
    ttl_seconds_after_success = Int(
        86400, help="Delete a succeeded Workflow object this long after it finished; 0: keep it."
    )
    ttl_seconds_after_failure = Int(
        7 * 86400, help="Delete a failed Workflow object this long after it finished; 0: keep it."
    )

    max_parallel_per_run = Int(
        4, help="Steps of one local run that may run at once; a run asking for more `parallel` is refused."
    )
    max_parallel_per_user = Int(
        8, help="Steps of one user's local runs, all together, that may run at once; more wait their turn."
    )
    max_workers = Int(
        8,
        help="Steps the local runs of all users run at once at most, each in a kernel of its own (one "
        "worker process drives them); further steps wait for a free slot.",
    )
    worker_idle_seconds = Float(
        300.0, help="A local pipeline worker idle this long exits with its kernel, giving its memory back."
    )

    cluster_target = CaselessStrEnum(
        CLUSTER_TARGETS,
        default_value="auto",
        help="Whether Kubeflow Pipelines is offered as run target 'kfp' beside Argo's 'cluster': 'kfp' "
        "always, 'argo' never, 'auto' when the cluster serves KFP's ScheduledWorkflow CRD "
        "(scheduledworkflows.kubeflow.org).",
    )
    kfp_url = Unicode(
        "http://ml-pipeline.kubeflow:8888",
        help="KFP's API server (its v2beta1 REST API), as the workbench reaches it.",
    )
    kfp_auth = CaselessStrEnum(
        KFP_AUTH,
        default_value="userid-header",
        help="How KFP learns who asks: 'userid-header' (the central workbench names the user in "
        "`kfp_userid_header`, as Kubeflow's gateway does; KFP must trust it from the workbench) or "
        "'service-account-token' (a user server sends its pod's token from `kfp_token_file`).",
    )
    kfp_userid_header = Unicode("kubeflow-userid", help="The header that names the user to KFP.")
    kfp_userid_prefix = Unicode(
        "",
        help="Put before the user name in that header, as Kubeflow's `userid-prefix` "
        "(e.g. 'accounts.google.com:').",
    )
    kfp_token_file = Unicode(
        "/var/run/secrets/kubeflow/pipelines/token",
        help="The pod's ServiceAccount token for KFP (audience pipelines.kubeflow.org, as Kubeflow's "
        "PodDefault projects it), read on every request since it rotates.",
    )
    pipeline_root = Unicode(
        "",
        help="Where KFP runs keep their artifacts (s3://, gs:// or minio://bucket/prefix); "
        "'': CubeStorage.url.",
    )
    kfp_runtime_wheels = Unicode(
        "",
        help="Where KFP steps whose image lacks cube-jupyter import the runtime from (KFP has no init "
        "containers): the runtime image's wheelhouse in the object store, s3://, gs:// or "
        "minio://bucket/prefix, put there with `python -m cube_jupyter.wheelhouse upload URI` in "
        "runtime_image (one folder per version). KFP's launcher must be able to read it: the pipeline "
        "root's bucket is the safe choice. '': such steps are refused.",
    )
    kfp_ui_url = Unicode(
        "",
        help="KFP's UI as users open it (e.g. 'https://kubeflow.example.com/pipelines'), for links "
        "to runs; '': no links.",
    )

    _runner_command_ok = checked(not_empty, "runner_command")
    _limits_ok = checked(
        positive, "max_parallel_per_run", "max_parallel_per_user", "max_workers", "worker_idle_seconds"
    )
    _seconds_ok = checked(
        non_negative, "retry_backoff_seconds", "ttl_seconds_after_success", "ttl_seconds_after_failure"
    )
    _kfp_url_ok = checked(http_url, "kfp_url")
    _kfp_ui_url_ok = checked(optional(http_url), "kfp_ui_url")
    _kfp_userid_header_ok = checked(header_name, "kfp_userid_header")
    _kfp_userid_prefix_ok = checked(header_value, "kfp_userid_prefix")
    _kfp_token_file_ok = checked(absolute_path, "kfp_token_file")
    _object_stores_ok = checked(optional(object_store_url), "pipeline_root", "kfp_runtime_wheels")


@dataclass(frozen=True, kw_only=True)
class PipelineSettings(WorkloadSettings[CubePipelines]):
    """What the pipelines feature reads: `CubePipelines` and the workbench-wide settings."""

    @property
    def pipelines(self) -> CubePipelines:
        return self.workload

    def step_queue_labels(self, step: str, options: StepOptions) -> dict[str, str]:
        """The Kueue labels of a step's pod (Argo's or KFP's): its `queue:`/`priority:` tags among those
        offered, else the admin's for pipeline steps; a PipelineError naming the step otherwise."""
        try:
            return self.queues.choose(
                "pipeline-step", queue=options.queue, priority=options.priority, field=f"steps.{step}."
            )
        except InvalidInput as exc:
            raise PipelineError(f"step {step!r}: {exc.message}", field=exc.field) from None

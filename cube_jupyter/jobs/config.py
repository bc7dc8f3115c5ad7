"""How training, tuning and serving jobs are shaped on the cluster: the `CubeJobs` traitlets admins set.

    c.CubeJobs.training_images = {"pytorch": "registry.example.com/ml/torch:2.5-cuda12"}
    c.CubeJobs.service_account = "default-editor"
    c.CubeJobs.gpu_resource = "nvidia.com/gpu"

Where shipped code lives (and the Secret holding the store's credentials) is `CubeStorage`'s, shared
with pipelines. `jobs_config(settings)` reads both from the traitlets Config the workbench was loaded
from and validates them once, so a bad value is a ConfigError naming the field at startup, never an
object the cluster rejects later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from traitlets import CaselessStrEnum, Dict, Int, List, TraitError, Unicode
from traitlets.config import Config, Configurable

from cube_jupyter.config import Settings
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.gpu.config import gpu_config, validate_prometheus_url
from cube_jupyter.jobs.serving_spec import MODEL_FORMATS
from cube_jupyter.jobs.training_spec import FRAMEWORKS
from cube_jupyter.jobs.tuning_spec import METRICS_FORMAT
from cube_jupyter.names import MAX_SLUG_LENGTH, parse_quantity, validate_dns_label
from cube_jupyter.notebooks.spec import (
    DEFAULT_GPU_RESOURCE,
    IMAGE_REFERENCE,
    parse_node_selector,
    parse_tolerations,
)
from cube_jupyter.storage.config import CubeStorage

ENTRY_COMMAND = ["python", "-m", "cube_jupyter.jobs.entry"]
# Mean DCGM GPU utilization (percent) over an InferenceService's predictor pods. The labels depend on
# the scrape config: DCGM exporter pods scraped with honor_labels keep `namespace`/`pod`.
GPU_UTILIZATION_QUERY = 'avg(DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}",pod=~"{name}-predictor-.*"}})'


class CubeJobs(Configurable):
    """Training (Training Operator), tuning (Katib) and serving (KServe) on the cluster."""

    default_image = Unicode(
        "",
        help="Image of jobs whose spec names none and whose framework has no entry in training_images; "
        "it must have cube-jupyter installed to run shipped code. '' uses the default notebook profile's "
        "image, whose kernels already import cube_jupyter.",
    ).tag(config=True)
    training_images = Dict(
        {},
        help="Default image per framework: {'pytorch': ..., 'tensorflow': ..., 'xgboost': ..., 'mpi': ...}.",
    ).tag(config=True)
    serving_runtimes = Dict(
        {},
        help="KServe ServingRuntime per model format, e.g. {'sklearn': 'kserve-sklearnserver'}; a format "
        "left out lets KServe pick the runtime that supports it.",
    ).tag(config=True)
    entry_command = List(
        Unicode(),
        default_value=ENTRY_COMMAND,
        help="Command that runs shipped code (a package from the artifact store) in a replica.",
    ).tag(config=True)
    service_account = Unicode(
        "default-editor", help="Service account of training and trial pods; '' uses the namespace's default."
    ).tag(config=True)
    serving_service_account = Unicode(
        "",
        help="Service account of InferenceServices. KServe's storage initializer reads S3 credentials from "
        "the Secrets attached to it (annotated with serving.kserve.io/s3-endpoint), so they are never "
        "inlined. '' uses service_account.",
    ).tag(config=True)
    namespace_template = Unicode(
        "",
        help="Namespace of a user's jobs; {username} is the escaped user name. '' uses "
        "CubeSpawner.namespace_template (the user's notebook namespace, as Kubeflow profiles do).",
    ).tag(config=True)
    default_cpu = Unicode("1", help="CPU request and limit of replicas whose spec gives none.").tag(
        config=True
    )
    default_memory = Unicode("2Gi", help="Memory request and limit of replicas whose spec gives none.").tag(
        config=True
    )
    gpu_resource = Unicode(
        DEFAULT_GPU_RESOURCE, help="Extended resource a replica's `gpu: N` asks for (e.g. 'nvidia.com/gpu')."
    ).tag(config=True)
    gpu_node_selector = Dict({}, help="nodeSelector added to replicas that ask for GPUs.").tag(config=True)
    gpu_tolerations = List(
        Dict(),
        default_value=[{"key": DEFAULT_GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        help="Tolerations added to replicas that ask for GPUs, so they can land on tainted GPU nodes.",
    ).tag(config=True)
    ttl_seconds_after_finished = Int(
        86400,
        allow_none=True,
        help="Delete a finished training job (and its pods) this long after it ended, unless its spec "
        "says otherwise; None keeps them.",
    ).tag(config=True)
    workspace_claim_template = Unicode(
        "{username}-workspace",
        help="PVC mounted at /home/jovyan in every replica of a job with `workspace: true`; {username} is "
        "the escaped user name. Use a ReadWriteMany claim: replicas run on several nodes.",
    ).tag(config=True)
    katib_metrics_format = Unicode(
        METRICS_FORMAT,
        help="Regex with two groups (name, value) Katib's StdOut collector reads metrics with.",
    ).tag(config=True)
    katib_resume_policy = CaselessStrEnum(
        ["Never", "LongRunning", "FromVolume"],
        default_value="Never",
        help="Katib Experiment resumePolicy: whether its suggestion service is kept after it succeeds.",
    ).tag(config=True)
    serving_prometheus_url = Unicode(
        "",
        help="Prometheus KEDA queries for DCGM GPU utilization when an InferenceService scales on `gpu`; "
        "'' uses CubeGPU.prometheus_url / CubeWorkbench.prometheus_url.",
    ).tag(config=True)
    gpu_utilization_query = Unicode(
        GPU_UTILIZATION_QUERY,
        help="PromQL for an InferenceService's GPU utilization in percent; {namespace} and {name} are filled "
        "in (double any other braces). Use exported_namespace/exported_pod if Prometheus renames labels.",
    ).tag(config=True)


@dataclass(frozen=True)
class JobSettings:
    """The validated jobs and storage config the renderers read."""

    jobs: CubeJobs
    storage: CubeStorage
    default_image: str  # resolved: the trait, else the default notebook profile's image
    training_images: dict[str, str]
    serving_runtimes: dict[str, str]
    gpu_node_selector: dict[str, str]
    gpu_tolerations: list[dict[str, Any]]
    prometheus_url: str  # '' when none is configured: GPU autoscaling is then refused

    def image_for(self, framework: str) -> str:
        return self.training_images.get(framework) or self.default_image

    def namespace_for(self, settings: Settings, user_slug: str) -> str:
        template = self.jobs.namespace_template
        return template.format(username=user_slug) if template else settings.namespace_for(user_slug)

    @property
    def serving_service_account(self) -> str:
        return self.jobs.serving_service_account or self.jobs.service_account


def jobs_config(settings: Settings, config: Config | None = None) -> JobSettings:
    """Build and validate `CubeJobs` + `CubeStorage` from `config` (default: the Config the workbench's
    own Configurables were loaded from)."""
    config = config if config is not None else settings.workbench.config
    try:
        jobs = CubeJobs(config=config)
        storage = CubeStorage(config=config)
    except TraitError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    try:
        for name in ("default_cpu", "default_memory"):
            if parse_quantity(getattr(jobs, name), f"CubeJobs.{name}") <= 0:
                raise InvalidInput(f"CubeJobs.{name} must be more than 0", field=f"CubeJobs.{name}")
        for name in ("service_account", "serving_service_account"):
            if getattr(jobs, name):
                validate_dns_label(getattr(jobs, name), f"CubeJobs.{name}", 253)
        if storage.credentials_secret:
            validate_dns_label(storage.credentials_secret, "CubeStorage.credentials_secret", 253)
        node_selector = parse_node_selector(jobs.gpu_node_selector, "CubeJobs.gpu_node_selector")
        tolerations = parse_tolerations(jobs.gpu_tolerations, "CubeJobs.gpu_tolerations")
        training_images = _image_map(jobs.training_images, "CubeJobs.training_images", FRAMEWORKS)
        runtimes = _runtime_map(jobs.serving_runtimes)
        _check_templates(jobs)
    except InvalidInput as exc:
        raise ConfigError(exc.message, field=exc.field) from None
    _check_values(jobs)
    return JobSettings(
        jobs=jobs,
        storage=storage,
        default_image=jobs.default_image.strip() or settings.profile(None).image,
        training_images=training_images,
        serving_runtimes=runtimes,
        gpu_node_selector=node_selector,
        gpu_tolerations=tolerations,
        prometheus_url=_prometheus_url(jobs, settings, config),
    )


def _check_values(jobs: CubeJobs) -> None:
    checks = [
        ("gpu_resource", "/" in jobs.gpu_resource, "must be an extended resource such as 'nvidia.com/gpu'"),
        ("entry_command", bool(jobs.entry_command), "must not be empty"),
        (
            "default_image",
            not jobs.default_image.strip() or bool(IMAGE_REFERENCE.match(jobs.default_image.strip())),
            "must be an image reference (no spaces)",
        ),
        (
            "ttl_seconds_after_finished",
            jobs.ttl_seconds_after_finished is None or jobs.ttl_seconds_after_finished >= 0,
            "must be >= 0 (or None to keep finished jobs)",
        ),
    ]
    for name, ok, why in checks:
        if not ok:
            field = f"CubeJobs.{name}"
            raise ConfigError(f"{field} {getattr(jobs, name)!r} {why}", field=field)
    try:
        pattern = re.compile(jobs.katib_metrics_format)
    except re.error as exc:
        raise ConfigError(
            f"CubeJobs.katib_metrics_format is not a regular expression: {exc}",
            field="CubeJobs.katib_metrics_format",
        ) from None
    if pattern.groups < 2:
        raise ConfigError(
            "CubeJobs.katib_metrics_format needs two groups: the metric name, then its value",
            field="CubeJobs.katib_metrics_format",
        )


def _image_map(value: dict[str, Any], field: str, keys: tuple[str, ...]) -> dict[str, str]:
    images: dict[str, str] = {}
    for key, image in value.items():
        where = f"{field}.{key}"
        if key not in keys:
            raise InvalidInput(f"{where}: {key!r} is not one of {', '.join(keys)}", field=where)
        if not isinstance(image, str) or not IMAGE_REFERENCE.match(image):
            raise InvalidInput(f"{where} {image!r} is not an image reference (no spaces)", field=where)
        images[key] = image
    return images


def _runtime_map(value: dict[str, Any]) -> dict[str, str]:
    runtimes: dict[str, str] = {}
    for key, runtime in value.items():
        where = f"CubeJobs.serving_runtimes.{key}"
        if key not in MODEL_FORMATS or key == "custom":
            formats = ", ".join(m for m in MODEL_FORMATS if m != "custom")
            raise InvalidInput(f"{where}: {key!r} is not one of {formats}", field=where)
        runtimes[key] = validate_dns_label(runtime, where, 253)
    return runtimes


def _check_templates(jobs: CubeJobs) -> None:
    """Templates must give a DNS label for every user, checked with the longest possible slug."""
    longest = "x" * MAX_SLUG_LENGTH
    templates = [("namespace_template", 63), ("workspace_claim_template", 253)]
    for name, limit in templates:
        template = getattr(jobs, name)
        if not template:
            continue
        field = f"CubeJobs.{name}"
        if "{username}" not in template:
            raise InvalidInput(f"{field} {template!r} must contain {{username}}", field=field)
        try:
            rendered = template.format(username=longest)
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise InvalidInput(
                f"{field} {template!r}: only {{username}} may be used ({exc!r})", field=field
            ) from None
        validate_dns_label(rendered, field, limit)
    query = jobs.gpu_utilization_query
    try:
        query.format(namespace="ns", name="model")
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise InvalidInput(
            f"CubeJobs.gpu_utilization_query: only {{namespace}} and {{name}} may be used; double other "
            f"braces ({exc!r})",
            field="CubeJobs.gpu_utilization_query",
        ) from None


def _prometheus_url(jobs: CubeJobs, settings: Settings, config: Config | None) -> str:
    if jobs.serving_prometheus_url.strip():
        return validate_prometheus_url(jobs.serving_prometheus_url.strip(), "CubeJobs.serving_prometheus_url")
    return gpu_config(settings, config).prometheus_url

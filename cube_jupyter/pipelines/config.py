"""How pipeline runs on the cluster are shaped: the `CubePipelines` traitlets admins set.

    c.CubePipelines.default_image = "registry.example.com/ml/step-runner:1.4"
    c.CubePipelines.service_account = "pipeline-runner"

Where artifacts live (and the Secret holding the store's credentials) is `CubeStorage`'s, shared with
local runs; this class only holds what the Argo compiler adds on top. `pipeline_config(settings)`
reads both from the same traitlets Config the rest of the workbench was loaded from and validates
them once, so a bad value is a ConfigError naming the field, never a Workflow the cluster rejects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traitlets import CaselessStrEnum, Dict, Int, List, TraitError, Unicode
from traitlets.config import Config, Configurable

from cube_jupyter.config import Settings
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.names import parse_quantity, validate_dns_label
from cube_jupyter.notebooks.spec import DEFAULT_GPU_RESOURCE, parse_node_selector, parse_tolerations
from cube_jupyter.storage.config import CubeStorage

RUNNER_COMMAND = ["python", "-m", "cube_jupyter.pipelines.runner"]
POD_GC_STRATEGIES = ["", "OnPodCompletion", "OnPodSuccess", "OnWorkflowCompletion", "OnWorkflowSuccess"]


class CubePipelines(Configurable):
    """Cluster runs of notebook pipelines (Argo Workflows): images, identity, resources, clean-up."""

    default_image = Unicode(
        "",
        help="Image of steps without an `image:` tag; it must have cube-jupyter, papermill and the "
        "notebook's kernel installed. '' uses the default notebook profile's image (as Kale uses the "
        "notebook server's image), since user kernels there already import cube_jupyter.",
    ).tag(config=True)
    runner_command = List(
        Unicode(),
        default_value=RUNNER_COMMAND,
        help="Command that starts the step runner in step images; the runner's flags are its args.",
    ).tag(config=True)
    service_account = Unicode(
        "default-editor",
        help="Service account of step pods; Argo's executor needs it to report results "
        "(Kubeflow profiles' 'default-editor' has the rights). '' uses the namespace's default.",
    ).tag(config=True)
    default_cpu = Unicode("1", help="CPU request and limit of steps without a `cpu:` tag.").tag(config=True)
    default_memory = Unicode("2Gi", help="Memory request and limit of steps without a `memory:` tag.").tag(
        config=True
    )
    gpu_resource = Unicode(
        DEFAULT_GPU_RESOURCE,
        help="Extended resource a `gpu:N` tag asks for (e.g. 'nvidia.com/gpu', 'amd.com/gpu').",
    ).tag(config=True)
    gpu_node_selector = Dict(
        {}, help="nodeSelector added to GPU steps, e.g. {'nvidia.com/gpu.present': 'true'}."
    ).tag(config=True)
    gpu_tolerations = List(
        Dict(),
        default_value=[{"key": DEFAULT_GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        help="Tolerations added to GPU steps, so they can land on tainted GPU nodes.",
    ).tag(config=True)
    retry_backoff_seconds = Int(
        10, help="Wait before the first retry of a step with `retries:N`; doubled on each further retry."
    ).tag(config=True)
    pod_gc_strategy = CaselessStrEnum(
        POD_GC_STRATEGIES,
        default_value="OnPodSuccess",
        help="When Argo deletes step pods. The default keeps failed pods for `kubectl logs`; executed "
        "step notebooks are in the artifact store either way.",
    ).tag(config=True)
    ttl_seconds_after_success = Int(
        86400, help="Delete a succeeded Workflow object this long after it finished; 0: keep it."
    ).tag(config=True)
    ttl_seconds_after_failure = Int(
        7 * 86400, help="Delete a failed Workflow object this long after it finished; 0: keep it."
    ).tag(config=True)


@dataclass(frozen=True)
class PipelineSettings:
    """The validated pipeline and storage config the compiler reads."""

    pipelines: CubePipelines
    storage: CubeStorage
    default_image: str  # resolved: the trait, else the default notebook profile's image
    gpu_node_selector: dict[str, str]
    gpu_tolerations: list[dict[str, Any]]


def pipeline_config(settings: Settings, config: Config | None = None) -> PipelineSettings:
    """Build and validate `CubePipelines` + `CubeStorage` from `config` (default: the Config the
    workbench's own Configurables were loaded from)."""
    config = config if config is not None else settings.workbench.config
    try:
        pipelines = CubePipelines(config=config)
        storage = CubeStorage(config=config)
    except TraitError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    try:
        for name in ("default_cpu", "default_memory"):
            parse_quantity(getattr(pipelines, name), f"CubePipelines.{name}")
        if pipelines.service_account:
            validate_dns_label(pipelines.service_account, "CubePipelines.service_account", 253)
        if storage.credentials_secret:
            validate_dns_label(storage.credentials_secret, "CubeStorage.credentials_secret", 253)
        node_selector = parse_node_selector(pipelines.gpu_node_selector, "CubePipelines.gpu_node_selector")
        tolerations = parse_tolerations(pipelines.gpu_tolerations, "CubePipelines.gpu_tolerations")
    except InvalidInput as exc:
        raise ConfigError(exc.message, field=exc.field) from None
    checks = [
        (
            "gpu_resource",
            "/" in pipelines.gpu_resource,
            "must be an extended resource such as 'nvidia.com/gpu'",
        ),
        ("retry_backoff_seconds", pipelines.retry_backoff_seconds >= 0, "must be >= 0"),
        ("ttl_seconds_after_success", pipelines.ttl_seconds_after_success >= 0, "must be >= 0 (0: keep)"),
        ("ttl_seconds_after_failure", pipelines.ttl_seconds_after_failure >= 0, "must be >= 0 (0: keep)"),
        ("runner_command", bool(pipelines.runner_command), "must not be empty"),
        ("default_image", not any(c.isspace() for c in pipelines.default_image), "must not contain spaces"),
    ]
    for name, ok, why in checks:
        if not ok:
            field = f"CubePipelines.{name}"
            raise ConfigError(f"{field} {getattr(pipelines, name)!r} {why}", field=field)
    return PipelineSettings(
        pipelines=pipelines,
        storage=storage,
        default_image=pipelines.default_image.strip() or settings.profile(None).image,
        gpu_node_selector=node_selector,
        gpu_tolerations=tolerations,
    )

"""How pipeline runs on the cluster are shaped: the `CubePipelines` traitlets admins set.

    c.CubePipelines.default_image = "registry.example.com/ml/step-runner:1.4"
    c.CubePipelines.service_account = "pipeline-runner"

Where artifacts live (and the Secret holding the store's credentials) is `CubeStorage`'s, shared with
local runs and jobs; image, resources, GPU placement and service account are `CubeWorkload`'s, shared
with jobs; this class only holds what the Argo compiler adds on top. `load_settings` checks all of it
once at startup, so a bad value is a ConfigError naming the field, never a Workflow the cluster
rejects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from traitlets import CaselessStrEnum, Int, List, Unicode

from cube_jupyter.configurable import CubeWorkload, WorkloadSettings, checked, non_negative, not_empty

if TYPE_CHECKING:
    pass

RUNNER_COMMAND = ["python", "-m", "cube_jupyter.pipelines.runner"]
POD_GC_STRATEGIES = ["", "OnPodCompletion", "OnPodSuccess", "OnWorkflowCompletion", "OnWorkflowSuccess"]


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

    _runner_command_ok = checked(not_empty, "runner_command")
    _seconds_ok = checked(
        non_negative, "retry_backoff_seconds", "ttl_seconds_after_success", "ttl_seconds_after_failure"
    )


@dataclass(frozen=True)
class PipelineSettings(WorkloadSettings[CubePipelines]):
    """The validated pipeline and storage config the compiler reads."""

    @property
    def pipelines(self) -> CubePipelines:
        return self.workload

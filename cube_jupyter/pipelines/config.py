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
"""

from __future__ import annotations

from dataclasses import dataclass

from traitlets import CaselessStrEnum, Float, Int, List, Unicode

from cube_jupyter.configurable import CubeWorkload, checked, non_negative, not_empty, positive
from cube_jupyter.workbench import WorkloadSettings

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

    _runner_command_ok = checked(not_empty, "runner_command")
    _limits_ok = checked(
        positive, "max_parallel_per_run", "max_parallel_per_user", "max_workers", "worker_idle_seconds"
    )
    _seconds_ok = checked(
        non_negative, "retry_backoff_seconds", "ttl_seconds_after_success", "ttl_seconds_after_failure"
    )


@dataclass(frozen=True, kw_only=True)
class PipelineSettings(WorkloadSettings[CubePipelines]):
    """What the pipelines feature reads: `CubePipelines` and the workbench-wide settings."""

    @property
    def pipelines(self) -> CubePipelines:
        return self.workload

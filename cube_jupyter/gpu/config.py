"""How GPU metrics are read and kept: the `CubeGPU` traitlets admins set.

    c.CubeGPU.prometheus_url = "http://prometheus.monitoring.svc:9090"   # DCGM metrics by pod
    c.CubeGPU.idle_warning_seconds = 3600
    c.CubeGPU.cull_idle_gpu_seconds = 7200   # then stop the server whose GPUs sit idle
    c.CubeGPU.cull_idle_gpu_jobs = True      # ... and the training job (off by default)

`c.CubeWorkbench.prometheus_url` (the issue's name) is honoured too; `CubeGPU.prometheus_url` wins
when both are set (`load_settings` resolves it). Both are checked as config loads at startup, so a
bad value is a ConfigError naming the field, never a failing request later.
"""

from __future__ import annotations

from dataclasses import dataclass

from traitlets import Bool, Float

from cube_jupyter.configurable import CubePrometheus, checked, non_negative, positive
from cube_jupyter.errors import InvalidInput
from cube_jupyter.workbench import WorkbenchSettings

# The most history one request may ask for (a day): Prometheus answers more, but no chart needs it.
MAX_HISTORY_SECONDS = 86400.0


def _history_window(value: float, field: str) -> None:
    if not 0 <= value <= MAX_HISTORY_SECONDS:
        raise InvalidInput(f"{field} {value!r} must be between 0 and {MAX_HISTORY_SECONDS:.0f}", field=field)


class CubeGPU(CubePrometheus):
    """GPU metrics: NVML on this machine (local backend) or DCGM exporter metrics via Prometheus."""

    prometheus_timeout_seconds = Float(5.0, help="Timeout of one Prometheus query.")
    sample_seconds = Float(
        2.0, help="How often the local backend samples NVML into its history (and idle detection)."
    )
    history_seconds = Float(
        600.0, help="How much history `/gpu` returns by default, and how much the local sampler keeps."
    )
    idle_warning_seconds = Float(
        1800.0,
        help="Warn about a kernel or pod that holds GPU memory at 0% utilization for longer; 0: never.",
    )
    cull_idle_gpu_seconds = Float(
        0.0,
        help="Stop a notebook server whose GPUs have held memory at 0% utilization for longer (its "
        "kernels' processes locally, from NVML; its pod on a cluster, from DCGM through Prometheus), "
        "saying why in its stop reason, as cull_idle_seconds does for servers without activity. "
        "Warned first at idle_warning_seconds when that is shorter. 0: never.",
    )
    cull_idle_gpu_jobs = Bool(
        False,
        help="Also stop a training job whose GPUs have held memory at 0% utilization for "
        "cull_idle_gpu_seconds: its replicas stop (processes locally; on a cluster the job is "
        "suspended, through its Kueue Workload when it is queued, so its pods go) and it ends "
        "Failed with reason IdleGPU, saying why; it stays until deleted (locally with its logs; on a "
        "cluster its pods go, their logs with them, as any suspended job's). Off by default: a "
        "training job may sit at 0% for a while by design (a long data load).",
    )
    cache_seconds = Float(
        1.0,
        help="How long one reading answers every `/gpu` request in the same scope (concurrent requests "
        "share one read); 0: read the source on every request.",
    )

    _periods_ok = checked(positive, "prometheus_timeout_seconds", "sample_seconds")
    _optional_periods_ok = checked(
        non_negative, "idle_warning_seconds", "cull_idle_gpu_seconds", "cache_seconds"
    )
    _history_seconds_ok = checked(_history_window, "history_seconds")


@dataclass(frozen=True, kw_only=True)
class GpuSettings(WorkbenchSettings):
    """What the GPU feature reads: `CubeGPU`, and the Prometheus it asks ('' reads NVML): a base URL
    ending in '/', CubeGPU's, else CubeWorkbench's."""

    gpu: CubeGPU
    prometheus_url: str = ""

    @property
    def source(self) -> str:
        return "prometheus" if self.prometheus_url else "nvml"

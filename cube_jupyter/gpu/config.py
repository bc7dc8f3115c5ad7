"""How GPU metrics are read and kept: the `CubeGPU` traitlets admins set.

    c.CubeGPU.prometheus_url = "http://prometheus.monitoring.svc:9090"   # DCGM metrics by pod
    c.CubeGPU.idle_warning_seconds = 3600

`c.CubeWorkbench.prometheus_url` (the issue's name) is honoured too; `CubeGPU.prometheus_url` wins
when both are set. `gpu_config(settings)` validates them once, so a bad value is a ConfigError
naming the field at startup, never a failing request later.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from traitlets import Float, TraitError, Unicode
from traitlets.config import Config, Configurable

from cube_jupyter.config import Settings
from cube_jupyter.errors import ConfigError, CubeError

# The most history one request may ask for (a day): Prometheus answers more, but no chart needs it.
MAX_HISTORY_SECONDS = 86400.0


class CubeGPU(Configurable):
    """GPU metrics: NVML on this machine (local backend) or DCGM exporter metrics via Prometheus."""

    prometheus_url = Unicode(
        "",
        help="Prometheus that scrapes the DCGM exporter (e.g. 'http://prometheus.monitoring:9090'); "
        "'' reads the GPUs of this machine through NVML instead. Overrides CubeWorkbench.prometheus_url.",
    ).tag(config=True)
    prometheus_timeout_seconds = Float(5.0, help="Timeout of one Prometheus query.").tag(config=True)
    sample_seconds = Float(
        2.0, help="How often the local backend samples NVML into its history (and idle detection)."
    ).tag(config=True)
    history_seconds = Float(
        600.0, help="How much history `/gpu` returns by default, and how much the local sampler keeps."
    ).tag(config=True)
    idle_warning_seconds = Float(
        1800.0,
        help="Warn about a kernel or pod that holds GPU memory at 0% utilization for longer; 0: never.",
    ).tag(config=True)
    cache_seconds = Float(
        1.0,
        help="How long one reading answers every `/gpu` request in the same scope (concurrent requests "
        "share one read); 0: read the source on every request.",
    ).tag(config=True)


@dataclass(frozen=True)
class GpuSettings:
    """The validated GPU config; `prometheus_url` is '' for NVML, else a base URL ending in '/'."""

    prometheus_url: str
    prometheus_timeout_seconds: float
    sample_seconds: float
    history_seconds: float
    idle_warning_seconds: float
    cache_seconds: float

    @property
    def source(self) -> str:
        return "prometheus" if self.prometheus_url else "nvml"


def gpu_config(settings: Settings, config: Config | None = None) -> GpuSettings:
    """Build and validate `CubeGPU` from `config` (default: the Config the workbench was loaded from)."""
    config = config if config is not None else settings.workbench.config
    try:
        gpu = CubeGPU(config=config)
    except TraitError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    url, url_field = gpu.prometheus_url, "CubeGPU.prometheus_url"
    if not url.strip():
        url, url_field = settings.workbench.prometheus_url, "CubeWorkbench.prometheus_url"
    url = url.strip()
    if url:
        url = validate_prometheus_url(url, url_field, ConfigError)
    checks = [
        ("prometheus_timeout_seconds", gpu.prometheus_timeout_seconds > 0, "must be > 0"),
        ("sample_seconds", gpu.sample_seconds > 0, "must be > 0"),
        (
            "history_seconds",
            0 <= gpu.history_seconds <= MAX_HISTORY_SECONDS,
            f"must be between 0 and {MAX_HISTORY_SECONDS:.0f}",
        ),
        ("idle_warning_seconds", gpu.idle_warning_seconds >= 0, "must be >= 0 (0: never warn)"),
        ("cache_seconds", gpu.cache_seconds >= 0, "must be >= 0 (0: no cache)"),
    ]
    for name, ok, why in checks:
        if not ok:
            field = f"CubeGPU.{name}"
            raise ConfigError(f"{field} {getattr(gpu, name)!r} {why}", field=field)
    return GpuSettings(
        prometheus_url=url,
        prometheus_timeout_seconds=gpu.prometheus_timeout_seconds,
        sample_seconds=gpu.sample_seconds,
        history_seconds=gpu.history_seconds,
        idle_warning_seconds=gpu.idle_warning_seconds,
        cache_seconds=gpu.cache_seconds,
    )


def validate_prometheus_url(url: str, field: str, error: type[CubeError] = ConfigError) -> str:
    """An http(s) base URL with a host and no query, normalized to end in '/'; `error(message,
    field=...)` otherwise (ConfigError for config, InvalidInput for a CLI flag)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query
    except ValueError:
        ok = False
    if not ok:
        raise error(
            f"{field} {url!r} must be an http(s) URL of Prometheus, e.g. 'http://prometheus:9090'",
            field=field,
        )
    return url.rstrip("/") + "/"

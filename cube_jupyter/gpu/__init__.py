"""GPU usage where people work: metric sources (NVML here, DCGM through Prometheus on a cluster),
attribution of GPU processes to Jupyter kernels, and the inline monitor.

`from cube_jupyter.gpu import monitor; monitor()` shows the monitor in a notebook. `monitor` is
imported on first use so that the server, the CLI and the sources never pay for ipywidgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cube_jupyter.gpu.widget import GpuMonitor, monitor

__all__ = ["GpuMonitor", "monitor"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from cube_jupyter.gpu import widget

        return getattr(widget, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

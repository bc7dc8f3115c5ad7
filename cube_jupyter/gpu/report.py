"""A GPU report read straight from its source, for `cube-jupyter gpu`: this machine's GPUs through
NVML (their processes attributed to the kernels found running, and to the job replicas, models and
pipeline steps the workbench's records name), or the cluster's through Prometheus by pod; and the
report as a table for a terminal."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

from cube_jupyter.gpu.attribution import attribute, attribute_workloads, discover_kernels
from cube_jupyter.gpu.describe import holder, memory, mib, percent, quantity
from cube_jupyter.gpu.model import GpuDevice, GpuReport, Series
from cube_jupyter.gpu.pods import group_pods
from cube_jupyter.gpu.sources import NO_GPU_VISIBLE, NoGpuVisible, no_gpu_visible
from cube_jupyter.process_owners import ProcessOwner

BAR_WIDTH = 10
HISTORY_POINTS = 300


def local_report(owners: Iterable[ProcessOwner] = ()) -> GpuReport:
    """This machine's GPUs through NVML, their processes attributed to the kernels we can see, or
    to the job replicas, models and pipeline steps `owners` names."""
    from cube_jupyter.gpu.nvml import NvmlSource

    source = NvmlSource()
    try:
        devices = source.read()
    except NoGpuVisible as exc:
        return GpuReport(source="nvml", available=False, timestamp=time.time(), message=exc.message)
    finally:
        source.close()
    attributed, kernels = attribute(devices, discover_kernels())
    attributed, workloads = attribute_workloads(attributed, owners)
    return GpuReport(
        source="nvml",
        available=True,
        timestamp=time.time(),
        devices=tuple(attributed),
        kernels=tuple(kernels),
        workloads=tuple(workloads),
    )


def cluster_report(url: str, timeout: float, history_seconds: float) -> GpuReport:
    """Every GPU DCGM reports through Prometheus, grouped by pod; BackendUnavailable if unreachable."""
    from cube_jupyter.gpu.prometheus import PrometheusSource

    source = PrometheusSource(url, timeout=timeout)
    now = time.time()
    try:
        devices = source.read()
    except NoGpuVisible as exc:
        return GpuReport(source="prometheus", available=False, timestamp=now, message=exc.message)
    if not devices:
        message = no_gpu_visible(f"Prometheus at {url} has no DCGM exporter metrics")
        return GpuReport(source="prometheus", available=False, timestamp=now, message=message)
    history: list[Series] = []
    if history_seconds:
        step = float(max(1, math.ceil(history_seconds / HISTORY_POINTS)))
        history = source.history(None, now - history_seconds, now, step)
    return GpuReport(
        source="prometheus",
        available=True,
        timestamp=now,
        devices=tuple(devices),
        pods=tuple(group_pods(devices, {}, {})),
        history=tuple(history),
    )


def render_table(report: GpuReport) -> str:
    """One row per GPU, then who holds it: its pod (Prometheus) or its processes (NVML)."""
    if not report.available:
        return report.message or NO_GPU_VISIBLE
    rows = [("GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "HELD BY")]
    for device in report.devices:
        rows.append(
            (
                str(device.index) if not device.host else f"{device.host}:{device.index}",
                device.name or device.uuid,
                f"{bar(device.utilization_pct)} {percent(device.utilization_pct):>5}",
                memory(device.memory_used_mib, device.memory_total_mib),
                quantity(device.temperature_c, "°C"),
                quantity(device.power_w, "W"),
                _held_by(device),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for device in report.devices:
        for process in device.processes:
            lines.append(
                f"  GPU {device.index}  pid {process.pid}  {mib(process.used_memory_mib)}  "
                f"{holder(process, ())}".rstrip()
            )
    for kernel in report.kernels:
        where = kernel.notebook_path or f"kernel {kernel.kernel_id}"
        lines.append(f"  kernel {kernel.kernel_id[:8]}  {where}: {mib(kernel.memory_used_mib)} of GPU memory")
    for usage in report.workloads:
        lines.append(f"  {usage.workload.label}: {mib(usage.memory_used_mib)} of GPU memory")
    return "\n".join(lines)


def bar(value: float | None, width: int = BAR_WIDTH) -> str:
    """`[####------]`, or a blank bar when the value was not reported."""
    if value is None:
        return "[" + " " * width + "]"
    filled = round(max(0.0, min(100.0, value)) / 100 * width)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def _held_by(device: GpuDevice) -> str:
    if device.pod:
        return f"{device.namespace}/{device.pod}" if device.namespace else device.pod
    if device.namespace is not None or device.host is not None:
        return "(not allocated)"
    return f"{len(device.processes)} process(es)" if device.processes else "-"

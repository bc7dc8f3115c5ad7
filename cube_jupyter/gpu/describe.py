"""Readings in words: the numbers and "held by" phrases the inline monitor and `%gpu --once` show.

One place decides how a GPU value reads (an unreported value is "n/a", never a zero) and how a
process holding memory is named, so the widget and the text table say the same thing.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from cube_jupyter.gpu.model import GpuDevice, GpuProcess

NOT_REPORTED = "n/a"


def percent(value: float | None) -> str:
    return NOT_REPORTED if value is None else f"{value:.0f} %"


def mib(value: float | None) -> str:
    """Memory in MiB or GiB, whichever reads better."""
    if value is None:
        return NOT_REPORTED
    return f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value:.0f} MiB"


def memory(used: float | None, total: float | None) -> str:
    if used is None and total is None:
        return NOT_REPORTED
    return f"{mib(used)} / {mib(total)}"


def quantity(value: float | None, unit: str) -> str:
    return NOT_REPORTED if value is None else f"{value:.0f} {unit}"


def own_kernel_id() -> str | None:
    """This kernel's id, from its connection file name (`kernel-<id>.json`); None outside a kernel."""
    try:
        from ipykernel.connect import get_connection_file

        name = os.path.basename(get_connection_file())
    except Exception:  # not in a kernel, or ipykernel missing: no id to compare with
        return None
    if name.startswith("kernel-") and name.endswith(".json"):
        return name[len("kernel-") : -len(".json")]
    return None


def own_pids() -> set[int]:
    """This kernel's PID and its descendants (DataLoader workers, `!python train.py`)."""
    pids = {os.getpid()}
    try:
        import psutil

        pids.update(child.pid for child in psutil.Process().children(recursive=True))
    except Exception:  # a child gone mid-walk: the kernel's own PID still counts
        pass
    return pids


def holder(process: GpuProcess, own_pids: Collection[int], own_kernel: str | None = None) -> str:
    """Who holds the memory, for the person looking at the notebook.

    `own_pids` are this kernel's PID and its descendants (as the kernel sees them); a process of
    this kernel reads "this notebook" whether or not the server-side attribution found it.
    """
    if process.workload is not None:  # a job, model or step, even one this notebook started
        return process.workload.label
    ours = process.pid in own_pids or (own_kernel is not None and process.kernel_id == own_kernel)
    place = process.notebook_path or (f"kernel {process.kernel_id}" if process.kernel_id else "")
    if ours:
        label = "this notebook" if process.pid == os.getpid() else "this notebook (child process)"
        return f"{label}: {place}" if process.notebook_path else label
    if process.kernel_id:
        where = f" on {process.server}" if process.server else ""
        return f"{place} (kernel {process.kernel_id[:8]}{where})" if process.notebook_path else place + where
    return process.note or ""


def devices_table(
    devices: Sequence[GpuDevice], own_pids: Collection[int], own_kernel: str | None = None
) -> str:
    """A plain-text table of the devices and the processes on each, for a terminal or `%gpu --once`."""
    rows = [("GPU", "name", "util", "memory", "temp", "power", "SM clock")]
    for device in devices:
        rows.append(
            (
                str(device.index),
                device.name or device.uuid,
                percent(device.utilization_pct),
                memory(device.memory_used_mib, device.memory_total_mib),
                quantity(device.temperature_c, "°C"),
                quantity(device.power_w, "W"),
                quantity(device.sm_clock_mhz, "MHz"),
            )
        )
    lines = _aligned(rows)
    for device in devices:
        for instance in device.mig:
            slot = f"{instance.gpu_instance_id}/{_or_dash(instance.compute_instance_id)}"
            used = memory(instance.memory_used_mib, instance.memory_total_mib)
            lines.append(f"  GPU {device.index} MIG {slot} {instance.name or ''}: {used}")
    processes = [(device, process) for device in devices for process in device.processes]
    if processes:
        lines.append("")
        table = [("GPU", "PID", "process", "GPU memory", "held by")]
        for device, process in processes:
            table.append(
                (
                    str(device.index),
                    str(process.pid),
                    process.name or "",
                    mib(process.used_memory_mib),
                    holder(process, own_pids, own_kernel),
                )
            )
        lines.extend(_aligned(table))
    return "\n".join(lines)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]

"""`%gpu`: this kernel's GPUs live in the notebook, as a monitor widget or a text table.

%gpu [--interval S] [--history N] | %gpu --once | %gpu stop
"""

from __future__ import annotations

from IPython.core.error import UsageError

from cube_jupyter.errors import CubeError
from cube_jupyter.magics import MagicArgumentParser, number_type

_positive_seconds = number_type(float, "number of seconds", lambda value: value > 0, "more than 0 seconds")
_samples = number_type(int, "whole number of samples", lambda value: value >= 2, "at least 2 samples")


GPU_PARSER = MagicArgumentParser(
    prog="%gpu",
    description="Show this kernel's GPUs live (utilization, memory, temperature, power, SM clock, "
    "and which notebooks hold their memory).",
    epilog="`%gpu stop` stops the running monitor; `%gpu --once` prints a table and returns.",
)
GPU_PARSER.add_argument("action", nargs="?", choices=("show", "stop"), default="show", help="default: show")
GPU_PARSER.add_argument("--interval", type=_positive_seconds, default=1.0, help="seconds between updates")
GPU_PARSER.add_argument("--history", type=_samples, default=60, help="samples kept for the sparkline")
GPU_PARSER.add_argument("--once", action="store_true", help="print the readings once as text")


def gpu_magic(line: str) -> None:
    """%gpu [--interval S] [--history N] | %gpu --once | %gpu stop"""
    args = GPU_PARSER.parse_line(line)
    if args is None:
        return
    if args.action == "stop":
        if args.once:
            GPU_PARSER.error("--once cannot be combined with stop")
        from cube_jupyter.gpu.widget import stop_current

        stopped = stop_current()
        print("GPU monitor stopped." if stopped is not None else "No GPU monitor is running.")
        return
    if args.once:
        print(gpu_text())
        return
    from cube_jupyter.gpu.widget import monitor

    try:
        monitor(interval=args.interval, history=args.history)
    except CubeError as bad:
        raise UsageError(bad.message) from None


def gpu_text() -> str:
    """The GPUs as a text table with the processes on each; a sentence when none can be read."""
    from cube_jupyter import process_owners
    from cube_jupyter.gpu import describe
    from cube_jupyter.gpu.attribution import attribute, attribute_workloads, discover_kernels
    from cube_jupyter.gpu.sources import NoGpuVisible

    try:
        from cube_jupyter.gpu.nvml import NvmlSource

        devices = NvmlSource().read()
        devices, _ = attribute(devices, discover_kernels())
        devices, _ = attribute_workloads(devices, process_owners.known())
    except NoGpuVisible as gone:
        return gone.message
    except Exception as failure:  # a failing driver is shown, not raised into the user's kernel
        return f"Reading the GPUs failed: {type(failure).__name__}: {failure}"
    return describe.devices_table(devices, describe.own_pids(), describe.own_kernel_id())

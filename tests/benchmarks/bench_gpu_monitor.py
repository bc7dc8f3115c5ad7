"""CPU cost of the inline GPU monitor in a kernel at 1 Hz: the kernel process's CPU seconds over a
20 s window with `monitor(interval=1.0)` running, against the same kernel idle; median of 3 runs each,
interleaved.

The kernel is a real one from the "cube-python" kernelspec, reading a REPLAY of recorded NVML readings
(tests/data/nvml/a100x2-processes.json: two GPUs, four processes), so the cost is the monitor's own
(reading through NvmlSource, attribution, kernel discovery every 10 s, widget updates over IOPub)
and not a driver's. The client drains IOPub as a browser would.
"""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path

import psutil
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from tests.benchmarks.timing import print_table

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "data" / "nvml" / "a100x2-processes.json"
RECORDED_KERNEL_PID = 41234
RUNS = 3
WINDOW_SECONDS = 20.0
WARMUP_SECONDS = 2.0


def _execute(client: BlockingKernelClient, code: str) -> None:
    reply = client.execute_interactive(code, timeout=60, output_hook=lambda message: None)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {code!r}: {reply['content']}")


def _cpu_over_window(process: psutil.Process, client: BlockingKernelClient) -> float:
    """CPU seconds (user + system, all threads) the kernel used in the window, draining IOPub."""
    before = process.cpu_times()
    deadline = time.monotonic() + WINDOW_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        try:
            client.get_iopub_msg(timeout=left)
        except queue.Empty:
            break
    after = process.cpu_times()
    return (after.user - before.user) + (after.system - before.system)


async def main() -> None:
    os.environ["JUPYTER_PATH"] = str(REPO)
    manager = KernelManager(kernel_name="cube-python")
    manager.start_kernel(cwd=str(REPO))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        _execute(
            client,
            f"import os, sys\nsys.path.insert(0, {str(REPO)!r})\n"
            "from tests.gpu.nvml_replay import install\n"
            f"install({str(RECORDING)!r}, pid_map={{{RECORDED_KERNEL_PID}: os.getpid()}})\n"
            "from cube_jupyter.gpu import monitor",
        )
        kernel = psutil.Process(manager.provisioner.pid)  # type: ignore[union-attr]
        idle, monitoring = [], []
        for _ in range(RUNS):  # interleaved, so machine noise hits both alike
            idle.append(_cpu_over_window(kernel, client))
            _execute(client, "m = monitor(interval=1.0)")
            time.sleep(WARMUP_SECONDS)
            monitoring.append(_cpu_over_window(kernel, client))
            _execute(client, "%gpu stop")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    window = f"{WINDOW_SECONDS:.0f} s"
    baseline = f"idle kernel, CPU per {window} (baseline)"
    print_table(
        f"GPU monitor: kernel CPU time per {window} window (median of {RUNS}; NVML replay, 2 GPUs)",
        [(baseline, idle), (f"monitor(interval=1.0) running, CPU per {window}", monitoring)],
        unit="ms",
        baseline=baseline,
    )
    extra = sorted(m - i for m, i in zip(monitoring, idle, strict=True))[len(idle) // 2]
    share = 100 * extra / WINDOW_SECONDS
    print(
        f"  monitor's own cost (median of paired differences): {extra * 1e3:.0f} ms CPU per {window} = "
        f"{share:.2f} % of one core, {extra * 1e3 / WINDOW_SECONDS:.1f} ms per 1 Hz update "
        "(psutil CPU times tick in 10 ms)"
    )


if __name__ == "__main__":
    import asyncio

    asyncio.run(main())

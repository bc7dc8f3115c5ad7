"""The inline monitor's widget model, in this process, fed by a REPLAY of recorded NVML readings
(tests/data/nvml, hand-written in the recorder's format: not a GPU) through the real NvmlSource.

What the widgets hold is compared with the recording itself; the thread tests check that it reads in
the background, stops when asked, and that a second monitor() ends the first's thread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.gpu import widget as gpu_widget
from cube_jupyter.gpu.attribution import KernelProcess
from cube_jupyter.gpu.nvml import NvmlSource
from cube_jupyter.gpu.sources import NoGpuVisible
from cube_jupyter.gpu.widget import THREAD_NAME, GpuMonitor, monitor
from tests.gpu import nvml_replay
from tests.waiting import wait_until

RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "nvml"
MIB = 1024 * 1024
# A PID above the kernel's pid_max exists in no namespace we can see: NVML reporting it is exactly a
# process of another PID namespace.
FOREIGN_PID = int(Path("/proc/sys/kernel/pid_max").read_text()) + 7


def _recording(name: str) -> dict[str, Any]:
    return json.loads((RECORDINGS / name).read_text())


def _calls(recording: dict[str, Any], sample: int, gpu: int) -> dict[str, Any]:
    return recording["samples"][sample]["devices"][gpu]["calls"]


def _monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


@pytest.fixture(autouse=True)
def _no_monitor_left() -> Iterator[None]:
    yield
    running = gpu_widget.current()
    if running is not None:
        running.close()
    assert _monitor_threads() == []


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A real child process, as a DataLoader worker of this kernel would be."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def stranger() -> Iterator[int]:
    """A real process that is not this one's descendant (its shell parent has exited), to stand for
    another kernel."""
    shell = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    pid = int(shell.stdout)
    yield pid
    os.kill(pid, signal.SIGKILL)


def _no_kernels() -> list[KernelProcess]:
    return []


def test_widget_shows_the_recorded_readings_and_who_holds_the_memory(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay], stranger: int
) -> None:
    install_nvml_replay(
        "a100x2-processes.json", pid_map={41234: os.getpid(), 41377: stranger, 52001: FOREIGN_PID}
    )
    other = KernelProcess("0b9f3c2e-1111-4a2b-9c3d-5e6f7a8b9c0d", stranger, "work/train.ipynb", "alice/nb1")
    gpu_monitor = GpuMonitor(NvmlSource(), interval=1.0, history=5, discover=lambda: [other])
    gpu_monitor.refresh()

    recording = _recording("a100x2-processes.json")
    gpu0, gpu1 = (_calls(recording, 0, i) for i in (0, 1))
    view0, view1 = gpu_monitor._views.values()
    assert view0.util_bar.value == gpu0["nvmlDeviceGetUtilizationRates"]["gpu"] == 37
    assert view0.util_text.value == "37 %"
    used, total = (gpu0["nvmlDeviceGetMemoryInfo"][k] / MIB for k in ("used", "total"))
    assert view0.memory_bar.value == pytest.approx(used) and view0.memory_bar.max == pytest.approx(total)
    assert view0.memory_text.value == f"{used / 1024:.1f} GiB / {total / 1024:.1f} GiB"
    figures = view0.figures.value
    assert f"{gpu0['nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)']} °C" in figures
    assert f"{gpu0['nvmlDeviceGetPowerUsage'] / 1000:.0f} W" in figures
    assert f"SM {gpu0['nvmlDeviceGetClockInfo(NVML_CLOCK_SM)']} MHz" in figures
    assert gpu0["nvmlDeviceGetName"] in view0.header.value and gpu0["nvmlDeviceGetUUID"] in view0.header.value
    assert view1.util_bar.value == gpu1["nvmlDeviceGetUtilizationRates"]["gpu"]

    rows0 = _rows(view0.processes.value)
    assert rows0[str(os.getpid())].endswith("<b>this notebook</b></td>")
    assert "work/train.ipynb (kernel 0b9f3c2e on alice/nb1)" in rows0[str(stranger)]
    rows1 = _rows(view1.processes.value)
    assert "not visible in this PID namespace" in rows1[str(FOREIGN_PID)]
    assert "this notebook" in rows1[str(os.getpid())]  # 41234 holds memory on both GPUs
    assert "1 GPU" not in gpu_monitor._title.value and "2 GPUs" in gpu_monitor._title.value
    assert view0.mig.value == ""


def test_a_child_of_this_kernel_is_this_notebook(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay], sleeper: int
) -> None:
    install_nvml_replay("a100x2-processes.json", pid_map={41377: sleeper})
    gpu_monitor = GpuMonitor(NvmlSource(), interval=1.0, history=5, discover=_no_kernels)
    gpu_monitor.refresh()
    rows = _rows(next(iter(gpu_monitor._views.values())).processes.value)
    assert rows[str(sleeper)].endswith("<b>this notebook (child process)</b></td>")
    assert "this notebook" not in rows["41234"]  # a recorded PID that is no process of ours


def _rows(table_html: str) -> dict[str, str]:
    """{pid: the row's HTML} of a process table."""
    rows = {}
    for row in table_html.split("<tr>")[2:]:
        pid = row.split(">", 1)[1].split("<", 1)[0]
        rows[pid] = row.split("</tr>")[0]
    return rows


def test_each_refresh_takes_the_next_sample_and_the_sparkline_keeps_history_samples(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    replay = install_nvml_replay("a100x2-processes.json")
    recording = _recording("a100x2-processes.json")
    gpu_monitor = GpuMonitor(NvmlSource(), interval=1.0, history=4, discover=_no_kernels)
    expected = [
        s["devices"][0]["calls"]["nvmlDeviceGetUtilizationRates"]["gpu"] for s in recording["samples"]
    ]
    seen = []
    for _ in range(6):
        gpu_monitor.refresh()
        seen.append(next(iter(gpu_monitor._views.values())).util_bar.value)
    assert seen == expected[:6] and len(set(seen)) > 1
    assert replay.reads == 6 and gpu_monitor.samples == 6
    sparkline = next(iter(gpu_monitor._views.values())).sparkline.value
    utilization_line = sparkline.split('<polyline points="')[1].split('"')[0]
    assert len(utilization_line.split()) == 4  # history=4: only the last four samples are drawn


def test_kernel_list_is_refreshed_less_often_than_the_readings(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    install_nvml_replay("a100x2-processes.json")
    discoveries: list[float] = []

    def discover() -> list[KernelProcess]:
        discoveries.append(time.monotonic())
        return []

    gpu_monitor = GpuMonitor(NvmlSource(), interval=1.0, history=4, kernel_refresh=3600, discover=discover)
    for _ in range(3):
        gpu_monitor.refresh()
    assert len(discoveries) == 1
    gpu_monitor.kernel_refresh = 0.0
    gpu_monitor.refresh()
    assert len(discoveries) == 2


def test_mig_instances_are_listed(install_nvml_replay: Callable[..., nvml_replay.NvmlReplay]) -> None:
    install_nvml_replay("a100-mig.json")
    gpu_monitor = GpuMonitor(NvmlSource(), interval=1.0, history=4, discover=_no_kernels)
    gpu_monitor.refresh()
    (view,) = gpu_monitor._views.values()
    migs = _recording("a100-mig.json")["samples"][0]["devices"][0]["mig_devices"]
    named = [m["calls"] for m in migs if "calls" in m]
    assert "2 MIG instance(s)" in view.mig.value
    for calls in named:
        assert calls["nvmlDeviceGetUUID"] in view.mig.value
        assert (
            f"{calls['nvmlDeviceGetGpuInstanceId']}/{calls['nvmlDeviceGetComputeInstanceId']}"
            in view.mig.value
        )
    assert view.util_text.value == "n/a"  # NVML reports no utilization for a GPU in MIG mode


def test_unreported_values_read_not_available(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    install_nvml_replay("vgpu-no-power-temp.json")
    gpu_monitor = GpuMonitor(NvmlSource(), interval=1.0, history=4, discover=_no_kernels)
    gpu_monitor.refresh()
    (view,) = gpu_monitor._views.values()
    assert "n/a °C" not in view.figures.value and view.figures.value.count("n/a") == 2
    rows = _rows(view.processes.value)
    assert "<td style='padding:1px 8px;text-align:left'>n/a</td>" in rows["3377"]


def test_a_failed_read_shows_in_the_widget_and_the_next_one_recovers(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    replay = install_nvml_replay("a100x2-processes.json")
    del replay.samples[1]["devices"][0]["calls"]["nvmlDeviceGetUUID"]  # a recording with a hole in it
    gpu_monitor = GpuMonitor(NvmlSource(), interval=1.0, history=4, discover=_no_kernels)
    gpu_monitor.refresh()
    before = next(iter(gpu_monitor._views.values())).util_bar.value
    gpu_monitor.refresh()  # raises LookupError inside the source: shown, not raised
    assert "Reading the GPUs failed: LookupError" in gpu_monitor._status.value
    assert next(iter(gpu_monitor._views.values())).util_bar.value == before  # last readings stay
    gpu_monitor.refresh()
    assert gpu_monitor.last_error is None and "Updated" in gpu_monitor._status.value
    assert gpu_monitor.samples == 2


def test_a_gpu_that_disappears_mid_run_is_said_in_the_widget(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    install_nvml_replay("a100x2-processes.json")
    gpu_monitor = GpuMonitor(NvmlSource(), interval=1.0, history=4, discover=_no_kernels)
    gpu_monitor.refresh()
    nvml_replay.uninstall()  # the real pynvml: no driver on this machine
    try:
        NvmlSource().read()
    except NoGpuVisible:
        pass
    else:
        pytest.skip("this machine has a GPU: the real NVML reads it")
    gpu_monitor.refresh()
    assert "No GPU visible" in gpu_monitor._status.value and gpu_monitor.available


def test_monitor_reads_in_the_background_and_stop_joins_the_thread(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    install_nvml_replay("a100x2-processes.json")
    gpu_monitor = monitor(interval=0.05, history=10)
    assert gpu_monitor.running and len(_monitor_threads()) == 1
    wait_until(lambda: gpu_monitor.samples >= 4, 30, "four samples")
    thread = gpu_monitor._thread
    gpu_monitor.stop()
    assert thread is not None and not thread.is_alive() and not gpu_monitor.running
    assert _monitor_threads() == []  # nothing is left to read again
    assert "Stopped" in gpu_monitor._status.value


def test_a_second_monitor_stops_the_first(install_nvml_replay: Callable[..., nvml_replay.NvmlReplay]) -> None:
    install_nvml_replay("a100x2-processes.json")
    first = monitor(interval=0.05)
    first_thread = first._thread
    second = monitor(interval=0.05)
    assert first_thread is not None and not first_thread.is_alive()
    assert _monitor_threads() == [second._thread] and gpu_widget.current() is second
    second.close()
    assert _monitor_threads() == [] and gpu_widget.current() is None


def test_no_gpu_visible_is_a_message_and_no_thread() -> None:
    try:
        NvmlSource().read()
    except NoGpuVisible as gone:
        reason = gone.message
    else:
        pytest.skip("this machine has a GPU: the real NVML reads it")
    gpu_monitor = monitor()
    assert not gpu_monitor.available and not gpu_monitor.running and _monitor_threads() == []
    assert gpu_monitor._status.value.count("No GPU visible") == 1
    assert reason.split(": ", 1)[-1] in gpu_monitor._status.value
    assert gpu_monitor._views == {}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"interval": 0}, "interval"), ({"interval": "1"}, "interval"), ({"history": 1}, "history")],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        monitor(**kwargs)
    assert caught.value.field == field
    assert _monitor_threads() == []


def test_close_closes_every_widget_model_it_made(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    from ipywidgets.widgets.widget import _instances

    install_nvml_replay("a100x2-processes.json")
    before = set(_instances)
    gpu_monitor = monitor(interval=0.05)
    wait_until(lambda: gpu_monitor.samples >= 2, 30, "two samples")
    assert len(set(_instances) - before) > 20  # two GPUs' bars, texts, tables, layouts and styles
    gpu_monitor.close()
    assert set(_instances) - before == set() and not gpu_monitor.running


def test_start_shows_a_reading_at_once_and_leaves_kernel_discovery_to_the_thread(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    install_nvml_replay("a100x2-processes.json")
    discoveries: list[tuple[bool, int]] = []  # (by the caller's thread, samples by then)

    def discover() -> list[KernelProcess]:
        discoveries.append((threading.current_thread() is caller, gpu_monitor.samples))
        return []

    caller = threading.current_thread()

    gpu_monitor = GpuMonitor(NvmlSource(), interval=0.05, history=4, discover=discover)
    gpu_monitor.start()
    try:
        assert gpu_monitor.samples >= 1  # read by start() itself (the thread may have ticked since)
        wait_until(lambda: gpu_monitor.samples >= 3, 30, "the thread's samples")
        # One discovery, by the monitor's thread, after the first reading was shown; the next is
        # kernel_refresh (10 s) away.
        ((by_caller, samples),) = discoveries
        assert not by_caller and samples >= 1, discoveries
    finally:
        gpu_monitor.close()


def test_a_failed_first_read_is_shown_and_the_thread_still_starts(
    install_nvml_replay: Callable[..., nvml_replay.NvmlReplay],
) -> None:
    replay = install_nvml_replay("a100x2-processes.json")
    del replay.samples[0]["devices"][1]["calls"]["nvmlDeviceGetUUID"]
    gpu_monitor = monitor(interval=3600)  # no tick of its own during the test: only the first read
    assert gpu_monitor.samples == 0 and "Reading the GPUs failed: LookupError" in gpu_monitor._status.value
    assert gpu_monitor.running and not gpu_monitor.no_gpu  # it retries; recovery: see test_a_failed_read_...

"""The monitor in a REAL kernel started from this repository's "cube-python" kernelspec.

Where a test installs a replay, the kernel reads recorded NVML readings (tests/data/nvml, written by
hand in the recorder's format: a replay, not a GPU) through the real NvmlSource. Without one, the
kernel uses the real pynvml, which on a machine without an NVIDIA driver sees no GPU.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from cube_jupyter.gpu.nvml import NvmlSource
from cube_jupyter.gpu.sources import NoGpuVisible

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "data" / "nvml" / "a100x2-processes.json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TIMEOUT = 60.0  # a deadline for a message that must come, not a speed requirement


class Kernel:
    """A started kernel and its client, keeping every IOPub message it has read."""

    def __init__(self, manager: KernelManager) -> None:
        self.manager = manager
        self.client = manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=TIMEOUT)
        self.messages: list[dict[str, Any]] = []

    def execute(self, code: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Run a cell; (its execute_reply content, the IOPub messages that are its own)."""
        msg_id = self.client.execute(code)
        reply = self.client.get_shell_msg(timeout=TIMEOUT)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.client.get_shell_msg(timeout=TIMEOUT)
        start = len(self.messages)
        self.drain_until(lambda m: _is_idle_for(m, msg_id))
        own = [m for m in self.messages[start:] if m["parent_header"].get("msg_id") == msg_id]
        return reply["content"], own

    def drain_until(self, condition: Any) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                message = self.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.messages.append(message)
            if condition(message):
                return message
        raise AssertionError("the kernel did not send the expected message")

    def value_of(self, code: str) -> Any:
        reply, own = self.execute(code)
        assert reply["status"] == "ok", reply
        (result,) = [m for m in own if m["msg_type"] == "execute_result"]
        return eval(result["content"]["data"]["text/plain"])  # a repr the kernel printed

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def _is_idle_for(message: dict[str, Any], msg_id: str) -> bool:
    return (
        message["msg_type"] == "status"
        and message["content"]["execution_state"] == "idle"
        and message["parent_header"].get("msg_id") == msg_id
    )


def _comm_states(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{comm id: the widget state after these messages}: comm_open's state plus later updates."""
    states: dict[str, dict[str, Any]] = {}
    for message in messages:
        content = message["content"]
        if message["msg_type"] == "comm_open":
            states[content["comm_id"]] = dict(content["data"]["state"])
        elif message["msg_type"] == "comm_msg" and content["data"].get("method") == "update":
            states.setdefault(content["comm_id"], {}).update(content["data"]["state"])
    return states


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Kernel]:
    monkeypatch.setenv("JUPYTER_PATH", str(REPO))  # finds kernels/cube-python without installing
    spec = KernelSpecManager().get_kernel_spec("cube-python")
    assert Path(spec.resource_dir) == REPO / "kernels" / "cube-python"
    assert spec.display_name == "Python 3 (cube-jupyter)"
    manager = KernelManager(kernel_name="cube-python")
    manager.start_kernel(cwd=str(REPO))
    started = Kernel(manager)
    yield started
    started.close()


def _gpu_visible_here() -> bool:
    try:
        NvmlSource().read()
    except NoGpuVisible:
        return False
    return True


def test_the_kernelspec_loads_the_gpu_magic_and_no_gpu_is_a_message(kernel: Kernel) -> None:
    assert kernel.value_of("get_ipython().find_line_magic('gpu') is not None") is True
    if _gpu_visible_here():
        pytest.skip("this machine has a GPU: the real NVML reads it")

    reply, own = kernel.execute("%gpu")
    assert reply["status"] == "ok" and not [m for m in own if m["msg_type"] == "error"]
    (shown,) = [m for m in own if m["msg_type"] == "display_data"]
    assert WIDGET_VIEW in shown["content"]["data"]
    texts = [s.get("value", "") for s in _comm_states(own).values()]
    assert any("No GPU visible: " in text for text in texts)
    assert kernel.value_of("[t.name for t in __import__('threading').enumerate() if 'gpu' in t.name]") == []

    reply, own = kernel.execute("%gpu --once")
    (printed,) = [m["content"]["text"] for m in own if m["msg_type"] == "stream"]
    assert reply["status"] == "ok" and printed.startswith("No GPU visible: ")


def test_bad_magic_arguments_are_a_usage_message_not_a_traceback(kernel: Kernel) -> None:
    for line, complaint in [
        ("%gpu --interval 0", "argument --interval: '0' must be more than 0 seconds"),
        ("%gpu --history two", "argument --history: 'two' is not a whole number of samples"),
        ("%gpu pause", "argument action: invalid choice: 'pause'"),
        ("%gpu stop --once", "--once cannot be combined with stop"),
    ]:
        _, own = kernel.execute(line)
        assert [m for m in own if m["msg_type"] == "error"] == []
        (stderr,) = [m["content"]["text"] for m in own if m["msg_type"] == "stream"]
        assert stderr.startswith("UsageError: usage: %gpu ") and complaint in stderr, stderr
    _, own = kernel.execute("%gpu stop")
    assert [m["content"]["text"] for m in own if m["msg_type"] == "stream"] == [
        "No GPU monitor is running.\n"
    ]
    reply, own = kernel.execute("%gpu --help")
    (printed,) = [m["content"] for m in own if m["msg_type"] == "stream"]
    assert (
        reply["status"] == "ok" and printed["name"] == "stdout" and "--interval INTERVAL" in printed["text"]
    )


def test_monitor_renders_updates_in_the_background_and_the_kernel_answers_other_cells(kernel: Kernel) -> None:
    recording = json.loads(RECORDING.read_text())
    calls0 = recording["samples"][0]["devices"][0]["calls"]
    recorded_pid = calls0["nvmlDeviceGetComputeRunningProcesses"][0]["pid"]
    utilization = [
        s["devices"][0]["calls"]["nvmlDeviceGetUtilizationRates"]["gpu"] for s in recording["samples"]
    ]
    kernel_pid = kernel.value_of("__import__('os').getpid()")
    reply, _ = kernel.execute(
        f"import os, sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from tests.gpu.nvml_replay import install\n"
        f"replay = install({str(RECORDING)!r}, pid_map={{{recorded_pid}: os.getpid()}})"
    )
    assert reply["status"] == "ok", reply

    # As a cell's last expression the monitor shows once: no second view from the displayhook.
    reply, own = kernel.execute("from cube_jupyter.gpu import monitor\nmonitor(interval=0.2)")
    after_display = len(kernel.messages)
    assert reply["status"] == "ok", reply
    (shown,) = [m for m in own if m["msg_type"] in ("display_data", "execute_result")]
    assert shown["msg_type"] == "display_data" and WIDGET_VIEW in shown["content"]["data"]
    kernel.execute("from cube_jupyter.gpu.widget import current\nm = current()")
    states = _comm_states(own)
    (bar_id,) = [
        comm_id
        for comm_id, state in states.items()
        if state.get("description") == "Utilization" and state.get("value") == float(utilization[0])
    ]
    tables = [s["value"] for s in states.values() if "Processes holding memory" in str(s.get("value"))]
    own_rows = [row for table in tables for row in table.split("<tr>") if f">{kernel_pid}</td>" in row]
    assert own_rows and all("<b>this notebook</b>" in row for row in own_rows)

    # The thread's updates arrive over IOPub, sample after sample, with no cell running.
    def bar_updates() -> list[float]:
        values = []
        for message in kernel.messages[after_display:]:
            content = message["content"]
            is_bar = message["msg_type"] == "comm_msg" and content["comm_id"] == bar_id
            if is_bar and "value" in content["data"]["state"]:
                values.append(content["data"]["state"]["value"])
        return values

    if len(bar_updates()) < 3:
        kernel.drain_until(lambda message: len(bar_updates()) >= 3)
    assert bar_updates()[:3] == [float(u) for u in utilization[1:4]]

    # Another cell answers while the monitor runs, and the monitor keeps going after it.
    assert kernel.value_of("1+1") == 2
    samples_then = kernel.value_of("m.samples")
    seen = len(bar_updates())
    kernel.drain_until(lambda message: len(bar_updates()) > seen)
    assert kernel.value_of("m.samples") > samples_then and kernel.value_of("m.running") is True

    _, own = kernel.execute("%gpu stop")
    assert [m["content"]["text"] for m in own if m["msg_type"] == "stream"] == ["GPU monitor stopped.\n"]
    assert kernel.value_of("[t.name for t in __import__('threading').enumerate() if 'gpu' in t.name]") == []

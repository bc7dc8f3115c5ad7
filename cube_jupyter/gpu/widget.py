"""The inline GPU monitor: `monitor()` in a notebook shows each GPU live, updated by a daemon thread.

The thread only reads NVML and sets widget traits; ipykernel sends the resulting comm messages on
its IOPub thread, so the kernel keeps answering cells while the monitor runs. Anything that goes
wrong while reading shows in the widget's status line and the thread carries on: nothing raises into
the user's kernel. One monitor runs per kernel; a new `monitor()` stops the previous one's thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from html import escape

import ipywidgets as widgets

from cube_jupyter import process_owners
from cube_jupyter.errors import InvalidInput
from cube_jupyter.gpu import describe
from cube_jupyter.gpu.attribution import KernelProcess, attribute, attribute_workloads, discover_kernels
from cube_jupyter.gpu.model import GpuDevice, MigInstance
from cube_jupyter.gpu.sources import GpuSource, NoGpuVisible
from cube_jupyter.gpu.sparkline import SparkLine, sparkline_svg
from cube_jupyter.process_owners import ProcessOwner

KERNEL_REFRESH_SECONDS = 10.0  # finding this server's kernels costs HTTP calls; the PIDs rarely change
THREAD_NAME = "cube-gpu-monitor"
UTIL_COLOR = "#1f77b4"
MEMORY_COLOR = "#ff7f0e"
LABEL_STYLE = {"description_width": "70px"}

_current_lock = threading.Lock()
_current: GpuMonitor | None = None


def monitor(interval: float = 1.0, history: int = 60, source: GpuSource | None = None) -> GpuMonitor:
    """Show the GPUs this kernel can see, refreshed every `interval` seconds with `history` samples
    of sparkline; `source` defaults to NVML. Stops the monitor this kernel showed before."""
    _validate(interval, history)
    global _current
    with _current_lock:
        previous, _current = _current, None
    if previous is not None:
        previous.stop()
    gpu_monitor = GpuMonitor(source, interval=interval, history=history)
    gpu_monitor.start()
    with _current_lock:
        _current = gpu_monitor
    gpu_monitor.display()
    return gpu_monitor


def current() -> GpuMonitor | None:
    """The monitor `monitor()` last started in this kernel, if any."""
    return _current


def _validate(interval: float, history: int) -> None:
    if not isinstance(interval, int | float) or isinstance(interval, bool) or not interval > 0:
        raise InvalidInput(f"interval {interval!r} must be a positive number of seconds", field="interval")
    if not isinstance(history, int) or isinstance(history, bool) or history < 2:
        raise InvalidInput(
            f"history {history!r} must be a whole number of samples, at least 2", field="history"
        )


class GpuMonitor:
    """The widget tree and the thread that keeps it current. `widget` is the ipywidgets VBox."""

    def __init__(
        self,
        source: GpuSource | None = None,
        *,
        interval: float = 1.0,
        history: int = 60,
        kernel_refresh: float = KERNEL_REFRESH_SECONDS,
        discover: Callable[[], list[KernelProcess]] = discover_kernels,
        owners: Callable[[], list[ProcessOwner]] = process_owners.known,
    ) -> None:
        _validate(interval, history)
        self.interval = float(interval)
        self.history = history
        self.kernel_refresh = kernel_refresh
        self.samples = 0  # successful reads so far
        self.available = False  # a GPU has been read
        self.no_gpu = False  # the source said no GPU is visible before any was read
        self.last_error: str | None = None
        self._source = source
        self._owns_source = source is None  # an NVML source we opened, and close when stopped
        self._discover = discover
        self._owners_now = owners
        self._kernels: list[KernelProcess] = []
        self._owners: list[ProcessOwner] = []
        self._kernels_read_at = float("-inf")
        self._own_pids: set[int] = {os.getpid()}
        self._own_kernel = describe.own_kernel_id()
        self._series: dict[str, deque[tuple[float | None, float | None]]] = {}
        self._views: dict[str, _GpuView] = {}
        self._stop = threading.Event()
        self._tick_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._displayed_in: int | None = None
        self._title = widgets.HTML("<b>GPUs</b>")
        self._status = widgets.HTML("")
        self._gpus = widgets.VBox([])
        self.widget = widgets.VBox([self._title, self._status, self._gpus])

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Read once now; with a GPU visible, keep reading in a daemon thread. No GPU: no thread."""
        try:
            source = self._open_source()
        except NoGpuVisible as gone:
            self._show_no_gpu(gone.message)
            return
        self._source = source
        # The first reading shows at once; finding the kernels (slower) is left to the thread.
        self._refresh(with_kernels=False)
        if self.no_gpu:
            return
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it; the widget keeps its last readings."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10.0)  # the thread waits on the stop event: it ends within a read
        if self._owns_source and self._source is not None and not self.running:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()
        if self.available:
            self._status.value = f"Stopped at {time.strftime('%H:%M:%S')} after {self.samples} samples."

    def close(self) -> None:
        """Stop, and close every widget of the monitor (their views disappear from the notebook)."""
        global _current
        self.stop()
        with _current_lock:
            if _current is self:
                _current = None
        _close_tree(self.widget)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def display(self) -> None:
        """Show the widget in the notebook (a no-op outside IPython)."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        shell = get_ipython()
        if shell is None:
            return
        self._displayed_in = shell.execution_count
        display(self.widget)

    def _ipython_display_(self) -> None:
        # `monitor()` as a cell's last line has already displayed the widget in that cell; showing it
        # again from the displayhook would draw it twice. Evaluating the monitor later shows it again.
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None and shell.execution_count == self._displayed_in:
            return
        self.display()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        gpus = len(self._views)
        return f"<GpuMonitor {state}, every {self.interval:g} s, {gpus} GPU(s), {self.samples} samples>"

    # -- reading -----------------------------------------------------------------------------------

    def _open_source(self) -> GpuSource:
        if self._source is not None:
            return self._source
        from cube_jupyter.gpu.nvml import NvmlSource

        return NvmlSource()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def refresh(self) -> None:
        """Read the source once and update the widget. Never raises: failures go to the status line."""
        self._refresh(with_kernels=True)

    def _refresh(self, *, with_kernels: bool) -> None:
        with self._tick_lock:
            try:
                if with_kernels:
                    self._refresh_kernels()
                assert self._source is not None
                devices = self._source.read()
                devices, _kernels = attribute(devices, self._kernels)
                devices, _workloads = attribute_workloads(devices, self._owners)
            except NoGpuVisible as gone:
                if not self.available:
                    self._show_no_gpu(gone.message)
                else:
                    self._show_error(gone.message)
                return
            except Exception as failure:  # an NVML error mid-run must not reach the user's kernel
                self._show_error(f"Reading the GPUs failed: {type(failure).__name__}: {failure}")
                return
            self.available, self.no_gpu = True, False
            self.samples += 1
            self.last_error = None
            self._show(devices)

    def _refresh_kernels(self) -> None:
        now = time.monotonic()
        if now - self._kernels_read_at < self.kernel_refresh:
            return
        self._kernels_read_at = now
        try:
            self._kernels = self._discover()
        except Exception:  # attribution is a nicety; the readings still show without it
            self._kernels = []
        self._owners = self._owners_now()
        self._own_pids = describe.own_pids()

    # -- drawing -----------------------------------------------------------------------------------

    def _show_no_gpu(self, message: str) -> None:
        self.no_gpu = True
        self.last_error = message
        self._title.value = "<b>GPUs</b>"
        self._status.value = f"<span style='color:#a15c00'>{escape(self.last_error)}</span>"

    def _show_error(self, message: str) -> None:
        self.last_error = message
        when = time.strftime("%H:%M:%S")
        self._status.value = (
            f"<span style='color:#b00020'>{escape(message)}</span> "
            f"<span style='color:#666'>({when}; still trying every {self.interval:g} s)</span>"
        )

    def _show(self, devices: Sequence[GpuDevice]) -> None:
        seen = [device.uuid for device in devices]
        for device in devices:
            series = self._series.setdefault(device.uuid, deque(maxlen=self.history))
            series.append((device.utilization_pct, device.memory_used_mib))
        if seen != list(self._views):  # GPUs appeared or went (rare): rebuild the list
            for uuid in set(self._views) - set(seen):
                _close_tree(self._views.pop(uuid).box)
                self._series.pop(uuid, None)
            self._views = {uuid: self._views.get(uuid) or _GpuView() for uuid in seen}
            self._gpus.children = [view.box for view in self._views.values()]
        for device in devices:
            self._views[device.uuid].update(
                device, self._series[device.uuid], self.history, self._own_pids, self._own_kernel
            )
        count = len(devices)
        self._title.value = f"<b>{count} GPU{'s' if count != 1 else ''}</b>"
        self._status.value = (
            f"<span style='color:#666'>Updated {time.strftime('%H:%M:%S')} · every {self.interval:g} s · "
            f"sparkline: last {self.history} samples (<span style='color:{UTIL_COLOR}'>utilization</span>, "
            f"<span style='color:{MEMORY_COLOR}'>memory</span>)</span>"
        )


class _GpuView:
    """The widgets of one GPU: header, bars, figures, sparkline, MIG slices and processes."""

    def __init__(self) -> None:
        self.header = widgets.HTML()
        self.util_bar = widgets.FloatProgress(
            min=0.0, max=100.0, description="Utilization", style=LABEL_STYLE
        )
        self.util_text = widgets.HTML()
        self.memory_bar = widgets.FloatProgress(min=0.0, max=1.0, description="Memory", style=LABEL_STYLE)
        self.memory_text = widgets.HTML()
        self.figures = widgets.HTML()
        self.sparkline = widgets.HTML()
        self.mig = widgets.HTML()
        self.processes = widgets.HTML()
        bars = widgets.VBox(
            [
                widgets.HBox([self.util_bar, self.util_text]),
                widgets.HBox([self.memory_bar, self.memory_text]),
                self.figures,
            ]
        )
        self.box = widgets.VBox(
            [self.header, widgets.HBox([bars, self.sparkline]), self.mig, self.processes],
            layout=widgets.Layout(border="1px solid #ddd", padding="4px", margin="2px 0"),
        )

    def update(
        self,
        device: GpuDevice,
        series: Sequence[tuple[float | None, float | None]],
        history: int,
        own_pids: set[int],
        own_kernel: str | None,
    ) -> None:
        self.header.value = (
            f"<b>GPU {device.index}</b> · {escape(device.name or 'unknown model')} "
            f"<span style='color:#888'>{escape(device.uuid)}</span>"
        )
        self.util_bar.value = min(max(device.utilization_pct or 0.0, 0.0), 100.0)
        self.util_text.value = describe.percent(device.utilization_pct)
        total = device.memory_total_mib
        with self.memory_bar.hold_sync():
            self.memory_bar.max = total if total else 1.0
            self.memory_bar.value = min(device.memory_used_mib or 0.0, self.memory_bar.max)
            full = bool(total) and (device.memory_used_mib or 0.0) >= 0.9 * (total or 1.0)
            self.memory_bar.bar_style = "warning" if full else ""
        self.memory_text.value = describe.memory(device.memory_used_mib, total)
        temperature = describe.quantity(device.temperature_c, "°C")
        power = describe.quantity(device.power_w, "W")
        clock = describe.quantity(device.sm_clock_mhz, "MHz")
        self.figures.value = f"<span style='margin-left:74px'>{temperature} · {power} · SM {clock}</span>"
        self.sparkline.value = sparkline_svg(
            [
                SparkLine([u for u, _ in series], maximum=100.0, color=UTIL_COLOR, label="utilization %"),
                SparkLine(
                    [m for _, m in series], maximum=total or 0.0, color=MEMORY_COLOR, label="memory used"
                ),
            ],
            capacity=history,
        )
        self.mig.value = _mig_table(device.mig)
        self.processes.value = _process_table(device, own_pids, own_kernel)


TABLE_STYLE = "border-collapse:collapse;font-size:12px;margin-top:4px"
CELL = "padding:1px 8px;text-align:left"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], caption: str) -> str:
    head = "".join(f"<th style='{CELL}'>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td style='{CELL}'>{cell}</td>" for cell in row) + "</tr>" for row in rows
    )
    return (
        f"<table style='{TABLE_STYLE}'>"
        f"<caption style='text-align:left;color:#666'>{escape(caption)}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _mig_table(instances: Sequence[MigInstance]) -> str:
    if not instances:
        return ""
    rows = [
        (
            f"{i.gpu_instance_id}/{'-' if i.compute_instance_id is None else i.compute_instance_id}",
            escape(i.name or ""),
            escape(describe.memory(i.memory_used_mib, i.memory_total_mib)),
            f"<span style='color:#888'>{escape(i.uuid or '')}</span>",
        )
        for i in instances
    ]
    return _table(("GI/CI", "MIG profile", "memory", "UUID"), rows, f"{len(rows)} MIG instance(s)")


def _process_table(device: GpuDevice, own_pids: set[int], own_kernel: str | None) -> str:
    if not device.processes:
        return "<span style='color:#666;font-size:12px'>No process holds memory on this GPU.</span>"
    named = any(process.name for process in device.processes)  # NVML itself names no process
    rows: list[tuple[str, ...]] = []
    for process in sorted(device.processes, key=lambda p: -(p.used_memory_mib or 0.0)):
        held_by = describe.holder(process, own_pids, own_kernel)
        ours = held_by.startswith("this notebook")
        rows.append(
            (
                str(process.pid),
                *([escape(process.name or "")] if named else []),
                escape(describe.mib(process.used_memory_mib)),
                f"<b>{escape(held_by)}</b>" if ours else escape(held_by),
            )
        )
    headers = ("PID", *(["process"] if named else []), "GPU memory", "held by")
    return _table(headers, rows, "Processes holding memory")


def _close_tree(widget: widgets.Widget) -> None:
    """Close a widget, its children, and their layout and style models (close() does not cascade)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
        if isinstance(part, widgets.Widget):
            part.close()
    widget.close()


def stop_current() -> GpuMonitor | None:
    """Stop the monitor this kernel runs (what `%gpu stop` does); its widget keeps the last readings."""
    global _current
    with _current_lock:
        running, _current = _current, None
    if running is not None:
        running.stop()
    return running

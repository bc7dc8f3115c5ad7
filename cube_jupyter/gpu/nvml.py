"""GPU readings from this machine's NVIDIA driver through NVML (`nvidia-ml-py`, module `pynvml`).

This runs inside users' kernels (the inline monitor) and the Jupyter server (`/gpu`), so it never
raises for a metric a device cannot report: that metric is `None`. A machine without the driver, or
with no GPU, is the `NoGpuVisible` state with a message that says which.

The NVML module is looked up at call time (`local.gpus.NVML`, this machine's one, unless one is
passed in), so a recorded replay of NVML readings can stand in for the driver: see
`tests/gpu/nvml_replay.py`.
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType
from typing import Any

from cube_jupyter.gpu.model import GpuDevice, GpuProcess, MigInstance
from cube_jupyter.gpu.sources import NoGpuVisible
from cube_jupyter.local import gpus

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# Why NVML could not start, by pynvml's error class, in words a user can act on.
_INIT_FAILURES = {
    "NVMLError_LibraryNotFound": "the NVIDIA driver library libnvidia-ml.so.1 is not loaded on this machine",
    "NVMLError_DriverNotLoaded": "the NVIDIA driver is not loaded on this machine",
    "NVMLError_NoPermission": "this process is not permitted to query the NVIDIA driver",
    "NVMLError_LibRmVersionMismatch": (
        "the NVIDIA driver library does not match the loaded kernel module (reboot or reload the driver)"
    ),
}


class NvmlSource:
    """Reads every GPU NVML can see: utilization, memory, temperature, power, SM clock, the
    processes holding memory and, in MIG mode, the MIG instances.

    Thread-safe: the widget's background thread and a cell may read at once. NVML is initialised on
    the first read and again after `close()`.
    """

    name = "nvml"

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self._nvml_override = nvml
        self._lock = threading.Lock()
        self._initialised: Any = None  # the module nvmlInit succeeded on, if any

    @property
    def _nvml(self) -> Any:
        return self._nvml_override if self._nvml_override is not None else gpus.NVML

    def read(self) -> list[GpuDevice]:
        """Every visible GPU now; raises NoGpuVisible when NVML cannot start or sees none."""
        with self._lock:
            nvml = self._nvml
            self._init(nvml)
            try:
                count = int(nvml.nvmlDeviceGetCount())
            except nvml.NVMLError as err:
                if type(err).__name__ != "NVMLError_Uninitialized":
                    raise NoGpuVisible(f"NVML could not count the GPUs ({err})") from None
                # Something else in this process shut NVML down: start it again, once.
                self._initialised = None
                self._init(nvml)
                try:
                    count = int(nvml.nvmlDeviceGetCount())
                except nvml.NVMLError as again:
                    raise NoGpuVisible(f"NVML could not count the GPUs ({again})") from None
            if count == 0:
                raise NoGpuVisible(
                    "the NVIDIA driver reports no GPU to this process "
                    "(none installed, or none assigned to this container)"
                )
            devices = []
            for index in range(count):
                device = self._read_device(nvml, index)
                if device is not None:
                    devices.append(device)
            return devices

    def close(self) -> None:
        """Shut NVML down; a later read starts it again."""
        with self._lock:
            nvml, self._initialised = self._initialised, None
            if nvml is not None:
                try:
                    nvml.nvmlShutdown()
                except nvml.NVMLError as err:
                    log.debug("nvmlShutdown: %s", err)

    def _init(self, nvml: Any) -> None:
        if self._initialised is nvml:
            return
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            reason = _INIT_FAILURES.get(type(err).__name__, f"NVML could not start ({err})")
            raise NoGpuVisible(reason) from None
        self._initialised = nvml

    def _read_device(self, nvml: Any, index: int) -> GpuDevice | None:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle)) or f"GPU-{index}"
        except nvml.NVMLError as err:
            # Typically a GPU outside this container's cgroup (NoPermission) or one that fell off the bus.
            log.debug("GPU %d skipped: %s", index, err)
            return None
        utilization = _metric(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = _metric(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        temperature = _metric(nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        power_mw = _metric(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
        sm_clock = _metric(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        return GpuDevice(
            index=index,
            uuid=uuid,
            name=_text(_metric(nvml, nvml.nvmlDeviceGetName, handle)),
            utilization_pct=_number(getattr(utilization, "gpu", None)),
            memory_used_mib=_mib(getattr(memory, "used", None)),
            memory_total_mib=_mib(getattr(memory, "total", None)),
            temperature_c=_number(temperature),
            power_w=None if power_mw is None else float(power_mw) / 1000.0,
            sm_clock_mhz=_number(sm_clock),
            processes=_processes(nvml, handle),
            mig=_mig_instances(nvml, handle),
        )


def _metric(nvml: Any, call: Any, *args: Any) -> Any:
    """One NVML call; None when the device does not support or cannot report it."""
    try:
        return call(*args)
    except nvml.NVMLError_NotSupported:
        return None
    except nvml.NVMLError as err:
        log.debug("%s: %s", getattr(call, "__name__", call), err)
        return None


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes, one entry per PID (a process can be both)."""
    by_pid: dict[int, GpuProcess] = {}
    for call in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
        for info in _metric(nvml, call, handle) or ():
            pid = int(info.pid)
            if pid not in by_pid or by_pid[pid].used_memory_mib is None:
                by_pid[pid] = GpuProcess(pid=pid, used_memory_mib=_mib(getattr(info, "usedGpuMemory", None)))
    return tuple(by_pid[pid] for pid in sorted(by_pid))


def _mig_instances(nvml: Any, handle: Any) -> tuple[MigInstance, ...]:
    """The MIG instances of a GPU in MIG mode; () for any other GPU."""
    mode = _metric(nvml, nvml.nvmlDeviceGetMigMode, handle)
    if not mode or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
        return ()
    slots = _metric(nvml, nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    instances = []
    for slot in range(int(slots)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:  # NotFound: an empty slot
            continue
        gi = _metric(nvml, nvml.nvmlDeviceGetGpuInstanceId, mig)
        if gi is None:
            continue
        ci = _metric(nvml, nvml.nvmlDeviceGetComputeInstanceId, mig)
        memory = _metric(nvml, nvml.nvmlDeviceGetMemoryInfo, mig)
        instances.append(
            MigInstance(
                gpu_instance_id=int(gi),
                compute_instance_id=None if ci is None else int(ci),
                uuid=_text(_metric(nvml, nvml.nvmlDeviceGetUUID, mig)),
                name=_text(_metric(nvml, nvml.nvmlDeviceGetName, mig)),
                memory_used_mib=_mib(getattr(memory, "used", None)),
                memory_total_mib=_mib(getattr(memory, "total", None)),
            )
        )
    return tuple(instances)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _mib(value: Any) -> float | None:
    return None if value is None else float(value) / MIB


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)

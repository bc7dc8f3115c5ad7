"""A replay of recorded NVML readings, standing in for `pynvml` where there is no GPU.

The recordings (`tests/data/nvml/*.json`, written by `python -m cube_jupyter.gpu.record`) hold every
answer NVML gave `NvmlSource`; `NvmlReplay` gives the same answers back, sample after sample, to the
real `NvmlSource` code. It is a replay, not a GPU: say so in any test that uses it.

In a test, in a kernel cell, or in a `jupyter_server_config.py`:

    from tests.gpu.nvml_replay import install, uninstall
    replay = install("tests/data/nvml/a100x2-processes.json", pid_map={41234: os.getpid()})
    ...            # every NvmlSource in this process now reads the replay
    uninstall()    # back to the real pynvml

`pid_map` turns recorded PIDs into live ones, so per-kernel attribution can find a real process.
Each read cycle (`nvmlDeviceGetCount`, called once per `NvmlSource.read()`) moves to the next
recorded sample, looping at the end.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from cube_jupyter.gpu.record import ARGUMENT_NAMES, FORMAT, call_key
from cube_jupyter.local import gpus


class NVMLError(Exception):
    """Base of the replayed NVML errors; each recorded error name becomes a subclass, as in pynvml."""

    def __str__(self) -> str:
        return type(self).__name__.removeprefix("NVMLError_")


_ERROR_CLASSES: dict[str, type[NVMLError]] = {}


def error_class(name: str) -> type[NVMLError]:
    """The replay's class for a pynvml error name such as `NVMLError_NotSupported`."""
    if name not in _ERROR_CLASSES:
        _ERROR_CLASSES[name] = type(name, (NVMLError,), {"__module__": __name__})
    return _ERROR_CLASSES[name]


class _Handle:
    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record


class NvmlReplay(ModuleType):
    """Answers the pynvml calls `NvmlSource` makes from a recording, one sample per read (a module
    object, as `pynvml` is, so it can stand wherever pynvml does)."""

    NVMLError = NVMLError
    NVMLError_NotSupported = error_class("NVMLError_NotSupported")
    NVMLError_Uninitialized = error_class("NVMLError_Uninitialized")
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, recording: dict[str, Any], pid_map: dict[int, int] | None = None) -> None:
        super().__init__("pynvml_replay", "A replay of recorded NVML readings.")
        if recording.get("format") != FORMAT or not recording.get("samples"):
            raise ValueError(f"not an NVML recording in format {FORMAT}")
        self.recording = recording
        self.samples: list[dict[str, Any]] = recording["samples"]
        self.pid_map = dict(pid_map or {})
        self.reads = 0  # read cycles answered so far
        self.initialised = False
        self._lock = threading.Lock()
        self._sample = self.samples[0]

    @classmethod
    def from_file(cls, path: str | Path, pid_map: dict[int, int] | None = None) -> NvmlReplay:
        return cls(json.loads(Path(path).read_text()), pid_map)

    @property
    def sample_index(self) -> int:
        """The recorded sample the last read cycle answered from."""
        return (self.reads - 1) % len(self.samples)

    # -- lifecycle -----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._require_init()
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        with self._lock:
            self._sample = self.samples[self.reads % len(self.samples)]
            self.reads += 1
        return int(_answer(self._sample, "nvmlDeviceGetCount"))

    # -- handles -------------------------------------------------------------------------------

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._require_init()
        return _Handle(_raise_recorded(_by_index(self._sample["devices"], index, "device")))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        return _Handle(_raise_recorded(_by_index(handle.record["mig_devices"], index, "MIG device")))

    # -- per-device readings -------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return str(self._call(handle, "nvmlDeviceGetUUID"))

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return str(self._call(handle, "nvmlDeviceGetName"))

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(**self._call(handle, "nvmlDeviceGetUtilizationRates"))

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(**self._call(handle, "nvmlDeviceGetMemoryInfo"))

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return int(self._call(handle, "nvmlDeviceGetTemperature", sensor))

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return int(self._call(handle, "nvmlDeviceGetPowerUsage"))

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        return int(self._call(handle, "nvmlDeviceGetClockInfo", clock))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        return self._processes(self._call(handle, "nvmlDeviceGetComputeRunningProcesses"))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        return self._processes(self._call(handle, "nvmlDeviceGetGraphicsRunningProcesses"))

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        return [int(mode) for mode in self._call(handle, "nvmlDeviceGetMigMode")]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        return int(self._call(handle, "nvmlDeviceGetMaxMigDeviceCount"))

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        return int(self._call(handle, "nvmlDeviceGetGpuInstanceId"))

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> int:
        return int(self._call(handle, "nvmlDeviceGetComputeInstanceId"))

    # -- helpers -------------------------------------------------------------------------------

    def _call(self, handle: _Handle, name: str, *args: Any) -> Any:
        self._require_init()
        for arg in args:
            if arg not in ARGUMENT_NAMES.get(name, {}):
                raise LookupError(f"{name}: argument {arg!r} has no recorded name")
        return _answer(handle.record["calls"], call_key(name, args))

    def _processes(self, recorded: list[dict[str, Any]]) -> list[SimpleNamespace]:
        processes = []
        for info in recorded:
            fields = dict(info)
            fields["pid"] = self.pid_map.get(int(fields["pid"]), int(fields["pid"]))
            processes.append(SimpleNamespace(**fields))
        return processes

    def _require_init(self) -> None:
        if not self.initialised:
            raise error_class("NVMLError_Uninitialized")()


def _answer(record: dict[str, Any], key: str) -> Any:
    if key not in record:
        raise LookupError(f"the recording has no answer for {key}: record it again with the current code")
    return _raise_recorded(record[key])


def _raise_recorded(value: Any) -> Any:
    if isinstance(value, dict) and "nvml_error" in value:
        raise error_class(value["nvml_error"])()
    return value


def _by_index(records: list[dict[str, Any]], index: int, what: str) -> dict[str, Any]:
    for record in records:
        if record["index"] == index:
            return record
    raise LookupError(f"the recording has no {what} {index}")


_installed: list[Any] = []  # the module replaced by install(), to put back


def install(path: str | Path, pid_map: dict[int, int] | None = None) -> NvmlReplay:
    """Make every NvmlSource in this process read the recording at `path`; returns the replay."""
    replay = NvmlReplay.from_file(path, pid_map)
    if not _installed:
        _installed.append(gpus.NVML)
    gpus.NVML = replay
    return replay


def uninstall() -> None:
    """Put the real pynvml back."""
    if _installed:
        gpus.NVML = _installed.pop()

"""Record what NVML answers on a real GPU machine, so tests can replay it where there is no GPU.

    python -m cube_jupyter.gpu.record OUT.json [--samples N] [--interval S]

It runs the real `NvmlSource` over a pass-through wrapper of `pynvml` that writes down every call's
answer (or the NVML error's class name, e.g. `NVMLError_NotSupported`), per sample and per device. So
a recording holds exactly the calls `NvmlSource` makes, and `tests/gpu/nvml_replay.py` can answer
them again. The format:

    {"format": "cube-jupyter/nvml-recording@1", "host", "recorded_at", "driver_version",
     "interval_seconds", "samples": [
        {"time": <unix s>, "nvmlDeviceGetCount": 2,
         "devices": [{"index": 0, "calls": {"nvmlDeviceGetUUID": "GPU-...",
                                           "nvmlDeviceGetPowerUsage": 212400,
                                           "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)": 61,
                                           "nvmlDeviceGetMigMode": {"nvml_error": "NVMLError_NotSupported"},
                                           ...},
                      "mig_devices": [{"index": 0, "calls": {...}}, {"index": 1, "nvml_error": "..."}]}]}]}

Structures (memory, utilization, processes) are recorded as objects of their fields, in NVML's
units (bytes, milliwatts). A device whose handle could not be had is `{"index": i, "nvml_error": ...}`.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import socket
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from cube_jupyter.gpu.nvml import NvmlSource
from cube_jupyter.gpu.sources import NoGpuVisible
from cube_jupyter.local import gpus

FORMAT = "cube-jupyter/nvml-recording@1"

# NVML enum arguments, recorded by name so a recording reads plainly and replays by name.
ARGUMENT_NAMES: dict[str, dict[int, str]] = {
    "nvmlDeviceGetTemperature": {0: "NVML_TEMPERATURE_GPU"},
    "nvmlDeviceGetClockInfo": {
        0: "NVML_CLOCK_GRAPHICS",
        1: "NVML_CLOCK_SM",
        2: "NVML_CLOCK_MEM",
        3: "NVML_CLOCK_VIDEO",
    },
}


def call_key(name: str, args: tuple[Any, ...]) -> str:
    """How one call (its arguments after the device handle) is named in a recording."""
    if not args:
        return name
    names = ARGUMENT_NAMES.get(name, {})
    return f"{name}({', '.join(names.get(arg, repr(arg)) for arg in args)})"


def plain(value: Any) -> Any:
    """An NVML answer as JSON: structures become objects of their fields, bytes become text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, ctypes.Structure):
        return {field[0]: plain(getattr(value, field[0])) for field in value._fields_}
    if hasattr(value, "__dict__"):
        return {key: plain(item) for key, item in vars(value).items() if not key.startswith("_")}
    return repr(value)


class _RecordedHandle:
    """A device (or MIG device) handle, with the record its calls' answers go into."""

    def __init__(self, real: Any, record: dict[str, Any]) -> None:
        self.real = real
        self.record = record


class RecordingNvml(ModuleType):
    """Stands in for `pynvml`: passes every call through and records the answer in the current sample."""

    def __init__(self, nvml: Any) -> None:
        super().__init__("pynvml_recording")
        self._nvml = nvml
        self.samples: list[dict[str, Any]] = []

    def begin_sample(self) -> None:
        self.samples.append({"time": round(time.time(), 3), "devices": []})

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(attr)):
            return attr  # constants and NVMLError classes

        def call(*args: Any) -> Any:
            return self._call(name, attr, args)

        call.__name__ = name
        return call

    def _call(self, name: str, fn: Any, args: tuple[Any, ...]) -> Any:
        real_args = [arg.real if isinstance(arg, _RecordedHandle) else arg for arg in args]
        if name in ("nvmlInit", "nvmlShutdown") or not self.samples:
            return fn(*real_args)
        sample = self.samples[-1]
        if name == "nvmlDeviceGetHandleByIndex":
            record: dict[str, Any] = {"index": args[0]}
            sample["devices"].append(record)
            return self._handle(fn, real_args, record, {"calls": {}, "mig_devices": []})
        if name == "nvmlDeviceGetMigDeviceHandleByIndex":
            record = {"index": args[1]}
            args[0].record["mig_devices"].append(record)
            return self._handle(fn, real_args, record, {"calls": {}})
        if args and isinstance(args[0], _RecordedHandle):
            target, key = args[0].record["calls"], call_key(name, args[1:])
        else:
            target, key = sample, call_key(name, args)
        try:
            result = fn(*real_args)
        except self._nvml.NVMLError as err:
            target[key] = {"nvml_error": type(err).__name__}
            raise
        target[key] = plain(result)
        return result

    def _handle(self, fn: Any, args: list[Any], record: dict[str, Any], fields: dict[str, Any]) -> Any:
        try:
            real = fn(*args)
        except self._nvml.NVMLError as err:
            record["nvml_error"] = type(err).__name__
            raise
        record.update(fields)
        return _RecordedHandle(real, record)


def record(samples: int, interval: float, nvml: Any = None) -> dict[str, Any]:
    """Read all GPUs `samples` times, `interval` seconds apart; raises NoGpuVisible on a GPU-less machine."""
    real = nvml if nvml is not None else gpus.NVML
    recorder = RecordingNvml(real)
    source = NvmlSource(nvml=recorder)
    try:
        for number in range(samples):
            if number:
                time.sleep(interval)
            recorder.begin_sample()
            source.read()
        driver = _optional(real, "nvmlSystemGetDriverVersion")
    finally:
        source.close()
    return {
        "format": FORMAT,
        "host": socket.gethostname(),
        "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "driver_version": plain(driver),
        "interval_seconds": interval,
        "samples": recorder.samples,
    }


def _optional(nvml: Any, name: str) -> Any:
    call = getattr(nvml, name, None)
    if call is None:
        return None
    try:
        nvml.nvmlInit()
        try:
            return call()
        finally:
            nvml.nvmlShutdown()
    except nvml.NVMLError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cube_jupyter.gpu.record", description="Record NVML readings for replay in tests."
    )
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--samples", type=int, default=10, help="how many readings (default 10)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between readings (default 1)")
    options = parser.parse_args(argv)
    if options.samples < 1 or options.interval < 0:
        parser.error("--samples must be at least 1 and --interval not negative")
    try:
        recording = record(options.samples, options.interval)
    except NoGpuVisible as err:
        print(err.message, file=sys.stderr)
        return 1
    options.out.write_text(json.dumps(recording, indent=1) + "\n")
    devices = len(recording["samples"][0]["devices"])
    print(f"recorded {options.samples} samples of {devices} GPU(s) to {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The GPUs this machine can hand to local servers and replicas, and the one NVML every reader of
this machine's GPUs goes through (the GPU monitor too): a recorded replay can stand in for the driver
for all of them at once (`tests/gpu/nvml_replay.py` sets `NVML`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import pynvml

NVML: Any = pynvml


def visible_gpu_ids(environ: Mapping[str, str] | None = None) -> list[str]:
    """NVML's devices, narrowed by our own `CUDA_VISIBLE_DEVICES` when the admin set one. No NVML
    (no driver, `nvidia-ml-py` not installed) means no GPUs."""
    count = nvml_device_count()
    ids = [str(i) for i in range(count)]
    environ = os.environ if environ is None else environ
    restricted = environ.get("CUDA_VISIBLE_DEVICES")
    if restricted is not None:
        ids = [part.strip() for part in restricted.split(",") if part.strip()][:count]
    return ids


def nvml_device_count() -> int:
    """GPUs this machine has, as NVML counts them; 0 without a driver (or without `nvidia-ml-py`).
    NVML counts its users: this start and shutdown leave the GPU monitor's own session alone."""
    nvml = NVML
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:  # no library, no driver, no permission: this machine hands out no GPU
        return 0
    try:
        return int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError:
        return 0
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()

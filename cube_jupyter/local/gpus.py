"""The GPUs this machine can hand to local servers and replicas, and the one NVML every reader of
this machine's GPUs goes through (the GPU monitor too): a recorded replay can stand in for the driver
for all of them at once (`tests/gpu/nvml_replay.py` sets `NVML`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
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


# The file lock (in the state directory) under which local work picks its GPUs and records them held:
# the training queue's admission and a pipeline step's assignment, in any process of this machine.
ASSIGN_LOCK = "gpus.lock"


def assign_lock_path(state_dir: Path) -> Path:
    """The lock every assignment of this machine's GPUs takes (`local.locks.blocking_file_lock`)."""
    return state_dir / "locks" / ASSIGN_LOCK


def free_gpu_ids(held: Iterable[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The one rule for which GPUs are free: this machine's (`visible_gpu_ids`) that no running local
    work holds, in order. `held` is every holder's GPU ids: training replicas and pipeline steps (the
    composition root hands each feature the other's), each taken under `assign_lock_path`."""
    taken = set(held)
    return [gpu for gpu in visible_gpu_ids(environ) if gpu not in taken]


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

"""The GPUs this machine can hand to local servers and replicas."""

from __future__ import annotations

import os
from collections.abc import Mapping


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
    """GPUs this machine has, read through the same NVML source the GPU monitor uses."""
    from cube_jupyter.gpu.nvml import NvmlSource
    from cube_jupyter.gpu.sources import NoGpuVisible

    source = NvmlSource()
    try:
        return len(source.read())
    except NoGpuVisible:
        return 0
    finally:
        source.close()

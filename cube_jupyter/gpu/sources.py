"""The one interface every GPU metric source offers, and the "No GPU visible" state.

`NoGpuVisible` is not a failure: a laptop or a CPU-only pod has no GPU, and every consumer (the
widget in a user's kernel, `/gpu`, the CLI) shows its message instead of raising.
"""

from __future__ import annotations

from typing import Protocol

from cube_jupyter.gpu.model import GpuDevice

# The state, in the words every consumer shows (`no_gpu_visible`): one string, one place.
NO_GPU_VISIBLE = "No GPU visible"


def no_gpu_visible(why: str) -> str:
    """ "No GPU visible: <why>"."""
    return f"{NO_GPU_VISIBLE}: {why}"


class NoGpuVisible(Exception):
    """The source sees no GPU; `message` says so and why, in words a user can act on."""

    def __init__(self, why: str) -> None:
        message = no_gpu_visible(why)
        super().__init__(message)
        self.message = message


class GpuSource(Protocol):
    """Reads the GPUs one source can see, now."""

    name: str  # "nvml" | "prometheus"

    def read(self) -> list[GpuDevice]:
        """Current readings; raises NoGpuVisible when there is nothing to read."""
        ...

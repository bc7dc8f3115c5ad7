"""The one interface every GPU metric source offers, and the "no GPU visible" state.

`NoGpuVisible` is not a failure: a laptop or a CPU-only pod has no GPU, and every consumer (the
widget in a user's kernel, `/gpu`, the CLI) shows its message instead of raising.
"""

from __future__ import annotations

from typing import Protocol

from cube_jupyter.gpu.model import GpuDevice


class NoGpuVisible(Exception):
    """The source sees no GPU; `message` says why in words a user can act on."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class GpuSource(Protocol):
    """Reads the GPUs one source can see, now."""

    name: str  # "nvml" | "prometheus"

    def read(self) -> list[GpuDevice]:
        """Current readings; raises NoGpuVisible when there is nothing to read."""
        ...

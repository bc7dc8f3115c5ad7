"""Fixtures for the GPU tests: NVML replays (the real Prometheus fixtures are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.gpu import nvml_replay

NVML_RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "nvml"


@pytest.fixture
def install_nvml_replay() -> Iterator[Callable[..., nvml_replay.NvmlReplay]]:
    """`install_nvml_replay("a100x2-processes.json", pid_map={...})` makes every NvmlSource in this
    process read that recording (a replay, not a GPU) until the test ends."""

    def install(name: str, pid_map: dict[int, int] | None = None) -> nvml_replay.NvmlReplay:
        return nvml_replay.install(NVML_RECORDINGS / name, pid_map)

    yield install
    nvml_replay.uninstall()

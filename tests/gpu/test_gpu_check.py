"""`make gpu-check` where there is no GPU (these machines): it says so, in NVML's words, and exits 2
without trying anything else. Its checks themselves need a GPU (`make gpu-check` on one)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cube_jupyter.gpu.nvml import NvmlSource
from cube_jupyter.gpu.sources import NoGpuVisible


def test_without_a_gpu_the_check_says_so_and_exits_2() -> None:
    try:
        NvmlSource().read()
    except NoGpuVisible as exc:
        message = exc.message
    else:
        pytest.skip("this machine has a GPU: run `make gpu-check` itself")
    done = subprocess.run(
        [sys.executable, "-m", "tests.gpu.gpu_check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout.splitlines() == [message, "gpu-check: nothing to check without a GPU"]
    assert done.stderr == ""

"""`cube-jupyter notebook` with the machine's queue, run as a user runs it: a GPU server past the
quota waits `queued`, and `create` and `list` say where it is and why (its QUEUE column). The CLI's
GPUs are a replay of two recorded A100s (`tests/gpu/nvml_replay.py`), installed by the config file:
a replay, not a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import cube
from tests.local.support import kill_children

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]
CONFIG = """
import sys
sys.path.insert(0, {repo!r})
from tests.gpu.nvml_replay import install
install({recording!r})

c.CubeWorkbench.state_dir = {state!r}
c.CubeWorkbench.default_user = "alice"
c.CubeWorkbench.gpu_quota_per_user = 1
c.CubeSpawner.profiles = [
    {{"name": "small", "image": "jupyter/base", "cpu": "500m", "memory": "1Gi", "default": True}},
    {{"name": "a100", "image": "jupyter/gpu", "cpu": "1", "memory": "1Gi", "gpu": 1}},
]
"""
QUOTA_FULL = "waiting for 1 GPU of quota: 'alice' holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)"


def test_a_queued_server_shows_its_place_and_reason(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = tmp_path / "jupyter_server_config.py"
    recording = REPO / "tests" / "data" / "nvml" / "a100x2-processes.json"
    config.write_text(CONFIG.format(repo=str(REPO), recording=str(recording), state=str(state)))
    try:
        first = cube("notebook", "create", "--name", "g1", "--profile", "a100", "--no-wait", config=config)
        assert first.returncode == 0 and first.stdout.startswith("g1: pending"), first.stderr
        queued = cube("notebook", "create", "--name", "g2", "--profile", "a100", "--no-wait", config=config)
        assert queued.returncode == 0, queued.stderr
        assert queued.stdout.startswith(f"g2: queued #1: {QUOTA_FULL}  /cube/notebook/alice/g2/")

        table = cube("notebook", "list", config=config).stdout.splitlines()
        header = table[0].split()
        assert header[header.index("URL") + 1 : header.index("URL") + 3] == ["QUEUE", "REASON"]
        [row] = [line for line in table if line.startswith("g2 ")]
        assert f"#1: {QUOTA_FULL}" in row and row.split()[2] == "queued"
        listed = {s["name"]: s for s in json.loads(cube("notebook", "list", "--json", config=config).stdout)}
        assert (listed["g2"]["queue_position"], listed["g2"]["queue_reason"]) == (1, QUOTA_FULL)
        assert listed["g1"]["queue_position"] is None

        assert cube("notebook", "delete", "--name", "g2", config=config).returncode == 0
    finally:
        cube("notebook", "delete", "--name", "g1", config=config)
        kill_children(state)

"""A Trainer v2 node's env, turned into the Training Operator's names by the job entrypoint, so the
same code runs on a TrainJob, a v1 job and locally; and the working directory a TrainJob cannot set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cube_jupyter.jobs.trainer_env import operator_env

TORCH = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "1",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "ddp-node-0-0.ddp",
    "PET_MASTER_PORT": "29400",
}
XGBOOST = {
    "DMLC_TRACKER_URI": "xgb-node-0-0.xgb",
    "DMLC_TRACKER_PORT": "29400",
    "DMLC_TASK_ID": "2",
    "DMLC_NUM_WORKER": "3",
}


def test_torch_nodes_get_the_names_torchrun_would_give_one_process() -> None:
    assert operator_env(TORCH) == {
        "MASTER_ADDR": "ddp-node-0-0.ddp",
        "MASTER_PORT": "29400",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }


def test_xgboost_nodes_meet_at_the_tracker() -> None:
    assert operator_env(XGBOOST) == {
        "MASTER_ADDR": "xgb-node-0-0.xgb",
        "MASTER_PORT": "29400",
        "WORLD_SIZE": "3",
        "RANK": "2",
    }


@pytest.mark.parametrize(
    "environ",
    [
        {**TORCH, "PET_NPROC_PER_NODE": "auto"},  # processes only torchrun can start
        {k: v for k, v in TORCH.items() if k != "PET_MASTER_ADDR"},  # a local worker-only job
        {},
    ],
)
def test_nothing_is_derived_from_an_incomplete_or_foreign_env(environ: dict[str, str]) -> None:
    assert operator_env(environ) == {}


def test_names_already_set_are_kept() -> None:
    local = {**TORCH, "MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}
    assert operator_env(local) == {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


def test_the_entrypoint_runs_the_code_in_the_node_env_and_working_directory(tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text(
        "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'], os.getcwd())\n"
    )
    env = {**os.environ, **TORCH, "CUBE_WORKDIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "cube_jupyter.jobs.entry", "--kind", "script", "--target", "show.py"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "2", str(tmp_path)]
    env["CUBE_WORKDIR"] = str(tmp_path / "missing")
    missing = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 2 and "CUBE_WORKDIR" in missing.stderr and "Traceback" not in missing.stderr

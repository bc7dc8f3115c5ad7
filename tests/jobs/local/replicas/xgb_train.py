"""A toy distributed XGBoost job, as the XGBoostJob examples run it: the Master (RANK 0) starts the
Rabit tracker on MASTER_ADDR:MASTER_PORT, and every replica joins the collective as task RANK.

Each rank trains on its own shard; the collective all-reduces the histograms, so every rank must end
with the same model. Writes `{out}/rank-{RANK}.json` (the model) and `{out}/shard-{RANK}.npz`.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import xgboost
from xgboost import collective
from xgboost.tracker import RabitTracker

PARAMS = {"tree_method": "hist", "max_depth": 3, "nthread": 1, "seed": 0}
ROUNDS = 5


def shard(rank: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(300, 5))
    return x, x @ np.arange(5.0) + (rank * 3.0) + rng.normal(scale=0.1, size=300)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    tracker = None
    if rank == 0:
        tracker = RabitTracker(n_workers=world, host_ip=host, port=port, sortby="task", timeout=120)
        tracker.start()
    x, y = shard(rank)
    np.savez(os.path.join(args.out, f"shard-{rank}.npz"), x=x, y=y)
    with collective.CommunicatorContext(
        dmlc_communicator="rabit",
        dmlc_tracker_uri=host,
        dmlc_tracker_port=port,
        dmlc_task_id=str(rank),
        dmlc_retry=30,
        dmlc_timeout=120,
    ):
        assert collective.get_world_size() == world, collective.get_world_size()
        booster = xgboost.train(PARAMS, xgboost.DMatrix(x, y), num_boost_round=ROUNDS)
        with open(os.path.join(args.out, f"rank-{collective.get_rank()}.json"), "wb") as out:
            out.write(booster.save_raw("json"))
    if tracker is not None:
        tracker.wait_for()


if __name__ == "__main__":
    main()

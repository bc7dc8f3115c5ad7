"""The env of each local replica is the one the Kubeflow operators set (pure functions)."""

from __future__ import annotations

import json
import os

from cube_jupyter.jobs.local import rendezvous
from cube_jupyter.jobs.local.rendezvous import Rendezvous, Slot
from cube_jupyter.jobs.local.training_plan import cpu_threads_env


def test_slots_follow_roles_in_order() -> None:
    names = [s.name for s in rendezvous.slots([("Master", 1), ("Worker", 2)])]
    assert names == ["master-0", "worker-0", "worker-1"]


def test_pytorch_master_is_rank_zero_and_workers_follow() -> None:
    roles = [("Master", 1), ("Worker", 2)]
    rdv = Rendezvous(master_port=29500)
    master = rendezvous.replica_env("pytorch", roles, Slot("Master", 0), rdv)
    worker = rendezvous.replica_env("pytorch", roles, Slot("Worker", 1), rdv)
    assert master["RANK"] == "0" and worker["RANK"] == "2"
    for env in (master, worker):
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "127.0.0.1"
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29500"
        assert env["WORLD_SIZE"] == env["PET_NNODES"] == "3"
        assert env["PET_NPROC_PER_NODE"] == "1"
    assert worker["PET_NODE_RANK"] == "2"


def test_pytorch_without_master_sets_no_rank_as_the_operator() -> None:
    env = rendezvous.replica_env("pytorch", [("Worker", 2)], Slot("Worker", 0), Rendezvous(master_port=1))
    assert "RANK" not in env and "MASTER_ADDR" not in env
    assert env["PET_NNODES"] == "2"


def test_tf_config_lists_the_cluster_without_the_evaluator() -> None:
    roles = [("Chief", 1), ("PS", 1), ("Worker", 2), ("Evaluator", 1)]
    rdv = rendezvous.plan("tensorflow", roles, pick=iter(range(5000, 5100)).__next__)
    assert sorted(rdv.ports) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    worker = json.loads(rendezvous.replica_env("tensorflow", roles, Slot("Worker", 1), rdv)["TF_CONFIG"])
    assert worker == {
        "cluster": {
            "chief": ["127.0.0.1:5000"],
            "ps": ["127.0.0.1:5001"],
            "worker": ["127.0.0.1:5002", "127.0.0.1:5003"],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    evaluator = json.loads(
        rendezvous.replica_env("tensorflow", roles, Slot("Evaluator", 0), rdv)["TF_CONFIG"]
    )
    assert evaluator["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in evaluator["cluster"]


def test_xgboost_workers_rank_after_the_master_and_list_worker_addresses() -> None:
    roles = [("Master", 1), ("Worker", 2)]
    rdv = Rendezvous(master_port=9991, worker_port=9992)
    master = rendezvous.replica_env("xgboost", roles, Slot("Master", 0), rdv)
    worker = rendezvous.replica_env("xgboost", roles, Slot("Worker", 0), rdv)
    assert (master["RANK"], worker["RANK"]) == ("0", "1")
    assert worker["WORLD_SIZE"] == "3" and worker["MASTER_PORT"] == "9991"
    assert worker["WORKER_PORT"] == "9992"
    assert worker["WORKER_ADDRS"] == "127.0.0.1,127.0.0.1"
    alone = rendezvous.replica_env("xgboost", [("Master", 1)], Slot("Master", 0), rdv)
    assert "WORKER_ADDRS" not in alone


def test_mpi_hostfile_and_env() -> None:
    assert rendezvous.mpi_hostfile(2, 3) == "localhost slots=6\n"
    launcher = rendezvous.replica_env(
        "mpi", [("Launcher", 1), ("Worker", 2)], Slot("Launcher", 0), Rendezvous(), hostfile="/w/hostfile"
    )
    assert launcher["OMPI_MCA_orte_default_hostfile"] == "/w/hostfile"
    rank = rendezvous.mpi_rank_env(1, 4)
    assert rank["OMPI_COMM_WORLD_RANK"] == rank["PMI_RANK"] == "1"
    assert rank["OMPI_COMM_WORLD_SIZE"] == rank["PMI_SIZE"] == "4"


def test_planned_ports_are_free_and_distinct() -> None:
    rdv = rendezvous.plan("tensorflow", [("Chief", 1), ("Worker", 3)])
    assert len(set(rdv.ports.values())) == 4
    assert rendezvous.plan("mpi", [("Launcher", 1), ("Worker", 1)]) == Rendezvous()


def test_each_replica_gets_its_share_of_the_cores_as_math_library_threads() -> None:

    assert cpu_threads_env("2", 4) == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    assert cpu_threads_env("500m", 1)["OMP_NUM_THREADS"] == "1"  # at least one thread
    cores = os.cpu_count() or 1
    assert cpu_threads_env(None, 2)["OMP_NUM_THREADS"] == str(max(1, cores // 2))

"""The env each local replica gets: what the Kubeflow operators set on each pod, with this machine's
loopback address and free ports in place of the per-replica Services.

- PyTorch (training-operator `setPodEnv`): `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`
  (Master 0, Worker i → i+1), and torchrun's `PET_MASTER_ADDR`, `PET_MASTER_PORT`, `PET_NNODES`,
  `PET_NODE_RANK`, `PET_NPROC_PER_NODE` — one process per replica here, so `PET_NPROC_PER_NODE`
  is 1 rather than the operator's default "auto" (which on CPU means one per core).
- TensorFlow: `TF_CONFIG` = {cluster: {chief, ps, worker: [host:port]}, task: {type, index},
  environment: "cloud"}; the evaluator is not in the cluster, as the operator does.
- XGBoost (`SetPodEnv` of the XGBoostJob controller): `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`,
  `RANK` (workers after the master), and with more than one replica `WORKER_PORT` and
  `WORKER_ADDRS` (the workers' hosts). The operator starts no tracker: the Master's code does
  (`xgboost.tracker.RabitTracker` on `MASTER_ADDR:MASTER_PORT`), here as there.
- MPI: the launcher gets a hostfile and `OMPI_MCA_orte_default_hostfile`; each rank gets Open MPI's
  `OMPI_COMM_WORLD_*` (and MPICH's `PMI_*`) from whoever starts it (mpirun, or `local.mpi`).

Everything here is a pure function of the job's shape and the ports picked for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cube_jupyter.local.processes import LOOPBACK, free_port

TF_CLUSTER_ROLES = ("Chief", "Master", "PS", "Worker")  # the evaluator is not part of the cluster
MPI_HOSTFILE = "hostfile"


@dataclass(frozen=True)
class Slot:
    """One replica of the job: its role and its index within the role."""

    role: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.role.lower()}-{self.index}"


@dataclass(frozen=True)
class Rendezvous:
    """The addresses the replicas meet at: the master's port, and each TF cluster member's port."""

    host: str = LOOPBACK
    master_port: int = 0
    worker_port: int = 0
    ports: dict[str, int] = field(default_factory=dict)  # slot name → port (TensorFlow)


def slots(roles: Sequence[tuple[str, int]]) -> list[Slot]:
    """Every replica of `roles` ((role, replicas) in the operator's order), role by role."""
    return [Slot(role, index) for role, count in roles for index in range(count)]


def plan(framework: str, roles: Sequence[tuple[str, int]], pick: Callable[[], int] = free_port) -> Rendezvous:
    """Ports for one job: pytorch/xgboost a master port (xgboost also a worker port); tensorflow one
    per cluster member; mpi none."""
    if framework in ("pytorch", "xgboost"):
        return Rendezvous(master_port=pick(), worker_port=pick() if framework == "xgboost" else 0)
    if framework == "tensorflow":
        members = [s for s in slots(roles) if s.role in TF_CLUSTER_ROLES]
        return Rendezvous(ports={s.name: pick() for s in members})
    return Rendezvous()


def _counts(roles: Sequence[tuple[str, int]]) -> dict[str, int]:
    return {role: count for role, count in roles}


def pytorch_env(roles: Sequence[tuple[str, int]], slot: Slot, rdv: Rendezvous) -> dict[str, str]:
    counts = _counts(roles)
    total = sum(counts.values())
    env = {"PYTHONUNBUFFERED": "0", "PET_NNODES": str(total)}
    if counts.get("Master", 0):
        rank = slot.index + 1 if slot.role == "Worker" else slot.index
        env.update(
            {
                "MASTER_ADDR": rdv.host,
                "MASTER_PORT": str(rdv.master_port),
                "PET_MASTER_ADDR": rdv.host,
                "PET_MASTER_PORT": str(rdv.master_port),
                "WORLD_SIZE": str(total),
                "RANK": str(rank),
                "PET_NPROC_PER_NODE": "1",
                "PET_NODE_RANK": str(rank),
            }
        )
    return env


def tf_config(roles: Sequence[tuple[str, int]], slot: Slot, rdv: Rendezvous) -> dict[str, object]:
    cluster: dict[str, list[str]] = {}
    for member in slots(roles):
        if member.role in TF_CLUSTER_ROLES:
            cluster.setdefault(member.role.lower(), []).append(f"{rdv.host}:{rdv.ports[member.name]}")
    return {
        "cluster": cluster,
        "task": {"type": slot.role.lower(), "index": slot.index},
        "environment": "cloud",
    }


def tensorflow_env(roles: Sequence[tuple[str, int]], slot: Slot, rdv: Rendezvous) -> dict[str, str]:
    return {"PYTHONUNBUFFERED": "0", "TF_CONFIG": json.dumps(tf_config(roles, slot, rdv), sort_keys=True)}


def xgboost_env(roles: Sequence[tuple[str, int]], slot: Slot, rdv: Rendezvous) -> dict[str, str]:
    counts = _counts(roles)
    total = sum(counts.values())
    rank = slot.index + counts.get("Master", 0) if slot.role == "Worker" else slot.index
    env = {
        "MASTER_PORT": str(rdv.master_port),
        "MASTER_ADDR": rdv.host,
        "WORLD_SIZE": str(total),
        "RANK": str(rank),
        "PYTHONUNBUFFERED": "0",
    }
    if total > 1:
        env["WORKER_PORT"] = str(rdv.worker_port)
        env["WORKER_ADDRS"] = ",".join([rdv.host] * (total - 1))
    return env


def mpi_hostfile(workers: int, slots_per_worker: int) -> str:
    """The launcher's hostfile. The MPI operator writes one line per worker pod; every worker is this
    machine here, and Open MPI refuses a host listed twice with `slots=`, so it is one line with
    all their slots."""
    return f"localhost slots={workers * slots_per_worker}\n"


def mpi_launcher_env(hostfile: str) -> dict[str, str]:
    """The launcher's env: where its hosts are. `OMPI_ALLOW_RUN_AS_ROOT*` is added by the runner
    only when it runs as root, as container images do."""
    return {
        "PYTHONUNBUFFERED": "0",
        "OMPI_MCA_orte_default_hostfile": hostfile,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "K_MPI_JOB_ROLE": "launcher",
    }


def mpi_rank_env(
    rank: int, size: int, local_rank: int | None = None, local_size: int | None = None
) -> dict[str, str]:
    """What mpirun gives each rank (Open MPI's names, and MPICH's PMI_* for mpi4py on MPICH)."""
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank if local_rank is None else local_rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(size if local_size is None else local_size),
        "OMPI_COMM_WORLD_NODE_RANK": "0",
        "PMI_RANK": str(rank),
        "PMI_SIZE": str(size),
    }


def replica_env(
    framework: str,
    roles: Sequence[tuple[str, int]],
    slot: Slot,
    rdv: Rendezvous,
    *,
    hostfile: str | None = None,
) -> dict[str, str]:
    """The operator's env for `slot` of a job shaped `roles`."""
    if framework == "pytorch":
        return pytorch_env(roles, slot, rdv)
    if framework == "tensorflow":
        return tensorflow_env(roles, slot, rdv)
    if framework == "xgboost":
        return xgboost_env(roles, slot, rdv)
    if framework == "mpi":
        if slot.role == "Launcher":
            return mpi_launcher_env(hostfile or MPI_HOSTFILE)
        return {"PYTHONUNBUFFERED": "0", "K_MPI_JOB_ROLE": "worker"}
    raise ValueError(f"unknown framework {framework!r}")


def describe(env: Mapping[str, str]) -> str:
    """The rendezvous env as one line for a replica's log header (no secrets live in it)."""
    return " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k != "PYTHONUNBUFFERED")

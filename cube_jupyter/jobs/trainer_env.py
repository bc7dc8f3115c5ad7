"""What a training node's code finds in its env, whichever API started it.

Code written for the Training Operator (and for the local backend, which sets the same names) reads
`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` and `RANK`, as `torch.distributed`'s `env://` does.
Kubeflow Trainer v2 sets other names on a TrainJob's nodes: torchrun's `PET_*` for the torch runtime
(which torchrun would turn into those), `DMLC_*` for the xgboost runtime. The job entrypoint derives
the operator's names from them, for one process per node, so no torchrun is needed; a name already set
is kept. It also enters `CUBE_WORKDIR`: a TrainJob cannot set its container's working directory.
"""

from __future__ import annotations

from collections.abc import Mapping

WORKDIR_ENV = "CUBE_WORKDIR"
# Trainer v2's name → the Training Operator's, per runtime; all of a runtime's names must be there.
TORCH_NAMES = {
    "PET_MASTER_ADDR": "MASTER_ADDR",
    "PET_MASTER_PORT": "MASTER_PORT",
    "PET_NNODES": "WORLD_SIZE",
    "PET_NODE_RANK": "RANK",
}
XGBOOST_NAMES = {
    "DMLC_TRACKER_URI": "MASTER_ADDR",
    "DMLC_TRACKER_PORT": "MASTER_PORT",
    "DMLC_NUM_WORKER": "WORLD_SIZE",
    "DMLC_TASK_ID": "RANK",
}


def operator_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The Training Operator's rendezvous names `environ` lacks, from Trainer v2's (empty when it has
    neither runtime's, or torch's for more than one process per node, which only torchrun can start)."""
    derived: dict[str, str] = {}
    if all(name in environ for name in TORCH_NAMES) and environ.get("PET_NPROC_PER_NODE", "1") == "1":
        derived = {ours: environ[theirs] for theirs, ours in TORCH_NAMES.items()}
        derived.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    elif all(name in environ for name in XGBOOST_NAMES):
        derived = {ours: environ[theirs] for theirs, ours in XGBOOST_NAMES.items()}
    return {name: value for name, value in derived.items() if name not in environ}

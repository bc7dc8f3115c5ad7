"""A local training job's record, kept as every local job's is (`cube_jupyter.local.records`), so a
restarted workbench still lists what ran: the spec, the operator-style conditions, each replica's
process, and the process supervising the job (`owner`: pid and start time)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS training_jobs (
    user TEXT NOT NULL,
    name TEXT NOT NULL,
    owner TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (user, name)
)
"""


@dataclass
class ReplicaRecord:
    """One replica process: how to (re)start it and what became of it. A `virtual` replica (an MPI
    worker whose ranks run under the launcher) has no process of its own."""

    role: str
    index: int
    argv: list[str]
    env: dict[str, str]  # what the job adds to the workbench's env (operator env, spec env, GPUs)
    gpus: int = 0
    gpu_ids: list[str] = field(default_factory=list)
    state: str = "Pending"
    pid: int | None = None
    started: float | None = None  # the process's create time: a recycled pid never matches it
    exit_code: int | None = None
    restarts: int = 0
    message: str | None = None
    virtual: bool = False
    slots: int = 1  # the CPU slots it takes (`CubeJobs.cpu_slots`): its cpu rounded up, or 1

    @property
    def name(self) -> str:
        return f"{self.role.lower()}-{self.index}"


@dataclass
class JobRecord:
    """A local training job: its spec, the operator-style conditions, and its replicas."""

    user: str
    name: str
    framework: str
    spec: dict[str, Any]
    created: float
    work_dir: str
    log_dir: str
    replicas: list[ReplicaRecord]
    restart_policy: str = "Never"
    backoff_limit: int | None = None
    clean_pod_policy: str = "Running"
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)
    message: str | None = None
    error: dict[str, Any] | None = None  # the failed replica's traceback, cause first (`JobError`)
    completed: float | None = None
    restarts: int = 0
    package_uri: str | None = None
    owner: str = ""  # the supervising process, `processes.this_process_id()`
    # The queue (`admission`): a waiting job has started no replica and holds nothing; its place and
    # reason are the last admission pass's.
    waiting: bool = False
    enqueued: float | None = None
    queue_position: int | None = None
    queue_reason: str | None = None
    # Why the workbench asked it stopped (its GPUs sat idle) while another process supervised it:
    # that supervisor stops it on its next pass.
    stop_requested: str | None = None

    @property
    def active(self) -> bool:
        """Admitted and unfinished: it holds its GPUs and CPU slots."""
        return not self.waiting and self.completed is None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        raw = json.loads(text)
        raw["replicas"] = [ReplicaRecord(**r) for r in raw["replicas"]]
        return cls(**raw)

    def replica(self, name: str) -> ReplicaRecord | None:
        return next((r for r in self.replicas if r.name == name), None)

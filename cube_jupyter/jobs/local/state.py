"""Local training jobs as sqlite rows, so a restarted workbench still lists what ran.

One row per (user, name): the supervising process (`owner`, pid and start time) and the job's whole
record as JSON. Each operation is a short transaction of its own (`cube_jupyter.sqlite`), safe with
the CLI and the server on the same file.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cube_jupyter import sqlite
from cube_jupyter.errors import Conflict
from cube_jupyter.local.files import private_dir, private_file

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
    completed: float | None = None
    restarts: int = 0
    package_uri: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        raw = json.loads(text)
        raw["replicas"] = [ReplicaRecord(**r) for r in raw["replicas"]]
        return cls(**raw)

    def replica(self, name: str) -> ReplicaRecord | None:
        return next((r for r in self.replicas if r.name == name), None)


class TrainingState:
    """CRUD on `training_jobs`; a record is only ever replaced whole by its owner."""

    def __init__(self, path: Path) -> None:
        self.path = path
        private_dir(path.parent)
        private_file(path)
        db = sqlite.connect(path)
        try:
            db.execute("PRAGMA journal_mode=WAL")
        finally:
            db.close()
        with sqlite.transaction(path) as db:
            db.execute(SCHEMA)

    def insert(self, record: JobRecord, owner: str) -> None:
        try:
            with sqlite.transaction(self.path) as db:
                db.execute(
                    "INSERT INTO training_jobs (user, name, owner, record) VALUES (?, ?, ?, ?)",
                    (record.user, record.name, owner, record.to_json()),
                )
        except sqlite3.IntegrityError:
            raise Conflict(f"training job {record.name!r} already exists", field="name") from None

    def save(self, record: JobRecord, owner: str) -> bool:
        """Replace the record; False when the row is gone (deleted meanwhile)."""
        with sqlite.transaction(self.path) as db:
            cursor = db.execute(
                "UPDATE training_jobs SET owner = ?, record = ? WHERE user = ? AND name = ?",
                (owner, record.to_json(), record.user, record.name),
            )
            return cursor.rowcount > 0

    def get(self, user: str, name: str) -> tuple[JobRecord, str] | None:
        with sqlite.transaction(self.path, write=False) as db:
            row = db.execute(
                "SELECT owner, record FROM training_jobs WHERE user = ? AND name = ?", (user, name)
            ).fetchone()
        return (JobRecord.from_json(row["record"]), row["owner"]) if row else None

    def list(self, user: str | None = None) -> list[tuple[JobRecord, str]]:
        query, args = "SELECT owner, record FROM training_jobs", []
        if user is not None:
            query += " WHERE user = ?"
            args.append(user)
        with sqlite.transaction(self.path, write=False) as db:
            rows = db.execute(query + " ORDER BY user, name", args).fetchall()
        records = [(JobRecord.from_json(row["record"]), row["owner"]) for row in rows]
        return sorted(records, key=lambda item: (item[0].created, item[0].name))

    def delete(self, user: str, name: str) -> bool:
        with sqlite.transaction(self.path) as db:
            cursor = db.execute("DELETE FROM training_jobs WHERE user = ? AND name = ?", (user, name))
            return cursor.rowcount > 0

"""Pipeline run history in sqlite (`{state_dir}/pipelines.sqlite`): runs, per-step state, timings,
cache hits and executed-notebook keys, so runs survive a server restart.

The server and the CLI may write the same file, so every call is its own short transaction on a fresh
connection (WAL, busy timeout), as in the local backend's state store. A run records the process
driving it (pid + start time); `recover()` marks a run whose driver is gone as interrupted (failed),
so nothing is left "running" forever. A local run also keeps the pipeline it runs and how (`spec`),
so `claim_for_resume` can hand an interrupted or failed run to a new driver: its completed steps
kept, the others pending again.

A local GPU step's demand is kept here too, from when it asks for GPUs until it gets them (`wanted_gpus`,
`enqueued`): this file is what every process of the machine reads, so the machine's queue sees a
waiting step as it sees a waiting job or server (`queued_gpu_steps`), not only once it runs.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from cube_jupyter import sqlite
from cube_jupyter.errors import Conflict, NotFound

RUN_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
STEP_STATUSES = ("pending", "queued", "running", "succeeded", "failed", "cached", "skipped", "cancelled")
ACTIVE_RUN = ("queued", "running")
DONE_STEP = ("succeeded", "failed", "cached", "skipped", "cancelled")

SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        user TEXT NOT NULL,
        path TEXT NOT NULL,
        pipeline TEXT NOT NULL,
        status TEXT NOT NULL,
        target TEXT NOT NULL,
        parameters TEXT NOT NULL,
        store TEXT NOT NULL,
        created TEXT NOT NULL,
        started TEXT,
        finished TEXT,
        error TEXT,
        external TEXT,
        driver_pid INTEGER,
        driver_started REAL,
        spec TEXT
    )
    """,
    "CREATE INDEX IF NOT EXISTS runs_by_user ON runs (user, created)",
    """
    CREATE TABLE IF NOT EXISTS steps (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        started TEXT,
        finished TEXT,
        duration REAL,
        attempts INTEGER NOT NULL DEFAULT 0,
        cache_hit INTEGER NOT NULL DEFAULT 0,
        cache_key TEXT,
        error TEXT,
        notebook TEXT,
        outputs TEXT NOT NULL DEFAULT '{}',
        metrics TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (run_id, name)
    )
    """,
)
STEP_FIELDS = (
    "status",
    "started",
    "finished",
    "duration",
    "attempts",
    "cache_hit",
    "cache_key",
    "error",
    "notebook",
    "outputs",
    "metrics",
    "files",
    "gpus",
    "reason",
    "wanted_gpus",
    "enqueued",
)
RUN_FIELDS = ("status", "started", "finished", "error", "external")
COMPLETED_STEP = ("succeeded", "cached")
RESUMABLE_RUN = ("failed", "cancelled")
# Columns added after the first release, created on open in an older file.
LATER_COLUMNS = {
    "runs": {"spec": "TEXT", "schedule": "TEXT", "logical_date": "TEXT"},
    "steps": {
        "files": "TEXT NOT NULL DEFAULT '[]'",
        "gpus": "TEXT NOT NULL DEFAULT '[]'",
        "reason": "TEXT",
        "wanted_gpus": "INTEGER NOT NULL DEFAULT 0",
        "enqueued": "REAL",
    },
}
# A run as read: every column but the (large) spec, of which only whether it is there.
SELECT_RUNS = (
    "SELECT id, user, path, pipeline, status, target, parameters, store, created, started, finished,"
    " error, external, schedule, logical_date, spec IS NOT NULL AS has_spec FROM runs"
)


class GpuStep(NamedTuple):
    """A running local step holding GPUs: whose, which run's, its GPU ids, and the process driving
    its run (its kernels descend from it)."""

    user: str
    run_id: str
    step: str
    gpu_ids: tuple[str, ...]
    driver_pid: int


@dataclass(frozen=True)
class StepRecord:
    """One step of one run. `error` is {message, cell, ename, evalue, traceback} from the runner;
    `outputs` maps each saved variable to {key, sha256, kind, size}; `metrics` are the values of the
    notebook's `metrics` names this step defined; `files` the data files its cache key saw; `gpus`
    the GPU ids a local step was given (`CUDA_VISIBLE_DEVICES`), held while it runs; `reason` why a
    `queued` step waits (GPUs, the GPU quota)."""

    name: str
    status: str = "pending"
    started: str | None = None
    finished: str | None = None
    duration: float | None = None
    attempts: int = 0
    cache_hit: bool = False
    cache_key: str | None = None
    error: dict[str, Any] | None = None
    notebook: str | None = None
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The REST/CLI view: no store internals (cache key, output keys); the traceback as lines,
        like an nbformat error output's."""
        body = asdict(self)
        del body["cache_key"], body["outputs"], body["metrics"]
        error = body["error"]
        if error is not None and isinstance(error.get("traceback"), str):
            error["traceback"] = error["traceback"].splitlines()
        return body


@dataclass(frozen=True)
class RunRecord:
    """One pipeline run as the REST API and the CLI show it."""

    id: str
    user: str
    path: str
    pipeline: str
    status: str
    target: str
    parameters: dict[str, Any]
    store: str
    created: str
    started: str | None = None
    finished: str | None = None
    error: str | None = None
    external: str | None = None  # the cluster object running it (Argo Workflow name, KFP run id), if any
    link: str | None = None  # the run in its engine's own UI (KFP's), set as it is read, never stored
    schedule: str | None = None  # the schedule that started it, and the logical time it stands for
    logical_date: str | None = None
    steps: tuple[StepRecord, ...] = ()
    resumable: bool = False  # a local run, failed or cancelled, with steps left to run

    def step(self, name: str) -> StepRecord:
        for step in self.steps:
            if step.name == name:
                return step
        raise NotFound(f"run {self.id!r} has no step named {name!r}", field="step")

    def evolve(self, **changes: Any) -> RunRecord:
        return replace(self, **changes)

    @property
    def metrics(self) -> dict[str, Any]:
        """The notebook's `metrics` names as the run computed them; a later step's value wins."""
        merged: dict[str, Any] = {}
        for step in self.steps:
            merged.update(step.metrics)
        return merged

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "user": self.user,
            "path": self.path,
            "pipeline": self.pipeline,
            "status": self.status,
            "target": self.target,
            "parameters": self.parameters,
            "store": self.store,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "error": self.error,
            "link": self.link,
            "schedule": self.schedule,
            "logical_date": self.logical_date,
            "metrics": self.metrics,
            "resumable": self.resumable,
            "steps": [step.to_dict() for step in self.steps],
        }


@dataclass(frozen=True)
class QueuedGpuStep:
    """A local step waiting for GPUs: whose, which, how many it asked for, since when (epoch seconds)."""

    user: str
    run_id: str
    step: str
    gpus: int
    enqueued: float


def now() -> str:
    """RFC 3339 UTC with milliseconds: step timings are often well under a second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class RunHistory:
    """CRUD on `runs` and `steps` with short transactions; safe from several processes at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        sqlite.create(path)
        db = self._connect()
        try:
            db.execute("PRAGMA journal_mode=WAL")
        finally:
            db.close()
        with self._transaction() as db:
            for statement in SCHEMA:
                db.execute(statement)
            for table, columns in LATER_COLUMNS.items():
                have = {row["name"] for row in db.execute(f"PRAGMA table_info({table})")}
                for name, kind in columns.items():
                    if name not in have:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> RunHistory:
        return cls(state_dir / "pipelines.sqlite")

    def create(
        self, run: RunRecord, step_names: Sequence[str], spec: dict[str, Any] | None = None
    ) -> RunRecord:
        """Insert a run (driven by this process) with its steps pending; Conflict on a reused id.
        `spec` is what a resume needs to run it again (a local run's pipeline and options)."""
        driver = psutil.Process(os.getpid())
        try:
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO runs (id, user, path, pipeline, status, target, parameters, store, created,"
                    " started, finished, error, external, driver_pid, driver_started, spec, schedule,"
                    " logical_date) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run.id,
                        run.user,
                        run.path,
                        run.pipeline,
                        run.status,
                        run.target,
                        json.dumps(run.parameters),
                        run.store,
                        run.created,
                        run.started,
                        run.finished,
                        run.error,
                        run.external,
                        driver.pid,
                        driver.create_time(),
                        json.dumps(spec) if spec is not None else None,
                        run.schedule,
                        run.logical_date,
                    ),
                )
                db.executemany(
                    "INSERT INTO steps (run_id, position, name, status) VALUES (?, ?, ?, 'pending')",
                    [(run.id, position, name) for position, name in enumerate(step_names)],
                )
        except sqlite3.IntegrityError:
            raise Conflict(f"a run with id {run.id!r} already exists", field="id") from None
        return self.get(run.id)

    def get(self, run_id: str) -> RunRecord:
        with self._transaction(write=False) as db:
            row = db.execute(f"{SELECT_RUNS} WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise NotFound(f"no pipeline run with id {run_id!r}", field="id")
            steps = db.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY position", (run_id,)).fetchall()
        return _run_from_row(row, steps)

    def spec(self, run_id: str) -> dict[str, Any] | None:
        """What `create` kept to run it again (None for a cluster run or a run from before it)."""
        with self._transaction(write=False) as db:
            row = db.execute("SELECT spec FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"no pipeline run with id {run_id!r}", field="id")
        return json.loads(row["spec"]) if row["spec"] else None

    def claim_for_resume(self, run_id: str) -> RunRecord:
        """Make this process the driver of a failed or cancelled run, its unfinished steps pending
        again (completed ones keep their outputs); Conflict if the run is not resumable (any more:
        two resumes of one run, one wins)."""
        driver = psutil.Process(os.getpid())
        with self._transaction() as db:
            claimed = db.execute(
                "UPDATE runs SET status = 'queued', finished = NULL, error = NULL, driver_pid = ?,"
                " driver_started = ? WHERE id = ? AND target = 'local' AND spec IS NOT NULL"
                f" AND status IN {RESUMABLE_RUN}",
                (driver.pid, driver.create_time(), run_id),
            ).rowcount
            if claimed:
                db.execute(
                    "UPDATE steps SET status = 'pending', started = NULL, finished = NULL, duration = NULL,"
                    " attempts = 0, cache_hit = 0, cache_key = NULL, error = NULL, notebook = NULL,"
                    " outputs = '{}', metrics = '{}', files = '[]',"
                    " gpus = '[]', reason = NULL, wanted_gpus = 0, enqueued = NULL"
                    f" WHERE run_id = ? AND status NOT IN {COMPLETED_STEP}",
                    (run_id,),
                )
        run = self.get(run_id)
        if not claimed:
            raise Conflict(
                f"run {run_id!r} is {run.status}: only a failed or cancelled local run resumes", field="id"
            )
        return run

    def list(self, user: str | None = None, limit: int = 200) -> list[RunRecord]:
        """Newest first; `user=None` lists everyone's."""
        query, args = SELECT_RUNS, []
        if user is not None:
            query += " WHERE user = ?"
            args.append(user)
        with self._transaction(write=False) as db:
            rows = db.execute(query + " ORDER BY created DESC, id DESC LIMIT ?", [*args, limit]).fetchall()
            ids = [row["id"] for row in rows]
            marks = ", ".join("?" for _ in ids)
            step_rows = db.execute(
                f"SELECT * FROM steps WHERE run_id IN ({marks}) ORDER BY position", ids
            ).fetchall()
        by_run: dict[str, list[sqlite3.Row]] = {}
        for step in step_rows:
            by_run.setdefault(step["run_id"], []).append(step)
        return [_run_from_row(row, by_run.get(row["id"], [])) for row in rows]

    def update_run(self, run_id: str, *, only_if_active: bool = False, **changes: Any) -> RunRecord:
        """Set run fields; with `only_if_active`, a run already finished is left as it is."""
        unknown = set(changes) - set(RUN_FIELDS)
        if unknown:
            raise ValueError(f"unknown run fields: {sorted(unknown)}")
        sets = ", ".join(f"{name} = ?" for name in changes)
        where = "id = ?" + (" AND status IN ('queued', 'running')" if only_if_active else "")
        with self._transaction() as db:
            db.execute(f"UPDATE runs SET {sets} WHERE {where}", [*changes.values(), run_id])
        return self.get(run_id)

    def update_step(self, run_id: str, name: str, **changes: Any) -> None:
        unknown = set(changes) - set(STEP_FIELDS)
        if unknown:
            raise ValueError(f"unknown step fields: {sorted(unknown)}")
        values = {key: _step_value(key, value) for key, value in changes.items()}
        sets = ", ".join(f"{key} = ?" for key in values)
        with self._transaction() as db:
            updated = db.execute(
                f"UPDATE steps SET {sets} WHERE run_id = ? AND name = ?", [*values.values(), run_id, name]
            ).rowcount
        if not updated:
            raise NotFound(f"run {run_id!r} has no step named {name!r}", field="step")

    def finish_steps(self, run_id: str, status: str, error: dict[str, Any] | None = None) -> None:
        """Settle every step not yet done: running ones and pending ones alike."""
        with self._transaction() as db:
            db.execute(
                "UPDATE steps SET status = ?, error = COALESCE(error, ?), finished = COALESCE(finished, ?)"
                " WHERE run_id = ? AND status IN ('pending', 'queued', 'running')",
                (status, json.dumps(error) if error else None, now(), run_id),
            )

    def recover(self) -> builtins.list[str]:
        """Mark runs whose driving process is gone as failed (their unfinished steps too); their ids."""
        with self._transaction(write=False) as db:
            rows = db.execute(
                "SELECT id, driver_pid, driver_started FROM runs WHERE status IN ('queued', 'running')"
                " AND target = 'local'"
            ).fetchall()
        dead = [row for row in rows if not _alive(row["driver_pid"], row["driver_started"])]
        for row in dead:
            message = (
                f"interrupted: the process running it (pid {row['driver_pid']}) exited before the run "
                "finished; resume the run to rerun what did not finish"
            )
            with self._transaction() as db:
                db.execute(
                    "UPDATE steps SET status = CASE status WHEN 'running' THEN 'failed' ELSE 'skipped' END,"
                    " error = CASE status WHEN 'running' THEN ? ELSE error END, finished = ?"
                    " WHERE run_id = ? AND status IN ('pending', 'queued', 'running')",
                    (json.dumps({"message": message}), now(), row["id"]),
                )
                db.execute(
                    "UPDATE runs SET status = 'failed', error = ?, finished = ?"
                    " WHERE id = ? AND status IN ('queued', 'running')",
                    (message, now(), row["id"]),
                )
        return [row["id"] for row in dead]

    def gpu_steps(self, user: str | None = None) -> builtins.list[GpuStep]:
        """Every running local step that holds GPUs, with the process driving its run."""
        rows = self._live_steps("steps.status = 'running' AND steps.gpus != '[]'", user)
        return [
            GpuStep(row["user"], row["id"], row["name"], tuple(json.loads(row["gpus"])), row["driver_pid"])
            for row in rows
        ]

    def queued_gpu_steps(self, user: str | None = None) -> builtins.list[QueuedGpuStep]:
        """Every local step that asked for GPUs and has none yet (`wanted_gpus`, `enqueued` set, not
        yet running nor done)."""
        rows = self._live_steps(
            "steps.status IN ('pending', 'queued') AND steps.wanted_gpus > 0 AND steps.enqueued IS NOT NULL",
            user,
        )
        return [
            QueuedGpuStep(row["user"], row["id"], row["name"], row["wanted_gpus"], row["enqueued"])
            for row in rows
        ]

    def _live_steps(self, condition: str, user: str | None) -> builtins.list[sqlite3.Row]:
        """The steps meeting `condition` of active local runs whose driving process is alive (a dead
        driver's steps hold and wait for nothing, before `recover` marks them); `user`'s only, if given."""
        query = (
            "SELECT runs.user, runs.id, steps.name, steps.gpus, steps.wanted_gpus, steps.enqueued,"
            " runs.driver_pid, runs.driver_started FROM steps JOIN runs ON runs.id = steps.run_id"
            f" WHERE {condition} AND runs.target = 'local' AND runs.status IN ('queued', 'running')"
        )
        args: builtins.list[str] = []
        if user is not None:
            query += " AND runs.user = ?"
            args.append(user)
        with self._transaction(write=False) as db:
            rows = db.execute(query, args).fetchall()
        return [row for row in rows if _alive(row["driver_pid"], row["driver_started"])]

    def delete(self, run_id: str) -> bool:
        with self._transaction() as db:
            db.execute("DELETE FROM steps WHERE run_id = ?", (run_id,))
            return db.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount > 0

    def _connect(self) -> sqlite3.Connection:
        return sqlite.connect(self.path)

    def _transaction(self, write: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        return sqlite.transaction(self.path, write)


def _alive(pid: int | None, started: float | None) -> bool:
    """Is the process that created the run still the one with that pid (not a reused pid)?"""
    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        return started is None or abs(process.create_time() - started) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _step_value(key: str, value: Any) -> Any:
    if key in ("error", "outputs", "metrics", "files", "gpus") and value is not None:
        return json.dumps(value)
    if key == "cache_hit":
        return int(bool(value))
    return value


def _columns(row: sqlite3.Row, record: type[Any]) -> dict[str, Any]:
    """The row's columns that are fields of `record`, as stored."""
    names = set(row.keys())
    return {f.name: row[f.name] for f in fields(record) if f.name in names}


def _run_from_row(row: sqlite3.Row, steps: Sequence[sqlite3.Row]) -> RunRecord:
    step_records = tuple(_step_from_row(step) for step in steps)
    resumable = (
        row["has_spec"]
        and row["status"] in RESUMABLE_RUN
        and any(step.status not in COMPLETED_STEP for step in step_records)
    )
    return RunRecord(
        **{
            **_columns(row, RunRecord),
            "parameters": json.loads(row["parameters"]),
            "steps": step_records,
            "resumable": resumable,
        }
    )


def _step_from_row(row: sqlite3.Row) -> StepRecord:
    return StepRecord(
        **{
            **_columns(row, StepRecord),
            "cache_hit": bool(row["cache_hit"]),
            "error": json.loads(row["error"]) if row["error"] else None,
            "outputs": json.loads(row["outputs"] or "{}"),
            "metrics": json.loads(row["metrics"] or "{}"),
            "files": json.loads(row["files"] or "[]"),
            "gpus": json.loads(row["gpus"] or "[]"),
        }
    )

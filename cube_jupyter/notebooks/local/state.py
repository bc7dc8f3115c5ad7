"""The local backend's source of truth: one sqlite row per notebook server.

The main server and the CLI may both act on the same file, so every operation is its own short
transaction on a fresh connection (WAL mode, busy timeout), and state changes made by background
work are conditional (`expect=`) so they never overwrite a change someone else made meanwhile.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cube_jupyter import sqlite
from cube_jupyter.local.files import PRIVATE_FILE
from cube_jupyter.notebooks.spec import NotebookServer, Resources, ServerStatus, server_exists

SCHEMA = """
CREATE TABLE IF NOT EXISTS servers (
    user TEXT NOT NULL,
    name TEXT NOT NULL,
    slug TEXT NOT NULL,
    profile TEXT NOT NULL,
    image TEXT NOT NULL,
    resources TEXT NOT NULL,
    env TEXT NOT NULL,
    gpu_ids TEXT NOT NULL,
    pid INTEGER,
    port INTEGER,
    token TEXT,
    base_url TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    created TEXT NOT NULL,
    last_activity TEXT,
    started TEXT,
    enqueued REAL,
    queue_position INTEGER,
    queue_reason TEXT,
    PRIMARY KEY (user, name)
)
"""
# Columns added since the first schema, with their types: a state file of an older version gains them.
ADDED_COLUMNS = {"enqueued": "REAL", "queue_position": "INTEGER", "queue_reason": "TEXT"}
COLUMNS = (
    "user",
    "name",
    "slug",
    "profile",
    "image",
    "resources",
    "env",
    "gpu_ids",
    "pid",
    "port",
    "token",
    "base_url",
    "status",
    "reason",
    "created",
    "last_activity",
    "started",
    *ADDED_COLUMNS,
)
_JSON_COLUMNS = ("resources", "env", "gpu_ids")
# Where a live child process may exist.
ACTIVE = (ServerStatus.PENDING, ServerStatus.RUNNING, ServerStatus.STOPPING)


@dataclass(frozen=True)
class ServerRecord:
    """One row: what the user asked for plus what the supervisor knows about the child."""

    user: str
    name: str
    slug: str
    profile: str
    image: str
    resources: Resources
    base_url: str
    status: ServerStatus
    created: str
    env: dict[str, str] = field(default_factory=dict)
    gpu_ids: tuple[str, ...] = ()
    pid: int | None = None
    port: int | None = None
    token: str | None = None
    reason: str | None = None
    last_activity: str | None = None
    started: str | None = None
    # The machine's queue (`local.admission`): a queued server holds nothing; when it asked, and its
    # place and reason as the last admission pass saw them.
    enqueued: float | None = None
    queue_position: int | None = None
    queue_reason: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.user, self.name)

    def evolve(self, **changes: Any) -> ServerRecord:
        return replace(self, **changes)

    def to_server(self) -> NotebookServer:
        return NotebookServer(
            user=self.user,
            name=self.name,
            profile=self.profile,
            status=self.status,
            url=self.base_url,
            resources=self.resources,
            created=self.created,
            image=self.image,
            reason=self.reason,
            last_activity=self.last_activity,
            queue_position=self.queue_position,
            queue_reason=self.queue_reason,
        )


class StateStore:
    """CRUD on `servers` with short transactions; safe to use from several processes at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        sqlite.create(path)  # rows hold every child's token
        db = self._connect()
        try:
            db.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, across processes
        finally:
            db.close()
        with self._transaction() as db:
            db.execute(SCHEMA)
            present = {row[1] for row in db.execute("PRAGMA table_info(servers)")}
            for column, kind in ADDED_COLUMNS.items():
                if column not in present:
                    db.execute(f"ALTER TABLE servers ADD COLUMN {column} {kind}")
        for suffix in ("-wal", "-shm"):
            # Another process closing its last connection may delete the sidecars at any moment.
            with suppress(FileNotFoundError):
                path.with_name(path.name + suffix).chmod(PRIVATE_FILE)

    def insert(self, record: ServerRecord) -> None:
        """Add a record; Conflict when the user already has a server of that name."""
        row = _to_row(record)
        marks = ", ".join("?" for _ in COLUMNS)
        try:
            with self._transaction() as db:
                db.execute(
                    f"INSERT INTO servers ({', '.join(COLUMNS)}) VALUES ({marks})", [row[c] for c in COLUMNS]
                )
        except sqlite3.IntegrityError:
            raise server_exists(record.user, record.name) from None

    def get(self, user: str, name: str) -> ServerRecord | None:
        with self._transaction(write=False) as db:
            row = db.execute("SELECT * FROM servers WHERE user = ? AND name = ?", (user, name)).fetchone()
        return _from_row(row) if row else None

    def list(self, user: str | None = None, statuses: tuple[ServerStatus, ...] = ()) -> list[ServerRecord]:
        query, args = "SELECT * FROM servers WHERE 1=1", []
        if user is not None:
            query += " AND user = ?"
            args.append(user)
        if statuses:
            query += f" AND status IN ({', '.join('?' for _ in statuses)})"
            args.extend(s.value for s in statuses)
        with self._transaction(write=False) as db:
            rows = db.execute(query + " ORDER BY user, created, name", args).fetchall()
        return [_from_row(row) for row in rows]

    def update(
        self, user: str, name: str, expect: dict[str, Any] | None = None, **changes: Any
    ) -> ServerRecord | None:
        """Apply `changes` if the row still matches `expect` (column -> value); the new record, or
        None when the row is gone or no longer matches."""
        unknown = (set(changes) | set(expect or {})) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown server columns: {sorted(unknown)}")
        values = _to_row_values(changes)
        sets = ", ".join(f"{column} = ?" for column in values)
        where, args = "user = ? AND name = ?", [*values.values(), user, name]
        for column, value in _to_row_values(expect or {}).items():
            if value is None:
                where += f" AND {column} IS NULL"
            else:
                where += f" AND {column} = ?"
                args.append(value)
        with self._transaction() as db:
            if values and db.execute(f"UPDATE servers SET {sets} WHERE {where}", args).rowcount == 0:
                return None
            row = db.execute("SELECT * FROM servers WHERE user = ? AND name = ?", (user, name)).fetchone()
        return _from_row(row) if row else None

    def delete(self, user: str, name: str) -> bool:
        with self._transaction() as db:
            return db.execute("DELETE FROM servers WHERE user = ? AND name = ?", (user, name)).rowcount > 0

    def _connect(self) -> sqlite3.Connection:
        return sqlite.connect(self.path)

    def _transaction(self, write: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        return sqlite.transaction(self.path, write)


def _to_row(record: ServerRecord) -> dict[str, Any]:
    return _to_row_values({c: getattr(record, c) for c in COLUMNS})


def _to_row_values(values: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for column, value in values.items():
        if column == "resources" and isinstance(value, Resources):
            value = json.dumps(value.to_dict())
        elif column in ("env", "gpu_ids"):
            value = json.dumps(list(value) if column == "gpu_ids" else dict(value))
        elif isinstance(value, ServerStatus):
            value = value.value
        row[column] = value
    return row


def _from_row(row: sqlite3.Row) -> ServerRecord:
    values = dict(row)
    for column in _JSON_COLUMNS:
        values[column] = json.loads(values[column])
    values["resources"] = Resources(**values["resources"])
    values["gpu_ids"] = tuple(values["gpu_ids"])
    values["status"] = ServerStatus(values["status"])
    return ServerRecord(**values)

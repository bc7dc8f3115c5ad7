"""Schedules and their runs by logical time, in sqlite (`{state_dir}/schedules.sqlite`), beside the
pipeline run history: the workbench's scheduler and the CLI share it, each call its own short
transaction (as `pipelines.history` does).

A *slot* is one logical time of one schedule. Its key (owner, schedule, logical time) is the table's
primary key, so however a logical time is asked for (on time, caught up after downtime, backfilled,
run now) it is inserted once and runs once; only an explicit rerun sets a finished slot pending again.
A slot is claimed for launch by one conditional UPDATE, so two schedulers never launch it twice.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from cube_jupyter import sqlite
from cube_jupyter.errors import Conflict, NotFound
from cube_jupyter.schedules.spec import MAX_CONCURRENCY, ScheduleSpec

SLOT_STATES = ("pending", "running", "succeeded", "failed", "skipped", "cancelled")
ACTIVE_SLOT = ("pending", "running")
# Slot origins: fired on time, a missed fire time caught up, a backfill, "run now", fired by Argo's
# CronWorkflow, fired by KFP's recurring run.
ORIGINS = ("schedule", "catchup", "backfill", "manual", "cluster", "kfp")

SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS schedules (
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        spec TEXT NOT NULL,
        snapshot TEXT,
        snapshot_taken TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        watermark TEXT NOT NULL,
        next_fire TEXT,
        paused INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (owner, name)
    )
    """,
    "CREATE INDEX IF NOT EXISTS schedules_due ON schedules (paused, next_fire)",
    """
    CREATE TABLE IF NOT EXISTS slots (
        owner TEXT NOT NULL,
        schedule TEXT NOT NULL,
        logical TEXT NOT NULL,
        state TEXT NOT NULL,
        origin TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        run_id TEXT,
        reason TEXT,
        not_before TEXT,
        batch TEXT,
        parallel INTEGER,
        created TEXT NOT NULL,
        started TEXT,
        finished TEXT,
        PRIMARY KEY (owner, schedule, logical)
    )
    """,
    "CREATE INDEX IF NOT EXISTS slots_active ON slots (state, not_before)",
    # The running scheduler's heartbeat: whether a command's change will be picked up soon.
    "CREATE TABLE IF NOT EXISTS scheduler (id INTEGER PRIMARY KEY CHECK (id = 1), pid INTEGER, beat TEXT)",
)


@dataclass(frozen=True)
class Schedule:
    """A saved schedule: its spec, when it was made, how far its fire times have been considered
    (`watermark`), its next fire time, and the notebook snapshot runs execute (kind notebook)."""

    owner: str
    spec: ScheduleSpec
    created: str
    updated: str
    watermark: str
    next_fire: str | None
    snapshot_taken: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            **self.spec.to_dict(),
            "created": self.created,
            "updated": self.updated,
            "next_fire": None if self.spec.paused else self.next_fire,
            "snapshot_taken": self.snapshot_taken,
        }


@dataclass(frozen=True)
class Slot:
    """One logical time of one schedule: its state, attempts, the run (pipeline run id or job name)
    of its latest attempt, and why it waits, was skipped or failed."""

    owner: str
    schedule: str
    logical: str
    state: str
    origin: str
    attempts: int = 0
    run_id: str | None = None
    reason: str | None = None
    not_before: str | None = None
    batch: str | None = None
    parallel: int | None = None
    created: str = ""
    started: str | None = None
    finished: str | None = None

    def to_dict(self) -> dict[str, Any]:
        body = {
            key: getattr(self, key)
            for key in ("logical", "state", "origin", "attempts", "run_id", "reason", "created", "started")
        }
        body.update(logical_date=self.logical, finished=self.finished, retry_at=self._retry_at())
        del body["logical"]
        return body

    def _retry_at(self) -> str | None:
        return self.not_before if self.state == "pending" and self.attempts else None


SLOT_COLUMNS = tuple(f.name for f in fields(Slot))


class ScheduleStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        sqlite.create(path)
        self._db = sqlite.HeldConnection(path)
        with self._transaction() as db:
            for statement in SCHEMA:
                db.execute(statement)

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> ScheduleStore:
        return cls(state_dir / "schedules.sqlite")

    # -- schedules ---------------------------------------------------------------------------------

    def create(self, schedule: Schedule, snapshot: str | None, *, limit: int) -> Schedule:
        """Insert; Conflict when the owner has one by that name or already has `limit`."""
        try:
            with self._transaction() as db:
                (count,) = db.execute(
                    "SELECT COUNT(*) FROM schedules WHERE owner = ?", (schedule.owner,)
                ).fetchone()
                if count >= limit:
                    raise Conflict(
                        f"user {schedule.owner!r} has {count} schedules, the most allowed "
                        "(c.CubeSchedules.max_schedules_per_user); delete one first",
                        field="name",
                    )
                db.execute(
                    "INSERT INTO schedules (owner, name, spec, snapshot, snapshot_taken, created, updated,"
                    " watermark, next_fire, paused) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        schedule.owner,
                        schedule.name,
                        json.dumps(schedule.spec.to_dict()),
                        snapshot,
                        schedule.snapshot_taken,
                        schedule.created,
                        schedule.updated,
                        schedule.watermark,
                        schedule.next_fire,
                        int(schedule.spec.paused),
                    ),
                )
        except sqlite3.IntegrityError:
            raise Conflict(
                f"user {schedule.owner!r} already has a schedule named {schedule.name!r}", field="name"
            ) from None
        return schedule

    def update(self, schedule: Schedule, snapshot: str | None = None) -> Schedule:
        """Save a changed schedule (`snapshot` replaces the stored one when given)."""
        sets = "spec = ?, updated = ?, watermark = ?, next_fire = ?, paused = ?, snapshot_taken = ?"
        values: list[Any] = [
            json.dumps(schedule.spec.to_dict()),
            schedule.updated,
            schedule.watermark,
            schedule.next_fire,
            int(schedule.spec.paused),
            schedule.snapshot_taken,
        ]
        if snapshot is not None:
            sets += ", snapshot = ?"
            values.append(snapshot)
        with self._transaction() as db:
            changed = db.execute(
                f"UPDATE schedules SET {sets} WHERE owner = ? AND name = ?",
                [*values, schedule.owner, schedule.name],
            ).rowcount
        if not changed:
            raise NotFound(f"user {schedule.owner!r} has no schedule named {schedule.name!r}", field="name")
        return schedule

    def advance(self, owner: str, name: str, watermark: str, next_fire: str | None) -> None:
        """Record that fire times up to `watermark` have been considered."""
        with self._transaction() as db:
            db.execute(
                "UPDATE schedules SET watermark = ?, next_fire = ? WHERE owner = ? AND name = ?",
                (watermark, next_fire, owner, name),
            )

    def get(self, owner: str, name: str) -> Schedule | None:
        with self._transaction(write=False) as db:
            row = db.execute(f"{_SELECT_SCHEDULES} WHERE owner = ? AND name = ?", (owner, name)).fetchone()
        return None if row is None else _schedule(row)

    def snapshot(self, owner: str, name: str) -> str | None:
        with self._transaction(write=False) as db:
            row = db.execute(
                "SELECT snapshot FROM schedules WHERE owner = ? AND name = ?", (owner, name)
            ).fetchone()
        return None if row is None else row["snapshot"]

    def list(self, owner: str | None = None) -> builtins.list[Schedule]:
        query, args = _SELECT_SCHEDULES, []
        if owner is not None:
            query += " WHERE owner = ?"
            args.append(owner)
        with self._transaction(write=False) as db:
            rows = db.execute(query + " ORDER BY owner, name", args).fetchall()
        return [_schedule(row) for row in rows]

    def due(self, now: str) -> builtins.list[Schedule]:
        """Unpaused schedules whose next fire time has come (an index range, however many there are)."""
        with self._transaction(write=False) as db:
            rows = db.execute(
                f"{_SELECT_SCHEDULES} WHERE paused = 0 AND next_fire IS NOT NULL AND next_fire <= ?"
                " ORDER BY next_fire",
                (now,),
            ).fetchall()
        return [_schedule(row) for row in rows]

    def earliest(self) -> str | None:
        """The soonest moment anything is due: a fire time or a pending slot's retry."""
        with self._transaction(write=False) as db:
            fire = db.execute("SELECT MIN(next_fire) FROM schedules WHERE paused = 0").fetchone()[0]
            retry = db.execute(
                "SELECT MIN(not_before) FROM slots WHERE state = 'pending' AND not_before IS NOT NULL"
            ).fetchone()[0]
        moments = [moment for moment in (fire, retry) if moment is not None]
        return min(moments) if moments else None

    def delete(self, owner: str, name: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM slots WHERE owner = ? AND schedule = ?", (owner, name))
            db.execute("DELETE FROM schedules WHERE owner = ? AND name = ?", (owner, name))

    def dependents(self, owner: str, name: str) -> builtins.list[str]:
        return [s.name for s in self.list(owner) if s.spec.depends_on == name]

    # -- slots -------------------------------------------------------------------------------------

    def add_slots(self, slots: Iterable[Slot]) -> int:
        """Insert each slot whose logical time is new; one already there is left as it is."""
        rows = [
            (
                s.owner,
                s.schedule,
                s.logical,
                s.state,
                s.origin,
                s.reason,
                s.not_before,
                s.batch,
                s.parallel,
                s.created,
                s.finished,
            )
            for s in slots
        ]
        with self._transaction() as db:
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO slots (owner, schedule, logical, state, origin, reason, not_before,"
                " batch, parallel, created, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            return db.total_changes - before

    def rerun(self, slots: Sequence[Slot]) -> int:
        """Set finished slots pending again (an explicit rerun or a backfill over failed ones)."""
        with self._transaction() as db:
            before = db.total_changes
            db.executemany(
                "UPDATE slots SET state = 'pending', origin = ?, attempts = 0, run_id = NULL, reason = NULL,"
                " not_before = NULL, batch = ?, parallel = ?, started = NULL, finished = NULL"
                " WHERE owner = ? AND schedule = ? AND logical = ? AND state NOT IN ('pending', 'running')",
                [(s.origin, s.batch, s.parallel, s.owner, s.schedule, s.logical) for s in slots],
            )
            return db.total_changes - before

    def slots(
        self, owner: str, name: str, logicals: Sequence[str] | None = None, limit: int = 500
    ) -> builtins.list[Slot]:
        """A schedule's slots, newest logical time first (those of `logicals` only, when given)."""
        query, args = "SELECT * FROM slots WHERE owner = ? AND schedule = ?", [owner, name]
        if logicals is not None:
            query += f" AND logical IN ({', '.join('?' for _ in logicals)})"
            args.extend(logicals)
        with self._transaction(write=False) as db:
            rows = db.execute(query + " ORDER BY logical DESC LIMIT ?", [*args, limit]).fetchall()
        return [_slot(row) for row in rows]

    def slot(self, owner: str, name: str, logical: str) -> Slot | None:
        found = self.slots(owner, name, [logical], limit=1)
        return found[0] if found else None

    def active(self) -> builtins.list[Slot]:
        """Every running slot, and the oldest pending ones of each schedule (and backfill): as many
        as could start at once, so a pass over a long catch-up reads a few rows, not all of them."""
        with self._transaction(write=False) as db:
            rows = db.execute(
                "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY owner, schedule, batch, state"
                " ORDER BY logical) AS place FROM slots WHERE state IN ('pending', 'running'))"
                " WHERE state = 'running' OR place <= ? ORDER BY logical, schedule",
                (MAX_CONCURRENCY,),
            ).fetchall()
        return [_slot(row) for row in rows]

    def claim(self, slot: Slot, started: str) -> Slot | None:
        """Mark a pending slot running (one more attempt) if it still is pending; None if another
        claim won."""
        with self._transaction() as db:
            claimed = db.execute(
                "UPDATE slots SET state = 'running', attempts = attempts + 1, run_id = NULL, reason = NULL,"
                " started = ?, finished = NULL"
                " WHERE owner = ? AND schedule = ? AND logical = ? AND state = 'pending'",
                (started, slot.owner, slot.schedule, slot.logical),
            ).rowcount
        if not claimed:
            return None
        return replace(
            slot, state="running", attempts=slot.attempts + 1, run_id=None, reason=None, started=started
        )

    def settle(self, slot: Slot, **changes: Any) -> Slot:
        """Write a slot's new state (and run id, reason, retry time, finish time)."""
        allowed = {"state", "run_id", "reason", "not_before", "finished"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"unknown slot fields: {sorted(unknown)}")
        sets = ", ".join(f"{key} = ?" for key in changes)
        with self._transaction() as db:
            db.execute(
                f"UPDATE slots SET {sets} WHERE owner = ? AND schedule = ? AND logical = ?",
                [*changes.values(), slot.owner, slot.schedule, slot.logical],
            )
        return replace(slot, **changes)

    # -- the scheduler's heartbeat ----------------------------------------------------------------

    def beat(self, pid: int, stamp: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO scheduler (id, pid, beat) VALUES (1, ?, ?)", (pid, stamp))

    def last_beat(self) -> tuple[int, str] | None:
        """(pid, time) of the scheduler's latest pass, if one ever ran."""
        with self._transaction(write=False) as db:
            row = db.execute("SELECT pid, beat FROM scheduler WHERE id = 1").fetchone()
        return None if row is None else (row["pid"], row["beat"])

    def close(self) -> None:
        self._db.close()

    def _transaction(self, write: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        return self._db.transaction(write)


_SELECT_SCHEDULES = (
    "SELECT owner, name, spec, snapshot_taken, created, updated, watermark, next_fire FROM schedules"
)


def _schedule(row: sqlite3.Row) -> Schedule:
    return Schedule(
        owner=row["owner"],
        spec=ScheduleSpec(**json.loads(row["spec"])),
        created=row["created"],
        updated=row["updated"],
        watermark=row["watermark"],
        next_fire=row["next_fire"],
        snapshot_taken=row["snapshot_taken"],
    )


def _slot(row: sqlite3.Row) -> Slot:
    return Slot(**{key: row[key] for key in SLOT_COLUMNS})

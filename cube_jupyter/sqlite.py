"""The sqlite access both local state stores use (servers, pipeline runs): short transactions on
their own connections, safe from several processes (the server and the CLI) at once."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cube_jupyter.local import files


def create(path: Path) -> None:
    """Make the database file private (0600, in a 0700 folder) before anything is written to it: it
    holds tokens and every user's runs (SQLite gives its WAL files the database file's mode)."""
    files.private_dir(path.parent)
    files.private_file(path)


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
    db.row_factory = sqlite3.Row
    return db


@contextmanager
def transaction(path: Path, write: bool = True) -> Iterator[sqlite3.Connection]:
    """One transaction on its own connection; writers take the lock up front (no upgrade deadlocks
    between processes), readers do not block anyone under WAL."""
    db = connect(path)
    try:
        db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    finally:
        db.close()


class HeldConnection:
    """One connection a store keeps for its lifetime, for a store written many times a second (the
    scheduler's): no connect and no WAL checkpoint per transaction, and commits that reach the WAL
    without an fsync each (`synchronous=NORMAL`: durable when a process is killed, as the scheduler's
    kill -9 test proves; a power cut may take back the last transactions). Other processes open their
    own; WAL and the busy timeout keep them apart."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

"""The sqlite access both local state stores use (servers, pipeline runs): short transactions on
their own connections, safe from several processes (the server and the CLI) at once."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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

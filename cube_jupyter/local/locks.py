"""Locks: per-key asyncio locks forgotten once nobody holds or waits for them, and file locks that
hold across the processes of one machine."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Hashable, Iterator
from pathlib import Path

from cube_jupyter.local import files
from cube_jupyter.names import user_slug


class KeyedLocks:
    """`async with locks.hold(key):` serializes work on one key.

    An entry is dropped when its last holder or waiter leaves, never while someone still waits:
    dropping it then would hand a newcomer a fresh lock while the waiter goes on with the old one,
    and two operations on the same server would run at once.
    """

    def __init__(self) -> None:
        self._locks: dict[Hashable, asyncio.Lock] = {}
        self._users: dict[Hashable, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if self._users[key] == 0:
                del self._users[key]
                del self._locks[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._locks

    def __len__(self) -> int:
        return len(self._locks)


def file_lock_path(lock_dir: Path, key: str) -> Path:
    """The lock file of `key` (a user) in `lock_dir`: one name every process of this machine uses."""
    return lock_dir / f"{user_slug(key)}.lock"


def _lock_file(path: Path) -> int:
    """The descriptor of `path`'s lock file (created 0600, its folder private)."""
    files.private_dir(path.parent)
    return os.open(path, os.O_CREAT | os.O_RDWR, files.PRIVATE_FILE)


@contextlib.asynccontextmanager
async def file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive lock on `path` (created 0600) held across processes on this machine: the
    workbench and the notebook servers it started, and the CLI, all take the same one. Taken in a
    thread, so waiting for it never blocks the event loop; released when the block ends (or the
    process dies: the kernel drops a dead holder's flock)."""
    fd = _lock_file(path)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and with it the lock


@contextlib.contextmanager
def blocking_file_lock(path: Path) -> Iterator[None]:
    """`file_lock` for a thread that may wait: held until the block ends."""
    fd = _lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and with it the lock


@contextlib.contextmanager
def try_file_lock(path: Path) -> Iterator[bool]:
    """The lock of `file_lock` if nobody holds it, without waiting: yields whether it is held (False
    too when `path`'s directory is gone; it is never created, so a deleted job stays deleted)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, files.PRIVATE_FILE)
    except FileNotFoundError:
        fd = -1
    try:
        held = fd >= 0
        if held:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held = False
        yield held
    finally:
        if fd >= 0:
            os.close(fd)  # and with it the lock

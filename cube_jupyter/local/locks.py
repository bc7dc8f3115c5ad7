"""Per-key asyncio locks that are forgotten once nobody holds or waits for them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable


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

"""One source read answers every request in the same scope for a moment, however many arrive.

Fifty browsers polling `/gpu` must not mean fifty Prometheus queries or NVML reads: the first
request of a scope starts the read, the others await the same future, and its answer is reused for
`ttl` seconds. A failed read is not kept: every waiter gets the error, and the next request retries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class CoalescingCache(Generic[T]):
    """Answers younger than `ttl` seconds per key, and at most one load in flight per key.

    `ttl` 0 turns both off: every call loads (the baseline the benchmark compares against).
    """

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self.loads = 0  # how many times a loader ran: what the cache saves is visible
        self._values: dict[Hashable, tuple[float, T]] = {}
        self._inflight: dict[Hashable, asyncio.Future[T]] = {}

    async def get(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        if self.ttl <= 0:
            self.loads += 1
            return await load()
        cached = self._values.get(key)
        if cached is not None and self.clock() - cached[0] < self.ttl:
            return cached[1]
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            self.loads += 1
            value = await load()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        else:
            self._values[key] = (self.clock(), value)
            future.set_result(value)
            self._prune()
            return value
        finally:
            self._inflight.pop(key, None)

    def _prune(self) -> None:
        now = self.clock()
        for key in [k for k, (stamp, _) in self._values.items() if now - stamp >= self.ttl]:
            del self._values[key]

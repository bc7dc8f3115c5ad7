"""An injected clock for the scheduler: time moves only when a test says so."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta


class SteppedClock:
    def __init__(self, start: datetime) -> None:
        self.moment = start
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> datetime:
        self.moment += timedelta(seconds=seconds)
        return self.moment

    async def sleep(self, seconds: float) -> None:
        """Record the wait and yield once: the loop's next pass sees whatever time a test set."""
        self.sleeps.append(seconds)
        await asyncio.sleep(0)

"""Background passes that must survive their own failures: supervision, culling."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


async def repeat(step: Callable[[], Awaitable[None]], seconds: float, what: str) -> None:
    """Await `step()` every `seconds` until cancelled; a failing pass is logged and the next one
    retries, so one bad answer never ends the background work for good."""
    while True:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s pass failed", what)
        await asyncio.sleep(seconds)

"""The one way tests wait for something that happens asynchronously: poll until it holds, or fail
naming what was awaited and the last value seen.

    job = wait_until(lambda: runner.status("a"), 60, "job a to be recorded")
    status, body = await wait_until_async(
        lambda: api("GET", "notebooks"), 60, "the API to answer 200", until=lambda r: r[0] == 200
    )

`probe()` is called until `until(value)` is true (by default: until the value is truthy), and that
value is returned. `wait_until_async` also awaits a probe that returns an awaitable. Exceptions of
the `ignoring` types count as "not yet" (and are reported as the last value). The timeout is a
deadline to give up at, never a duration a test asserts.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
DEFAULT_INTERVAL = 0.05


def _describe(probe: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(probe).strip()
    except (OSError, TypeError):
        return repr(probe)


def _timed_out(probe: Callable[..., Any], timeout: float, what: str, last: Any) -> AssertionError:
    return AssertionError(
        f"timed out after {timeout:g} s waiting for {what or _describe(probe)}; last value: {last!r}"
    )


def wait_until(
    probe: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT,
    what: str = "",
    *,
    until: Callable[[T], object] = bool,
    ignoring: tuple[type[BaseException], ...] = (),
    interval: float = DEFAULT_INTERVAL,
) -> T:
    """Poll `probe()` until `until(value)` holds and return that value; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = probe()
        except ignoring as exc:
            last = exc
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() > deadline:
            raise _timed_out(probe, timeout, what, last)
        time.sleep(interval)


@overload
async def wait_until_async(
    probe: Callable[[], Awaitable[T]],
    timeout: float = ...,
    what: str = ...,
    *,
    until: Callable[[T], object] = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
    interval: float = ...,
) -> T: ...


@overload
async def wait_until_async(
    probe: Callable[[], T],
    timeout: float = ...,
    what: str = ...,
    *,
    until: Callable[[T], object] = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
    interval: float = ...,
) -> T: ...


async def wait_until_async(
    probe: Callable[[], Any],
    timeout: float = DEFAULT_TIMEOUT,
    what: str = "",
    *,
    until: Callable[[Any], object] = bool,
    ignoring: tuple[type[BaseException], ...] = (),
    interval: float = DEFAULT_INTERVAL,
) -> Any:
    """`wait_until` without blocking the event loop; a probe may return an awaitable (a coroutine)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        try:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as exc:
            last = exc
        else:
            if until(value):
                return value
            last = value
        if loop.time() > deadline:
            raise _timed_out(probe, timeout, what, last)
        await asyncio.sleep(interval)

"""Idle detection for child servers, from what the child itself reports about kernels and terminals.

A server's own `/api/status` `last_activity` also moves on every API call (our polling included), so
activity is taken from `/api/kernels` and `/api/terminals` only, like JupyterHub's idle culler does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from cube_jupyter.backends.local.process import LOOPBACK


@dataclass(frozen=True)
class Activity:
    """What a child reported: whether any kernel is busy, and the newest activity it knows of."""

    busy: bool
    last_activity: datetime

    def idle_seconds(self, now: datetime) -> float:
        return 0.0 if self.busy else max(0.0, (now - self.last_activity).total_seconds())


class ActivityUnavailable(Exception):
    """The child did not answer; the supervisor's liveness check decides what that means."""


async def fetch_activity(
    port: int, base_url: str, token: str, started: datetime, timeout: float = 5.0
) -> Activity:
    """Ask a child for its kernels and terminals; activity never predates the server's start."""
    kernels = await _get_list(port, f"{base_url}api/kernels", token, timeout)
    terminals = await _get_list(port, f"{base_url}api/terminals", token, timeout, missing_ok=True)
    busy = any(k.get("execution_state") == "busy" for k in kernels)
    stamps = [started]
    for item in [*kernels, *terminals]:
        stamp = parse_time(item.get("last_activity"))
        if stamp is not None:
            stamps.append(stamp)
    return Activity(busy=busy, last_activity=max(stamps))


def should_cull(activity: Activity, now: datetime, limit_seconds: int) -> bool:
    return limit_seconds > 0 and activity.idle_seconds(now) > limit_seconds


def cull_reason(limit_seconds: int) -> str:
    return f"culled after {limit_seconds} s idle"


def parse_time(value: object) -> datetime | None:
    """An ISO 8601 timestamp as Jupyter writes it ('2024-05-01T10:00:00.123456Z'), in UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def format_time(stamp: datetime) -> str:
    """RFC 3339 in UTC with a 'Z', the form every record and REST response uses."""
    return stamp.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def _get_list(
    port: int, path: str, token: str, timeout: float, missing_ok: bool = False
) -> list[dict[str, object]]:
    request = HTTPRequest(
        f"http://{LOOPBACK}:{port}{path}",
        headers={"Authorization": f"token {token}"},
        connect_timeout=timeout,
        request_timeout=timeout,
    )
    try:
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
    except (TimeoutError, OSError, HTTPClientError) as exc:
        raise ActivityUnavailable(f"{path}: {exc}") from None
    if response.code == 404 and missing_ok:  # terminals disabled on the child
        return []
    if response.code != 200:
        raise ActivityUnavailable(f"{path}: HTTP {response.code}")
    try:
        items = json.loads(response.body)
    except ValueError:
        raise ActivityUnavailable(f"{path}: not JSON") from None
    if not isinstance(items, list):
        raise ActivityUnavailable(f"{path}: not a list")
    return [item for item in items if isinstance(item, dict)]

"""Idle detection for notebook servers, from what a server itself reports about kernels and terminals.

Both backends cull with it: the local one asks its children on loopback, the kubernetes one asks each
pod through its Service. A server's own `/api/status` `last_activity` also moves on every API call (our
polling included), so activity is taken from `/api/kernels` and `/api/terminals` only, like JupyterHub's
idle culler; unlike Kubeflow's, a busy kernel (a long cell running) and terminals count as activity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from cube_jupyter.fields import parse_timestamp


@dataclass(frozen=True)
class Activity:
    """What a server reported: whether any kernel is busy, and the newest activity it knows of."""

    busy: bool
    last_activity: datetime

    def idle_seconds(self, now: datetime) -> float:
        return 0.0 if self.busy else max(0.0, (now - self.last_activity).total_seconds())

    def stamp(self, now: datetime) -> datetime:
        """The activity time to record: a busy server is active right now."""
        return now if self.busy else self.last_activity


class ActivityUnavailable(Exception):
    """The server did not answer; never a reason to cull (the caller decides what it means)."""


async def fetch_activity(
    server_url: str, started: datetime, *, token: str | None = None, timeout: float = 5.0
) -> Activity:
    """Ask the server at `server_url` (its base URL, ending in '/') for its kernels and terminals;
    activity never predates `started`, the server's start, so a fresh server is not idle at once."""
    kernels = await _get_list(f"{server_url}api/kernels", token, timeout)
    terminals = await _get_list(f"{server_url}api/terminals", token, timeout, missing_ok=True)
    busy = any(k.get("execution_state") == "busy" for k in kernels)
    stamps = [started]
    for item in [*kernels, *terminals]:
        stamp = parse_timestamp(item.get("last_activity"))
        if stamp is not None:
            stamps.append(stamp)
    return Activity(busy=busy, last_activity=max(stamps))


def should_cull(activity: Activity, now: datetime, limit_seconds: int) -> bool:
    return limit_seconds > 0 and activity.idle_seconds(now) > limit_seconds


def cull_reason(limit_seconds: int) -> str:
    return f"culled after {limit_seconds} s idle"


async def _get_list(
    url: str, token: str | None, timeout: float, missing_ok: bool = False
) -> list[dict[str, object]]:
    # Loaded here: a command that asks no server (`cube-jupyter notebook list`) never pays for it.
    from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

    headers = {"Authorization": f"token {token}"} if token else {}
    request = HTTPRequest(url, headers=headers, connect_timeout=timeout, request_timeout=timeout)
    try:
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
    except (TimeoutError, OSError, HTTPClientError) as exc:
        raise ActivityUnavailable(f"{url}: {exc}") from None
    if response.code == 404 and missing_ok:  # terminals disabled on the server
        return []
    if response.code != 200:
        raise ActivityUnavailable(f"{url}: HTTP {response.code}")
    try:
        items = json.loads(response.body)
    except ValueError:
        raise ActivityUnavailable(f"{url}: not JSON") from None
    if not isinstance(items, list):
        raise ActivityUnavailable(f"{url}: not a list")
    return [item for item in items if isinstance(item, dict)]

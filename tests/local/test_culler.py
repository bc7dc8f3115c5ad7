"""Idle culling: real children, a real busy kernel, the supervisor's own polling."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

from cube_jupyter.notebooks.activity import Activity, parse_time, should_cull
from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.local.support import KERNEL_V1, execute_request, make_settings, send_shell

pytestmark = pytest.mark.timeout(120)


async def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


def test_idle_server_is_culled_and_busy_one_is_not(
    state_dir: Path, backends: Callable[..., LocalNotebookBackend], loop: asyncio.AbstractEventLoop
) -> None:
    settings = make_settings(state_dir, cull_idle_seconds=2)
    backend = backends(settings)
    profile = settings.profile(None)

    def status(name: str) -> ServerStatus | None:
        server = backend.get_server("alice", name)
        return server.status if server else None

    async def run() -> None:
        for name in ("idle", "busy"):
            await backend.create_server(NotebookSpec("alice", name, profile))
        for name in ("idle", "busy"):
            await backend.wait_until_ready("alice", name, timeout=60)

        # Keep one server's kernel busy with a long cell, talking to the child directly.
        up = backend.upstream("alice", "busy")
        assert up is not None
        base, auth = f"{up.host}:{up.port}{up.base_url}", {"Authorization": f"token {up.token}"}
        http = AsyncHTTPClient()
        kernel = json.loads(
            (await http.fetch(f"http://{base}api/kernels", method="POST", body="{}", headers=auth)).body
        )
        ws = await websocket_connect(
            HTTPRequest(f"ws://{base}api/kernels/{kernel['id']}/channels", headers=auth),
            subprotocols=[KERNEL_V1],
        )
        await send_shell(ws, execute_request("import time; time.sleep(60)"))

        async def kernel_state() -> str:
            model = json.loads(
                (await http.fetch(f"http://{base}api/kernels/{kernel['id']}", headers=auth)).body
            )
            return str(model["execution_state"])

        while await kernel_state() != "busy":
            await asyncio.sleep(0.1)
        busy_since = time.monotonic()

        await backend.start()  # supervision: polls every 0.3 s, culls after 2 s idle
        await wait_for(lambda: status("idle") == ServerStatus.STOPPED, timeout=15)
        culled = backend.get_server("alice", "idle")
        assert culled is not None and culled.reason == "culled after 2 s idle"

        await asyncio.sleep(max(0.0, busy_since + 3.5 - time.monotonic()))  # well past the limit
        assert status("busy") == ServerStatus.RUNNING
        busy = backend.get_server("alice", "busy")
        assert busy is not None and busy.last_activity is not None
        seen = parse_time(busy.last_activity)
        assert seen is not None and datetime.now(UTC) - seen < timedelta(seconds=2)
        ws.close()

    loop.run_until_complete(run())


def test_cull_decision() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    recent = Activity(busy=False, last_activity=now - timedelta(seconds=1))
    old = Activity(busy=False, last_activity=now - timedelta(seconds=3))
    busy_old = Activity(busy=True, last_activity=now - timedelta(hours=1))
    assert not should_cull(recent, now, 2)
    assert should_cull(old, now, 2)
    assert not should_cull(busy_old, now, 2)
    assert not should_cull(old, now, 0)  # 0: culling is off
    assert parse_time("2025-01-01T11:59:57.123456Z") == now - timedelta(seconds=2, microseconds=876544)

"""Idle culling: real children, a real busy kernel, the supervisor's own polling."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

from cube_jupyter.fields import parse_timestamp
from cube_jupyter.notebooks.activity import Activity, should_cull
from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.local.support import KERNEL_V1, execute_request, make_settings, send_shell
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(120)


def test_idle_server_is_culled_and_busy_one_is_not(
    state_dir: Path,
    backends: Callable[..., LocalNotebookBackend],
    loop: asyncio.AbstractEventLoop,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = make_settings(state_dir, cull_idle_seconds=2)
    backend = backends(settings)
    profile = settings.notebooks.profile(None)

    # When each supervision pass that has finished began.
    passes: list[datetime] = []
    check_once = backend.check_once

    async def recording_pass() -> None:
        began = datetime.now(UTC)
        await check_once()
        passes.append(began)

    monkeypatch.setattr(backend, "check_once", recording_pass)

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

        await wait_until_async(kernel_state, 30, "the kernel to be busy", until=lambda s: s == "busy")
        past_the_limit = datetime.now(UTC) + timedelta(seconds=2)  # the cell began before now

        await backend.start()  # supervision: polls every 0.3 s, culls after 2 s idle
        await wait_until_async(lambda: status("idle") == ServerStatus.STOPPED, what="the idle server culled")
        culled = backend.get_server("alice", "idle")
        assert culled is not None and culled.reason == "culled after 2 s idle"

        # A pass that began 2 s after the cell did has finished: it would have culled a server idle
        # since the cell began.
        checked: list[datetime] = await wait_until_async(
            lambda: [began for began in passes if began > past_the_limit],
            what="a finished supervision pass past the limit",
        )
        assert status("busy") == ServerStatus.RUNNING
        busy = backend.get_server("alice", "busy")
        assert busy is not None and busy.last_activity is not None
        # Busy is active when checked, not when the cell began (activity is kept in whole seconds).
        seen = parse_timestamp(busy.last_activity)
        assert seen is not None and seen >= checked[0].replace(microsecond=0)
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
    assert parse_timestamp("2025-01-01T11:59:57.123456Z") == now - timedelta(seconds=2, microseconds=876544)

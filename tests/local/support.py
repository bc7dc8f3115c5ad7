"""Helpers for local-backend tests: settings, cleanup of children, and a tiny kernel client."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any, cast

import psutil
from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session
from jupyter_server.services.kernels.connection.base import deserialize_msg_from_ws_v1, serialize_msg_to_ws_v1
from tornado.httpclient import AsyncHTTPClient
from tornado.websocket import WebSocketClientConnection
from traitlets.config import Config

from cube_jupyter.config import Settings, load_settings
from cube_jupyter.notebooks.backend import Upstream
from tests.waiting import wait_until_async

BASE_URL = "/a%40b/"  # pytest-jupyter's default base_url: an escaped character keeps us honest
KERNEL_V1 = "v1.kernel.websocket.jupyter.org"
PROFILES = [
    {
        "name": "small",
        "image": "jupyter/base",
        "cpu": "1",  # a whole core: a start is not slowed by the quota (test_limits measures limits)
        "memory": "1Gi",
        "default": True,
        "env": {"CUBE_TEST_PROFILE": "small"},
    },
]
# A "lab" that dies at once, with something in its log: a real child process failing to start.
EXITING_LAB = (sys.executable, "-c", "import sys; print('no lab here today', flush=True); sys.exit(3)")


def make_settings(
    state_dir: Path, profiles: list[dict[str, Any]] | None = None, default_user: str = "alice", **spawner: Any
) -> Settings:
    config = Config(
        {
            "CubeWorkbench": {
                "state_dir": str(state_dir),
                "poll_seconds": 0.3,
                "default_user": default_user,
                "admin_users": ["boss"],
            },
            "CubeSpawner": {"profiles": profiles or PROFILES, **spawner},
        }
    )
    return load_settings(config)


def kill_children(state_dir: Path) -> None:
    """Kill every process started for `state_dir` (their argv names its workspaces) and its kernels."""
    family: list[psutil.Process] = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(state_dir) in part for part in proc.info["cmdline"] or []):
                family += [proc, *proc.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for proc in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(family, timeout=10)


def children_of(state_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(
            str(state_dir) in part for part in proc.info["cmdline"] or []
        ):
            found.append(proc)
    return found


async def kernel_environment(upstream: Upstream, server_pid: int) -> dict[str, str]:
    """The environment of a kernel the child server `server_pid` starts: the server's own, as user
    code sees it. (A forked server's /proc/PID/environ is its fork server's start environment.)"""
    url = f"http://{upstream.host}:{upstream.port}{upstream.base_url}api/kernels"
    headers = {"Authorization": f"token {upstream.token}"}
    response = await AsyncHTTPClient().fetch(url, method="POST", body="{}", headers=headers)
    kernel_id = json.loads(response.body)["id"]
    try:
        kernels = await wait_until_async(
            lambda: [p for p in psutil.Process(server_pid).children() if "ipykernel_launcher" in _cmdline(p)],
            60,
            "the server's kernel process",
        )
        return cast(dict[str, str], kernels[0].environ())
    finally:
        await AsyncHTTPClient().fetch(f"{url}/{kernel_id}", method="DELETE", headers=headers)


def _cmdline(process: psutil.Process) -> list[str]:
    """A process's command line; none for one that exited meanwhile (a zombie, or gone)."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def execute_request(code: str) -> dict[str, Any]:
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    return Session().msg("execute_request", content=content)


async def send_shell(ws: WebSocketClientConnection, msg: dict[str, Any]) -> None:
    """Send on the shell channel in whichever protocol the server picked (v1 binary or legacy JSON)."""
    if ws.selected_subprotocol == KERNEL_V1:
        parts = [
            json.dumps(msg[key], default=json_default).encode()
            for key in ("header", "parent_header", "metadata", "content")
        ]
        await ws.write_message(serialize_msg_to_ws_v1(parts, "shell"), binary=True)
    else:
        await ws.write_message(json.dumps({**msg, "channel": "shell"}, default=json_default))


async def receive(ws: WebSocketClientConnection) -> tuple[str, dict[str, Any]]:
    """The next message as (channel, {header, parent_header, content})."""
    raw = await ws.read_message()
    if raw is None:
        raise ConnectionError(f"WebSocket closed: {ws.close_code} {ws.close_reason}")
    if isinstance(raw, bytes):
        channel, parts = deserialize_msg_from_ws_v1(raw)
        header, parent, _, content = (json.loads(p) for p in parts[:4])
        return channel, {"header": header, "parent_header": parent, "content": content}
    msg = json.loads(raw)
    return msg.get("channel", ""), msg


async def execute(ws: WebSocketClientConnection, code: str) -> str:
    """Run `code` and return the text/plain of its result (raises on an error reply)."""
    msg = execute_request(code)
    await send_shell(ws, msg)
    result, replied = None, False
    while result is None or not replied:  # shell reply and iopub result may come in either order
        channel, reply = await receive(ws)
        if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            continue
        kind = reply["header"]["msg_type"]
        if kind == "execute_result":
            result = reply["content"]["data"]["text/plain"]
        elif kind == "error":
            raise RuntimeError(f"{reply['content']['ename']}: {reply['content']['evalue']}")
        elif channel == "shell" and kind == "execute_reply":
            replied = True
    return result

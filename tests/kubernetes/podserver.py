"""A real Jupyter server on loopback standing in for a notebook server's pod.

It runs with the rendered container's own Jupyter flags (base_url = the route prefix, no token, any
origin), moved onto a loopback port, so the backend's in-cluster reads (`api/kernels`,
`api/terminals`) meet what they would meet in the pod. Kernels are started the way a browser does it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from cube_jupyter.local.processes import LOOPBACK
from tests.local.support import KERNEL_V1, execute_request, send_shell
from tests.waiting import wait_until_async

# Flags the stand-in sets itself: where it listens, and what keeps it a plain, local server.
OWN_FLAGS = ("--ServerApp.ip=", "--ServerApp.port=")
# The browser's double-submit XSRF token: a cookie and a header with the same value.
XSRF = {"Cookie": "_xsrf=cube-test-xsrf", "X-XSRFToken": "cube-test-xsrf"}


class PodServer:
    """`jupyter server` with the pod's flags on `127.0.0.1:port`; `stop()` kills it and its kernels."""

    def __init__(self, container: dict[str, Any], port: int, root: Path) -> None:
        self.port = port
        self.root = root
        flags = [a for a in container["args"] if a.startswith("--") and not a.startswith(OWN_FLAGS)]
        self.base_url = next(a.split("=", 1)[1] for a in flags if a.startswith("--ServerApp.base_url="))
        self.argv = [
            sys.executable,
            "-m",
            "jupyter_server",
            *flags,
            f"--ServerApp.ip={LOOPBACK}",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.jpserver_extensions=cube_jupyter_server=False",
            "--no-browser",
        ]
        if os.geteuid() == 0:
            self.argv.append("--allow-root")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{self.base_url}"

    async def start(self, timeout: float = 30.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_TOKEN")}
        env["JUPYTER_RUNTIME_DIR"] = str(self.root / ".runtime")
        log = (self.root / "server.log").open("ab")
        self.proc = subprocess.Popen(self.argv, cwd=self.root, env=env, stdout=log, stderr=log)
        log.close()
        http = AsyncHTTPClient()
        proc = self.proc

        async def status_code() -> int:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"stand-in server exited: {(self.root / 'server.log').read_text()[-2000:]}"
                )
            response = await http.fetch(f"{self.url}api/status", raise_error=False)
            return response.code

        await wait_until_async(
            status_code,
            timeout,
            "the stand-in server to answer api/status",
            until=lambda code: code == 200,
            ignoring=(OSError,),  # not listening yet
            interval=0.1,
        )

    async def busy_kernel(self, code: str) -> WebSocketClientConnection:
        """Start a kernel and run `code` in it over its WebSocket; return once the kernel is busy."""
        http = AsyncHTTPClient()
        response = await http.fetch(f"{self.url}api/kernels", method="POST", body="{}", headers=XSRF)
        kernel_id = json.loads(response.body)["id"]
        ws = await websocket_connect(
            HTTPRequest(f"ws://{LOOPBACK}:{self.port}{self.base_url}api/kernels/{kernel_id}/channels"),
            subprotocols=[KERNEL_V1],
        )
        await send_shell(ws, execute_request(code))

        async def kernel() -> dict[str, Any]:
            model: dict[str, Any] = json.loads((await http.fetch(f"{self.url}api/kernels/{kernel_id}")).body)
            return model

        await wait_until_async(
            kernel, 30, "the kernel to be busy", until=lambda m: m["execution_state"] == "busy", interval=0.1
        )
        return ws

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            family = [psutil.Process(self.proc.pid)]
            family += family[0].children(recursive=True)
            for proc in family:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            psutil.wait_procs(family, timeout=10)
        self.proc.wait(timeout=10)
        self.proc = None

"""A real workbench (`jupyter server` + the extension, local backend) behind the trusted identity
header, as a shared host runs it, that a benchmark can kill -9 and start again over the same state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from cube_jupyter.local import files
from cube_jupyter.local.processes import free_port
from cube_jupyter.names import user_slug
from tests.benchmarks.server import jupyter_server_argv
from tests.waiting import wait_until_async

IDENTITY_PROVIDER = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"
USER_HEADER = "kubeflow-userid"
XSRF = "bench-xsrf"  # what JupyterLab sends on unsafe methods: the _xsrf cookie echoed in a header
READY_PATH = "/cube/api/v1/notebooks"  # 503 until the notebook backend has started (re-attached)


class Workbench:
    """One workbench on one port and state dir; `start` again after `kill` to measure a restart."""

    def __init__(self, root: Path, admin: str) -> None:
        self.root = root
        self.state_dir = root / "state"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "workbench.log"
        self.config = root / "jupyter_server_config.py"
        self.config.write_text(
            f"c.ServerApp.identity_provider_class = {IDENTITY_PROVIDER!r}\n"
            'c.ServerApp.authorizer_class = "cube_jupyter_server.authorizer.CubeAuthorizer"\n'
            'c.ServerApp.jpserver_extensions = {"cube_jupyter_server": True}\n'
            "c.ServerApp.port_retries = 0\n"  # a restart must come back on the same port, or fail
            'c.CubeWorkbench.backend = "local"\n'
            f"c.CubeWorkbench.state_dir = {str(self.state_dir)!r}\n"
            "c.CubeWorkbench.poll_seconds = 0.5\n"
            f"c.CubeWorkbench.admin_users = [{admin!r}]\n"
            f"c.CubeStorage.url = {str(root / 'artifacts')!r}\n"
            # A small host's pool: the chains the benchmarks run need no more, and each worker's kernel
            # costs a few seconds of CPU to start.
            "c.CubePipelines.max_workers = 2\n"
            "c.CubePipelines.max_parallel_per_run = 2\n"
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.client = AsyncHTTPClient(force_instance=True)

    def user_area(self, user: str) -> Path:
        """The files `user` may name in requests on this shared server (their servers' workspaces)."""
        area = files.user_workspaces(self.state_dir, user_slug(user))
        area.mkdir(parents=True, exist_ok=True)
        return area

    async def start(self, timeout: float = 90.0) -> float:
        """Start the server; seconds until the notebooks API answers 200 (the backend is up)."""
        started = time.perf_counter()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                jupyter_server_argv(self.config, self.port, self.root), stdout=log, stderr=subprocess.STDOUT
            )
        await wait_until_async(
            lambda: self.call("GET", READY_PATH, "bench-probe"),
            timeout,
            f"{self.url}{READY_PATH} to answer 200 (log: {self.log_path})",
            until=lambda answer: answer[0] == 200,
            ignoring=(OSError,),
            interval=0.05,
        )
        return time.perf_counter() - started

    @property
    def pid(self) -> int:
        assert self.process is not None, "the workbench is not started"
        return self.process.pid

    def rss(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.pid).children(recursive=True)

    def kill(self) -> None:
        """kill -9: no shutdown hook runs, as when the host or the OOM killer takes the server down."""
        os.kill(self.pid, signal.SIGKILL)
        assert self.process is not None
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    async def call(self, method: str, path: str, user: str, body: Any = None) -> tuple[int, Any]:
        """One request as `user`; (status, parsed JSON or None), never raising on an HTTP status."""
        headers = {USER_HEADER: user}
        if method not in ("GET", "HEAD"):
            headers.update({"Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF})
        payload = None if method in ("GET", "HEAD", "DELETE") else json.dumps(body or {})
        try:
            response = await self.client.fetch(
                f"{self.url}{path}", method=method, headers=headers, body=payload, request_timeout=30
            )
        except HTTPClientError as exc:
            if exc.response is None:  # tornado's 599: no HTTP answer at all
                raise ConnectionError(f"{method} {path}: {exc}") from exc
            response = exc.response
        text = response.body.decode() if response.body else ""
        try:
            return response.code, json.loads(text) if text else None
        except json.JSONDecodeError:
            return response.code, text[:200]

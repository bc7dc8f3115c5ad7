"""`cube_jupyter.train` and `%%cube_train` from a real kernel of a real Jupyter server (local backend).

The kernel finds its server from the server's `jpserver-*.json` runtime file, ships the function or
the cell through the artifact store and submits it through the REST API; the job runs one process per
replica and succeeds. `deploy` and `predict` serve an in-memory sklearn model the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.simple_httpclient import HTTPStreamClosedError
from tornado.websocket import WebSocketClientConnection, websocket_connect

from cube_jupyter.local.processes import free_port
from tests.local.support import KERNEL_V1, execute_request, receive, send_shell
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(240)


class Server:
    """`jupyter server` with the workbench extension, token auth, everything under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    async def start(self) -> None:
        work = self.root / "work"
        work.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_TOKEN", "CUBE_JUPYTER"))}
        env.update(
            JUPYTER_RUNTIME_DIR=str(self.root / "runtime"),
            JUPYTER_DATA_DIR=str(self.root / "data"),
            PYTHONPATH=os.pathsep.join(sys.path),
        )
        argv = [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={work}",
            '--ServerApp.jpserver_extensions={"cube_jupyter_server": True}',
            f"--CubeWorkbench.state_dir={self.root / 'state'}",
            "--CubeWorkbench.poll_seconds=0.5",
        ]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        log = (self.root / "server.log").open("ab")
        self.proc = subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=log)
        log.close()
        proc = self.proc

        async def answers() -> bool:
            assert proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
            response = await AsyncHTTPClient().fetch(f"{self.url}api/status", headers=self.headers)
            return response.code == 200 and bool(list((self.root / "runtime").glob("jpserver-*.json")))

        await wait_until_async(
            answers,
            60,
            "the server to answer and write its runtime file",
            # not listening yet, or listening and closing the connection while it starts
            ignoring=(OSError, HTTPStreamClosedError),
            interval=0.2,
        )

    async def kernel(self) -> WebSocketClientConnection:
        response = await AsyncHTTPClient().fetch(
            f"{self.url}api/kernels", method="POST", body="{}", headers=self.headers
        )
        kernel_id = json.loads(response.body)["id"]
        return await websocket_connect(
            HTTPRequest(f"ws://127.0.0.1:{self.port}/api/kernels/{kernel_id}/channels", headers=self.headers),
            subprotocols=[KERNEL_V1],
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        family = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        # Model servers and replicas run in sessions of their own: find them by their state dir.
        state = str(self.root / "state")
        for proc in psutil.process_iter(["cmdline"]):
            if proc not in family and any(state in part for part in proc.info["cmdline"] or []):
                family.append(proc)
        for proc in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(family, timeout=10)
        self.proc = None


@pytest.fixture
def server(tmp_path: Path, jp_asyncio_loop: asyncio.AbstractEventLoop) -> Iterator[Server]:
    """On the loop pytest-jupyter runs async tests on."""
    started = Server(tmp_path)
    try:
        jp_asyncio_loop.run_until_complete(started.start())
        yield started
    finally:
        started.stop()


async def run_cell(ws: WebSocketClientConnection, code: str, timeout: float = 180) -> str:
    """Execute `code`; its printed output (an error in the cell fails the test with its traceback).
    The shell's reply can come before the last of the output on IOPub: done is both the reply and
    IOPub's `idle`, which the kernel sends after everything the cell printed."""
    msg = execute_request(code)
    await send_shell(ws, msg)
    output: list[str] = []
    replied = idle = False
    deadline = time.monotonic() + timeout
    while not (replied and idle):
        channel, reply = await asyncio.wait_for(receive(ws), max(1.0, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            continue
        kind = reply["header"]["msg_type"]
        if kind == "stream":
            output.append(reply["content"]["text"])
        elif kind == "error":
            raise AssertionError("\n".join(reply["content"]["traceback"]))
        elif kind == "status" and reply["content"]["execution_state"] == "idle":
            idle = True
        elif channel == "shell" and kind == "execute_reply":
            replied = True
    return "".join(output)


TRAIN = """
import cube_jupyter

def greet(greeting="hello"):
    import os
    print(greeting, "from rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], flush=True)

job = cube_jupyter.train(greet, framework="pytorch", workers=2, name="greet", show=False)
print("PHASE", job.phase)
# The job succeeds when its Master does (the operator's rule): its log is complete.
print("LOG", job.logs("master-0").strip().splitlines()[-1])
"""

# What the cube-python kernelspec's `--ext=cube_jupyter.ipython` does at kernel start.
MAGIC = """
%load_ext cube_jupyter.ipython
"""
MAGIC_CELL = """%%cube_train --framework pytorch --workers 2 --name cell-job
import os
print("cell on rank", os.environ["RANK"], flush=True)
"""


async def test_train_ships_a_function_from_a_kernel_and_the_job_succeeds(server: Server) -> None:
    ws = await server.kernel()
    out = await run_cell(ws, TRAIN)
    assert "PHASE Succeeded" in out, out
    assert "LOG hello from rank 0 of 2" in out, out

    await run_cell(ws, MAGIC)
    out = await run_cell(ws, MAGIC_CELL + "\n")
    job = await AsyncHTTPClient().fetch(f"{server.url}cube/api/v1/jobs/cell-job", headers=server.headers)
    body: dict[str, Any] = json.loads(job.body)
    assert body["phase"] == "Succeeded", body
    logs = await AsyncHTTPClient().fetch(
        f"{server.url}cube/api/v1/jobs/cell-job/logs?replica=master-0", headers=server.headers
    )
    assert "cell on rank 0" in logs.body.decode()
    ws.close()


DEPLOY = """
import cube_jupyter
from sklearn.datasets import load_iris
from sklearn.tree import DecisionTreeClassifier

X, y = load_iris(return_X_y=True)
model = DecisionTreeClassifier(random_state=0).fit(X, y)
served = cube_jupyter.deploy(model, name="iris", show=False)
print("PHASE", served.phase)
rows = X[[0, 70, 140]].tolist()
print("MATCH", cube_jupyter.predict("iris", rows) == model.predict(rows).tolist())
"""


async def test_deploy_serves_an_in_memory_model_and_predict_asks_it(server: Server) -> None:
    ws = await server.kernel()
    out = await run_cell(ws, DEPLOY)
    assert "PHASE Ready" in out and "MATCH True" in out, out
    out = await run_cell(
        ws,
        "served.delete()\ntry:\n    served.refresh()\n"
        "except Exception as exc:\n    print('GONE', type(exc).__name__)",
    )
    assert "GONE NotFound" in out, out
    ws.close()


async def test_a_refused_job_raises_the_servers_error_in_the_kernel(server: Server) -> None:
    ws = await server.kernel()
    out = await run_cell(
        ws,
        "import cube_jupyter\nfrom cube_jupyter.errors import InvalidInput\n"
        "try:\n    cube_jupyter.train(print, framework='caffe', name='bad')\n"
        "except InvalidInput as exc:\n    print('REFUSED', exc.field)\n",
    )
    assert "REFUSED framework" in out, out
    ws.close()

"""Local spawn-to-ready latency: a workbench server vs. a bare `jupyter lab`, median of 5.

Spawn-to-ready is from the create call until the child answers `/api/status` through its base_url.
A running workbench forks its servers from a process that has imported `jupyter lab` already; the
cold row is a create at the moment the workbench starts (the fork server's imports still to do).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.local.processes import free_port
from cube_jupyter.notebooks.config import DEFAULT_PROFILES, NotebookSettings
from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec
from tests.benchmarks.timing import print_table, time_async
from tests.waiting import wait_until_async

RUNS = 5


async def _wait_status(url: str, token: str, timeout: float) -> None:
    client = AsyncHTTPClient()
    await wait_until_async(
        lambda: client.fetch(url, headers={"Authorization": f"token {token}"}, request_timeout=2),
        timeout,
        f"{url} to answer",
        ignoring=(HTTPClientError, OSError),
        interval=0.02,  # fine-grained: timed
    )


async def bare_lab_start(root: Path) -> float:
    """The baseline: `jupyter lab` started by hand, until /api/status answers."""
    port, token = free_port(), "bench-token"
    argv = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--ServerApp.port={port}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.jpserver_extensions=cube_jupyter_server=False",
    ]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, env={**os.environ, "JUPYTER_TOKEN": token}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await _wait_status(f"http://127.0.0.1:{port}/api/status", token, 60)
        return time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(10)


async def workbench_spawn(backend: LocalNotebookBackend, spec: NotebookSpec) -> float:
    async def spawn() -> None:
        await backend.create_server(spec)
        await backend.wait_until_ready(spec.user, spec.name, timeout=60)

    elapsed = await time_async(spawn)
    await backend.delete_server(spec.user, spec.name)
    return elapsed


async def cold_workbench_spawn(settings: NotebookSettings, spec: NotebookSpec) -> float:
    """From the workbench's start (its backend's) to a server created at once running."""
    backend = LocalNotebookBackend(settings)

    async def start_and_spawn() -> None:
        await backend.start()
        await backend.create_server(spec)
        await backend.wait_until_ready(spec.user, spec.name, timeout=60)

    try:
        elapsed = await time_async(start_and_spawn)
        await backend.delete_server(spec.user, spec.name)
    finally:
        await backend.close()
    return elapsed


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-") as tmp:
        config = Config()
        config.CubeWorkbench.state_dir = str(Path(tmp) / "state")
        # The default profile (1 CPU, enforced locally: a quota or affinity), and one asking for the
        # whole machine, which no limit slows: what the workbench itself adds to a start.
        whole = {**DEFAULT_PROFILES[0], "name": "whole", "cpu": str(os.cpu_count() or 1), "default": False}
        config.CubeSpawner.profiles = [{**DEFAULT_PROFILES[0], "default": True}, whole]
        settings = load_settings(config).notebooks
        backend = LocalNotebookBackend(settings)
        await backend.start()
        spawns: list[float] = []
        unlimited: list[float] = []
        cold: list[float] = []
        bare: list[float] = []
        try:
            for i in range(RUNS):  # interleaved, so machine noise hits each alike
                bare.append(await bare_lab_start(Path(tmp)))
                for profile, times in ((None, spawns), ("whole", unlimited)):
                    spec = NotebookSpec(user="bench", name=f"nb{i}", profile=settings.profile(profile))
                    times.append(await workbench_spawn(backend, spec))
                spec = NotebookSpec(user="bench", name=f"cold{i}", profile=settings.profile(None))
                cold.append(await cold_workbench_spawn(settings, spec))
        finally:
            await backend.close()
    print_table(
        "Local notebook server: spawn to ready (median of 5)",
        [
            ("bare `jupyter lab` start -> /api/status (baseline)", bare),
            ("workbench create -> running, default profile (1 CPU, enforced)", spawns),
            (f"workbench create -> running, all {os.cpu_count()} cores (no CPU limit)", unlimited),
            ("workbench start + create at once -> running (cold)", cold),
        ],
        baseline="bare `jupyter lab` start -> /api/status (baseline)",
    )


if __name__ == "__main__":
    asyncio.run(main())

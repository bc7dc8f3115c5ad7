"""Notebook backends on the control plane, connected as the workbench (its ServiceAccount's token):
`run_backends` starts them, runs a scenario on the test's own loop and closes them; `until` waits for
a server (`eventually`, anything) to reach a state through the backend's caches (what the panel reads)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from cube_jupyter.config import Settings
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.notebooks.backend import NotebookBackend
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.spec import NotebookServer
from tests.cluster.conftest import api_client
from tests.waiting import wait_until_async

T = TypeVar("T")
Scenario = Callable[..., Awaitable[T]]


def run_backends(
    kubeconfig: Path,
    settings: Settings,
    scenario: Scenario[T],
    *,
    replicas: int = 1,
    supervise: bool = False,
    **options: Any,
) -> T:
    """`scenario(*backends)`: `replicas` started backends, each on a connection of its own (as that
    many workbench replicas would be); `options` go to each backend; with `supervise` they cull idle
    servers as the workbench's own do (the CLI's do not)."""

    async def go() -> T:
        clusters = [Cluster(settings, api_client(kubeconfig)) for _ in range(replicas)]
        backends = [
            KubernetesNotebookBackend(settings.notebooks, cluster, **{"sync_timeout": 60, **options})
            for cluster in clusters
        ]
        try:
            for backend in backends:
                await backend.start(supervise=supervise)
            return await scenario(*backends)
        finally:
            for backend, cluster in zip(backends, clusters, strict=True):
                await backend.close()
                await cluster.close()

    return asyncio.run(go())


async def eventually(
    what: str, read: Callable[[], T | None], done: Callable[[T], Any], timeout: float = 90
) -> T:
    """Poll `read()` (a backend's cache) until `done` says yes, for `timeout` s at most; the last value
    read."""
    found: T = await wait_until_async(
        read, timeout, what, until=lambda last: last is not None and done(last), interval=0.2
    )
    return found


async def until(
    backend: NotebookBackend, user: str, name: str, done: Callable[[NotebookServer], Any]
) -> NotebookServer:
    return await eventually(f"{user}/{name}", lambda: backend.get_server(user, name), done)

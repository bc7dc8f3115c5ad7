"""Fixtures for the local backend: real `jupyter lab` children in temp state dirs, and a real Jupyter
server (pytest-jupyter) with the path router mounted.

Tests are plain functions driving `jp_asyncio_loop`, the loop pytest-jupyter's server runs on, so they
work whatever async plugin mode the suite is configured with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cube_jupyter_server.identity import make_caller
from cube_jupyter_server.router import ROUTE_PATTERN, NotebookRouterHandler
from jupyter_server.utils import url_path_join

from cube_jupyter.config import Settings
from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookSpec
from tests.local.support import BASE_URL, kill_children, make_settings

HEADER_IDP = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"
CUBE_AUTHORIZER = "cube_jupyter_server.authorizer.CubeAuthorizer"


@pytest.fixture
def loop(jp_asyncio_loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
    return jp_asyncio_loop


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh state dir; every child started in it is killed afterwards, whatever the test did."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    path = tmp_path / "state"
    yield path
    kill_children(path)


@pytest.fixture
def backends(loop: asyncio.AbstractEventLoop) -> Iterator[Callable[..., LocalNotebookBackend]]:
    """Make LocalNotebookBackends (not started); all are closed at the end. Children stay for
    `state_dir` to kill, as they would outlive a real server."""
    made: list[LocalNotebookBackend] = []

    def make(settings: Settings, **kwargs: Any) -> LocalNotebookBackend:
        kwargs.setdefault("base_url", BASE_URL)
        kwargs.setdefault("stop_grace_seconds", 5.0)
        backend = LocalNotebookBackend(settings.notebooks, **kwargs)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        loop.run_until_complete(backend.close())


@pytest.fixture(scope="session")
def shared_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One running child, alice/nb1, shared by the router tests (spawning costs ~2-3 s each)."""
    state = tmp_path_factory.mktemp("shared") / "state"
    settings = make_settings(state)

    async def spawn() -> None:
        backend = LocalNotebookBackend(settings.notebooks, base_url=BASE_URL)
        try:
            await backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile(None)))
            await backend.wait_until_ready("alice", "nb1", timeout=60)
        finally:
            await backend.close()

    try:
        asyncio.run(spawn())
        yield state
    finally:
        kill_children(state)


@pytest.fixture
def jp_base_url() -> str:
    return BASE_URL


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    # Callers are named by the trusted `kubeflow-userid` header, as behind Istio: several users.
    return {"ServerApp": {"identity_provider_class": HEADER_IDP, "authorizer_class": CUBE_AUTHORIZER}}


@pytest.fixture
def router(
    jp_serverapp: Any,
    loop: asyncio.AbstractEventLoop,
    shared_state: Path,
    backends: Callable[..., LocalNotebookBackend],
) -> NotebookService:
    """The router mounted on the pytest-jupyter server over a backend that re-attached to alice/nb1."""
    settings = make_settings(shared_state)
    backend = backends(settings)
    loop.run_until_complete(backend.start())
    service = NotebookService(settings.notebooks, backend)
    web_app = jp_serverapp.web_app
    web_app.settings.update(
        {"cube_settings": settings, "cube_notebooks": service, "cube_caller": make_caller(settings)}
    )
    web_app.add_handlers(
        ".*$", [(url_path_join(jp_serverapp.base_url, ROUTE_PATTERN), NotebookRouterHandler)]
    )
    return service

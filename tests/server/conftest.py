"""A real Jupyter server with the workbench extension, on the local backend, in a temp state dir.

Callers are named by the trusted identity header (`kubeflow-userid`), as behind Istio, with the
workbench's Authorizer, so tests can act as several users; `anonymous_fetch` and `xsrf` tests cover
Jupyter's own auth paths. Tests marked `jupyterlab` get JupyterLab and its language-server proxy
loaded too, as in production.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from cube_jupyter.local import files
from cube_jupyter.names import user_slug

HEADER_IDP = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"
CUBE_AUTHORIZER = "cube_jupyter_server.authorizer.CubeAuthorizer"
# What JupyterLab's frontend sends with unsafe methods: the _xsrf cookie echoed in a header.
XSRF = {"Cookie": "_xsrf=test-xsrf-token", "X-XSRFToken": "test-xsrf-token"}
PROFILES = [
    {
        "name": "small",
        "display_name": "Small",
        "image": "jupyter/base",
        "cpu": "1",  # a whole core: a start is not slowed by the quota (tests/local/test_limits.py)
        "memory": "1Gi",
        "default": True,
    },
    {"name": "gpu", "display_name": "One GPU", "image": "jupyter/gpu", "cpu": "2", "memory": "8Gi", "gpu": 1},
]


@pytest.fixture
def cube_config(tmp_path: Any) -> dict[str, Any]:
    """Workbench config for the server under test; tests may change it before `jp_serverapp` starts."""
    return {
        "CubeWorkbench": {
            "state_dir": str(tmp_path / "cube-state"),
            "poll_seconds": 0.5,
            "admin_users": ["root-admin"],
        },
        "CubeSpawner": {"profiles": PROFILES, "max_servers_per_user": 2},
    }


@pytest.fixture
def user_files(cube_config: dict[str, Any]) -> Callable[[str], Path]:
    """A user's own files on this shared server (what the pipelines and jobs APIs let them name):
    the workspaces of their notebook servers, made on demand."""

    def area(user: str) -> Path:
        path = files.user_workspaces(Path(cube_config["CubeWorkbench"]["state_dir"]), user_slug(user))
        return files.private_dir(path)  # as the workbench makes them

    return area


@pytest.fixture
def jp_server_config(cube_config: dict[str, Any], request: pytest.FixtureRequest) -> dict[str, Any]:
    extensions = {"cube_jupyter_server": True}
    if request.node.get_closest_marker("jupyterlab"):
        extensions.update({"jupyterlab": True, "jupyter_lsp": True})
    return {
        "ServerApp": {
            "jpserver_extensions": extensions,
            "identity_provider_class": HEADER_IDP,
            "authorizer_class": CUBE_AUTHORIZER,
        },
        **cube_config,
    }


def cut_first_sync_waits(workbench: Any, seconds: float = 1.0) -> None:
    """Each cluster component's wait for its informers' first list (30 s, spent in full where the
    API is down or an emulator serves none of its resources) cut to `seconds`: the notebook, job and
    pipeline backends', and the schedules' CronWorkflow mirrors'."""
    runs = workbench.pipelines.targets["cluster"].runs
    for waiting in (workbench.notebook_backend, workbench.job_backend, runs, *workbench.schedules.mirrors):
        waiting.sync_timeout = seconds


@pytest.fixture
def cube_app(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    """The server with its extensions started (pytest-jupyter initializes but does not start them)."""
    jp_asyncio_loop.run_until_complete(jp_serverapp.extension_manager.start_all_extensions())
    return jp_serverapp


Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def api(cube_app: Any, jp_fetch: Fetch) -> Callable[..., Awaitable[tuple[int, Any]]]:
    """Call the REST API as `as_user`, query parameters as keywords.

    Returns (status, parsed JSON or None) and never raises on 4xx.
    """

    async def call(
        method: str, path: str, as_user: str = "alice", body: Any = None, xsrf: bool = True, **params: str
    ) -> tuple[int, Any]:
        headers = {"kubeflow-userid": as_user} if as_user else {}
        if xsrf and method not in ("GET", "HEAD"):
            headers.update(XSRF)
        kwargs: dict[str, Any] = {"method": method, "headers": headers, "params": params}
        if body is not None:
            kwargs["body"] = body if isinstance(body, str) else json.dumps(body)
        elif method in ("POST", "PATCH", "PUT"):
            kwargs["body"] = ""
        try:
            response = await jp_fetch("cube", "api", "v1", *path.strip("/").split("/"), **kwargs)
        except HTTPClientError as exc:
            assert exc.response is not None, exc
            response = exc.response
        text = response.body.decode() if response.body else ""
        return response.code, (json.loads(text) if text else None)

    return call

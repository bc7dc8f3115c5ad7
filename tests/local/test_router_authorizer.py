"""The path router asks the server's Authorizer about the `cube` resource, as every Jupyter handler does:
an Authorizer that allows only reads keeps even the owner from writing or opening a WebSocket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from cube_jupyter_server.authorizer import CubeAuthorizer
from jupyter_server.auth.identity import User
from jupyter_server.base.handlers import JupyterHandler
from tornado.httpclient import HTTPClientError, HTTPRequest, HTTPResponse
from tornado.websocket import websocket_connect

from cube_jupyter.notebooks.service import NotebookService
from tests.local.conftest import HEADER_IDP
from tests.local.support import BASE_URL

pytestmark = pytest.mark.timeout(120)
XSRF = {"Cookie": "_xsrf=t", "X-XSRFToken": "t"}
ASKED: list[tuple[str, str, str]] = []


class ReadOnlyCube(CubeAuthorizer):
    """The workbench's rules, and `cube` for reading only; records what it was asked."""

    def is_authorized(self, handler: JupyterHandler, user: User, action: str, resource: str) -> bool:
        ASKED.append((user.username, action, resource))
        if resource == "cube" and action != "read":
            return False
        return super().is_authorized(handler, user, action, resource)


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {
            "identity_provider_class": HEADER_IDP,
            "authorizer_class": f"{__name__}.{ReadOnlyCube.__name__}",
        }
    }


@pytest.fixture
def fetch(router: NotebookService, jp_fetch: Callable[..., Any]) -> Callable[..., Any]:
    async def call(path: str, **kw: Any) -> HTTPResponse:
        kw.setdefault("headers", {}).setdefault("kubeflow-userid", "alice")
        try:
            return await jp_fetch(f"cube/notebook/{path}", **kw)
        except HTTPClientError as exc:
            assert exc.response is not None, exc
            return exc.response

    return call


def test_router_obeys_the_authorizer(fetch: Any, loop: asyncio.AbstractEventLoop, jp_http_port: int) -> None:
    async def run() -> None:
        ASKED.clear()
        assert (await fetch("alice/nb1/api/status")).code == 200
        assert ("alice", "read", "cube") in ASKED
        posted = await fetch("alice/nb1/api/kernels", method="POST", body="{}", headers=dict(XSRF))
        assert posted.code == 403, posted.body
        assert json.loads(posted.body)["reason"] == "Forbidden"
        request = HTTPRequest(
            f"ws://127.0.0.1:{jp_http_port}{BASE_URL}cube/notebook/alice/nb1/api/events/subscribe",
            headers={"kubeflow-userid": "alice"},
        )
        with pytest.raises(HTTPClientError) as refused:
            await websocket_connect(request)
        assert refused.value.code == 403
        assert ("alice", "execute", "cube") in ASKED

    loop.run_until_complete(run())

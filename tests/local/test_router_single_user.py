"""The router under Jupyter's own token auth (single-user mode: every authenticated caller is the
owner, `CubeWorkbench.default_user`): login redirect for pages, 403 for APIs, token calls exempt
from XSRF as everywhere in Jupyter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest, HTTPResponse
from tornado.websocket import websocket_connect

from cube_jupyter.notebooks.service import NotebookService
from tests.local.support import BASE_URL

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {}  # Jupyter's default identity provider: token or login cookie


@pytest.fixture
def fetch(router: NotebookService, jp_fetch: Callable[..., Any]) -> Callable[..., Any]:
    async def call(path: str, **kw: Any) -> HTTPResponse:
        kw.setdefault("follow_redirects", False)
        try:
            return await jp_fetch(f"cube/notebook/{path}", **kw)
        except HTTPClientError as exc:
            assert exc.response is not None, exc
            return exc.response

    return call


def test_token_caller_is_the_owner_and_needs_no_xsrf(fetch: Any, loop: asyncio.AbstractEventLoop) -> None:
    async def run() -> None:
        assert (await fetch("alice/nb1/api/status")).code == 200
        made = await fetch(
            "alice/nb1/api/contents/by-token", method="PUT", body=json.dumps({"type": "directory"})
        )
        assert made.code == 201, made.body
        assert (await fetch("alice/nb1/api/contents/by-token", method="DELETE")).code == 204

    loop.run_until_complete(run())


def test_anonymous_browser_goes_to_login_and_api_gets_403(
    fetch: Any, loop: asyncio.AbstractEventLoop, jp_http_port: int
) -> None:
    anonymous = {"Authorization": ""}

    async def run() -> None:
        page = await fetch("alice/nb1/lab", headers={**anonymous, "Accept": "text/html"})
        assert page.code == 302
        assert page.headers["Location"].startswith(f"{BASE_URL}login?next=")
        assert "cube%2Fnotebook%2Falice%2Fnb1%2Flab" in page.headers["Location"]
        assert (await fetch("alice/nb1/api/status", headers=anonymous)).code == 403
        post = await fetch("alice/nb1/api/kernels", method="POST", body="{}", headers=anonymous)
        assert post.code == 403
        url = f"ws://127.0.0.1:{jp_http_port}{BASE_URL}cube/notebook/alice/nb1/api/events/subscribe"
        with pytest.raises(HTTPClientError) as refused:
            await websocket_connect(HTTPRequest(url))
        assert refused.value.code == 403

    loop.run_until_complete(run())

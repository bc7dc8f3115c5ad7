"""The path router on a real Jupyter server, forwarding to a real child `jupyter lab`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cube_jupyter_server.router import (
    cookie_values,
    forwarded_query,
    forwarded_request_headers,
    strip_cookies,
)
from tornado.httpclient import HTTPClientError, HTTPRequest, HTTPResponse
from tornado.httputil import HTTPHeaders
from tornado.websocket import websocket_connect

from cube_jupyter.errors import BackendUnavailable
from cube_jupyter.local import gpus
from cube_jupyter.local.admission import Held, QueuePolicy, QueueSide, Waiting
from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookSpec
from tests.local.support import BASE_URL, EXITING_LAB, KERNEL_V1, PROFILES, execute, make_settings

pytestmark = pytest.mark.timeout(120)
XSRF = {"Cookie": "_xsrf=main-token; _xsrf=child-token", "X-XSRFToken": "child-token"}


@pytest.fixture
def fetch(router: NotebookService, jp_fetch: Callable[..., Any]) -> Callable[..., Any]:
    """Request `/cube/notebook/{path}` as `user` (None: no identity); returns the response, 4xx too."""

    async def call(
        path: str, user: str | None = "alice", headers: dict[str, str] | None = None, **kw: Any
    ) -> HTTPResponse:
        all_headers = {"kubeflow-userid": user} if user else {}
        all_headers.update(headers or {})
        kw.setdefault("follow_redirects", False)
        try:
            # One piece, so a trailing slash survives; jp_fetch percent-escapes it ("a b" -> "a%20b").
            return await jp_fetch(f"cube/notebook/{path}", headers=all_headers, **kw)
        except HTTPClientError as exc:
            assert exc.response is not None, exc
            return exc.response

    return call


def ws_url(port: int, path: str) -> str:
    return f"ws://127.0.0.1:{port}{BASE_URL}cube/notebook/{path}"


def test_status_through_router(fetch: Any, loop: asyncio.AbstractEventLoop) -> None:
    response = loop.run_until_complete(fetch("alice/nb1/api/status"))
    assert response.code == 200
    body = json.loads(response.body)
    assert {"started", "last_activity", "kernels"} <= set(body)
    assert response.headers["Content-Type"].startswith("application/json")


def test_child_redirects_pass_unchanged_under_the_public_path(
    fetch: Any, loop: asyncio.AbstractEventLoop
) -> None:
    root = loop.run_until_complete(fetch("alice/nb1/", headers={"Accept": "text/html"}))
    assert root.code == 302
    # The child's base_url is the public path, so its absolute redirect is right for the browser.
    assert root.headers["Location"].startswith(f"{BASE_URL}cube/notebook/alice/nb1/lab")
    bare = loop.run_until_complete(fetch("alice/nb1"))
    assert bare.code == 302 and bare.headers["Location"] == f"{BASE_URL}cube/notebook/alice/nb1/"
    page = loop.run_until_complete(fetch("alice/nb1/lab", headers={"Accept": "text/html"}))
    assert page.code == 200 and b"jupyter-config-data" in page.body


def test_kernel_runs_code_over_the_websocket(
    fetch: Any, loop: asyncio.AbstractEventLoop, jp_http_port: int
) -> None:
    async def run() -> None:
        created = await fetch(
            "alice/nb1/api/kernels", method="POST", body=json.dumps({"name": "python3"}), headers=XSRF
        )
        assert created.code == 201, created.body
        kernel_id = json.loads(created.body)["id"]
        request = HTTPRequest(
            ws_url(jp_http_port, f"alice/nb1/api/kernels/{kernel_id}/channels"),
            headers={"kubeflow-userid": "alice"},
        )
        ws = await websocket_connect(request, subprotocols=[KERNEL_V1])
        try:
            assert ws.selected_subprotocol == KERNEL_V1
            assert await asyncio.wait_for(execute(ws, "1+1"), 60) == "2"
            assert await asyncio.wait_for(execute(ws, "b'x' * 3"), 30) == "b'xxx'"
        finally:
            ws.close()
        deleted = await fetch(f"alice/nb1/api/kernels/{kernel_id}", method="DELETE", headers=XSRF)
        assert deleted.code == 204

    loop.run_until_complete(run())


def test_legacy_websocket_protocol_without_subprotocol(
    fetch: Any, loop: asyncio.AbstractEventLoop, jp_http_port: int
) -> None:
    async def run() -> None:
        created = await fetch("alice/nb1/api/kernels", method="POST", body="{}", headers=XSRF)
        kernel_id = json.loads(created.body)["id"]
        request = HTTPRequest(
            ws_url(jp_http_port, f"alice/nb1/api/kernels/{kernel_id}/channels"),
            headers={"kubeflow-userid": "alice"},
        )
        ws = await websocket_connect(request)
        try:
            assert ws.selected_subprotocol is None
            assert await asyncio.wait_for(execute(ws, "6*7"), 60) == "42"
        finally:
            ws.close()
        await fetch(f"alice/nb1/api/kernels/{kernel_id}", method="DELETE", headers=XSRF)

    loop.run_until_complete(run())


def test_only_the_owner_gets_through_not_even_admins(
    fetch: Any, router: NotebookService, loop: asyncio.AbstractEventLoop
) -> None:
    async def run() -> None:
        stranger = await fetch("alice/nb1/api/status", user="bob")
        missing = await fetch("alice/nope/api/status", user="alice")
        assert stranger.code == missing.code == 404  # the same answer: existence is not revealed
        assert json.loads(stranger.body)["reason"] == "NotFound"
        assert (await fetch("bob/nb1/api/status", user="bob")).code == 404
        # An admin would run alice's pages on the workbench's origin with the admin's session.
        assert router.settings.is_admin("boss")
        assert (await fetch("alice/nb1/api/status", user="boss")).code == 404
        assert (await fetch("alice/nb1/lab", user="boss", headers={"Accept": "text/html"})).code == 404
        for user in ("bob", "boss"):
            posted = await fetch("alice/nb1/api/kernels", user=user, method="POST", body="{}", headers=XSRF)
            assert posted.code == 404
        assert (await fetch("alice/nb1/api/status", user="alice")).code == 200

    loop.run_until_complete(run())


def test_the_main_servers_token_is_not_forwarded_in_the_query(
    fetch: Any, router: NotebookService, loop: asyncio.AbstractEventLoop, shared_state: Path
) -> None:
    secret = "main-" + os.urandom(8).hex()

    async def run() -> None:
        for params in ({"token": secret}, {"a": "1", "token": secret, "_xsrf": secret, "b": " x"}):
            # The child would refuse a token that is not its own, and log it.
            response = await fetch("alice/nb1/api/contents", params=params)
            assert response.code == 200, response.body
            assert json.loads(response.body)["type"] == "directory"
        # Unsafe methods too: the router checks `_xsrf` from the query, the child never sees it.
        made = await fetch(
            "alice/nb1/api/contents/q-dir",
            params={"token": secret, "_xsrf": "child-token"},
            method="PUT",
            body=json.dumps({"type": "directory"}),
            headers={"Cookie": "_xsrf=child-token"},
        )
        assert made.code == 201, made.body
        await fetch("alice/nb1/api/contents/q-dir", method="DELETE", headers=XSRF)

    loop.run_until_complete(run())
    logs = "".join(path.read_text(errors="replace") for path in shared_state.rglob("*.log"))
    assert logs and secret not in logs


def test_query_without_private_arguments_is_kept_verbatim() -> None:
    assert forwarded_query("a=1&token=x&b=%2F%20&_xsrf=y&c") == "a=1&b=%2F%20&c"
    assert forwarded_query("%74oken=x&tokens=1") == "tokens=1"  # escaped names are still names
    assert forwarded_query("token=x") == ""


def test_websocket_of_another_user_is_refused(
    fetch: Any, loop: asyncio.AbstractEventLoop, jp_http_port: int
) -> None:
    async def run() -> None:
        for user in ("bob", None):
            headers = {"kubeflow-userid": user} if user else {}
            request = HTTPRequest(ws_url(jp_http_port, "alice/nb1/api/events/subscribe"), headers=headers)
            with pytest.raises(HTTPClientError) as refused:
                await websocket_connect(request)
            assert refused.value.code == (404 if user else 403)
        request = HTTPRequest(
            ws_url(jp_http_port, "alice/nb1/api/events/subscribe"), headers={"kubeflow-userid": "alice"}
        )
        ws = await websocket_connect(request)  # the owner gets through to the same endpoint
        ws.close()

    loop.run_until_complete(run())


def test_unauthenticated_requests_are_refused(fetch: Any, loop: asyncio.AbstractEventLoop) -> None:
    async def run() -> None:
        assert (await fetch("alice/nb1/api/status", user=None)).code == 403
        assert (await fetch("alice/nb1/lab", user=None, headers={"Accept": "text/html"})).code == 403
        posted = await fetch("alice/nb1/api/kernels", user=None, method="POST", body="{}", headers=XSRF)
        assert posted.code == 403

    loop.run_until_complete(run())


def test_unsafe_methods_need_a_matching_xsrf_cookie(fetch: Any, loop: asyncio.AbstractEventLoop) -> None:
    async def run() -> None:
        body = json.dumps({"type": "directory"})
        missing = await fetch("alice/nb1/api/contents/a", method="PUT", body=body)
        wrong = await fetch(
            "alice/nb1/api/contents/a",
            method="PUT",
            body=body,
            headers={"Cookie": "_xsrf=main-token; _xsrf=child-token", "X-XSRFToken": "forged"},
        )
        assert missing.code == wrong.code == 403
        for echoed in ("main-token", "child-token"):  # either cookie the browser holds will do
            headers = {"Cookie": "_xsrf=main-token; _xsrf=child-token", "X-XSRFToken": echoed}
            made = await fetch(
                f"alice/nb1/api/contents/dir-{echoed}", method="PUT", body=body, headers=headers
            )
            assert made.code == 201, made.body
            gone = await fetch(f"alice/nb1/api/contents/dir-{echoed}", method="DELETE", headers=headers)
            assert gone.code == 204

    loop.run_until_complete(run())


def test_large_bodies_both_ways(fetch: Any, loop: asyncio.AbstractEventLoop) -> None:
    payload = os.urandom(3 * 1024 * 1024).hex()  # 6 MiB of text

    async def run() -> None:
        model = {"type": "file", "format": "text", "content": payload}
        put = await fetch(
            "alice/nb1/api/contents/big file.txt", method="PUT", body=json.dumps(model), headers=XSRF
        )
        assert put.code == 201, put.body
        raw = await fetch("alice/nb1/files/big file.txt")
        assert raw.code == 200 and raw.body == payload.encode()
        await fetch("alice/nb1/api/contents/big file.txt", method="DELETE", headers=XSRF)

    loop.run_until_complete(run())


def test_server_not_running_is_503_with_status_and_reason(
    fetch: Any,
    router: NotebookService,
    loop: asyncio.AbstractEventLoop,
    backends: Callable[..., LocalNotebookBackend],
    shared_state: Path,
) -> None:
    # A server whose process dies at once, created through a second backend on the same state.
    settings = make_settings(shared_state)
    failing = backends(settings, lab_command=EXITING_LAB)

    async def run() -> None:
        await failing.create_server(NotebookSpec("alice", "broken", settings.notebooks.profile(None)))
        with pytest.raises(
            BackendUnavailable, match=r"'broken' of user 'alice' is failed: .*exited with code 3"
        ) as info:
            await failing.wait_until_ready("alice", "broken", timeout=30)
        assert info.value.field == "name"
        response = await fetch("alice/broken/api/status")
        assert response.code == 503
        body = json.loads(response.body)
        assert body["status"] == "failed" and "code 3" in body["server_reason"]
        assert "no lab here today" in body["server_reason"]
        await failing.delete_server("alice", "broken")

    loop.run_until_complete(run())


def test_a_queued_server_is_503_with_its_place_and_reason(
    fetch: Any,
    router: NotebookService,
    jp_serverapp: Any,
    loop: asyncio.AbstractEventLoop,
    backends: Callable[..., LocalNotebookBackend],
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opening a GPU server that waits in this machine's queue says where it is and why: a machine
    of 2 GPUs, both held by carol's job, and bob's job asked first (same share: the older head)."""
    monkeypatch.setattr(gpus, "nvml_device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu = {"name": "gpu", "image": "x", "cpu": "1", "memory": "1Gi", "gpu": 1}
    settings = make_settings(state_dir, profiles=[*PROFILES, gpu])
    jobs = QueueSide(
        waiting=lambda: [Waiting("bob", "first", 0.0, 1, 1, "job")],
        held=lambda: [Held("carol", "job", ("0", "1"))],
    )
    backend = backends(settings, queue=QueuePolicy(others=[jobs]))
    monkeypatch.setitem(
        jp_serverapp.web_app.settings, "cube_notebooks", NotebookService(settings.notebooks, backend)
    )

    async def run() -> None:
        server = await backend.create_server(NotebookSpec("alice", "g", settings.notebooks.profile("gpu")))
        assert (server.queue_position, server.queue_reason) == (2, "waiting for 1 GPU: 0 of 2 free")
        response = await fetch("alice/g/lab", headers={"Accept": "text/html"})
        assert response.code == 503
        body = json.loads(response.body)
        assert "queued #2: waiting for 1 GPU: 0 of 2 free" in body["message"], body
        assert body["status"] == "queued" and body["queue_position"] == 2
        assert body["queue_reason"] == "waiting for 1 GPU: 0 of 2 free"

    loop.run_until_complete(run())


def test_credentials_of_the_main_server_are_not_forwarded() -> None:
    headers = HTTPHeaders()
    headers.add("Authorization", "token main-server-token")
    headers.add("Cookie", "_xsrf=abc; username-localhost-8888=session; theme=dark")
    headers.add("Cookie", "other=1")
    headers.add("Connection", "keep-alive, X-Private")
    headers.add("X-Private", "hop")
    headers.add("Host", "workbench.example.com")
    headers.add("Accept", "application/json")
    out = forwarded_request_headers(headers, "child-token", {"_xsrf", "username-localhost-8888"})
    assert out["Authorization"] == "token child-token"
    assert out["Cookie"] == "theme=dark; other=1"
    assert "Host" not in out and "Connection" not in out and "X-Private" not in out
    assert out["Accept"] == "application/json"
    assert strip_cookies(["a=1; b=2"], {"a"}) == "b=2"
    assert cookie_values(["_xsrf=one; x=2", '_xsrf="two"'], "_xsrf") == ["one", "two"]


if sys.platform == "win32":  # pragma: no cover - children are POSIX sessions
    pytest.skip("local backend tests need POSIX", allow_module_level=True)

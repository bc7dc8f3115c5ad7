"""CubeAuthorizer on a real Jupyter server (with JupyterLab loaded) behind the trusted header.

Non-admins get the workbench's API and what the JupyterLab page reads to start; nothing that runs
code, touches files or changes what other users see. Admins keep the whole Jupyter API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError
from tornado.httputil import HTTPHeaders

from tests.server.conftest import XSRF, Fetch

pytestmark = [pytest.mark.timeout(120), pytest.mark.jupyterlab]
ADMIN = "root-admin"
THEMES = "@jupyterlab/apputils-extension:themes"
FILE_MODEL = {"type": "file", "format": "text", "content": "x"}
DARK_THEME = {"raw": '{"theme": "JupyterLab Dark"}'}

# What the JupyterLab page reads while it starts (seen in Chromium's network log), plus the workbench.
READS = [
    "api/status",
    "api/me",
    "api/kernelspecs",
    "api/config/notebook",
    "lab",
    "lab/api/settings",
    f"lab/api/settings/{THEMES}",
    "lab/api/translations/en",
    "lab/api/workspaces",
    "cube/api/v1/profiles",
    "cube/api/v1/notebooks",
]
# (method, path, body): each would run code, read or write files, or act for every user of the server.
REFUSED: list[tuple[str, str, Any]] = [
    ("GET", "api/contents", None),
    ("PUT", "api/contents/planted.txt", FILE_MODEL),
    ("GET", "files/secret.txt", None),
    ("GET", "api/kernels", None),
    ("POST", "api/kernels", {"name": "python3"}),
    ("GET", "api/sessions", None),
    ("POST", "api/sessions", {"path": "a.ipynb", "type": "notebook", "kernel": {"name": "python3"}}),
    ("GET", "api/terminals", None),
    ("POST", "api/terminals", {}),
    ("GET", "api/nbconvert", None),
    ("PATCH", "api/config/notebook", {"planted": True}),
    ("POST", "api/events", {"schema_id": "x", "version": "1", "data": {}}),
    ("PUT", f"lab/api/settings/{THEMES}", DARK_THEME),
    ("PUT", "lab/api/workspaces/planted", {"data": {}, "metadata": {"id": "planted"}}),
    ("POST", "lab/api/extensions", {"cmd": "disable", "extension_name": "cube-jupyter"}),
    ("GET", "lab/api/extensions", None),  # the extension manager lists the server's extensions
    ("GET", "lsp/status", None),
    ("POST", "api/shutdown", None),
]


@pytest.fixture
def call(cube_app: Any, jp_fetch: Fetch) -> Any:
    async def request(method: str, path: str, user: str, body: Any = None) -> tuple[int, bytes]:
        headers = {"kubeflow-userid": user, **(XSRF if method not in ("GET", "HEAD") else {})}
        payload = None if body is None else json.dumps(body)
        if payload is None and method in ("POST", "PUT", "PATCH"):
            payload = ""
        try:
            response = await jp_fetch(path, method=method, headers=headers, body=payload)
        except HTTPClientError as exc:
            assert exc.response is not None, exc
            response = exc.response
        return response.code, response.body or b""

    return request


async def test_non_admins_get_the_workbench_and_read_only_lab(call: Any, jp_root_dir: Path) -> None:
    (jp_root_dir / "secret.txt").write_text("the workbench's own files")
    for path in READS:
        code, body = await call("GET", path, "alice")
        assert code == 200, (path, body[:300])
    for method, path, body in REFUSED:
        code, answer = await call(method, path, "alice", body)
        assert code == 403, (method, path, code, answer[:300])
    assert not (jp_root_dir / "planted.txt").exists()


async def test_admins_keep_the_whole_jupyter_api(call: Any, jp_root_dir: Path, jp_ws_fetch: Any) -> None:
    code, body = await call("PUT", "api/contents/made.txt", ADMIN, FILE_MODEL)
    assert code == 201, body
    assert (jp_root_dir / "made.txt").read_text() == "x"
    assert (await call("GET", "api/contents", ADMIN))[0] == 200
    code, body = await call("POST", "api/terminals", ADMIN, {})
    assert code == 200, body
    terminal = json.loads(body)["name"]
    # The terminal's WebSocket is refused to a non-admin, even knowing its name.
    with pytest.raises(HTTPClientError) as refused:
        await jp_ws_fetch("terminals", "websocket", terminal, headers={"kubeflow-userid": "alice"})
    assert refused.value.code == 403
    ws = await jp_ws_fetch("terminals", "websocket", terminal, headers={"kubeflow-userid": ADMIN})
    ws.close()
    assert (await call("DELETE", f"api/terminals/{terminal}", ADMIN))[0] == 204
    code, body = await call("POST", "api/kernels", ADMIN, {"name": "python3"})
    assert code == 201, body
    assert (await call("DELETE", f"api/kernels/{json.loads(body)['id']}", ADMIN))[0] == 204
    code, body = await call("PUT", f"lab/api/settings/{THEMES}", ADMIN, DARK_THEME)
    assert code == 204, body


async def test_refusals_use_the_api_error_form(call: Any) -> None:
    code, body = await call("POST", "api/kernels", "alice", {"name": "python3"})
    assert code == 403
    assert json.loads(body)["message"]
    # The workbench's own endpoints: `reason` is always a string.
    code, body = await call("GET", "cube/api/v1/notebooks", "")
    assert code == 403 and json.loads(body)["reason"] == "Forbidden"


async def test_repeated_or_joined_identity_headers_name_nobody(cube_app: Any, jp_fetch: Fetch) -> None:
    async def status(headers: HTTPHeaders) -> int:
        try:
            return (await jp_fetch("cube", "api", "v1", "notebooks", headers=headers)).code
        except HTTPClientError as exc:
            return exc.code

    twice = HTTPHeaders()
    twice.add("kubeflow-userid", "alice")
    twice.add("kubeflow-userid", ADMIN)
    assert await status(twice) == 403
    assert await status(HTTPHeaders({"kubeflow-userid": f"alice, {ADMIN}"})) == 403
    assert await status(HTTPHeaders({"kubeflow-userid": "alice"})) == 200

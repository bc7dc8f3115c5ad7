"""The trusted-header identity provider reads the workbench's validated settings: the configured prefix
is required, and without the workbench extension the header is not trusted at all."""

from __future__ import annotations

from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.server.conftest import Fetch

pytestmark = pytest.mark.timeout(120)
PREFIX = "accounts.google.com:"


async def _get(jp_fetch: Fetch, headers: dict[str, str], *path: str) -> int:
    try:
        return (await jp_fetch(*path, headers=headers)).code
    except HTTPClientError as exc:
        return exc.code


class TestPrefix:
    @pytest.fixture
    def cube_config(self, cube_config: dict[str, Any]) -> dict[str, Any]:
        cube_config["CubeSpawner"]["user_header_prefix"] = PREFIX
        return cube_config

    async def test_values_without_the_prefix_name_nobody(self, api: Any, jp_fetch: Fetch) -> None:
        status, body = await api("GET", "notebooks", as_user=f"{PREFIX}alice")
        assert status == 200 and body["user"] == "alice"
        status, body = await api("GET", "notebooks", as_user=f"{PREFIX}root-admin")
        assert status == 200 and body["is_admin"] is True
        # Not from the gateway's authenticator: not alice, and certainly not the admin.
        for raw in ("alice", "root-admin", f"other:{PREFIX}alice", PREFIX):
            status, _ = await api("GET", "notebooks", as_user=raw)
            assert status == 403, raw


class TestWithoutTheWorkbench:
    @pytest.fixture
    def jp_server_config(self, jp_server_config: dict[str, Any]) -> dict[str, Any]:
        jp_server_config["ServerApp"]["jpserver_extensions"] = {"cube_jupyter_server": False}
        return jp_server_config

    async def test_the_header_is_not_trusted(self, jp_serverapp: Any, jp_fetch: Fetch) -> None:
        # No validated workbench config says which header and prefix: Jupyter's own token auth applies.
        assert "cube_settings" not in jp_serverapp.web_app.settings
        forged = {"kubeflow-userid": "alice", "Authorization": "token not-the-token"}
        assert await _get(jp_fetch, forged, "api", "status") == 403
        assert await _get(jp_fetch, {"kubeflow-userid": "alice"}, "api", "status") == 200  # real token

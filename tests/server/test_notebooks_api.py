"""REST API of notebook servers on a real Jupyter server with the local backend."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.openapi import assert_response_matches

pytestmark = pytest.mark.timeout(120)


async def test_profiles_are_the_admins_offer(api: Any) -> None:
    status, body = await api("GET", "profiles")
    assert status == 200
    assert_response_matches("/profiles", "get", status, body)
    assert [p["name"] for p in body["profiles"]] == ["small", "gpu"]
    small, gpu = body["profiles"]
    assert gpu["gpu"] == 1 and gpu["gpu_resource"] == "nvidia.com/gpu"
    # The local backend says what it really gives: never the image; memory and GPUs limited here.
    assert small["enforced"]["image"] is False and small["enforced"]["memory"] is True
    assert small["enforcement"][0] == "Runs in this machine's Python environment; the image is not used."
    assert small["enforcement"][1].startswith("Memory: at most 1 GiB")


async def test_caller_without_identity_is_refused(api: Any) -> None:
    for method, path in (("GET", "profiles"), ("GET", "notebooks"), ("POST", "notebooks")):
        status, body = await api(method, path, as_user="", body={"name": "x"} if method == "POST" else None)
        assert status == 403, (method, path)
        # The API's error form, even when Jupyter refuses before our handler runs.
        assert body["reason"] == "Forbidden" and body["message"], body


async def test_post_without_xsrf_is_refused(api: Any) -> None:
    status, body = await api("POST", "notebooks", body={"name": "nb1"}, xsrf=False)
    assert status == 403
    assert body["reason"] == "Forbidden" and "xsrf" in body["message"].lower(), body


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"name": "Bad_Name"}, "name", 400),
        ({"name": "-lead"}, "name", 400),
        ({"name": "1nb"}, "name", 400),
        ({"name": "x" * 60}, "name", 400),
        ({}, "name", 400),
        ({"name": "ok", "profile": "huge"}, "profile", 400),
        ({"name": "ok", "profile": 3}, "profile", 400),
        ({"name": "ok", "image": "evil"}, "image", 400),
        ("[1, 2]", "body", 400),
        ("{not json", "body", 400),
    ],
)
async def test_bad_create_names_the_field(api: Any, body: Any, field: str, status: int) -> None:
    code, error = await api("POST", "notebooks", body=body)
    assert code == status
    assert error["field"] == field
    assert error["message"] and error["reason"] == "BadRequest"
    code, listing = await api("GET", "notebooks")
    assert listing["notebooks"] == []


async def test_bad_patch_names_the_field(api: Any) -> None:
    code, error = await api("PATCH", "notebooks/nb1", body={"stopped": "yes"})
    assert code == 400 and error["field"] == "stopped"


async def test_unknown_server_is_404(api: Any) -> None:
    for method in ("GET", "DELETE"):
        code, error = await api(method, "notebooks/nope")
        assert code == 404 and error["field"] == "name"
    code, _ = await api("PATCH", "notebooks/nope", body={"stopped": True})
    assert code == 404


async def test_listing_every_user_is_for_admins(api: Any) -> None:
    code, error = await api("GET", "notebooks", as_user="bob", all="1")
    assert code == 403 and error["field"] == "all"
    code, error = await api("GET", "notebooks", as_user="bob", user="alice")
    assert code == 403 and error["field"] == "user"
    code, body = await api("GET", "notebooks", as_user="root-admin", all="1")
    assert code == 200 and body["is_admin"] is True and body["user"] == "root-admin"

"""A server's whole life through the REST API, on real child processes, checked against openapi.yaml."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cube_jupyter.local import gpus
from cube_jupyter.notebooks.local import children
from tests.local.support import kernel_environment
from tests.server.openapi import assert_response_matches
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)
ONE = "/notebooks/{name}"


async def settle(api: Any, name: str, want: str, as_user: str = "alice", timeout: float = 60) -> Any:
    async def server() -> Any:
        code, body = await api("GET", f"notebooks/{name}", as_user=as_user)
        assert code == 200, body
        return body

    return await wait_until_async(
        server,
        timeout,
        f"server {name} to be {want}",
        until=lambda body: body["status"] == want,
        interval=0.3,
    )


async def test_create_connect_stop_start_delete(api: Any, jp_base_url: str) -> None:
    code, server = await api("POST", "notebooks", body={"name": "nb1"})
    assert code == 201, server
    assert_response_matches("/notebooks", "post", code, server)
    assert server["profile"] == "small" and server["status"] in ("pending", "running")
    assert server["url"] == f"{jp_base_url}cube/notebook/alice/nb1/"
    assert server["resources"] == {"cpu": "1", "memory": "1Gi", "gpu": 0, "gpu_resource": "nvidia.com/gpu"}

    running = await settle(api, "nb1", "running")
    assert running["reason"] is None
    assert running["actions"] == ["connect", "stop", "delete"]  # the panel shows exactly these
    # through the local router only the owner connects, so an admin is not offered Connect
    code, seen_by_admin = await api("GET", "notebooks/nb1", as_user="root-admin", user="alice")
    assert code == 200 and seen_by_admin["actions"] == ["stop", "delete"]
    code, listing = await api("GET", "notebooks")
    assert_response_matches("/notebooks", "get", code, listing)
    assert [s["name"] for s in listing["notebooks"]] == ["nb1"]

    code, stopped = await api("PATCH", "notebooks/nb1", body={"stopped": True})
    assert_response_matches(ONE, "patch", code, stopped)
    assert (await settle(api, "nb1", "stopped"))["actions"] == ["start", "delete"]
    code, started = await api("PATCH", "notebooks/nb1", body={"stopped": False})
    assert code == 200 and started["status"] in ("pending", "running")
    await settle(api, "nb1", "running")

    code, body = await api("DELETE", "notebooks/nb1")
    assert_response_matches(ONE, "delete", code, body)
    code, error = await api("GET", "notebooks/nb1")
    assert_response_matches(ONE, "get", code, error)
    assert code == 404


async def test_duplicates_quotas_and_users_are_kept_apart(api: Any) -> None:
    assert (await api("POST", "notebooks", body={"name": "a1"}))[0] == 201
    code, error = await api("POST", "notebooks", body={"name": "a1"})
    assert code == 409 and error["field"] == "name" and error["reason"] == "Conflict"
    assert_response_matches("/notebooks", "post", code, error)

    assert (await api("POST", "notebooks", body={"name": "a2"}))[0] == 201
    code, error = await api("POST", "notebooks", body={"name": "a3"})
    assert code == 403 and error["reason"] == "QuotaExceeded"
    assert "limit is 2" in error["message"] and "max_servers_per_user" in error["message"]

    # bob sees none of alice's servers and cannot reach, stop or delete them
    code, listing = await api("GET", "notebooks", as_user="bob")
    assert listing["notebooks"] == []
    for method, body in (("GET", None), ("PATCH", {"stopped": True}), ("DELETE", None)):
        code, _ = await api(method, "notebooks/a1", as_user="bob", body=body)
        assert code == 404, method
    code, _ = await api("DELETE", "notebooks/a1", as_user="bob", user="alice")
    assert code == 403
    # bob's own server with the same name is his, separately
    assert (await api("POST", "notebooks", as_user="bob", body={"name": "a1"}))[0] == 201

    # an admin sees everyone's and may act on alice's
    code, everyone = await api("GET", "notebooks", as_user="root-admin", all="1")
    assert sorted((s["user"], s["name"]) for s in everyone["notebooks"]) == [
        ("alice", "a1"),
        ("alice", "a2"),
        ("bob", "a1"),
    ]
    code, _ = await api("DELETE", "notebooks/a2", as_user="root-admin", user="alice")
    assert code == 204
    code, listing = await api("GET", "notebooks")
    assert [s["name"] for s in listing["notebooks"]] == ["a1"]
    for user, name in (("alice", "a1"), ("bob", "a1")):
        assert (await api("DELETE", f"notebooks/{name}", as_user=user))[0] == 204


def visible_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """What NVML would report: the test does not depend on the machine having GPUs (or nvidia-ml-py)."""
    monkeypatch.setattr(gpus, "nvml_device_count", lambda: count)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


async def test_gpu_profile_without_gpus_is_refused_and_leaves_nothing(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    visible_gpus(monkeypatch, 0)
    code, error = await api("POST", "notebooks", body={"name": "g1", "profile": "gpu"})
    assert code == 503 and error["field"] == "profile" and "GPU" in error["message"]
    assert_response_matches("/notebooks", "post", code, error)
    code, listing = await api("GET", "notebooks")
    assert listing["notebooks"] == []


async def test_gpu_server_gets_a_gpu_of_its_own(
    api: Any, cube_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    visible_gpus(monkeypatch, 1)
    code, server = await api("POST", "notebooks", body={"name": "g1", "profile": "gpu"})
    assert code == 201, server
    assert server["resources"]["gpu"] == 1
    await settle(api, "g1", "running")
    backend = cube_app.web_app.settings["cube_notebooks"].backend
    record = backend.state.get("alice", "g1")
    env = await kernel_environment(backend.upstream("alice", "g1"), record.pid)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"  # what its users' code sees

    # The only GPU is taken: a second GPU server waits in the queue, and can be deleted there.
    code, queued = await api("POST", "notebooks", as_user="bob", body={"name": "g2", "profile": "gpu"})
    assert (code, queued["status"], queued["queue_position"]) == (201, "queued", 1), queued
    assert queued["queue_reason"] == "waiting for 1 GPU: 0 of 1 free"
    assert (await api("DELETE", "notebooks/g2", as_user="bob"))[0] == 204
    assert (await api("DELETE", "notebooks/g1"))[0] == 204


async def test_concurrent_posts_of_one_name_make_one_server(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(children, "LAB_COMMAND", children.LAB_COMMAND)  # real children
    codes = [
        code
        for code, _ in await asyncio.gather(
            *(api("POST", "notebooks", body={"name": "same"}) for _ in range(5))
        )
    ]
    assert sorted(codes) == [201, 409, 409, 409, 409]
    _, listing = await api("GET", "notebooks")
    assert [s["name"] for s in listing["notebooks"]] == ["same"]
    assert (await api("DELETE", "notebooks/same"))[0] == 204


async def test_concurrent_posts_never_exceed_the_server_limit(api: Any) -> None:
    answers = await asyncio.gather(*(api("POST", "notebooks", body={"name": f"c{i}"}) for i in range(5)))
    codes = sorted(code for code, _ in answers)
    assert codes == [201, 201, 403, 403, 403]  # max_servers_per_user is 2
    assert all(body["reason"] == "QuotaExceeded" for code, body in answers if code == 403)
    _, listing = await api("GET", "notebooks")
    assert len(listing["notebooks"]) == 2
    for server in listing["notebooks"]:
        assert (await api("DELETE", f"notebooks/{server['name']}"))[0] == 204

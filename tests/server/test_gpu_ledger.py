"""One GPU ledger for servers and jobs, through the REST API of a real server (local backend): a GPU
job keeps a new GPU server queued until it is gone and the other way round (the machine's one queue),
and `/gpu` reports the holders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.local import gpus
from tests.server.openapi import assert_response_matches
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)

# A replica that holds its GPU until the job is deleted.
HOLD_SCRIPT = "import time\nprint('holding', flush=True)\ntime.sleep(300)\n"
ONE_GPU_JOB = {
    "name": "holder",
    "framework": "pytorch",
    "replicas": {"master": {"replicas": 1, "resources": {"gpu": 1}}},
    "script": "hold.py",
}


@pytest.fixture
def cube_config(cube_config: dict[str, Any]) -> dict[str, Any]:
    """One GPU per user, on a machine NVML says has two (the test needs no real GPU)."""
    cube_config["CubeWorkbench"]["gpu_quota_per_user"] = 1
    return cube_config


@pytest.fixture(autouse=True)
def two_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "nvml_device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


async def test_a_gpu_server_waits_while_the_users_jobs_hold_the_quota_and_starts_once_they_are_gone(
    api: Any, user_files: Callable[[str], Path]
) -> None:
    """The machine's one queue: a local GPU server past the quota is queued (holding nothing: the
    report counts the job only), and starts once the job is deleted."""
    (user_files("alice") / "hold.py").write_text(HOLD_SCRIPT)
    code, job = await api("POST", "jobs", body={"kind": "training", "spec": ONE_GPU_JOB})
    assert code == 201, job
    assert job["gpus"] == 1 and job["finished"] is False

    code, server = await api("POST", "notebooks", body={"name": "g1", "profile": "gpu"})
    assert_response_matches("/notebooks", "post", code, server)
    assert (code, server["status"], server["queue_position"]) == (201, "queued", 1), server
    assert server["queue_reason"] == (
        "waiting for 1 GPU of quota: 'alice' holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)"
    )
    assert server["actions"] == ["stop", "delete"]
    code, queue = await api("GET", "queue")  # the same queue as the jobs': side by side
    assert_response_matches("/queue", "get", code, queue)
    assert [(s["name"], s["queue_position"]) for s in queue["servers"]] == [("g1", 1)]
    assert [j["name"] for j in queue["running"]] == ["holder"] and queue["queued"] == []
    code, everyone = await api("GET", "queue", as_user="root-admin", all="1")
    assert [(s["user"], s["name"]) for s in everyone["servers"]] == [("alice", "g1")]
    assert (await api("GET", "queue", as_user="bob"))[1]["servers"] == []

    # bob's quota is his own
    code, other = await api("POST", "notebooks", as_user="bob", body={"name": "g1", "profile": "gpu"})
    assert (code, other["status"]) == (201, "pending"), other

    # the GPU report counts the same holders the queue did: the queued server holds nothing
    code, report = await api("GET", "gpu")
    assert code == 200, report
    assert report["quota"]["used"] == 1 and report["quota"]["limit"] == 1
    assert report["quota"]["holders"] == [{"kind": "job", "name": "holder", "gpus": 1}]

    # once the job is gone its GPU is alice's server's
    assert (await api("DELETE", "jobs/holder"))[0] == 204
    await wait_until_async(
        lambda: api("GET", "notebooks/g1"),
        60,
        "the queue to admit g1",
        until=lambda answer: answer[1]["status"] != "queued",
    )
    for user in ("alice", "bob"):
        assert (await api("DELETE", "notebooks/g1", as_user=user))[0] == 204


async def test_a_gpu_job_waits_while_the_users_server_holds_the_quota_and_starts_once_it_is_gone(
    api: Any, user_files: Callable[[str], Path]
) -> None:
    """A local training job past the quota is queued (holding nothing: the report counts the server
    only), and the ledger's change admits it once the server is deleted."""
    (user_files("alice") / "hold.py").write_text(HOLD_SCRIPT)
    code, server = await api("POST", "notebooks", body={"name": "g1", "profile": "gpu"})
    assert code == 201, server
    code, job = await api("POST", "jobs", body={"kind": "training", "spec": ONE_GPU_JOB})
    assert_response_matches("/jobs", "post", code, job)
    assert (code, job["phase"], job["queue"]["position"]) == (201, "Queued", 1), job
    assert job["queue"]["reason"] == (
        "waiting for 1 GPU of quota: 'alice' holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)"
    )
    code, queue = await api("GET", "queue")
    assert_response_matches("/queue", "get", code, queue)
    assert [j["name"] for j in queue["queued"]] == ["holder"] and queue["running"] == []
    code, report = await api("GET", "gpu")
    assert report["quota"]["holders"] == [{"kind": "notebook", "name": "g1", "gpus": 1}]

    assert (await api("DELETE", "notebooks/g1"))[0] == 204
    job = await wait_until_async(
        lambda: api("GET", "jobs/holder"),
        60,
        "the queue to admit holder",
        until=lambda a: a[1]["queue"] is None,
    )
    assert job[1]["phase"] in ("Created", "Running"), job
    assert (await api("DELETE", "jobs/holder"))[0] == 204

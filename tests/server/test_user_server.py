"""A user server (`CubeWorkbench.role = "user"`): what a notebook server the workbench starts serves,
on a real Jupyter server sharing the workbench's state. Its identity is its owner whoever holds its
token; it serves pipelines, jobs and GPU but no spawner; no other user's runs or jobs are reachable;
and what it starts counts in the same GPU ledger as the workbench's servers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import QuotaExceeded
from cube_jupyter.jobs.local.training import LocalTrainingRunner
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.local import gpus
from cube_jupyter.pipelines.history import RunHistory, RunRecord, now
from cube_jupyter.services import Workbench
from tests.pipelines.notebooks import code, notebook, write
from tests.server.openapi import assert_response_matches

pytestmark = pytest.mark.timeout(180)
HOLD = [sys.executable, "-c", "import time; time.sleep(300)"]
DONE = [sys.executable, "-c", "pass"]
GPU_HOLDER = {"kind": "job", "name": "gpu-hold", "gpus": 1}


@pytest.fixture
def cube_config(cube_config: dict[str, Any]) -> dict[str, Any]:
    """alice's user server; she is a workbench admin, which gives her nothing extra here."""
    cube_config["CubeWorkbench"].update(
        role="user", default_user="alice", admin_users=["alice"], gpu_quota_per_user=1
    )
    return cube_config


@pytest.fixture
def jp_server_config(cube_config: dict[str, Any]) -> dict[str, Any]:
    """As the workbench starts a child: its own token auth, no trusted header, no CubeAuthorizer."""
    return {"ServerApp": {"jpserver_extensions": {"cube_jupyter_server": True}}, **cube_config}


@pytest.fixture(autouse=True)
def two_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "nvml_device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def state_dir(cube_config: dict[str, Any]) -> Path:
    return Path(cube_config["CubeWorkbench"]["state_dir"])


@pytest.fixture
def bobs_work(state_dir: Path) -> tuple[str, str]:
    """A finished training job and a pipeline run of bob's, in the state the workbench shares."""
    runner = LocalTrainingRunner(state_dir)
    spec = TrainingSpec.from_dict(
        {
            "name": "bobs-job",
            "framework": "pytorch",
            "replicas": {"master": 1},
            "command": DONE,
        },
        user="bob",
    )
    runner.start(spec)
    run = RunHistory.in_state_dir(state_dir).create(
        RunRecord(
            id="bobs-run",
            user="bob",
            path="secret.ipynb",
            pipeline="secret",
            status="succeeded",
            target="local",
            parameters={},
            store="",
            created=now(),
        ),
        ["train"],
    )
    return spec.name, run.id


async def test_a_user_server_serves_its_owners_features_and_no_spawner(api: Any) -> None:
    code, info = await api("GET", "info", as_user="")
    assert code == 200, info
    assert_response_matches("/info", "get", code, info)
    assert info["role"] == "user" and info["user"] == "alice" and info["is_admin"] is False
    assert info["features"] == ["pipelines", "jobs", "gpu"]
    for path in ("notebooks", "profiles", "notebooks/nb1"):
        code, error = await api("GET", path, as_user="")
        assert (code, error["reason"], error["field"]) == (404, "NotFound", "path"), error
        assert "notebook servers are managed at the workbench" in error["message"]
    code, error = await api("GET", "schedules", as_user="")
    assert (code, error["field"]) == (404, "path") and "schedules are managed at the workbench" in error[
        "message"
    ]
    code, jobs = await api("GET", "jobs", as_user="")
    assert code == 200 and jobs["user"] == "alice"


async def test_no_other_users_runs_or_jobs_are_reachable(api: Any, bobs_work: tuple[str, str]) -> None:
    job, run = bobs_work
    # whatever name a request carries, the caller is the server's owner
    code, listing = await api("GET", "jobs", as_user="bob")
    assert code == 200 and listing["user"] == "alice" and listing["jobs"] == []
    code, runs = await api("GET", "pipelines/runs", as_user="bob")
    assert code == 200 and runs["runs"] == []
    assert (await api("GET", f"jobs/{job}", as_user=""))[0] == 404
    assert (await api("GET", f"jobs/{job}/logs", as_user=""))[0] == 404
    assert (await api("DELETE", f"jobs/{job}", as_user=""))[0] == 404
    assert (await api("GET", f"pipelines/runs/{run}", as_user=""))[0] == 404
    assert (await api("DELETE", f"pipelines/runs/{run}", as_user=""))[0] == 404
    # naming bob, or everyone, is an admin's privilege, and a user server has no admins
    for path, params in (("jobs", {"user": "bob"}), ("jobs", {"all": "1"}), ("gpu", {"all": "1"})):
        code, error = await api("GET", path, as_user="", **params)
        assert code == 403, (path, params, error)
        assert error["field"] in ("user", "all")
    code, error = await api("GET", f"jobs/{job}", as_user="", user="bob")
    assert code == 403 and error["field"] == "user"


async def test_what_a_user_server_starts_counts_in_the_workbenchs_ledger(
    api: Any, jp_root_dir: Path, cube_config: dict[str, Any]
) -> None:
    spec = {
        "name": "gpu-hold",
        "framework": "pytorch",
        "replicas": {"master": {"replicas": 1, "resources": {"gpu": 1}}},
        "command": HOLD,
    }
    code, job = await api("POST", "jobs", as_user="", body={"kind": "training", "spec": spec})
    assert code == 201, job
    try:
        # the workbench (another process on the same state) sees the job hold alice's only GPU
        settings = load_settings(Config({k: Config(v) for k, v in cube_config.items()}))
        ledger = Workbench(settings).ledger
        assert [h.to_dict() for h in ledger.holders("alice")] == [
            {"kind": "job", "name": "gpu-hold", "gpus": 1}
        ]
        async with ledger.locked("alice"):
            with pytest.raises(QuotaExceeded) as refused:
                ledger.check("alice", 1, field="profile")
        assert "1 in unfinished jobs" in refused.value.message
        # and the user server queues a second GPU job behind the same holder (it holds nothing)
        code, more = await api(
            "POST", "jobs", as_user="", body={"kind": "training", "spec": {**spec, "name": "more"}}
        )
        assert (code, more["phase"]) == (201, "Queued"), more
        assert "'alice' holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)" in more["queue"]["reason"]
        assert (await api("DELETE", "jobs/more", as_user=""))[0] == 204
        # the GPU report of the user server shows the same holder
        code, report = await api("GET", "gpu", as_user="", history="0")
        assert code == 200 and report["quota"]["holders"] == [GPU_HOLDER]
    finally:
        assert (await api("DELETE", "jobs/gpu-hold", as_user=""))[0] == 204


async def test_a_run_store_may_name_no_other_users_workspace(
    api: Any, jp_root_dir: Path, state_dir: Path
) -> None:
    """The owner of a user server writes only among their own files: a run's `store` naming bob's
    workspace (by its absolute path, or by '..' from hers) is refused, and nothing is written there."""
    write(notebook(code("x = 1", "step:one")), jp_root_dir / "one.ipynb")
    bobs = state_dir / "workspaces" / "bob" / "nb1"
    bobs.mkdir(parents=True)
    for store in (str(bobs / "artifacts"), f"file://{bobs}/artifacts", "../bob/nb1/artifacts"):
        body = {"path": "one.ipynb", "store": store}
        status, error = await api("POST", "pipelines/runs", as_user="", body=body)
        assert (status, error["field"]) == (400 if ".." in store else 403, "store"), (store, error)
        assert "bob" not in error["message"].replace(store, ""), error  # nothing beyond what was sent
    assert list(bobs.iterdir()) == []
    assert RunHistory.in_state_dir(state_dir).list("alice") == []

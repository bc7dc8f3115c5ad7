"""REST API of schedules on a real Jupyter server (local backend), checked against openapi.yaml.

The scheduler runs in this server (the central workbench) with the real clock; "run now" and a
backfill start real pipeline runs (papermill kernels), each carrying its logical time into the
notebook's `logical_date` parameter. The rules of when runs start are tested with an injected clock
in tests/schedules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.pipelines.notebooks import code, notebook, write
from tests.server.openapi import assert_response_matches
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(240)
BERLIN = ZoneInfo("Europe/Berlin")

DATED = notebook(
    code("logical_date = None\nscale = 2", "parameters"),
    code("stamp = logical_date\nsize = scale * 10", "step:extract"),
    code("print('ran for', stamp, size)", "step:report"),
    code("stamp", "metrics"),
)


@pytest.fixture
def root(user_files: Any) -> Path:
    area: Path = user_files("alice")
    write(DATED, area / "dated.ipynb")
    return area


async def call(api: Any, method: str, path: str, spec_path: str, **kwargs: Any) -> tuple[int, Any]:
    status, body = await api(method, path, **kwargs)
    assert_response_matches(spec_path, method, status, body)
    return status, body


async def settled(api: Any, name: str, count: int, as_user: str = "alice") -> list[dict[str, Any]]:
    """The schedule's runs the test started, once `count` of them have ended (a real fire, should
    the test span 02:00 in Berlin, is the clock's doing, not the test's)."""

    async def runs() -> list[dict[str, Any]]:
        status, body = await call(
            api, "GET", f"schedules/{name}/runs", "/schedules/{name}/runs", as_user=as_user
        )
        assert status == 200, body
        return [r for r in body["runs"] if r["origin"] != "schedule"]

    return await wait_until_async(
        runs,
        180,
        f"{count} run(s) of {name} to end",
        until=lambda found: sum(r["state"] not in ("pending", "running") for r in found) >= count,
        interval=0.25,
    )


def next_two_oclock_in_berlin() -> str:
    """The next 02:00 in Berlin, in UTC: 01:00Z in winter, 00:00Z in summer."""
    now = datetime.now(BERLIN)
    two = now.replace(hour=2, minute=0, second=0, microsecond=0)
    if two <= now:
        two += timedelta(days=1)  # wall-clock arithmetic: 02:00 of the next day
    return two.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_save_run_now_and_backfill_real_runs(api: Any, root: Path) -> None:
    body = {
        "name": "nightly",
        "path": "dated.ipynb",
        "cron": "0 2 * * *",
        "timezone": "Europe/Berlin",
        "parameters": {"scale": 3},
        "max_concurrency": 2,
    }
    status, saved = await call(api, "POST", "schedules", "/schedules", body=body)
    assert status == 201, saved
    assert saved["describe"] == "At 02:00 every day (Europe/Berlin)" and saved["state"] == "active"
    assert saved["next_fire"] == next_two_oclock_in_berlin() and saved["snapshot_taken"]
    # The file changes after saving: runs execute the snapshot, never the edit.
    write(notebook(code("raise SystemExit('half-edited')", "step:broken")), root / "dated.ipynb")

    status, slot = await call(api, "POST", "schedules/nightly/run", "/schedules/{name}/run")
    assert status == 201 and slot["state"] == "pending" and slot["origin"] == "manual"
    (done,) = await settled(api, "nightly", 1)
    assert done["state"] == "succeeded", done
    status, run = await api("GET", f"pipelines/runs/{done['run_id']}")
    assert status == 200 and run["schedule"] == "nightly" and run["logical_date"] == done["logical_date"]
    assert run["parameters"] == {"logical_date": done["logical_date"], "scale": 3}
    assert run["metrics"] == {"stamp": done["logical_date"]}

    status, plan = await call(
        api,
        "POST",
        "schedules/nightly/backfill",
        "/schedules/{name}/backfill",
        body={"start": "2026-11-01", "end": "2026-11-03", "parallel": 2, "dry_run": True},
    )
    assert status == 200 and plan["to_run"] == [
        "2026-11-01T01:00:00Z",
        "2026-11-02T01:00:00Z",
        "2026-11-03T01:00:00Z",
    ]
    status, queued = await call(
        api,
        "POST",
        "schedules/nightly/backfill",
        "/schedules/{name}/backfill",
        body={"start": "2026-11-01", "end": "2026-11-03", "parallel": 2},
    )
    assert status == 202 and queued["batch"]
    runs = await settled(api, "nightly", 4)
    assert {r["logical_date"]: r["state"] for r in runs if r["origin"] == "backfill"} == dict.fromkeys(
        plan["to_run"], "succeeded"
    )
    # Again: every logical time already succeeded, nothing runs twice.
    status, again = await call(
        api,
        "POST",
        "schedules/nightly/backfill",
        "/schedules/{name}/backfill",
        body={"start": "2026-11-01", "end": "2026-11-03"},
    )
    assert status == 200 and again["to_run"] == [] and again["already_succeeded"] == plan["to_run"]

    status, paused = await call(api, "PATCH", "schedules/nightly", "/schedules/{name}", body={"paused": True})
    assert status == 200 and paused["state"] == "paused" and paused["next_fire"] is None
    status, listed = await call(api, "GET", "schedules", "/schedules")
    assert [s["name"] for s in listed["schedules"]] == ["nightly"]
    assert listed["schedules"][0]["last_run"]["state"] == "succeeded"
    status, _ = await call(api, "DELETE", "schedules/nightly", "/schedules/{name}")
    assert status == 204
    status, gone = await call(api, "GET", "schedules/nightly", "/schedules/{name}")
    assert status == 404 and gone["field"] == "name"


async def test_bad_input_names_the_field(api: Any, root: Path) -> None:
    good = {"name": "ok", "path": "dated.ipynb", "cron": "0 2 * * *"}
    cases = [
        ({**good, "cron": "0 2 * *"}, "cron"),
        ({**good, "timezone": "Europe/Atlantis"}, "timezone"),
        ({**good, "start": "2026-12-02", "end": "2026-12-01"}, "end"),
        ({**good, "depends_on": "missing"}, "depends_on"),
        ({**good, "path": "missing.ipynb"}, "path"),
        ({**good, "parameters": {"nope": 1}}, "parameters"),
        ({**good, "max_concurrency": 0}, "max_concurrency"),
        ("not json", "body"),
    ]
    for body, field in cases:
        status, error = await call(api, "POST", "schedules", "/schedules", body=body)
        missing = field == "path"  # a file that is not there is a 404, as for a pipeline run
        assert status == (404 if missing else 400) and error["field"].startswith(field), (body, error)
    for limit in ("0", "\u00b2", "9" * 5000, "\u0661\u0660"):  # superscript two, Arabic-Indic ten
        status, error = await call(api, "GET", "schedules/x/runs", "/schedules/{name}/runs", limit=limit)
        assert (status, error["field"]) == (400, "limit"), error
    status, error = await call(api, "GET", "schedules/preview", "/schedules/preview", cron="nonsense")
    assert status == 400 and error["field"] == "cron"
    status, preview = await call(
        api, "GET", "schedules/preview", "/schedules/preview", cron="@hourly", count="2"
    )
    assert status == 200 and preview["describe"] == "At the start of every hour (UTC)"
    assert len(preview["next"]) == 2


async def test_owners_only_and_admins_by_user(api: Any, root: Path, user_files: Any) -> None:
    status, _ = await api(
        "POST", "schedules", body={"name": "mine", "path": "dated.ipynb", "cron": "0 2 * * *"}
    )
    assert status == 201
    status, error = await call(api, "GET", "schedules/mine", "/schedules/{name}", as_user="bob")
    assert status == 404
    status, error = await call(api, "GET", "schedules/mine", "/schedules/{name}", as_user="bob", user="alice")
    assert status == 403 and error["field"] == "user"
    status, error = await call(
        api, "PATCH", "schedules/mine", "/schedules/{name}", as_user="bob", body={"paused": True}
    )
    assert status == 404
    status, seen = await call(
        api, "GET", "schedules/mine", "/schedules/{name}", as_user="root-admin", user="alice"
    )
    assert status == 200 and seen["owner"] == "alice"
    # bob cannot name alice's notebook, nor depend on her schedule.
    user_files("bob")
    status, error = await call(
        api,
        "POST",
        "schedules",
        "/schedules",
        as_user="bob",
        body={"name": "theirs", "path": "dated.ipynb", "cron": "0 2 * * *"},
    )
    assert status in (400, 403, 404) and error["field"] == "path"
    status, error = await call(api, "GET", "schedules", "/schedules", as_user="bob", all="1")
    assert status == 403


async def test_a_scheduled_training_job_gets_its_logical_time(api: Any, root: Path, jp_fetch: Any) -> None:
    """Nightly retraining is often a script: `kind: training` runs a job per logical time, named
    after it, with the logical time in CUBE_LOGICAL_DATE."""
    import sys

    job = {
        "name": "retrain",
        "framework": "pytorch",
        "replicas": {"worker": 1},
        "command": [sys.executable, "-c", "import os; print('logical', os.environ['CUBE_LOGICAL_DATE'])"],
    }
    body = {"name": "retrain", "kind": "training", "job": job, "interval_seconds": 86400, "retries": 1}
    status, saved = await call(api, "POST", "schedules", "/schedules", body=body)
    assert status == 201 and saved["kind"] == "training" and saved["path"] is None, saved
    status, slot = await call(api, "POST", "schedules/retrain/run", "/schedules/{name}/run")
    assert status == 201 and slot["origin"] == "manual"
    (done,) = await settled(api, "retrain", 1)
    assert done["state"] == "succeeded", done
    compact = done["logical_date"].replace("-", "").replace(":", "").replace("T", "-").rstrip("Z")
    assert done["run_id"] == f"retrain-{compact}"
    logs = await jp_fetch(
        "cube",
        "api",
        "v1",
        "jobs",
        done["run_id"],
        "logs",
        params={"replica": "worker-0"},
        headers={"kubeflow-userid": "alice"},
    )
    assert f"logical {done['logical_date']}" in logs.body.decode()
    bad = {**body, "name": "broken", "job": {**job, "replicas": {"chief": 1}}}
    status, error = await call(api, "POST", "schedules", "/schedules", body=bad)
    assert status == 400 and error["field"] == "job.replicas.chief", error


class TestLocalCodeExecutionForAdminsOnly:
    """A schedule runs as its owner under the owner's rules: where only admins may run code on the
    workbench, a non-admin's schedule is refused when saved, naming the rule; an admin's is saved."""

    @pytest.fixture
    def cube_config(self, cube_config: dict[str, Any]) -> dict[str, Any]:
        cube_config["CubeWorkbench"]["local_code_execution"] = "admins"
        return cube_config

    async def test_a_non_admins_schedule_is_refused_when_saved(self, api: Any, root: Path) -> None:
        body = {"name": "nightly", "path": "dated.ipynb", "cron": "0 2 * * *"}
        status, error = await call(api, "POST", "schedules", "/schedules", body=body)
        assert (status, error["field"]) == (403, "target"), error
        assert "CubeWorkbench.local_code_execution" in error["message"]
        status, listing = await call(api, "GET", "schedules", "/schedules")
        assert listing["schedules"] == []

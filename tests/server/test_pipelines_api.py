"""REST API of notebook pipelines on a real Jupyter server (local backend), checked against openapi.yaml.

Notebooks are written into the server's root dir; runs execute for real (papermill, kernels) and are
followed by polling, as the Lab panel does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest
from tornado.httpclient import HTTPClientError

from tests.pipelines.notebooks import FANOUT_ML, code, notebook, write
from tests.server.openapi import assert_response_matches
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)

LINEAR = notebook(
    code("import math", "imports"),
    code("base = 2", "parameters"),
    code("x = base * 10", "step:make"),
    code("y = math.sqrt(x)\nprint('y =', y)", "step:use"),
)
CYCLE = notebook(
    code("a = 1", "step:first", "after:second"),
    code("b = a + 1", "step:second"),
)
# Sleeps past the test's timeout: only a cancel that interrupts the step lets the test end.
SLOW = notebook(code("import time\ntime.sleep(3600)", "step:sleepy"))


@pytest.fixture
def root(user_files: Any) -> Path:
    """Alice's own files: on this shared server her requests name paths among them."""
    area: Path = user_files("alice")
    write(LINEAR, area / "linear.ipynb")
    shutil.copy(FANOUT_ML, area / "fanout_ml.ipynb")
    return area


async def call(api: Any, method: str, path: str, spec_path: str, **kwargs: Any) -> tuple[int, Any]:
    """One API call whose answer must match the published contract."""
    status, body = await api(method, path, **kwargs)
    assert_response_matches(spec_path, method, status, body)
    return status, body


async def run_now(api: Any, run_id: str, as_user: str = "alice") -> dict[str, Any]:
    status, run = await call(api, "GET", f"pipelines/runs/{run_id}", "/pipelines/runs/{id}", as_user=as_user)
    assert status == 200, run
    return dict(run)


async def wait_for_end(
    api: Any, run_id: str, timeout: float = 120.0, as_user: str = "alice"
) -> dict[str, Any]:
    return await wait_until_async(
        lambda: run_now(api, run_id, as_user),
        timeout,
        f"run {run_id} to end",
        until=lambda run: run["status"] in ("succeeded", "failed", "cancelled"),
        interval=0.25,
    )


async def test_config_offers_local_runs_on_the_local_backend(api: Any) -> None:
    status, body = await call(api, "GET", "pipelines/config", "/pipelines/config")
    assert status == 200
    assert body["backend"] == "local" and body["targets"] == ["local"]
    # The tag vocabulary the panel's cell editor reads and writes, Kale's aliases after ours.
    tags = body["tags"]
    assert tags["roles"]["parameters"] == ["parameters", "pipeline-parameters"]
    assert tags["roles"]["metrics"] == ["metrics", "pipeline-metrics"]
    assert set(tags["roles"]) == {"parameters", "metrics", "imports", "functions", "skip"}
    assert tags["step"] == ["step", "block"] and tags["after"] == ["after", "prev"]
    assert set(tags["options"]) == {
        "image",
        "cpu",
        "memory",
        "gpu",
        "retries",
        "timeout",
        "cache",
        "limit",
        "annotation",
        "label",
        "queue",
        "priority",
    }


async def test_graph_of_a_saved_notebook(api: Any, root: Path) -> None:
    status, graph = await call(
        api, "POST", "pipelines/graph", "/pipelines/graph", body={"path": "fanout_ml.ipynb"}
    )
    assert status == 200
    names = [s["name"] for s in graph["steps"]]
    assert names[0] == "load" and names[-1] == "evaluate"
    assert set(names) == {"load", "numeric-features", "city-features", "train", "evaluate"}
    edges = {(e["upstream"], e["downstream"]): e["variables"] for e in graph["edges"]}
    assert "raw" in edges[("load", "numeric-features")]
    assert "raw" in edges[("load", "city-features")]
    assert {("numeric-features", "train"), ("city-features", "train"), ("train", "evaluate")} <= set(edges)
    assert [p["name"] for p in graph["parameters"]] == ["n_samples", "test_size", "C", "seed"]
    assert graph["parameters"][0]["default"] == 600
    load = graph["steps"][0]
    assert load["cells"] == [5, 6]  # the untagged cell joins the step above


async def test_graph_of_unsaved_content_leaves_the_file_alone(api: Any, root: Path) -> None:
    saved = (root / "fanout_ml.ipynb").read_bytes()
    content = json.loads(saved)
    content["cells"][12]["metadata"]["tags"] = []  # `evaluate` now continues `train`
    status, graph = await call(
        api,
        "POST",
        "pipelines/graph",
        "/pipelines/graph",
        body={"path": "fanout_ml.ipynb", "notebook": content},
    )
    assert status == 200
    assert "evaluate" not in [s["name"] for s in graph["steps"]]
    train = next(s for s in graph["steps"] if s["name"] == "train")
    assert train["cells"] == [11, 12]
    assert (root / "fanout_ml.ipynb").read_bytes() == saved


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "path"),
        ({"path": ""}, "path"),
        ({"path": 3}, "path"),
        ({"path": "../outside.ipynb"}, "path"),
        ({"path": "sub/../../outside.ipynb"}, "path"),
        ({"path": "/etc/passwd"}, "path"),
        ({"path": "broken.ipynb"}, "path"),
        ({"path": "cycle.ipynb"}, "steps.second.after"),
        ({"path": "linear.ipynb", "notebook": "not a notebook"}, "notebook"),
        ({"path": "linear.ipynb", "extra": 1}, "extra"),
        ("[1, 2]", "body"),
        ("{not json", "body"),
    ],
)
async def test_bad_graph_request_names_the_field(api: Any, root: Path, body: Any, field: str) -> None:
    (root / "broken.ipynb").write_text('{"cells": [')
    write(CYCLE, root / "cycle.ipynb")
    status, error = await call(api, "POST", "pipelines/graph", "/pipelines/graph", body=body)
    assert status == 400, error
    assert error["field"] == field, error
    assert error["message"]


async def test_each_user_names_only_their_own_notebooks(
    api: Any, root: Path, user_files: Any, jp_root_dir: Path, jp_fetch: Any
) -> None:
    """Bob reaches neither alice's notebooks, nor hidden ones, nor the server root: the rule by which
    the contents API refuses him the server's files, which admins read."""
    bobs = user_files("bob")
    (bobs / ".private").mkdir()
    write(LINEAR, bobs / ".private" / "linear.ipynb")
    write(LINEAR, jp_root_dir / "on-the-server.ipynb")
    (jp_root_dir / ".hidden").mkdir()
    write(LINEAR, jp_root_dir / ".hidden" / "linear.ipynb")
    refused = [
        ("bob", "linear.ipynb", 404),  # alice's name for her notebook means nothing in bob's files
        ("bob", "../alice/linear.ipynb", 400),
        ("bob", str(root / "linear.ipynb"), 400),
        ("bob", ".private/linear.ipynb", 403),  # hidden, even his own
        ("alice", "on-the-server.ipynb", 404),
        ("root-admin", ".hidden/linear.ipynb", 403),
    ]
    for user, path, expected in refused:
        for endpoint, spec in (
            ("pipelines/graph", "/pipelines/graph"),
            ("pipelines/runs", "/pipelines/runs"),
        ):
            status, error = await call(api, "POST", endpoint, spec, as_user=user, body={"path": path})
            assert (status, error["field"]) == (expected, "path"), (user, path, endpoint, error)
            assert str(jp_root_dir) not in error["message"]  # no server paths in what users see
    with pytest.raises(HTTPClientError) as contents:  # the contents API's verdict on the same file
        await jp_fetch("api", "contents", "on-the-server.ipynb", headers={"kubeflow-userid": "alice"})
    assert contents.value.code == 403
    status, graph = await api(
        "POST", "pipelines/graph", as_user="root-admin", body={"path": "on-the-server.ipynb"}
    )
    assert status == 200 and [s["name"] for s in graph["steps"]] == ["make", "use"]
    _, listing = await api("GET", "pipelines/runs", as_user="root-admin")
    assert listing["runs"] == []


class TestLocalCodeExecutionForAdminsOnly:
    @pytest.fixture
    def cube_config(self, cube_config: dict[str, Any]) -> dict[str, Any]:
        cube_config["CubeWorkbench"]["local_code_execution"] = "admins"
        return cube_config

    async def test_non_admins_may_not_run_code_on_the_workbench(self, api: Any, root: Path) -> None:
        status, error = await call(
            api, "POST", "pipelines/runs", "/pipelines/runs", body={"path": "linear.ipynb"}
        )
        assert (status, error["field"]) == (403, "target"), error
        assert "CubeWorkbench.local_code_execution" in error["message"]
        job = {"kind": "training", "spec": {"name": "t", "script": "train.py"}}
        status, error = await api("POST", "jobs", body=job)
        assert (status, error["field"]) == (403, "kind"), error
        assert "CubeWorkbench.local_code_execution" in error["message"]
        status, graph = await api("POST", "pipelines/graph", body={"path": "linear.ipynb"})
        assert status == 200 and graph["steps"]  # reading her own notebook runs nothing
        _, listing = await api("GET", "pipelines/runs", as_user="root-admin")
        assert listing["runs"] == []


async def test_cycle_error_names_the_cycle(api: Any, root: Path) -> None:
    write(CYCLE, root / "cycle.ipynb")
    status, error = await api("POST", "pipelines/graph", body={"path": "cycle.ipynb"})
    assert status == 400
    assert "first -> second -> first" in error["message"] or "second -> first -> second" in error["message"]
    # The same cycle in unsaved content is the same 400.
    content = nbformat.writes(CYCLE)
    status, error = await api(
        "POST", "pipelines/graph", body={"path": "x.ipynb", "notebook": json.loads(content)}
    )
    assert status == 400 and error["field"].endswith(".after")


async def test_run_a_pipeline_to_the_end(api: Any, root: Path) -> None:
    saved = (root / "linear.ipynb").read_bytes()
    status, run = await call(
        api,
        "POST",
        "pipelines/runs",
        "/pipelines/runs",
        body={"path": "linear.ipynb", "parameters": {"base": 8}, "target": "local"},
    )
    assert status == 201, run
    assert run["user"] == "alice" and run["path"] == "linear.ipynb" and run["target"] == "local"
    assert run["parameters"] == {"base": 8}
    assert [s["name"] for s in run["steps"]] == ["make", "use"]

    done = await wait_for_end(api, run["id"])
    assert done["status"] == "succeeded", done
    assert [s["status"] for s in done["steps"]] == ["succeeded", "succeeded"]
    assert all(s["notebook"] and s["duration"] is not None for s in done["steps"])

    status, listing = await call(api, "GET", "pipelines/runs", "/pipelines/runs")
    assert status == 200 and listing["user"] == "alice"
    assert [r["id"] for r in listing["runs"]] == [run["id"]]

    spec = "/pipelines/runs/{id}/steps/{step}/notebook"
    status, executed = await call(api, "GET", f"pipelines/runs/{run['id']}/steps/use/notebook", spec)
    assert status == 200
    outputs = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    printed = "".join("".join(o.get("text", "")) for o in outputs)
    assert "y = 8.94" in printed, outputs
    assert (root / "linear.ipynb").read_bytes() == saved  # the user's notebook is never modified

    # Ended runs cannot be cancelled.
    status, error = await call(api, "DELETE", f"pipelines/runs/{run['id']}", "/pipelines/runs/{id}")
    assert status == 409 and error["field"] == "id"


async def test_runs_and_their_cache_are_private_to_their_user(api: Any, root: Path, user_files: Any) -> None:
    status, run = await api("POST", "pipelines/runs", body={"path": "linear.ipynb"})
    assert status == 201
    first = await wait_for_end(api, run["id"])
    for method, path in (
        ("GET", f"pipelines/runs/{run['id']}"),
        ("DELETE", f"pipelines/runs/{run['id']}"),
        ("GET", f"pipelines/runs/{run['id']}/steps/make/notebook"),
    ):
        status, error = await api(method, path, as_user="bob")
        assert status == 404 and error["field"] == "id", (method, path, error)
    status, listing = await api("GET", "pipelines/runs", as_user="bob")
    assert listing == {"user": "bob", "runs": []}
    status, listing = await api("GET", "pipelines/runs", as_user="root-admin")
    assert [r["id"] for r in listing["runs"]] == [run["id"]]
    status, error = await call(
        api,
        "GET",
        f"pipelines/runs/{run['id']}/steps/nope/notebook",
        "/pipelines/runs/{id}/steps/{step}/notebook",
    )
    assert status == 404 and error["field"] == "step"
    status, error = await call(api, "GET", "pipelines/runs/no-such-run", "/pipelines/runs/{id}")
    assert status == 404 and error["field"] == "id"

    # Bob's run of the very same notebook (in his own files) runs: alice's cache is not his.
    write(LINEAR, user_files("bob") / "linear.ipynb")
    status, bobs = await api("POST", "pipelines/runs", as_user="bob", body={"path": "linear.ipynb"})
    bobs = await wait_for_end(api, bobs["id"], as_user="bob")
    assert [s["status"] for s in bobs["steps"]] == ["succeeded", "succeeded"], bobs
    assert all(bobs["id"] in s["notebook"] for s in bobs["steps"]), bobs  # his own executed notebooks
    status, again = await api("POST", "pipelines/runs", body={"path": "linear.ipynb"})
    again = await wait_for_end(api, again["id"])
    assert [s["status"] for s in again["steps"]] == ["cached", "cached"]  # while alice's cache serves her
    assert [s["notebook"] for s in again["steps"]] == [s["notebook"] for s in first["steps"]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "path"),
        ({"path": "../linear.ipynb"}, "path"),
        ({"path": "linear.ipynb", "target": "mars"}, "target"),
        ({"path": "linear.ipynb", "target": "cluster"}, "target"),
        ({"path": "linear.ipynb", "target": "kfp"}, "target"),
        ({"path": "linear.ipynb", "parameters": [1]}, "parameters"),
        ({"path": "linear.ipynb", "parameters": {"nope": 1}}, "parameters.nope"),
        ({"path": "linear.ipynb", "parallel": 0}, "parallel"),
        ({"path": "linear.ipynb", "no_cache": "yes"}, "no_cache"),
        ({"path": "linear.ipynb", "store": 5}, "store"),
        ({"path": "linear.ipynb", "colour": "red"}, "colour"),
        ({"path": "cycle.ipynb"}, "steps.second.after"),
        ({"path": "empty.ipynb"}, "cells"),
    ],
)
async def test_bad_run_request_names_the_field_and_starts_nothing(
    api: Any, root: Path, body: dict[str, Any], field: str
) -> None:
    write(CYCLE, root / "cycle.ipynb")
    write(notebook(code("import os", "imports")), root / "empty.ipynb")
    status, error = await call(api, "POST", "pipelines/runs", "/pipelines/runs", body=body)
    assert status == 400, error
    assert error["field"] == field, error
    _, listing = await api("GET", "pipelines/runs")
    assert listing["runs"] == []


async def test_cancel_a_running_pipeline(api: Any, root: Path) -> None:
    write(SLOW, root / "slow.ipynb")
    status, run = await api("POST", "pipelines/runs", body={"path": "slow.ipynb"})
    assert status == 201
    await wait_until_async(
        lambda: run_now(api, run["id"]),
        60,
        "the step to run",
        until=lambda now: now["steps"][0]["status"] == "running",
        interval=0.2,
    )
    status, cancelled = await call(api, "DELETE", f"pipelines/runs/{run['id']}", "/pipelines/runs/{id}")
    assert status == 200
    assert cancelled["status"] == "cancelled", cancelled
    assert cancelled["steps"][0]["status"] == "cancelled"


async def test_resume_a_failed_run_from_its_failed_step(api: Any, root: Path) -> None:
    """Like Argo's retry: the failed step and those below it run again, the completed one is kept."""
    fixed = root / "fixed"
    write(
        notebook(
            code("x = 20", "step:make"),
            code(f"import os\nassert os.path.exists({str(fixed)!r}), 'not yet'\ny = x + 1", "step:use"),
        ),
        root / "flaky.ipynb",
    )
    status, run = await api("POST", "pipelines/runs", body={"path": "flaky.ipynb", "no_cache": True})
    failed = await wait_for_end(api, run["id"])
    assert failed["status"] == "failed" and failed["resumable"], failed
    resume, spec = f"pipelines/runs/{run['id']}/resume", "/pipelines/runs/{id}/resume"
    status, error = await call(api, "POST", resume, spec, as_user="bob")
    assert status == 404 and error["field"] == "id"
    status, error = await call(api, "POST", resume, spec, body={"parallel": 4})
    assert status == 400 and error["field"] == "body"

    fixed.touch()
    status, resumed = await call(api, "POST", resume, spec)
    assert status == 200 and resumed["id"] == run["id"] and resumed["status"] == "queued", resumed
    done = await wait_for_end(api, run["id"])
    assert done["status"] == "succeeded" and not done["resumable"], done
    assert done["steps"][0] == failed["steps"][0]  # kept as it was
    assert done["steps"][1]["status"] == "succeeded" and done["steps"][1]["attempts"] == 1
    status, error = await call(api, "POST", resume, spec)
    assert status == 409 and error["field"] == "id" and "is succeeded" in error["message"]
    _, listing = await api("GET", "pipelines/runs")
    assert [r["id"] for r in listing["runs"]] == [run["id"]]  # the same run, not a new one


async def test_pipeline_api_needs_identity_and_xsrf(api: Any, root: Path) -> None:
    for method, path in (("GET", "pipelines/runs"), ("POST", "pipelines/graph"), ("GET", "pipelines/config")):
        status, _ = await api(
            method, path, as_user="", body={"path": "linear.ipynb"} if method == "POST" else None
        )
        assert status == 403, (method, path)
    status, _ = await api("POST", "pipelines/runs", body={"path": "linear.ipynb"}, xsrf=False)
    assert status == 403

"""Hostile input gets a 4xx naming the limit or the field, never a 5xx: bodies over the size or
nesting limit, NUL and lone surrogates in bodies and parameters, a store on a system path, and
values too long to repeat back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from cube_jupyter_server.json_body import MAX_BODY_BYTES, MAX_DEPTH

from tests.pipelines.notebooks import code, notebook, write
from tests.server.openapi import assert_response_matches

pytestmark = pytest.mark.timeout(120)

# Every operation that takes a JSON body, as (method, path in the API, path in the contract).
JSON_BODY_OPERATIONS = [
    ("POST", "notebooks", "/notebooks"),
    ("PATCH", "notebooks/mine", "/notebooks/{name}"),
    ("POST", "pipelines/graph", "/pipelines/graph"),
    ("POST", "pipelines/runs", "/pipelines/runs"),
    ("POST", "jobs", "/jobs"),
    ("POST", "jobs/model/predict", "/jobs/{name}/predict"),
]


@pytest.mark.parametrize(("method", "path", "contract"), JSON_BODY_OPERATIONS)
async def test_nesting_past_the_limit_is_a_400_naming_it(
    api: Any, method: str, path: str, contract: str
) -> None:
    status, error = await api(method, path, body="[" * 200_000)
    assert status == 400 and error["field"] == "body", error
    assert f"limit of {MAX_DEPTH} levels" in error["message"]
    assert_response_matches(contract, method, status, error)


async def test_a_body_over_the_size_limit_is_a_413_naming_it(api: Any) -> None:
    status, error = await api("POST", "jobs", body=" " * (MAX_BODY_BYTES + 1))
    assert status == 413 and error["field"] == "body" and error["reason"] == "PayloadTooLarge", error
    assert str(MAX_BODY_BYTES) in error["message"]
    assert_response_matches("/jobs", "POST", status, error)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("pipelines/graph", '{"path": "a\\u0000.ipynb"}', "path"),
        ("pipelines/runs", '{"path": "x.ipynb", "store": "/tmp/\\ud800"}', "store"),
        ("pipelines/runs", '{"path": "x.ipynb", "parameters": {"a": ["ok", "\\u0000"]}}', "parameters.a[1]"),
        ("jobs", '{"kind": "training", "spec": {"command": ["python", "a\\u0000"]}}', "spec.command[1]"),
        ("jobs", '{"kind": "training", "spec": {"env": {"A": "\\udfff"}}}', "spec.env.A"),
        ("notebooks", '{"name": "nb", "\\u0000": 1}', "body"),
    ],
)
async def test_nul_and_lone_surrogates_name_their_json_path(
    api: Any, path: str, body: str, field: str
) -> None:
    status, error = await api("POST", path, body=body)
    assert status == 400 and error["field"] == field, error


async def test_nul_in_path_and_query_parameters_names_them(api: Any) -> None:
    status, error = await api("GET", "jobs/a\x00b")
    assert status == 400 and error["field"] == "name", error
    status, error = await api("GET", "notebooks", user="a\x00b")
    assert status == 400 and error["field"] == "user", error


async def test_predict_names_the_body_not_a_spec(api: Any) -> None:
    status, error = await api("POST", "jobs/model/predict", body=[])
    assert status == 400 and error["field"] == "body", error
    assert "spec" not in error["message"]


async def test_errors_quote_a_short_prefix_of_the_input(api: Any) -> None:
    huge = "x" * 1_000_000
    for method, path, body in [
        ("POST", "notebooks", {"name": huge}),
        ("POST", "jobs", {"kind": "training", "spec": huge}),
        ("POST", "pipelines/graph", {huge: 1}),
    ]:
        status, error = await api(method, path, body=body)
        assert status == 400 and "field" in error, error
        assert len(error["message"]) < 1200 and len(error["field"]) <= 200, (path, len(str(error)))


@pytest.mark.parametrize("store", ["/dev/null", "/proc/self/artifacts"])
async def test_a_store_on_a_system_path_is_refused_telling_no_pid(
    api: Any, user_files: Any, jp_root_dir: Path, store: str
) -> None:
    """A user may write a store only among their own files (403); an admin anywhere but on a system
    path (400). Neither answer tells the server's PID (`/proc/self` resolved would)."""
    write(notebook(code("x = 1", "step:one")), user_files("alice") / "one.ipynb")
    write(notebook(code("x = 1", "step:one")), jp_root_dir / "one.ipynb")
    for user, expected in (("alice", 403), ("root-admin", 400)):
        body = {"path": "one.ipynb", "store": store}
        status, error = await api("POST", "pipelines/runs", body=body, as_user=user)
        assert status == expected and error["field"] == "store", (user, error)
        assert str(os.getpid()) not in error["message"]
        assert_response_matches("/pipelines/runs", "POST", status, error)

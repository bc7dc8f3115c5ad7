"""Job spec files through the REST API (a real Jupyter server): a YAML file read into {kind, spec}
for the Jobs panel's form, and {kind, spec} rendered back as YAML, checked against openapi.yaml."""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tornado.httpclient import HTTPClientError

from tests.server.openapi import assert_response_matches

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
EXAMPLE_KINDS = {
    "pytorch-ddp.yaml": "training",
    "tune-lr.yaml": "tuning",
    "tune-notebook.yaml": "tuning",
    "serve-iris.yaml": "serving",
    "serve-local.yaml": "serving",
}
FILE, YAML = "/jobs/specs/file", "/jobs/specs/yaml"


@pytest.fixture
def root(user_files: Any) -> Path:
    area: Path = user_files("alice")
    return area


@pytest.fixture
def read(cube_app: Any, jp_fetch: Any) -> Callable[..., Awaitable[tuple[int, Any]]]:
    """GET /jobs/specs/file as `as_user` (the `api` fixture's own `path` argument would clash)."""

    async def call(path: str | None, as_user: str = "alice") -> tuple[int, Any]:
        headers = {"kubeflow-userid": as_user} if as_user else {}
        params = {"path": path} if path is not None else {}
        try:
            response = await jp_fetch(
                "cube", "api", "v1", "jobs", "specs", "file", headers=headers, params=params
            )
        except HTTPClientError as exc:
            assert exc.response is not None, exc
            response = exc.response
        return response.code, json.loads(response.body) if response.body else None

    return call


@pytest.mark.parametrize("name", sorted(EXAMPLE_KINDS))
async def test_each_example_round_trips(api: Any, read: Any, root: Path, name: str) -> None:
    shutil.copy(EXAMPLES / name, root / name)
    status, body = await read(name)
    assert_response_matches(FILE, "GET", status, body)
    assert status == 200, body
    assert body["kind"] == EXAMPLE_KINDS[name]
    assert body["spec"] == yaml.safe_load((EXAMPLES / name).read_text())

    status, rendered = await api("POST", "jobs/specs/yaml", body={"kind": body["kind"], "spec": body["spec"]})
    assert_response_matches(YAML, "POST", status, rendered)
    assert status == 200, rendered
    assert rendered["kind"] == body["kind"]
    assert yaml.safe_load(rendered["yaml"]) == body["spec"]


@pytest.mark.parametrize(
    ("path", "content", "status", "message"),
    [
        ("missing.yaml", None, 404, "does not exist"),
        ("broken.yaml", "name: [unclosed", 400, "not valid YAML"),
        ("two.yaml", "name: a\n---\nname: b\n", 400, "one YAML document"),
        ("list.yaml", "- a\n- b\n", 400, "not a job spec"),
        ("compose.yaml", "services: {web: {image: nginx}}\n", 400, "not a job spec"),
        ("typo.yaml", "name: a\nframework: pytorch\nscirpt: train.py\n", 400, "unknown key"),
        ("../outside.yaml", None, 400, "without '..'"),
        ("/etc/hostname", None, 403, ""),
    ],
)
async def test_bad_files_are_refused_naming_the_field(
    read: Any, root: Path, path: str, content: str | None, status: int, message: str
) -> None:
    if content is not None:
        (root / path).write_text(content)
    got, body = await read(path)
    assert_response_matches(FILE, "GET", got, body)
    assert got == status, body
    assert message in body["message"]
    assert body["field"] == ("scirpt" if path == "typo.yaml" else "path")


async def test_another_users_file_is_not_read(read: Any, root: Path, user_files: Any) -> None:
    shutil.copy(EXAMPLES / "pytorch-ddp.yaml", user_files("bob") / "ddp.yaml")
    status, body = await read("ddp.yaml")
    assert status == 404, body
    status, body = await read(str(user_files("bob") / "ddp.yaml"))
    assert status == 403, body


async def test_a_path_is_required(read: Any) -> None:
    status, body = await read(None)
    assert (status, body["field"]) == (400, "path")


@pytest.mark.parametrize(
    ("request_body", "field"),
    [
        ({"kind": "batch", "spec": {}}, "kind"),
        ({"kind": "training", "spec": "name: a"}, "spec"),
        ({"kind": "serving", "spec": {"name": "a", "replicas": 2}}, "replicas"),
        ({"kind": "training", "spec": {}, "path": "x.yaml"}, "path"),
    ],
)
async def test_bad_render_requests_name_the_field(api: Any, request_body: Any, field: str) -> None:
    status, body = await api("POST", "jobs/specs/yaml", body=request_body)
    assert_response_matches(YAML, "POST", status, body)
    assert (status, body["field"]) == (400, field), body


async def test_a_draft_renders_as_typed_with_how_to_run_it(api: Any) -> None:
    draft = {"name": "", "framework": "pytorch", "script": "train.py", "args": ["--lr", "0.1"]}
    status, body = await api("POST", "jobs/specs/yaml", body={"kind": "training", "spec": draft})
    assert status == 200, body
    assert body["yaml"].startswith("# A training job.")
    assert "cube-jupyter train run FILE" in body["yaml"]
    assert yaml.safe_load(body["yaml"]) == draft


async def test_anonymous_callers_and_missing_xsrf_are_refused(api: Any, read: Any) -> None:
    status, _ = await read("x.yaml", as_user="")
    assert status == 403
    status, _ = await api("POST", "jobs/specs/yaml", body={"kind": "training", "spec": {}}, xsrf=False)
    assert status == 403

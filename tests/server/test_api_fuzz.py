"""Fuzz every operation of `server_ext/openapi.yaml` against a real server: bodies drawn from the
contract's schemas (valid-ish), wrong types, hostile strings (NUL, lone surrogates, traversal, huge,
a symlink loop, a folder named like a notebook, paths into the shared artifact store) and hostile raw
bodies (deep nesting, bad UTF-8, huge numbers, 1 MiB keys), each raw body also sent to every
operation that takes one. No answer may be a 5xx, carry a
traceback, or echo a large part of the input; a 400 from the API names the field at fault.

Hypothesis runs in a worker thread and sends each request to the server on the test's event loop,
so failures shrink to a minimal request. Derandomized, no example database: the same requests on
every run, a bounded number per operation.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jupyter_server.utils import url_path_join
from tornado.httpclient import HTTPClientError

from tests.server.openapi import _resolve, _spec

pytestmark = pytest.mark.timeout(240)

METHODS = ("get", "post", "patch", "put", "delete")
EXAMPLES_PER_OPERATION = 25
# Error bodies repeat at most a short prefix of the input: far below the huge values sent here.
MAX_ERROR_BYTES = 8192
HUGE = "x" * 100_000
MIB_KEY = "k" * (1 << 20)
# Stands for the shared artifact store's directory in what is sent (it is known only once a test runs).
STORE = "@STORE@"
# Parameters travel in the request line, which the HTTP server caps well below HUGE.
HOSTILE_PARAMETERS = st.sampled_from(
    [
        "\x00",
        "a\x00b.ipynb",
        "\ud800",
        "nb\udfff.ipynb",
        "../../etc/passwd",
        "/dev/null",
        "/proc/self/environ",
        "file:///proc/self/x",
        "s3://bucket\x00/x",
        "%00",
        "$(id)",
        "",
        " ",
        "x" * 4000,
        # made on disk by `hostile_files`, in each fuzzing user's own area
        "loop",
        "loop/x.ipynb",
        "folder.ipynb",
        f"{STORE}/models/alice/model.joblib",
        f"file://{STORE}/models/alice",
        f"{STORE}/runs",
    ]
)
PARAMETER_TEXT = st.one_of(HOSTILE_PARAMETERS, st.text(max_size=12))
TEXT = st.one_of(HOSTILE_PARAMETERS, st.just(HUGE), st.text(max_size=12))
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
# Each sent to every operation with a body, beside the bodies the fuzz draws from them.
HOSTILE_BODY_LIST = (
    b"[" * 200_000,
    b'{"a":' * 100_000,
    b"[" * 65 + b"]" * 65,
    b'{"path": "' + b"[" * 100_000 + b'"}',
    b"\xff\xfe\x00",
    b"not json",
    b"1" * 5000,
    b'{"path": "\\u0000", "store": "\\ud800"}',
    b'{"\\u0000": 1}',
    b"null",
    json.dumps({MIB_KEY: 1}).encode(),
    json.dumps({"path": "x.ipynb", "parameters": {MIB_KEY: 1}}).encode(),
    json.dumps(
        {
            "kind": "training",
            "spec": {
                "name": "k",
                "framework": "pytorch",
                "replicas": {"master": 1},
                "command": ["true"],
                "env": {MIB_KEY: "v"},
            },
        }
    ).encode(),
)
HOSTILE_BODIES = st.sampled_from(HOSTILE_BODY_LIST)


def operations() -> list[tuple[str, str]]:
    return [(path, method) for path, item in _spec()["paths"].items() for method in item if method in METHODS]


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the schema describes, with any string also hostile and any value sometimes wrong."""
    return st.one_of(conforming(schema), ANY_JSON)


def conforming(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in schema:
            return st.one_of([conforming(option) for option in schema[combinator]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([conforming({**schema, "type": one}) for one in kind])
    if kind == "object":
        properties = schema.get("properties", {})
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {name: from_schema(sub) for name, sub in properties.items() if name in required},
            optional={name: from_schema(sub) for name, sub in properties.items() if name not in required},
        )
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {})), max_size=3)
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True) | TEXT
        return TEXT
    if kind == "integer":
        return st.integers(min_value=-(2**70), max_value=2**70)
    if kind == "number":
        return st.floats(allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return ANY_JSON


def parameter(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True) | PARAMETER_TEXT
    if "enum" in schema:
        return st.sampled_from(schema["enum"]) | PARAMETER_TEXT
    return PARAMETER_TEXT


def request_strategy(path: str, method: str) -> st.SearchStrategy[dict[str, Any]]:
    item = _resolve(_spec()["paths"][path])
    operation = item[method]
    parameters = item.get("parameters", []) + operation.get("parameters", [])
    path_params = {p["name"]: parameter(p["schema"]) for p in parameters if p["in"] == "path"}
    query = {p["name"]: parameter(p["schema"]) for p in parameters if p["in"] == "query"}
    body: st.SearchStrategy[bytes | None] = st.none()
    if "requestBody" in operation:
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        body = from_schema(schema).map(lambda value: json.dumps(value).encode()) | HOSTILE_BODIES
    return st.fixed_dictionaries(
        {
            "path": st.fixed_dictionaries(path_params),
            "query": st.fixed_dictionaries({}, optional=query),
            "body": body,
            "user": st.sampled_from(["mallory", "root-admin"]),
        }
    )


def path_parameters(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]


def encoded(text: Any) -> str:
    """Percent-encoded as a hostile client would send it: lone surrogates as their raw bytes."""
    return quote(str(text).encode("utf-8", "surrogatepass"), safe="")


def check_answer(where: str, status: int, content_type: str, body: bytes) -> None:
    assert status < 500, f"{where} answered {status}: {body[:500]!r}"
    assert b"Traceback" not in body, f"{where} answered a traceback: {body[:2000]!r}"
    if status < 400 or not content_type.startswith("application/json"):
        return
    assert len(body) <= MAX_ERROR_BYTES, f"{where} echoed {len(body)} bytes: {body[:300]!r}"
    error = json.loads(body)
    if error.get("reason") == "BadRequest" and "field" not in error:
        pytest.fail(f"{where} answered a 400 naming no field: {error}")


@pytest.fixture
def shared_store(tmp_path: Path) -> Path:
    """The workbench's artifact store, holding a model alice saved and a run's folder."""
    store = tmp_path / "shared-store"
    (store / "models" / "alice").mkdir(parents=True)
    (store / "models" / "alice" / "model.joblib").write_bytes(b"alice's model")
    (store / "runs" / "r1").mkdir(parents=True)
    return store


@pytest.fixture
def cube_config(cube_config: dict[str, Any], shared_store: Path) -> dict[str, Any]:
    """A notebook server the fuzz manages to create exits at once instead of starting JupyterLab."""
    cube_config["CubeSpawner"]["cmd"] = [sys.executable, "-c", "raise SystemExit(3)"]
    cube_config["CubeStorage"] = {"url": str(shared_store)}
    return cube_config


@pytest.fixture
def hostile_files(user_files: Callable[[str], Path], jp_root_dir: Path) -> None:
    """In each fuzzing user's own area (the admin's is the server root): a symlink loop and a folder
    named like a notebook."""
    for area in (user_files("mallory"), jp_root_dir):
        (area / "loop").symlink_to("loop")
        (area / "folder.ipynb").mkdir()


async def test_no_request_in_the_contract_gets_a_5xx(
    cube_app: Any,
    http_server_client: Any,
    jp_base_url: str,
    api: Callable[..., Any],
    shared_store: Path,
    hostile_files: None,
) -> None:
    loop = asyncio.get_running_loop()
    api_root = url_path_join(jp_base_url, "cube", "api", "v1")

    def placed(text: Any) -> str:
        return str(text).replace(STORE, str(shared_store))

    async def send(path: str, method: str, request: dict[str, Any]) -> None:
        url_path = path
        for name, value in request["path"].items():
            url_path = url_path.replace("{" + name + "}", encoded(placed(value)))
        query = "&".join(f"{encoded(k)}={encoded(placed(v))}" for k, v in request["query"].items())
        headers = {
            "kubeflow-userid": request["user"],
            "Cookie": "_xsrf=fuzz",
            "X-XSRFToken": "fuzz",
            "Content-Type": "application/json",
        }
        body = request["body"]
        if body is not None:
            body = body.replace(STORE.encode(), str(shared_store).encode())
        if body is None and method.upper() in ("POST", "PATCH", "PUT"):
            body = b""
        url = url_path_join(api_root, url_path) + (f"?{query}" if query else "")
        where = f"{method.upper()} {url[:200]} body {(body or b'')[:200]!r}"
        try:
            response = await http_server_client.fetch(
                url, method=method.upper(), headers=headers, body=body, request_timeout=30
            )
        except HTTPClientError as exc:
            assert exc.response is not None, f"{where}: {exc}"
            response = exc.response
        check_answer(where, response.code, response.headers.get("Content-Type", ""), response.body or b"")

    def fuzzer(path: str, method: str) -> Callable[[], None]:
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(request=request_strategy(path, method))
        def fuzz(request: dict[str, Any]) -> None:
            asyncio.run_coroutine_threadsafe(send(path, method, request), loop).result(timeout=60)

        return fuzz

    for path, method in operations():
        await asyncio.to_thread(fuzzer(path, method))
        if "requestBody" in _resolve(_spec()["paths"][path])[method]:
            for body in HOSTILE_BODY_LIST:
                names = {name: "x" for name in path_parameters(path)}
                await send(path, method, {"path": names, "query": {}, "body": body, "user": "mallory"})

    # Whatever the fuzz created is removed, so no process outlives the test.
    assert (shared_store / "models" / "alice" / "model.joblib").read_bytes() == b"alice's model"
    for user in ("mallory", "root-admin"):
        status, listing = await api("GET", "jobs", as_user=user)
        for job in listing["jobs"] if status == 200 else []:
            await api("DELETE", f"jobs/{job['name']}", as_user=user)
        status, listing = await api("GET", "notebooks", as_user=user)
        for server in listing["notebooks"] if status == 200 else []:
            await api("DELETE", f"notebooks/{server['name']}", as_user=user)

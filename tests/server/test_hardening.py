"""What a hostile or careless user of a shared workbench cannot do any more, each found by a probe
and reproduced here first: start unbounded work, make the server hold unbounded bodies, reach paths
around the file rule, or get a 5xx."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from cube_jupyter_server.handlers import MAX_READING_BYTES, READING
from cube_jupyter_server.json_body import MAX_BODY_BYTES

from cube_jupyter.fields import MAX_ENV_NAME
from cube_jupyter.local import files
from cube_jupyter.names import user_slug
from tests.pipelines.notebooks import code, notebook, write
from tests.server.conftest import XSRF
from tests.server.openapi import assert_response_matches
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)
# A replica would show this marker in its command line: none may ever start.
MARKER = "cube-hardening-replica"
HOLD = [sys.executable, "-c", "import time; time.sleep(60)", MARKER]
DDP = {"name": "wider", "framework": "pytorch", "replicas": {"master": 1, "worker": 1}, "command": HOLD}
TFJOB = {**DDP, "framework": "tensorflow"}
SCRIPTED = {k: v for k, v in DDP.items() if k != "command"}
TRIAL = {"framework": "pytorch", "replicas": {"worker": 1}, "command": HOLD}
TUNE = {
    "name": "search",
    "objective": {"metric": "loss", "type": "minimize"},
    "algorithm": "random",
    "parameters": {"lr": {"type": "double", "min": 0.001, "max": 0.1}},
    "trial": {"training": TRIAL},
}


def replicas_started() -> int:
    started = 0
    for process in psutil.process_iter(["cmdline"]):
        started += MARKER in (process.info["cmdline"] or [])
    return started


# -- bounds: refused at once, naming the field and the setting, nothing started ------------------------


@pytest.mark.parametrize(
    ("kind", "spec", "field", "setting"),
    [
        (
            "training",
            {**DDP, "replicas": {"master": 1, "worker": 100_000}},
            "replicas.worker",
            "max_replicas_per_role",
        ),
        (
            "training",
            {**TFJOB, "replicas": {"chief": 1, "ps": 8, "worker": 8}},
            "replicas",
            "max_replicas_per_job",
        ),
        ("tuning", {**TUNE, "max_trials": 100_000, "parallel_trials": 2}, "max_trials", "max_trials"),
        (
            "tuning",
            {**TUNE, "max_trials": 50, "parallel_trials": 40},
            "parallel_trials",
            "max_parallel_trials",
        ),
        (
            "tuning",
            {**TUNE, "parallel_trials": 3, "trial": {"training": {**TRIAL, "replicas": {"worker": 8}}}},
            "parallel_trials",
            "max_replicas_per_job",
        ),
    ],
)
async def test_a_job_past_the_admins_bounds_is_a_400_and_starts_nothing(
    api: Any, kind: str, spec: dict[str, Any], field: str, setting: str
) -> None:
    status, error = await api("POST", "jobs", body={"kind": kind, "spec": spec})
    assert status == 400 and error["field"] == field, error
    assert f"CubeJobs.{setting}" in error["message"], error
    assert_response_matches("/jobs", "POST", status, error)
    status, listing = await api("GET", "jobs")
    assert status == 200 and listing["jobs"] == []
    assert replicas_started() == 0


async def test_a_burst_of_oversized_jobs_is_refused_in_bounded_time_starting_nothing(api: Any) -> None:
    """The stress case: fifty users' replica bombs at once; each a 400, the server never forks."""
    bomb = {**DDP, "replicas": {"master": 1, "worker": 100_000}}
    answers = await asyncio.gather(
        *(
            api("POST", "jobs", body={"kind": "training", "spec": {**bomb, "name": f"b{i}"}})
            for i in range(50)
        )
    )
    assert {status for status, _ in answers} == {400}
    assert replicas_started() == 0


@pytest.fixture
def cube_config(cube_config: dict[str, Any]) -> dict[str, Any]:
    cube_config["CubeSpawner"]["max_starting_servers"] = 2
    cube_config["CubeSpawner"]["max_servers_per_user"] = 10
    return cube_config


async def test_servers_starting_at_once_are_bounded(api: Any) -> None:
    answers = await asyncio.gather(
        *(api("POST", "notebooks", body={"name": f"nb{i}"}, as_user=f"user{i}") for i in range(6))
    )
    created = [body for status, body in answers if status == 201]
    refused = [body for status, body in answers if status == 503]
    assert len(created) + len(refused) == 6 and 1 <= len(created) <= 2, answers
    assert all("CubeSpawner.max_starting_servers" in body["message"] for body in refused)
    for body in created:
        await api("DELETE", f"notebooks/{body['name']}", as_user=body["user"])


# -- bodies: never held past their limit, nor before the caller is known --------------------------------


def upload(port: int, path: str, body: bytes, headers: dict[str, str], length: int | None = None) -> str:
    """A raw HTTP POST of `body` (declared `length` bytes long, by default its own); the status line
    the server answers ('' when it closed without one)."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    size = len(body) if length is None else length
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        start = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\n{head}\r\n"
        conn.sendall(start.encode() + body)
        try:
            return conn.recv(4096).decode(errors="replace").split("\r\n", 1)[0]
        except OSError:
            return ""


async def test_unauthenticated_uploads_are_refused_before_their_bodies_are_read(
    cube_app: Any, http_server: Any, jp_http_port: int
) -> None:
    """Three concurrent 90 MiB POSTs without a caller (the test server's tornado refuses 100 MB by
    itself; Jupyter's takes 512 MiB): this server (this very process) holds none of them (it held all
    three before); a client that waits before sending (Expect: 100-continue) is told 403 before a byte
    of its body is asked for."""
    port = jp_http_port
    path = f"{cube_app.base_url}cube/api/v1/pipelines/graph"
    rss = psutil.Process().memory_info().rss
    peak = rss
    client = [sys.executable, "-c", UPLOAD_SCRIPT, str(port), path, str(90 << 20)]
    procs = [subprocess.Popen(client) for _ in range(3)]
    while any(p.poll() is None for p in procs):
        peak = max(peak, psutil.Process().memory_info().rss)
        await asyncio.sleep(0.05)
    assert peak - rss < 64 << 20, f"the server grew by {(peak - rss) >> 20} MiB"
    answer = await asyncio.to_thread(upload, port, path, b"", {"Expect": "100-continue"}, 300 << 20)
    assert answer.startswith("HTTP/1.1 403"), answer


UPLOAD_SCRIPT = """
import socket, sys
port, path, size = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
mib = b"x" * (1 << 20)
with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
    start = f"POST {path} HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nContent-Length: {size}\\r\\n\\r\\n"
    conn.sendall(start.encode())
    try:
        for _ in range(size >> 20):
            conn.sendall(mib)
    except OSError:  # refused and closed: the rest is never read
        pass
"""


async def test_bodies_read_at_once_share_one_budget_released_when_they_end(
    cube_app: Any, http_server: Any, jp_http_port: int
) -> None:
    """Authenticated bodies at the limit, held half-sent: once they fill the budget the next is a 503
    before its body is read; when they go (the clients disconnect) the budget is back."""
    port = jp_http_port
    path = f"{cube_app.base_url}cube/api/v1/jobs"
    headers = {"kubeflow-userid": "alice", **XSRF, "Content-Type": "application/json"}
    holders = MAX_READING_BYTES // MAX_BODY_BYTES
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {MAX_BODY_BYTES}\r\n{head}\r\n"
    held = []
    try:
        for _ in range(holders):
            conn = socket.create_connection(("127.0.0.1", port), timeout=30)
            conn.sendall(request.encode() + b" " * 1024)
            held.append(conn)
        full = holders * MAX_BODY_BYTES
        await wait_until_async(lambda: READING.reserved >= full, 30, "the held bodies to fill the budget")
        refused = await asyncio.to_thread(upload, port, path, b"{}", headers)
        assert refused.startswith("HTTP/1.1 503"), refused
    finally:
        for conn in held:
            conn.close()
    await wait_until_async(lambda: READING.reserved == 0, 30, "the budget to come back")
    answer = await asyncio.to_thread(upload, port, path, b"{}", headers)
    assert answer.startswith("HTTP/1.1 400"), answer  # `{}` is not a job, and the answer says so


# -- paths around the file rule ----------------------------------------------------------------------------


async def test_a_folder_a_symlink_loop_and_an_empty_notebook_name_their_field(
    api: Any, user_files: Any
) -> None:
    area: Path = user_files("alice")
    (area / "folder.ipynb").mkdir()
    os.symlink(area / "loop-b", area / "loop-a")
    os.symlink(area / "loop-a", area / "loop-b")
    write(notebook(code("x = 1", "step:one")), area / "ok.ipynb")
    content = notebook(code("x = 1", "step:one"))
    cases = [
        ("pipelines/runs", {"path": "folder.ipynb", "notebook": content}, 400, "path"),
        ("pipelines/runs", {"path": "loop-a/x.ipynb"}, 400, "path"),
        ("pipelines/graph", {"path": "loop-a"}, 400, "path"),
        ("pipelines/graph", {"path": "ok.ipynb", "notebook": {}}, 400, "notebook"),
        ("jobs", {"kind": "training", "spec": {**SCRIPTED, "script": "loop-a"}}, 400, "script"),
    ]
    for path, body, expected, field in cases:
        status, error = await api("POST", path, body=body)
        assert (status, error["field"]) == (expected, field), (path, body, error)
        assert "Traceback" not in error["message"]


async def test_a_megabyte_env_name_is_a_400_naming_env(api: Any) -> None:
    spec = {**DDP, "env": {"A" * (1 << 20): "x"}}
    status, error = await api("POST", "jobs", body={"kind": "training", "spec": spec})
    assert status == 400 and error["field"] == "env", error
    assert str(MAX_ENV_NAME) in error["message"]


async def test_a_model_in_the_shared_store_is_served_only_by_whom_deploy_saved_it_for(
    api: Any, cube_config: dict[str, Any], tmp_path: Path, user_files: Any
) -> None:
    """bob cannot serve alice's saved model by naming its path, and the answer is the same whether a
    path in her folder exists or not."""
    from cube_jupyter.jobs.model import saved_models_prefix
    from cube_jupyter.storage import default_store_dir

    store = Path(cube_config.get("CubeStorage", {}).get("url") or default_store_dir())
    model = store / saved_models_prefix("alice") / "iris" / "abc123"
    model.mkdir(parents=True)
    (model / "model.joblib").write_bytes(b"not a model")
    answers = []
    for uri in (str(model), str(store / saved_models_prefix("alice") / "iris" / "missing")):
        spec = {"name": "stolen", "model_format": "sklearn", "storage_uri": uri}
        answers.append(await api("POST", "jobs", body={"kind": "serving", "spec": spec}, as_user="bob"))
    assert [(status, error["field"]) for status, error in answers] == [(403, "storage_uri")] * 2
    assert answers[0][1]["message"].replace("abc123", "missing") == answers[1][1]["message"]


# -- files the workbench writes ---------------------------------------------------------------------------


async def test_state_files_are_private(api: Any, cube_config: dict[str, Any], user_files: Any) -> None:
    write(notebook(code("x = 1", "step:one")), user_files("alice") / "one.ipynb")
    status, run = await api("POST", "pipelines/runs", body={"path": "one.ipynb"})
    assert status == 201, run
    state = Path(cube_config["CubeWorkbench"]["state_dir"])
    for database in state.glob("*.sqlite"):
        assert database.stat().st_mode & 0o777 == files.PRIVATE_FILE, database
    for folder in (p for p in state.rglob("*") if p.is_dir()):
        if folder.is_relative_to(files.user_workspaces(state, user_slug("alice"))):
            continue  # the user's own area, made by the test
        assert folder.stat().st_mode & 0o777 == files.PRIVATE_DIR, folder

"""PipelineService as the REST API and the CLI use it: paths confined to the Jupyter root, runs kept
per user, history that a restarted service reads back, cancel, and executed step notebooks."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from traitlets.config import Config

from cube_jupyter.access import isolation_statement
from cube_jupyter.config import load_settings
from cube_jupyter.errors import Conflict, Forbidden, InvalidInput, NotFound
from cube_jupyter.local import gpus
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter.pipelines.targets import RunRequest
from cube_jupyter.storage import open_store
from tests.pipelines.notebooks import code, notebook, write
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, FaultyEndpoint, s3_server
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)

PIPELINE = notebook(
    code("import time", "imports"),
    code("rate = 0.5\nlabel = 'base'", "parameters"),
    code("values = [rate * i for i in range(4)]", "step:make"),
    code("print(label, sum(values), sep='\\n')", "step:show"),
)


@dataclass
class Env:
    loop: asyncio.AbstractEventLoop
    root: Path
    service: PipelineService

    def run(self, caller: str, path: str, parameters: dict[str, object] | None = None, **kwargs: object):  # type: ignore[no-untyped-def]
        async def go():  # type: ignore[no-untyped-def]
            run = await self.service.start_run(caller, RunRequest(path, parameters or {}, **kwargs))  # type: ignore[arg-type]
            assert run.status == "queued" and run.user == caller
            return await self.service.wait(caller, run.id)

        return self.loop.run_until_complete(go())


def settings_for(root: Path, **workbench: str):  # type: ignore[no-untyped-def]
    return load_settings(
        Config(
            {
                "CubeWorkbench": {
                    "state_dir": str(root / "state"),
                    "default_user": "alice",
                    "admin_users": ["boss"],
                    **workbench,
                },
                "CubeStorage": {"url": str(root / "artifacts")},
            }
        )
    ).pipelines


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("root")
    (root / "work").mkdir()
    write(PIPELINE, root / "work" / "calc.ipynb")
    loop = asyncio.new_event_loop()
    service = PipelineService(settings_for(root), root, pool_size=2)
    yield Env(loop, root, service)
    loop.run_until_complete(service.close())
    loop.close()


def test_graph_and_paths_stay_inside_the_root(env: Env) -> None:
    pipeline = env.service.graph("alice", "work/calc.ipynb")
    assert [s.name for s in pipeline.steps] == ["make", "show"]
    assert pipeline.edges[0].variables == ("values",)
    for bad in ("../etc/passwd.ipynb", "/etc/x.ipynb", "work/../../x.ipynb", "", None):
        with pytest.raises(InvalidInput) as caught:
            env.service.graph("alice", bad)
        assert caught.value.field == "path"
    with pytest.raises(NotFound, match="does not exist") as missing:
        env.service.graph("alice", "work/missing.ipynb")
    assert missing.value.field == "path"
    (env.root / ".secret").mkdir(exist_ok=True)
    write(PIPELINE, env.root / ".secret" / "calc.ipynb")
    (env.root / "work" / "escape").unlink(missing_ok=True)
    (env.root / "work" / "escape").symlink_to(env.root.parent)
    for refused in (".secret/calc.ipynb", "work/.ipynb_checkpoints/calc.ipynb", "work/escape/x.ipynb"):
        with pytest.raises(Forbidden) as caught:
            env.service.graph("alice", refused)
        assert caught.value.field == "path", refused
    unsaved = json.loads(json.dumps(notebook(code("a = 1", "step:one"), code("print(a)", "step:two"))))
    assert [s.name for s in env.service.graph_of_content("alice", "work/calc.ipynb", unsaved).steps] == [
        "one",
        "two",
    ]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"parameters": {"nope": 1}}, "parameters.nope"),
        ({"parameters": [1]}, "parameters"),
        ({"target": "mars"}, "target"),
        ({"target": "cluster"}, "target"),  # the local backend has no cluster
        ({"parallel": 0}, "parallel"),
        ({"no_cache": "yes"}, "no_cache"),
        ({"store": "ftp://host/x"}, "store"),
    ],
)
def test_bad_run_requests_name_the_field_and_leave_no_run(
    env: Env, kwargs: dict[str, object], field: str
) -> None:
    """As the REST API sends them: the request is read at the edge (`RunRequest.from_dict`), the
    parameters and the target against the notebook and this server."""
    before = len(env.service.list_runs("alice"))

    async def start() -> None:
        request = RunRequest.from_dict({"path": "work/calc.ipynb", **kwargs})
        await env.service.start_run("alice", request)

    with pytest.raises(InvalidInput) as caught:
        env.loop.run_until_complete(start())
    assert caught.value.field == field
    assert len(env.service.list_runs("alice")) == before


def test_a_step_asking_for_more_gpus_than_this_machine_has_is_refused_not_run_on_the_cpu(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kale's `limit:nvidia.com/gpu:2` on a laptop: a 400 naming the step, no run recorded."""
    nb = notebook(code("x = 1", "step:prep"), code("y = x", "block:train", "limit:nvidia.com/gpu:2"))
    write(nb, env.root / "work" / "gpu.ipynb")
    before = len(env.service.list_runs("alice"))
    for visible, refused in ((0, True), (1, True), (2, False)):
        monkeypatch.setattr(
            gpus, "visible_gpu_ids", lambda environ=None, n=visible: [str(i) for i in range(n)]
        )
        if not refused:
            assert env.run("alice", "work/gpu.ipynb").status == "succeeded"
            continue
        with pytest.raises(InvalidInput) as caught:
            env.loop.run_until_complete(env.service.start_run("alice", RunRequest("work/gpu.ipynb")))
        assert caught.value.field == "steps.train.gpu"
        assert f"asks for 2 GPU(s) (a gpu: or limit: tag on cell 1), but this machine has {visible}" in (
            caught.value.message
        )
        assert len(env.service.list_runs("alice")) == before


def test_a_run_request_names_each_bad_field_at_the_edge() -> None:
    for body, field in (
        ([], "body"),
        ({}, "path"),
        ({"path": "a.ipynb", "colour": "red"}, "colour"),
        ({"path": "a.ipynb", "store": 5}, "store"),
        ({"path": "a.ipynb", "notebook": "text"}, "notebook"),
        ({"path": "../a.ipynb"}, "path"),
    ):
        with pytest.raises(InvalidInput) as refused:
            RunRequest.from_dict(body)
        assert refused.value.field == field, body
    request = RunRequest.from_dict({"path": "a.ipynb", "parallel": 2, "target": "local"})
    assert (request.path, request.parallel, request.parameters, request.no_cache) == ("a.ipynb", 2, {}, False)


def test_runs_are_per_user_and_survive_a_restart(env: Env) -> None:
    run = env.run("alice", "work/calc.ipynb", {"rate": 2, "label": "tuned"}, no_cache=True)
    assert run.status == "succeeded", run.error
    assert run.parameters == {"rate": 2, "label": "tuned"} and run.path == "work/calc.ipynb"
    # Served as Jupyter's contents API serves notebooks: a multi-line output is one string (the file
    # holds a list of lines, which JupyterLab's notebook model would join with commas).
    shown = env.service.executed_notebook("alice", run.id, "show")
    texts = [o.get("text", "") for c in shown.cells for o in c.get("outputs", [])]
    assert "tuned\n12.0\n" in texts, texts  # `rate` is declared a float: 2 runs as 2.0
    key = run.step("show").notebook
    assert key
    stored = json.loads(open_store(run.store, env.service.settings.storage).get(key))
    assert ["tuned\n", "12.0\n"] in [o.get("text") for c in stored["cells"] for o in c.get("outputs", [])]

    assert run.id in [r.id for r in env.service.list_runs("alice")]
    assert run.id not in [r.id for r in env.service.list_runs("bob")]
    with pytest.raises(NotFound):
        env.service.get_run("bob", run.id)
    with pytest.raises(NotFound):
        env.service.executed_notebook("bob", run.id, "show")
    assert env.service.get_run("boss", run.id).user == "alice"  # admins see everyone's
    with pytest.raises(NotFound, match="no step named 'ghost'"):
        env.service.executed_notebook("alice", run.id, "ghost")
    with pytest.raises(Conflict, match="already succeeded"):
        env.loop.run_until_complete(env.service.cancel("alice", run.id))

    restarted = PipelineService(settings_for(env.root), env.root)
    cached = env.loop.run_until_complete(
        restarted.start_run("alice", RunRequest("work/calc.ipynb", {"rate": 2, "label": "tuned"}))
    )
    cached = env.loop.run_until_complete(restarted.wait("alice", cached.id))
    assert [s.status for s in cached.steps] == ["cached", "cached"]
    assert (
        restarted.local._pool is not None and restarted.local._pool.worker_count == 0
    )  # nothing to execute, nothing started
    again = restarted.get_run("alice", run.id)
    assert again.to_dict() == run.to_dict()
    body = again.to_dict()
    assert {s["name"]: s["status"] for s in body["steps"]} == {"make": "succeeded", "show": "succeeded"}
    assert body["store"].startswith("file://") and body["target"] == "local"


def test_a_run_of_unsaved_content_leaves_the_notebook_file_alone(env: Env) -> None:
    """The Lab panel runs what is on screen: the request's content, in the notebook's folder, while
    the file keeps its bytes and mtime; a resume runs that content on, not the file."""
    path = env.root / "work" / "calc.ipynb"
    saved, mtime = path.read_bytes(), path.stat().st_mtime_ns
    marker = env.root / "work" / "edited-input"
    edited = json.loads(saved)
    edited["cells"][3]["source"] = (
        f"import os\nassert os.path.exists({str(marker)!r}), 'no input yet'\nprint('edited in', os.getcwd())"
    )

    async def start(**kwargs: object) -> str:
        run = await env.service.start_run("alice", RunRequest("work/calc.ipynb", notebook=edited, **kwargs))  # type: ignore[arg-type]
        return (await env.service.wait("alice", run.id)).id

    failed = env.service.get_run("alice", env.loop.run_until_complete(start(no_cache=True)))
    assert failed.status == "failed" and "no input yet" in str(failed.step("show").error)
    marker.touch()
    resumed = env.loop.run_until_complete(env.service.resume_run("alice", failed.id))
    resumed = env.loop.run_until_complete(env.service.wait("alice", resumed.id))
    assert [s.status for s in resumed.steps] == ["succeeded", "succeeded"], resumed.error
    assert resumed.step("make").started == failed.step("make").started  # kept, not run again
    shown = env.service.executed_notebook("alice", resumed.id, "show")
    texts = [o.get("text", "") for c in shown.cells for o in c.get("outputs", [])]
    assert f"edited in {path.parent}\n" in texts, texts
    assert path.read_bytes() == saved and path.stat().st_mtime_ns == mtime

    for bad in (["cells"], {"cells": "none"}):  # content that is no notebook is named as sent
        with pytest.raises(InvalidInput) as caught:
            env.loop.run_until_complete(
                env.service.start_run("alice", RunRequest("work/calc.ipynb", notebook=bad))
            )
        assert caught.value.field == "notebook"
    with pytest.raises(NotFound) as missing:  # content names a notebook of the caller's; it must exist
        env.loop.run_until_complete(
            env.service.start_run("alice", RunRequest("work/unsaved.ipynb", notebook=edited))
        )
    assert missing.value.field == "path"


def test_cancel_through_the_service(env: Env) -> None:
    inside = env.root / "long-started"
    write(
        notebook(
            code("import time", "imports"),
            # Sleeps past the test's timeout: only a cancel that stops the step lets the test end.
            code(f"open({str(inside)!r}, 'w').close()\ntime.sleep(3600)", "step:long"),
        ),
        env.root / "work" / "long.ipynb",
    )

    async def go():  # type: ignore[no-untyped-def]
        run = await env.service.start_run("alice", RunRequest("work/long.ipynb"))
        await wait_until_async(
            lambda: env.service.get_run("alice", run.id).step("long").status == "running" and inside.exists(),
            120,
            "the step to run its cell",
        )
        with pytest.raises(NotFound, match=re.escape(f"user 'bob' has no pipeline run {run.id!r}")):
            await env.service.cancel("bob", run.id)
        return await env.service.cancel("alice", run.id)

    cancelled = env.loop.run_until_complete(go())
    assert cancelled.status == "cancelled" and cancelled.step("long").status == "cancelled"


def test_a_cluster_workbench_runs_no_user_code_on_itself(env: Env) -> None:
    """Behind the mesh on a cluster, users may not read the workbench's disk nor run code on it."""
    settings = settings_for(env.root, backend="kubernetes")
    shared = PipelineService(settings, env.root, pool_size=1, multi_user=True)
    with pytest.raises(Forbidden, match="only admins") as caught:
        shared.graph("alice", "work/calc.ipynb")
    assert caught.value.field == "path"
    with pytest.raises(Forbidden, match="only admins") as caught:
        env.loop.run_until_complete(shared.start_run("alice", RunRequest("work/calc.ipynb", target="local")))
    assert caught.value.field == "target"
    assert [s.name for s in shared.graph("boss", "work/calc.ipynb").steps] == ["make", "show"]
    content = json.loads((env.root / "work" / "calc.ipynb").read_text())
    assert shared.graph_of_content("alice", "work/calc.ipynb", content).steps  # no disk read, no code
    env.loop.run_until_complete(shared.close())


def test_on_a_shared_local_host_each_user_reads_only_their_own_files(env: Env) -> None:
    """Trusted-header mode, local backend: the same rule as the contents API (admins read the server
    root, everyone else only the workspaces of their own notebook servers); code runs here unless
    the admin setting keeps it to admins."""
    settings = settings_for(env.root)
    shared = PipelineService(settings, env.root, pool_size=1, multi_user=True)
    alice_area = settings.state_dir / "workspaces" / "alice"
    (alice_area / "lab").mkdir(parents=True, exist_ok=True)
    write(PIPELINE, alice_area / "lab" / "mine.ipynb")
    assert [s.name for s in shared.graph("alice", "lab/mine.ipynb").steps] == ["make", "show"]
    with pytest.raises(NotFound) as caught:  # the server root is not alice's
        shared.graph("alice", "work/calc.ipynb")
    assert caught.value.field == "path"
    for bobs_try in ("lab/mine.ipynb", "../alice/lab/mine.ipynb", str(alice_area / "lab" / "mine.ipynb")):
        with pytest.raises((NotFound, InvalidInput)) as refused:
            shared.graph("bob", bobs_try)
        assert refused.value.field == "path", bobs_try
    assert shared.graph("boss", "work/calc.ipynb").steps  # admins read the server root
    # A local store a run names is written among the caller's own files only.
    bob_area = settings.state_dir / "workspaces" / "bob"
    for elsewhere in (str(env.root / "elsewhere"), f"file://{bob_area}/store", "lab/.hidden", "../bob/x"):
        with pytest.raises((Forbidden, InvalidInput)) as refused:
            env.loop.run_until_complete(
                shared.start_run("alice", RunRequest("lab/mine.ipynb", store=elsewhere))
            )
        assert refused.value.field == "store", elsewhere
    assert not (env.root / "elsewhere").exists() and not bob_area.exists()
    content = json.loads((alice_area / "lab" / "mine.ipynb").read_text())
    with pytest.raises(NotFound) as refused:  # content sent along runs only as one of the caller's files
        env.loop.run_until_complete(shared.start_run("bob", RunRequest("lab/mine.ipynb", notebook=content)))
    assert refused.value.field == "path"
    started = env.loop.run_until_complete(
        shared.start_run("alice", RunRequest("lab/mine.ipynb", store="lab/artifacts"))
    )
    assert started.store == (alice_area / "lab" / "artifacts").resolve().as_uri()
    assert env.loop.run_until_complete(shared.wait("alice", started.id)).status == "succeeded"

    admins_only = PipelineService(
        settings_for(env.root, local_code_execution="admins"), env.root, pool_size=1, multi_user=True
    )
    with pytest.raises(Forbidden, match="local_code_execution") as caught:
        env.loop.run_until_complete(admins_only.start_run("alice", RunRequest("lab/mine.ipynb")))
    assert caught.value.field == "target"
    assert admins_only.graph("alice", "lab/mine.ipynb").steps  # reading her own notebook is no code
    # What the server logs at startup in this mode: plainly, what is and is not isolated.
    said = isolation_statement(settings)
    assert "NOT isolated" in said and "runs as this server's OS user" in said and "'everyone'" in said
    assert "admins only" in isolation_statement(admins_only.settings)
    for service in (shared, admins_only):
        env.loop.run_until_complete(service.close())


def test_a_silent_store_fails_the_run_not_the_request(env: Env) -> None:
    """The run request answers before the store is reached; the store's fault is the run's error."""
    with FaultyEndpoint(reply=None) as silent:
        settings = load_settings(
            Config(
                {
                    "CubeWorkbench": {"state_dir": str(env.root / "state"), "default_user": "alice"},
                    "CubeStorage": {"endpoint": f"http://127.0.0.1:{silent.port}", "read_timeout": 0.5},
                }
            )
        ).pipelines
        service = PipelineService(settings, env.root, pool_size=1)

        async def go():  # type: ignore[no-untyped-def]
            started = await service.start_run(
                "alice", RunRequest("work/calc.ipynb", store="s3://artifacts/runs")
            )
            assert started.status == "queued" and started.store == "s3://artifacts/runs"
            return await service.wait("alice", started.id)

        run = env.loop.run_until_complete(go())
        env.loop.run_until_complete(service.close())
    assert run.status == "failed"
    assert run.error is not None and "did not answer within 0.5 s" in run.error
    assert "CubeStorage.read_timeout" in run.error
    assert {step.status for step in run.steps} == {"skipped"}  # nothing ran against a store it cannot reach


def test_a_local_run_on_an_s3_store_and_one_on_a_missing_bucket(env: Env) -> None:
    """Workers reach the store the run reached (credentials from CubeStorage only); a bucket that
    does not exist fails the run with the store's message, never the request."""
    with s3_server() as s3:
        settings = load_settings(
            Config(
                {
                    "CubeWorkbench": {"state_dir": str(env.root / "state"), "default_user": "alice"},
                    "CubeStorage": {
                        "endpoint": s3.endpoint,
                        "access_key": ACCESS_KEY,
                        "secret_key": SECRET_KEY,
                    },
                }
            )
        ).pipelines
        service = PipelineService(settings, env.root, pool_size=1)

        async def run(store: str):  # type: ignore[no-untyped-def]
            started = await service.start_run(
                "alice", RunRequest("work/calc.ipynb", store=store, no_cache=True)
            )
            return await service.wait("alice", started.id)

        url = f"s3://{s3.new_bucket()}/runs"
        done = env.loop.run_until_complete(run(url))
        missing = env.loop.run_until_complete(run("s3://no-such-bucket-here/runs"))
        env.loop.run_until_complete(service.close())
        keys = open_store(url, settings.storage).list(f"runs/{done.id}/")
    assert done.status == "succeeded", done.error
    assert f"runs/{done.id}/steps/show.ipynb" in keys and f"runs/{done.id}/outputs/make/values" in keys
    assert missing.status == "failed" and missing.error is not None
    assert "bucket 'no-such-bucket-here' does not exist" in missing.error

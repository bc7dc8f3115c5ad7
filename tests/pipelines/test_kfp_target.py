"""Runs on Kubeflow Pipelines (target `kfp`) through PipelineService, against the stand-in KFP API
server (`kfp_server.py`): upload once per snapshot, create, poll at a bounded rate into the history,
terminate, both ways of naming the user, KFP's refusals and an unreachable KFP as clear errors, and
which targets a workbench offers per `CubePipelines.cluster_target`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import BackendUnavailable, Forbidden, InvalidInput
from cube_jupyter.kube.discovery import ServedApis
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.kubernetes.kfp_target import POLL_SECONDS, SCHEDULED_WORKFLOWS, KfpRunTarget
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter.pipelines.targets import RunRequest
from cube_jupyter.services import Workbench
from tests.pipelines.kfp_server import KfpServer, serve
from tests.pipelines.notebooks import code, notebook, write

NOTEBOOK = notebook(
    code("rate = 0.5\nlabel = 'base'", "parameters"),
    code("values = [rate * i for i in range(4)]", "step:make"),
    code("print(label, sum(values))", "step:show"),
)
UI = "https://kubeflow.example.com/pipelines"


class Clock:
    """Monotonic seconds the test moves on."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeCluster:
    """What the KFP target asks of the cluster: which CRDs it serves, the Profiles cache started."""

    client = None

    def __init__(self, served: bool = True) -> None:
        kinds = {(SCHEDULED_WORKFLOWS.api_version, SCHEDULED_WORKFLOWS.kind)} if served else set()
        self.served = ServedApis(frozenset(kinds))

    async def discover(self, group_versions: Any) -> ServedApis:
        return self.served

    async def start(self, informers: Any, timeout: float, hint: str = "") -> None:
        pass

    def informer(self, *args: Any, **kwargs: Any) -> object:  # Argo's target, built beside
        return object()

    def pods(self, indexers: Any) -> object:  # Argo's runs: their step pods (a Kueue gate's reason)
        return object()


def settings_for(root: Path, url: str, **pipelines: str) -> PipelineSettings:
    return load_settings(
        Config(
            {
                "CubeWorkbench": {"state_dir": str(root / "state"), "default_user": "alice"},
                "CubeStorage": {"url": "s3://ml/artifacts"},
                "CubePipelines": {"kfp_url": url, "kfp_ui_url": UI, "cluster_target": "kfp", **pipelines},
            }
        )
    ).pipelines


@pytest.fixture
def kfp(tmp_path: Path) -> Iterator[tuple[KfpServer, str]]:
    namespace = settings_for(tmp_path, "http://x").namespace_for("alice")
    state = KfpServer(access={"alice": {namespace}}, tokens={"alice-token": "alice"})
    server, url = serve(state)
    yield state, url
    server.shutdown()
    server.server_close()


def service_for(
    root: Path, settings: PipelineSettings, cluster: FakeCluster, clock: Clock
) -> PipelineService:
    if not (root / "work" / "calc.ipynb").exists():
        (root / "work").mkdir()
        write(NOTEBOOK, root / "work" / "calc.ipynb")
    target = KfpRunTarget(settings, cluster, clock=clock)  # type: ignore[arg-type]
    service = PipelineService(settings, root, pool_size=1, kfp=target)
    asyncio.run(service.start())
    return service


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(tmp_path: Path, kfp: tuple[KfpServer, str], clock: Clock) -> Iterator[PipelineService]:
    service = service_for(tmp_path, settings_for(tmp_path, kfp[1]), FakeCluster(), clock)
    yield service
    asyncio.run(service.close())


def start(service: PipelineService, caller: str = "alice", **parameters: Any) -> Any:
    return asyncio.run(service.start_run(caller, RunRequest("work/calc.ipynb", parameters, target="kfp")))


def task(step: str, state: str, **more: Any) -> dict[str, Any]:
    return {"display_name": f"step-{step}", "state": state, "create_time": "2026-01-02T03:04:00Z", **more}


def gets(state: KfpServer, kfp_run: str) -> int:
    return state.calls.count(("GET", f"/apis/v2beta1/runs/{kfp_run}"))


def test_run_is_created_polled_and_merged_into_the_history(
    service: PipelineService, kfp: tuple[KfpServer, str], clock: Clock
) -> None:
    state, _ = kfp
    run = start(service, rate=0.25)
    assert (run.target, run.status, run.link) == ("kfp", "queued", f"{UI}/#/runs/details/{run.external}")
    assert service.history.get(run.id).external == run.external
    sent = state.runs[run.external]
    assert sent["display_name"] == run.id
    assert sent["runtime_config"] == {
        "parameters": {"rate": 0.25},
        "pipeline_root": "s3://ml/artifacts",
    }
    assert state.experiments[sent["experiment_id"]]["namespace"] == service.settings.namespace_for("alice")
    assert service.get_run("alice", run.id).to_dict()["link"] == run.link

    state.set_run(run.external, "RUNNING", [task("make", "RUNNING", start_time="2026-01-02T03:04:05Z")])
    assert service.get_run("alice", run.id).status == "queued"  # read at launch: KFP not asked again yet
    assert gets(state, run.external) == 0
    clock.now += POLL_SECONDS
    current = service.get_run("alice", run.id)
    assert (current.status, current.step("make").status, current.step("show").status) == (
        "running",
        "running",
        "pending",
    )
    assert current.started is not None and current.finished is None
    assert gets(state, run.external) == 1
    service.list_runs("alice")
    assert gets(state, run.external) == 1  # at most once per POLL_SECONDS, however often it is read

    state.set_run(
        run.external,
        "FAILED",
        [
            task("make", "SUCCEEDED", start_time="2026-01-02T03:04:05Z", end_time="2026-01-02T03:04:07Z"),
            task("show", "FAILED", error={"code": 2, "message": "NameError: label"}),
        ],
        finished_at="2026-01-02T03:05:00Z",
        error={"code": 2, "message": "task step-show failed"},
    )
    clock.now += POLL_SECONDS
    ended = service.get_run("alice", run.id)
    assert (ended.status, ended.error, ended.finished) == (
        "failed",
        "task step-show failed",
        "2026-01-02T03:05:00Z",
    )
    assert ended.step("make").duration == 2.0
    assert ended.step("show").error == {"message": "NameError: label"}
    clock.now += 10 * POLL_SECONDS
    service.get_run("alice", run.id)
    assert gets(state, run.external) == 2  # an ended run is not asked about again


def test_in_the_workbench_kfp_is_read_in_the_background(
    service: PipelineService, kfp: tuple[KfpServer, str], clock: Clock
) -> None:
    """Under the workbench's event loop a read of the run never waits for KFP: it answers with what
    KFP said last and asks again behind it."""
    state, _ = kfp
    run = start(service)
    state.set_run(run.external, "RUNNING", [task("make", "RUNNING", start_time="2026-01-02T03:04:05Z")])
    clock.now += POLL_SECONDS
    target = service.targets["kfp"]
    assert isinstance(target, KfpRunTarget)

    async def scenario() -> None:
        assert service.get_run("alice", run.id).status == "queued"  # KFP not asked inline
        service.get_run("alice", run.id)
        assert gets(state, run.external) == 0 and len(target._reading) == 1  # one read behind, not two
        await asyncio.gather(*target._reading.values())
        assert gets(state, run.external) == 1
        assert service.get_run("alice", run.id).status == "running"

    asyncio.run(scenario())


def test_cancel_terminates_the_kfp_run(service: PipelineService, kfp: tuple[KfpServer, str]) -> None:
    state, _ = kfp
    run = start(service)
    state.set_run(run.external, "RUNNING")
    cancelled = asyncio.run(service.cancel("alice", run.id))
    assert state.runs[run.external]["state"] == "CANCELING"
    assert cancelled.status == "cancelled"


def test_same_snapshot_reuses_its_version(
    service: PipelineService, kfp: tuple[KfpServer, str], tmp_path: Path
) -> None:
    state, _ = kfp
    first, second = start(service), start(service)
    uploads = [c for c in state.calls if c[1].startswith("/apis/v2beta1/pipelines/upload")]
    assert uploads == [
        ("POST", "/apis/v2beta1/pipelines/upload"),
        ("POST", "/apis/v2beta1/pipelines/upload_version"),
    ]
    versions = {
        state.runs[r.external]["pipeline_version_reference"]["pipeline_version_id"] for r in (first, second)
    }
    assert len(versions) == 1
    assert len(state.pipelines) == 1 and len(state.experiments) == 1

    write(notebook(*NOTEBOOK.cells[:2]), tmp_path / "work" / "calc.ipynb")  # a new snapshot
    third = start(service)
    assert state.runs[third.external]["pipeline_version_reference"]["pipeline_version_id"] not in versions
    assert len(state.pipelines) == 1


def test_service_account_token(tmp_path: Path, kfp: tuple[KfpServer, str], clock: Clock) -> None:
    state, url = kfp
    token = tmp_path / "token"
    token.write_text("alice-token")
    settings = settings_for(tmp_path, url, kfp_auth="service-account-token", kfp_token_file=str(token))
    service = service_for(tmp_path, settings, FakeCluster(), clock)
    try:
        run = start(service)
        assert state.runs[run.external]["state"] == "PENDING"
        token.write_text("someone-elses")
        with pytest.raises(Forbidden, match="Unauthenticated"):
            start(service)
    finally:
        asyncio.run(service.close())


def test_kfp_refusal_is_the_callers_error(service: PipelineService, kfp: tuple[KfpServer, str]) -> None:
    with pytest.raises(Forbidden, match="User 'mallory' is not authorized") as refused:
        start(service, "mallory")
    assert "Kubeflow Pipelines refused finding pipeline" in refused.value.message


def test_unreachable_kfp(tmp_path: Path, kfp: tuple[KfpServer, str], clock: Clock, refused_port: int) -> None:
    service = service_for(tmp_path, settings_for(tmp_path, kfp[1]), FakeCluster(), clock)
    try:
        run = start(service)
        gone = f"http://127.0.0.1:{refused_port}"
        target = service.targets["kfp"]
        assert isinstance(target, KfpRunTarget)
        target.api.url = gone
        with pytest.raises(BackendUnavailable, match=f"CubePipelines.kfp_url '{gone}' cannot be reached"):
            start(service)
        clock.now += POLL_SECONDS
        assert service.get_run("alice", run.id).status == "queued"  # what KFP said last; no traceback
    finally:
        asyncio.run(service.close())


def test_auto_offers_kfp_only_on_a_cluster_with_kfp(
    tmp_path: Path, kfp: tuple[KfpServer, str], clock: Clock
) -> None:
    settings = settings_for(tmp_path, kfp[1], cluster_target="auto")
    without = service_for(tmp_path, settings, FakeCluster(served=False), clock)
    try:
        assert "kfp" not in without.targets and "scheduledworkflows.kubeflow.org" in without.off["kfp"]
        assert "kfp" in without.target_names()
        with pytest.raises(BackendUnavailable, match="cluster_target is 'auto'"):
            start(without)
    finally:
        asyncio.run(without.close())
    with_kfp = service_for(tmp_path, settings, FakeCluster(served=True), clock)
    try:
        assert "kfp" in with_kfp.targets
    finally:
        asyncio.run(with_kfp.close())


@pytest.mark.parametrize(("cluster_target", "offered"), [("argo", False), ("kfp", True), ("auto", True)])
def test_composition_root_builds_kfp_per_cluster_target(
    tmp_path: Path, cluster_target: str, offered: bool
) -> None:
    config = Config(
        {
            "CubeWorkbench": {"state_dir": str(tmp_path / "state"), "backend": "kubernetes"},
            "CubePipelines": {"cluster_target": cluster_target},
        }
    )
    workbench = Workbench(load_settings(config), root_dir=str(tmp_path), cluster=FakeCluster())  # type: ignore[arg-type]
    assert ("kfp" in workbench.pipelines.targets) is offered
    assert "cluster" in workbench.pipelines.targets


def test_run_request_takes_kfp_only_where_offered() -> None:
    body = {"path": "a.ipynb", "target": "kfp"}
    with pytest.raises(InvalidInput) as refused:
        RunRequest.from_dict(body, ("local", "cluster"))
    assert refused.value.field == "target"
    assert RunRequest.from_dict(body, ("local", "cluster", "kfp")).target == "kfp"

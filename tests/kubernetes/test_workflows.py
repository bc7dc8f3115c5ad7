"""Cluster pipeline runs over real HTTP against the KMock API server emulator; the tests play the Argo
controller by writing `status.nodes` the way it does, and the runs object must learn of it by watch."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, Conflict, InvalidInput, NotFound, NotServed
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.pipelines.kubernetes.argo import API_VERSION, KIND, compile_workflow
from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns
from tests.k8s_schemas import validate_object
from tests.kubernetes.conftest import StartOnEmulator, make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.pipelines.test_argo import fan_out_fan_in
from tests.waiting import wait_until_async

WORKFLOWS = "argoproj.io/v1alpha1/workflows"
STORE = "s3://ml-artifacts/runs"
STARTED = "2025-03-01T10:00:00Z"
FINISHED = "2025-03-01T10:05:00Z"
DONE = {"Succeeded", "Failed", "Error", "Skipped", "Omitted"}
STEPS = ["prepare", "train-a", "train-b", "evaluate", "report"]


@pytest.fixture
def kmock(kmock: ApiServerEmulator) -> ApiServerEmulator:
    """The Kubeflow cluster of the shared fixture, with Argo Workflows' CRD installed (no status
    subresource: the Argo controller writes status with the rest of the object)."""
    kmock.resources[WORKFLOWS] = kmock_lib.ResourceInfo(kind="Workflow", namespaced=True)
    return kmock


@pytest.fixture
def make_runs(start_on_emulator: StartOnEmulator[Any]) -> Callable[..., Any]:
    async def make(settings: Settings | None = None, **kwargs: Any) -> ClusterPipelineRuns:
        kwargs.setdefault("sync_timeout", 10.0)
        settings = settings or make_settings()
        return await start_on_emulator(
            settings, lambda cluster: ClusterPipelineRuns(settings.pipelines, cluster, **kwargs)
        )

    return make


@pytest.fixture
def runs(make_runs: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> ClusterPipelineRuns:
    result: ClusterPipelineRuns = loop.run_until_complete(make_runs())
    return result


async def submit(runs: ClusterPipelineRuns, user: str = "alice", run_id: str = "run-1", **kwargs: Any) -> str:
    return await runs.submit(fan_out_fan_in(), user, run_id, STORE, **kwargs)


# -- the Argo controller, played over HTTP -------------------------------------------------------


def node(workflow: str, display: str, phase: str, *, step: str | None = None, **extra: Any) -> dict[str, Any]:
    """A node of `status.nodes` as Argo writes it for a DAG task (or one attempt of a retried task)."""
    result = {
        "id": f"{workflow}-{zlib.crc32(display.encode())}",
        "name": f"{workflow}.{display}",
        "displayName": display,
        "type": "Pod",
        "templateName": f"step-{step or display}",
        "templateScope": f"local/{workflow}",
        "phase": phase,
        "boundaryID": workflow,
        "startedAt": STARTED,
        **extra,
    }
    if phase in DONE:
        result["finishedAt"] = FINISHED
    return result


def retried(workflow: str, step: str, phase: str, attempts: list[str], **extra: Any) -> list[dict[str, Any]]:
    """A `Retry` node and its pod attempts `step(0)`, `step(1)`, ... with the given phases."""
    pods = [node(workflow, f"{step}({i})", p, step=step) for i, p in enumerate(attempts)]
    parent = node(workflow, step, phase, type="Retry", children=[p["id"] for p in pods], **extra)
    return [parent, *pods]


async def argo_reports(
    kube: KubeClient,
    runs: ClusterPipelineRuns,
    name: str,
    phase: str,
    nodes: list[dict[str, Any]],
    **status: Any,
) -> None:
    """Write the Workflow's status as the controller does, checked against the CRD's status schema."""
    dag = {
        "id": name,
        "name": name,
        "displayName": name,
        "type": "DAG",
        "templateName": "pipeline",
        "phase": phase,
        "startedAt": STARTED,
        "children": [n["id"] for n in nodes if not n["displayName"].endswith(")")],
    }
    body = {"phase": phase, "startedAt": STARTED, "nodes": {n["id"]: n for n in [dag, *nodes]}, **status}
    if phase in DONE:
        body["finishedAt"] = FINISHED
    patched = await asyncio.to_thread(kube.patch, API_VERSION, KIND, "cube-alice", name, {"status": body})
    validate_object(patched)
    rv = patched["metadata"]["resourceVersion"]
    await wait_until_async(
        lambda: (runs.workflows.get("cube-alice", name) or {})["metadata"]["resourceVersion"] == rv
    )


# -- tests ---------------------------------------------------------------------------------------


async def test_submit_creates_the_compiled_workflow_in_the_users_namespace(
    kmock: ApiServerEmulator, runs: ClusterPipelineRuns
) -> None:
    name = await submit(runs, parameters={"lr": 0.5})

    assert name.startswith("churn-") and len(name) == len("churn-") + 5
    assert kmock.names(WORKFLOWS, "cube-alice") == [name]
    creates = kmock.requests_of("create", WORKFLOWS)
    assert (
        len(creates) == 1
        and creates[0].url.path == "/apis/argoproj.io/v1alpha1/namespaces/cube-alice/workflows"
    )
    stored = kmock.find(WORKFLOWS, "cube-alice", name)
    assert stored is not None
    expected = compile_workflow(
        fan_out_fan_in(), runs.settings, run_id="run-1", store_url=STORE, parameters={"lr": 0.5}, user="alice"
    )
    assert stored["spec"] == expected["spec"]
    assert stored["metadata"]["labels"] == expected["metadata"]["labels"]

    run = runs.get("alice", "run-1")
    assert (run.name, run.namespace, run.user, run.run_id) == (name, "cube-alice", "alice", "run-1")
    assert run.status == "queued" and run.created and run.created.endswith("Z")
    assert runs.status("alice", "run-1") == dict.fromkeys(STEPS, "pending")
    assert [s["name"] for s in run.to_dict()["steps"]] == STEPS


async def test_step_statuses_follow_the_nodes_argo_reports(
    kube: KubeClient, runs: ClusterPipelineRuns
) -> None:
    name = await submit(runs)
    unschedulable = "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    await argo_reports(
        kube,
        runs,
        name,
        "Running",
        [
            node(name, "prepare", "Succeeded"),
            *retried(name, "train-a", "Running", ["Failed", "Pending"]),
            node(name, "train-b", "Pending", message=unschedulable),
            node(name, "evaluate", "Running"),
        ],
    )
    run = runs.get("alice", "run-1")
    assert run.status == "running" and run.started == STARTED
    assert run.step_statuses() == {
        "prepare": "succeeded",
        "train-a": "running",
        "train-b": "pending",
        "evaluate": "running",
        "report": "pending",
    }
    assert run.steps["train-a"].attempts == 2
    assert run.steps["train-b"].message == unschedulable
    assert run.steps["prepare"].finished == FINISHED and run.steps["prepare"].attempts == 1

    await argo_reports(
        kube,
        runs,
        name,
        "Failed",
        [
            node(name, "prepare", "Succeeded"),
            *retried(name, "train-a", "Succeeded", ["Failed", "Succeeded"]),
            node(name, "train-b", "Succeeded", memoizationStatus={"hit": True, "key": "k", "cacheName": "c"}),
            node(name, "evaluate", "Failed", message="Error (exit code 1)"),
            node(name, "report", "Omitted", message="omitted: depends condition not met"),
        ],
        message="child 'churn.evaluate' failed",
    )
    run = runs.get("alice", "run-1")
    assert (
        run.status == "failed" and run.finished == FINISHED and run.message == "child 'churn.evaluate' failed"
    )
    assert run.step_statuses() == {
        "prepare": "succeeded",
        "train-a": "succeeded",
        "train-b": "cached",
        "evaluate": "failed",
        "report": "skipped",
    }
    assert run.steps["evaluate"].message == "Error (exit code 1)"


async def test_reads_are_served_from_the_cache(kmock: ApiServerEmulator, runs: ClusterPipelineRuns) -> None:
    await submit(runs)
    await submit(runs, run_id="run-2")
    requests_before = len(list(kmock))
    for _ in range(200):
        assert runs.status("alice", "run-1")["prepare"] == "pending"
        assert sorted(r.run_id for r in runs.list_runs("alice")) == ["run-1", "run-2"]
    assert len(list(kmock)) == requests_before  # no API call of any kind per read
    assert len(kmock.requests_of("list", WORKFLOWS)) == 1  # the informer's initial list
    assert runs.workflows.list_calls == 1


async def test_users_see_only_their_own_runs(runs: ClusterPipelineRuns) -> None:
    await submit(runs)
    await submit(runs, user="bob", run_id="run-1")
    assert runs.get("bob", "run-1").namespace == "cube-bob"
    assert [r.user for r in runs.list_runs("alice")] == ["alice"]
    assert sorted(r.user for r in runs.list_runs(None)) == ["alice", "bob"]
    with pytest.raises(NotFound) as info:
        runs.get("bob", "run-2")
    assert info.value.field == "run_id"


async def test_a_run_id_is_used_once(kmock: ApiServerEmulator, runs: ClusterPipelineRuns) -> None:
    await submit(runs)
    with pytest.raises(Conflict) as info:
        await submit(runs)
    assert info.value.field == "run_id"
    assert len(kmock.names(WORKFLOWS, "cube-alice")) == 1


async def test_bad_input_creates_nothing(kmock: ApiServerEmulator, runs: ClusterPipelineRuns) -> None:
    with pytest.raises(InvalidInput) as info:
        await submit(runs, parameters={"nope": 1})
    assert info.value.field == "parameters.nope"
    with pytest.raises(InvalidInput) as info:
        await runs.submit(fan_out_fan_in(), "alice", "run-1", "file:///tmp/store")
    assert info.value.field == "store"
    assert kmock.requests_of("create", WORKFLOWS) == []


async def test_cancel_sets_shutdown_terminate_and_the_run_ends_cancelled(
    kmock: ApiServerEmulator, kube: KubeClient, runs: ClusterPipelineRuns
) -> None:
    name = await submit(runs)
    await argo_reports(
        kube,
        runs,
        name,
        "Running",
        [
            node(name, "prepare", "Succeeded"),
            node(name, "train-a", "Running"),
            node(name, "evaluate", "Pending"),
        ],
    )
    run = await runs.cancel("alice", "run-1")
    assert run.status == "cancelled"
    patches = kmock.requests_of("update", WORKFLOWS)
    assert len(patches) == 2  # the controller's status write, then the cancel
    assert patches[-1].headers["Content-Type"] == "application/merge-patch+json"
    assert patches[-1].data == {"spec": {"shutdown": "Terminate"}}
    stored = kmock.find(WORKFLOWS, "cube-alice", name)
    assert stored is not None and stored["spec"]["shutdown"] == "Terminate"
    validate_object(stored)

    # What Argo does on Terminate: running and pending nodes fail with a shutdown message.
    await argo_reports(
        kube,
        runs,
        name,
        "Failed",
        [
            node(name, "prepare", "Succeeded"),
            node(name, "train-a", "Failed", message="workflow shutdown with strategy:  Terminate"),
            node(name, "evaluate", "Failed", message="Stopped with strategy 'Terminate'"),
        ],
        message="Stopped with strategy 'Terminate'",
    )
    run = runs.get("alice", "run-1")
    assert run.status == "cancelled"
    assert run.step_statuses() == {
        "prepare": "succeeded",
        "train-a": "cancelled",
        "train-b": "cancelled",
        "evaluate": "cancelled",
        "report": "cancelled",
    }
    again = await runs.cancel("alice", "run-1")  # already over: no second patch
    assert again.status == "cancelled" and len(kmock.requests_of("update", WORKFLOWS)) == 3


async def test_cancelling_a_finished_or_unknown_run(
    kmock: ApiServerEmulator, kube: KubeClient, runs: ClusterPipelineRuns
) -> None:
    name = await submit(runs)
    await argo_reports(kube, runs, name, "Succeeded", [node(name, step, "Succeeded") for step in STEPS])
    run = await runs.cancel("alice", "run-1")
    assert run.status == "succeeded" and set(run.step_statuses().values()) == {"succeeded"}
    assert len(kmock.requests_of("update", WORKFLOWS)) == 1  # only the controller's
    with pytest.raises(NotFound):
        await runs.cancel("alice", "run-9")
    with pytest.raises(NotFound):
        await runs.cancel("bob", "run-1")


async def test_wait_finished_returns_when_argo_finishes(kube: KubeClient, runs: ClusterPipelineRuns) -> None:
    name = await submit(runs)
    waiting = asyncio.ensure_future(runs.wait_finished("alice", "run-1", timeout=30))
    # A change that does not finish the run (the cache has it when argo_reports returns) wakes the
    # waiter, which goes on waiting.
    await argo_reports(kube, runs, name, "Running", [node(name, "prepare", "Running")])
    assert not waiting.done()
    await argo_reports(kube, runs, name, "Succeeded", [node(name, step, "Succeeded") for step in STEPS])
    run = await asyncio.wait_for(waiting, 30)
    # The run as it is once Argo finished it: a wait that returned early would show it running.
    assert run.status == "succeeded"


async def test_submitting_for_a_user_without_a_namespace(
    kmock: ApiServerEmulator, runs: ClusterPipelineRuns, make_runs: Callable[..., Any]
) -> None:
    with pytest.raises(NotFound) as info:
        await submit(runs, user="carol")
    assert info.value.field == "user" and "'cube-carol'" in info.value.message
    assert "CubeWorkbench.create_namespaces" in info.value.message  # the notebook servers' own words
    assert kmock.names(WORKFLOWS) == []
    # With create_namespaces the workbench makes the namespace first, as for a notebook server.
    creating = await make_runs(make_settings(create_namespaces=True))
    await submit(creating, user="carol")
    assert kmock.find("v1/namespaces", None, "cube-carol") is not None
    assert len(kmock.names(WORKFLOWS, "cube-carol")) == 1


async def test_an_api_failure_leaves_nothing_behind(
    kmock: ApiServerEmulator, runs: ClusterPipelineRuns
) -> None:
    kmock.fail_next("create", WORKFLOWS, 500, "etcdserver: request timed out")
    with pytest.raises(BackendUnavailable, match="answered 500: etcdserver: request timed out"):
        await submit(runs)
    assert kmock.names(WORKFLOWS) == [] and runs.list_runs(None) == []
    await submit(runs)  # and the next try works
    assert runs.status("alice", "run-1")["report"] == "pending"


async def test_a_cluster_without_argo_is_reported_at_start(
    kmock: ApiServerEmulator, make_runs: Callable[..., Any]
) -> None:
    del kmock.resources[WORKFLOWS]
    with pytest.raises(NotServed) as info:
        await make_runs()
    assert "needs the CRD workflows.argoproj.io" in info.value.message
    assert kmock.requests_of("list", WORKFLOWS) == []  # said at once, without waiting for a list

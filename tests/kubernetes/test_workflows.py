"""Cluster pipeline runs against the KMock API server emulator, for what Argo's real controller (run
by tests/cluster) does not do on demand: the tests play it, writing `status.nodes` in each shape it
has — a retried step, one kube-scheduler cannot place, a cache hit, a failure that omits what depends
on it, a Terminate — and the runs object must learn of each by watch; and an API server failing a
create."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.pipelines.kubernetes.argo import API_VERSION, KIND
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


async def test_an_api_failure_leaves_nothing_behind(
    kmock: ApiServerEmulator, runs: ClusterPipelineRuns
) -> None:
    kmock.fail_next("create", WORKFLOWS, 500, "etcdserver: request timed out")
    with pytest.raises(BackendUnavailable, match="answered 500: etcdserver: request timed out"):
        await submit(runs)
    assert kmock.names(WORKFLOWS) == [] and runs.list_runs(None) == []
    await submit(runs)  # and the next try works
    assert runs.status("alice", "run-1")["report"] == "pending"

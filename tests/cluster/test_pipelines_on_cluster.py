"""Pipeline runs on the real control plane, run by Argo Workflows' own workflow-controller: the
workbench (its ServiceAccount's token) submits the compiled Workflow into the user's namespace; Argo
makes each step's pod in DAG order, kube-scheduler places it (a GPU step on the GPU node), kwok
completes it; the run view (and the CLI, from a terminal) follows the status Argo itself writes, to
the end or to a cancel."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from kubernetes import client as k8s

from cube_jupyter.errors import Conflict, InvalidInput, NotFound, NotServed
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.pipelines.dag import build_pipeline, load_notebook
from cube_jupyter.pipelines.kubernetes.argo import API_VERSION, KIND, compile_workflow
from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns, WorkflowRun
from tests.cluster.conftest import (
    USERS,
    Kubectl,
    api_client,
    cli_in_user_pod,
    requests_of,
    service_account_kubeconfig,
    without_crd,
)
from tests.cluster.controlplane import State
from tests.cluster.servers import eventually
from tests.kubernetes.conftest import make_settings
from tests.pipelines.notebooks import EXAMPLES
from tests.pipelines.test_argo import fan_out_fan_in

ALICE, BOB = "alice@example.com", "bob@example.com"
NAMESPACE = USERS[ALICE]
STORE = "s3://ml-artifacts/runs"


def run_pipelines(kubeconfig: Path, scenario: Callable[[ClusterPipelineRuns], Awaitable[None]]) -> None:
    settings = make_settings({"namespace_source": "kubeflow-profile"})

    async def go() -> None:
        cluster = Cluster(settings, api_client(kubeconfig))
        runs = ClusterPipelineRuns(settings.pipelines, cluster, sync_timeout=60)
        await runs.start()
        try:
            await scenario(runs)
        finally:
            await runs.close()
            await cluster.close()

    asyncio.run(go())


def test_argos_controller_runs_a_submitted_pipeline_in_dag_order(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    # train-a asks for one GPU here (two in the fixture): the GPU node's other one may be another test's
    steps = [
        replace(s, options=replace(s.options, gpu=1)) if s.name == "train-a" else s
        for s in fan_out_fan_in().steps
    ]
    pipeline = replace(fan_out_fan_in(), steps=tuple(steps))
    finished: dict[str, WorkflowRun] = {}

    async def scenario(runs: ClusterPipelineRuns) -> None:
        name = await runs.submit(pipeline, ALICE, "argo-real", STORE)
        await eventually("the run in the cache", lambda: runs.get(ALICE, "argo-real"), bool)
        finished["run"] = await runs.wait_finished(ALICE, "argo-real", timeout=180)
        assert finished["run"].name == name

    run_pipelines(workbench_kubeconfig, scenario)
    run = finished["run"]
    assert run.status == "succeeded", run
    assert run.step_statuses() == {step.name: "succeeded" for step in pipeline.steps}
    for step in pipeline.steps:  # Argo started no step before those it depends on had finished
        for upstream in step.after:
            assert run.steps[step.name].started >= run.steps[upstream].finished, (step.name, upstream)  # type: ignore[operator]
    workflow = KubeClient(admin).get(API_VERSION, KIND, NAMESPACE, run.name)
    hosts = {node["displayName"]: node.get("hostNodeName") for node in workflow["status"]["nodes"].values()}
    assert hosts["train-a(0)"] == "gpu-node-1"  # it asks for a GPU: kube-scheduler's choice
    assert all(
        str(hosts[s.name]).startswith(("cpu-node-", "gpu-node-"))
        for s in pipeline.steps
        if s.name != "train-a"
    )


def test_a_cancelled_run_is_stopped_by_argo(installed: State, workbench_kubeconfig: Path) -> None:
    ended: dict[str, WorkflowRun] = {}
    # train-a asks for more GPUs than any node has: kube-scheduler leaves its pod Pending, so the run
    # is still under way when it is cancelled, however fast kwok completes the other steps.
    pipeline = fan_out_fan_in()
    held = tuple(
        replace(s, options=replace(s.options, gpu=3)) if s.name == "train-a" else s for s in pipeline.steps
    )

    async def scenario(runs: ClusterPipelineRuns) -> None:
        await runs.submit(replace(pipeline, steps=held), ALICE, "argo-cancel", STORE)
        await eventually(
            "train-a waiting for GPUs no node has, and the steps beside it done",
            lambda: runs.get(ALICE, "argo-cancel").step_statuses(),
            lambda steps: (
                steps.get("train-b") == "succeeded" and steps.get("train-a") not in (None, "succeeded")
            ),
        )
        cancelled = await runs.cancel(ALICE, "argo-cancel")
        assert cancelled.status in ("running", "cancelled")
        ended["run"] = await runs.wait_finished(ALICE, "argo-cancel", timeout=180)

    run_pipelines(workbench_kubeconfig, scenario)
    run = ended["run"]
    assert run.status == "cancelled", run
    assert "report" not in [name for name, status in run.step_statuses().items() if status == "succeeded"]


def test_the_cli_runs_a_notebook_on_the_cluster_and_follows_argo_to_the_end(
    installed: State, admin: k8s.ApiClient, tmp_path: Path
) -> None:
    """`cube-jupyter pipeline run --target cluster` in a notebook pod's terminal: the pod's role,
    namespace and `default-editor` token (which can list only that namespace): it submits the
    Workflow, Argo runs it, and the CLI prints each step to the end and exits 0."""
    kubeconfig = service_account_kubeconfig(installed, NAMESPACE, "default-editor", tmp_path / "kubeconfig")
    config = [
        'c.CubeWorkbench.backend = "kubernetes"',
        f"c.CubeWorkbench.state_dir = {str(tmp_path / 'state')!r}",
        'c.CubeWorkbench.default_user = "alice"',
        'c.CubeStorage.url = "s3://ml-artifacts/runs"',
    ]
    shutil.copy(EXAMPLES / "fanout_ml.ipynb", tmp_path / "fanout_ml.ipynb")
    argv = ["pipeline", "run", "fanout_ml.ipynb", "--target", "cluster", "-p", "n_samples", "300"]
    done = cli_in_user_pod(kubeconfig, NAMESPACE, tmp_path, config, argv, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [s.name for s in build_pipeline(load_notebook(tmp_path / "fanout_ml.ipynb"), "x").steps]
    for step in steps:
        assert step in done.stdout, done.stdout
    [workflow] = [
        w
        for w in KubeClient(admin)
        .list(API_VERSION, KIND, NAMESPACE, label_selector="cube-jupyter/user=alice")
        .items
        if {p["name"]: p.get("value") for p in w["spec"]["arguments"]["parameters"]}.get("n_samples") == "300"
    ]
    assert workflow["status"]["phase"] == "Succeeded"
    assert {n["displayName"] for n in workflow["status"]["nodes"].values() if n["type"] == "Pod"} >= set(
        steps
    )


def test_a_submitted_run_is_the_compiled_workflow_and_reads_come_from_the_cache(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    """Created once, in the user's namespace, as compiled; then every read (the panel's polling)
    is served by the informer, and users see only their own runs."""
    nodeid = request.node.nodeid

    def made(*verbs: str) -> list[tuple[str, str, int]]:
        return [(r.verb, r.resource, r.code) for r in requests_of(installed, nodeid) if r.verb in verbs]

    async def scenario(runs: ClusterPipelineRuns) -> None:
        name = await runs.submit(fan_out_fan_in(), ALICE, "compiled", STORE, parameters={"lr": 0.5})
        assert name.startswith("churn-") and len(name) == len("churn-") + 5
        await runs.submit(fan_out_fan_in(), BOB, "compiled", STORE)
        run = await eventually("the run in the cache", lambda: runs.get(ALICE, "compiled"), bool)
        assert (run.name, run.namespace, run.user, run.run_id) == (name, NAMESPACE, ALICE, "compiled")
        assert run.created and run.created.endswith("Z")
        assert [s["name"] for s in run.to_dict()["steps"]] == [s.name for s in fan_out_fan_in().steps]
        expected = compile_workflow(
            fan_out_fan_in(),
            runs.settings,
            run_id="compiled",
            store_url=STORE,
            parameters={"lr": 0.5},
            user=ALICE,
            namespace=NAMESPACE,
        )
        stored = KubeClient(admin).get(API_VERSION, KIND, NAMESPACE, name)
        # Argo's controller writes its defaults into the templates once it picks the run up (the
        # kinds test reads a Workflow back before it can): the rest is as compiled.
        for key, value in expected["spec"].items():
            assert key == "templates" or stored["spec"][key] == value, key
        assert [t["name"] for t in stored["spec"]["templates"]] == [
            t["name"] for t in expected["spec"]["templates"]
        ]
        assert expected["metadata"]["labels"].items() <= stored["metadata"]["labels"].items()

        before = made("get", "list", "create", "patch", "update", "delete")
        for _ in range(200):
            assert runs.get(ALICE, "compiled").run_id == "compiled"
            assert [r.user for r in runs.list_runs(ALICE)].count(ALICE) == len(runs.list_runs(ALICE))
        assert made("get", "list", "create", "patch", "update", "delete") == before
        assert runs.get(BOB, "compiled").namespace == USERS[BOB]
        with pytest.raises(NotFound) as unknown:
            runs.get(BOB, "never")
        assert unknown.value.field == "run_id"

        with pytest.raises(Conflict) as again:  # a run id is used once
            await runs.submit(fan_out_fan_in(), ALICE, "compiled", STORE)
        assert again.value.field == "run_id"
        with pytest.raises(InvalidInput) as bad:
            await runs.submit(fan_out_fan_in(), ALICE, "bad", STORE, parameters={"nope": 1})
        assert bad.value.field == "parameters.nope"
        with pytest.raises(InvalidInput) as bad:
            await runs.submit(fan_out_fan_in(), ALICE, "bad", "file:///tmp/store")
        assert bad.value.field == "store"
        with pytest.raises(NotFound) as nobody:
            await runs.submit(fan_out_fan_in(), "carol@example.com", "x", STORE)
        assert nobody.value.field == "user"

        finished = await runs.wait_finished(ALICE, "compiled", timeout=180)
        assert finished.status == "succeeded"
        patches = made("patch")
        assert (await runs.cancel(ALICE, "compiled")).status == "succeeded"  # over: nothing to stop
        assert made("patch") == patches
        for user in (ALICE, BOB):
            with pytest.raises(NotFound):
                await runs.cancel(user, "never")

    run_pipelines(workbench_kubeconfig, scenario)
    assert made("create") == [("create", "workflows", 201)] * 2


def test_a_cluster_without_argo_is_reported_at_start(
    installed: State, kubectl: Kubectl, workbench_kubeconfig: Path
) -> None:
    """Said at once from API discovery, without waiting on a list."""

    async def never(runs: ClusterPipelineRuns) -> None:
        raise AssertionError("started without Argo's CRD")

    with without_crd(kubectl, "workflows.argoproj.io"), pytest.raises(NotServed) as refused:
        run_pipelines(workbench_kubeconfig, never)
    assert "needs the CRD workflows.argoproj.io" in refused.value.message

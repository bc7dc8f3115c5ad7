"""One cluster layer on the real control plane: notebooks, pipelines and jobs share one API client and
one informer registry, so the workbench's pods and events are listed and watched once, whatever the
number of features (counted in the API server's audit log); the registry shares an informer per kind
and selector and merges its indexes; the cluster's APIs are discovered from the API server's own
discovery documents, once; a Kubeflow user's runs and jobs go to the Profile they own."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.errors import NotFound
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns
from tests.cluster.conftest import USERS, api_client, requests_of, wait_for
from tests.cluster.controlplane import State
from tests.cluster.servers import eventually, until
from tests.cluster.test_jobs_on_cluster import DDP, SERVE, operator_pod
from tests.kubernetes.actors import scheduler_warns
from tests.kubernetes.conftest import make_settings
from tests.pipelines.test_argo import fan_out_fan_in

ALICE = "alice@example.com"
NAMESPACE = USERS[ALICE]
STORE = "s3://ml-artifacts/runs"


def settings_for() -> Any:
    return make_settings(
        {"namespace_source": "kubeflow-profile"},
        jobs={"training_api": "training-operator-v1"},
        storage={"url": "s3://ml-artifacts/jobs", "endpoint": "http://minio:9000"},
        resource_kind="StatefulSet",
    )


def informer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("informer-")]


def test_one_pod_watch_and_one_event_watch_serve_every_feature(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    settings = settings_for()
    operator = KubeClient(admin)
    others = len(informer_threads())

    async def scenario() -> None:
        cluster = Cluster(settings, api_client(workbench_kubeconfig))
        notebooks = KubernetesNotebookBackend(settings.notebooks, cluster, sync_timeout=60)
        runs = ClusterPipelineRuns(settings.pipelines, cluster, sync_timeout=60)
        jobs = KubernetesJobBackend(settings.jobs, cluster, sync_timeout=60)
        for feature in (notebooks, runs, jobs):
            await feature.start()
        assert notebooks.pods is jobs.pods and notebooks.client is runs.client is jobs.client

        # A server's pod (the StatefulSet controller's) and a training replica's pod (the operator's
        # shape), each found by its own feature's index; a warning about the server's pod, by its.
        await notebooks.create_server(NotebookSpec(ALICE, "shared", settings.notebooks.profile("cpu")))
        await until(notebooks, ALICE, "shared", lambda s: s.status == ServerStatus.RUNNING)
        await jobs.submit("training", TrainingSpec.from_dict({**DDP, "name": "shared-ddp"}, user=ALICE))
        owner = await asyncio.to_thread(
            operator.get, "kubeflow.org/v1", "PyTorchJob", NAMESPACE, "shared-ddp"
        )
        await asyncio.to_thread(operator.create, operator_pod(owner, "master", 0, 0))
        server_pod = await asyncio.to_thread(operator.get, "v1", "Pod", NAMESPACE, "shared-0")
        await scheduler_warns(operator, server_pod, "BackOff", "Back-off pulling image")
        await eventually(
            "the server's pod", lambda: notebooks.pods.by_index("server", f"{NAMESPACE}/shared"), bool
        )
        await eventually(
            "its event", lambda: notebooks.events.by_index("object", f"Pod/{NAMESPACE}/shared-0"), bool
        )
        owned = await eventually(
            "the replica", lambda: jobs.pods.by_index("owner", f"{NAMESPACE}/shared-ddp"), bool
        )
        assert [p["metadata"]["name"] for p in owned] == ["shared-ddp-master-0"]
        assert notebooks.pods.by_index("server", f"{NAMESPACE}/shared-ddp") == []  # each index sees its own

        await notebooks.delete_server(ALICE, "shared")
        await jobs.delete(ALICE, "shared-ddp")
        # A feature closing leaves the shared caches to the others; the cluster stops them all, once.
        await notebooks.close()
        await runs.close()
        assert jobs.pods.started and len(informer_threads()) == others + len(cluster.informers)
        await jobs.close()
        await cluster.close()
        assert len(informer_threads()) == others and not any(i.started for i in cluster.informers)

    asyncio.run(scenario())

    def counted(verb: str, resource: str) -> int:
        made = requests_of(installed, request.node.nodeid)
        return sum(r.verb == verb and r.resource == resource and not r.namespace for r in made)

    for resource in ("pods", "events"):
        assert counted("list", resource) == 1, resource

        def watch_logged(resource: str = resource) -> bool:  # logged when it ends: the close ended it
            return counted("watch", resource) >= 1

        wait_for(f"the {resource} watch logged", watch_logged)
        assert counted("watch", resource) == 1, resource


def test_the_registry_shares_an_informer_per_kind_and_selector_and_merges_its_indexes(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "indexed", "namespace": NAMESPACE, "labels": {"cube-jupyter/user": "alice"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    operator = KubeClient(admin)
    operator.create(pod)

    def by_name(obj: dict[str, Any]) -> list[str]:
        return [obj["metadata"]["name"]]

    async def scenario() -> None:
        cluster = Cluster(settings_for(), api_client(workbench_kubeconfig))
        try:
            first = cluster.pods({"user": lambda obj: [obj["metadata"]["labels"]["cube-jupyter/user"]]})
            await cluster.start([first], 60)
            # An index added to a running informer covers what it already holds.
            same = cluster.pods({"name": by_name})
            assert same is first
            assert [p["metadata"]["name"] for p in same.by_index("name", "indexed")] == ["indexed"]
            assert "indexed" in [p["metadata"]["name"] for p in same.by_index("user", "alice")]
            with pytest.raises(ValueError, match="already has a different index 'user'"):
                cluster.pods({"user": by_name})
            assert cluster.informer("v1", "Pod", label_selector="cube-jupyter/job") is not first
        finally:
            await cluster.close()

    asyncio.run(scenario())
    operator.delete("v1", "Pod", NAMESPACE, "indexed")


def test_filters_of_several_features_keep_the_union(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    operator = KubeClient(admin)

    def keep_named(name: str) -> Any:
        return lambda event: event["involvedObject"]["name"] == name

    async def scenario() -> None:
        cluster = Cluster(settings_for(), api_client(workbench_kubeconfig))
        try:
            events = cluster.events({}, keep=keep_named("union-a"))
            assert cluster.events({}, keep=keep_named("union-b")) is events
            for name in ("union-a", "union-b", "union-c"):
                pod = {"kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}}
                await scheduler_warns(operator, pod, "BackOff", "restarting")
            await cluster.start([events], 60)
            names = {e["involvedObject"]["name"] for e in events.list()}
            assert {"union-a", "union-b"} <= names and "union-c" not in names
            # Events it already dropped would not come back: a filter is given before the cache starts.
            with pytest.raises(RuntimeError, match="already started"):
                cluster.events({}, keep=keep_named("union-c"))
        finally:
            await cluster.close()

    asyncio.run(scenario())


def test_apis_are_discovered_from_the_discovery_documents_once(
    installed: State, workbench_kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    async def scenario() -> None:
        cluster = Cluster(settings_for(), api_client(workbench_kubeconfig))
        try:
            asked = ["kubeflow.org/v1", "trainer.kubeflow.org/v1alpha1", "example.com/v1"]
            served = await cluster.discover(asked)
            assert served.serves("trainer.kubeflow.org/v1alpha1", "TrainJob")
            for kind in ("PyTorchJob", "TFJob", "XGBoostJob", "MPIJob", "Notebook"):
                assert served.serves("kubeflow.org/v1", kind), kind
            assert not served.serves("kubeflow.org/v1", "Pipeline")
            assert not served.serves("example.com/v1", "Widget")
            assert not served.serves("kubeflow.org/v1beta1", "Experiment")  # not asked about
            again = await cluster.discover(["kubeflow.org/v1", "trainer.kubeflow.org/v1alpha1"])
            assert again.serves("kubeflow.org/v1", "PyTorchJob")
        finally:
            await cluster.close()

    asyncio.run(scenario())
    asked = [r.path for r in requests_of(installed, request.node.nodeid) if r.path.startswith("/apis")]
    # example.com/v1 is not in /apis: not asked; the second discover asked nothing
    assert asked == ["/apis", "/apis/kubeflow.org/v1", "/apis/trainer.kubeflow.org/v1alpha1"], asked


def test_a_kubeflow_users_runs_and_jobs_go_to_the_profile_they_own(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    operator = KubeClient(admin)
    settings = settings_for()

    async def scenario() -> None:
        cluster = Cluster(settings, api_client(workbench_kubeconfig))
        runs = ClusterPipelineRuns(settings.pipelines, cluster, sync_timeout=60)
        jobs = KubernetesJobBackend(settings.jobs, cluster, sync_timeout=60)
        try:
            for feature in (runs, jobs):
                await feature.start()
            name = await runs.submit(fan_out_fan_in(), ALICE, "profile-run", STORE)
            assert operator.get("argoproj.io/v1alpha1", "Workflow", NAMESPACE, name)
            assert runs.get(ALICE, "profile-run").name == name
            job = await jobs.submit(
                "serving", ServingSpec.from_dict({**SERVE, "name": "profile-iris"}, user=ALICE)
            )
            assert operator.get("serving.kserve.io/v1beta1", "InferenceService", NAMESPACE, job.name)
            assert jobs.get(ALICE, job.name) is not None

            # Without a Profile there is nowhere to run: a 404 naming the setting, and nothing created.
            with pytest.raises(NotFound, match=r"CubeWorkbench\.namespace_source is 'kubeflow-profile'"):
                await runs.submit(fan_out_fan_in(), "nobody@example.com", "run-2", STORE)
            with pytest.raises(NotFound, match="owns no Kubeflow Profile"):
                await jobs.submit("serving", ServingSpec.from_dict(SERVE, user="nobody@example.com"))
            await runs.cancel(ALICE, "profile-run")
            await jobs.delete(ALICE, job.name)
        finally:
            for feature in (runs, jobs):
                await feature.close()
            await cluster.close()

    asyncio.run(scenario())

"""One cluster layer: notebooks, pipelines and jobs share one API client and one informer registry,
so the workbench's pods and events are listed and watched once, whatever the number of features; and
the cluster's APIs are discovered from /apis, once. Real HTTP against the KMock emulator."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.errors import NotFound
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns
from tests.kubernetes.actors import kubeflow_profile, scheduler_warns
from tests.kubernetes.conftest import connect, make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.kubernetes.test_jobs_k8s import JOB_RESOURCES, SERVE, replica_pod
from tests.kubernetes.test_workflows import STORE, WORKFLOWS
from tests.pipelines.test_argo import fan_out_fan_in
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(60)
PODS, EVENTS = "v1/pods", "v1/events"


@pytest.fixture
def kmock(kmock: ApiServerEmulator) -> ApiServerEmulator:
    """A Kubeflow cluster with every operator: Argo, the Training Operator, Katib and KServe."""
    for name, info in {**JOB_RESOURCES, WORKFLOWS: {"kind": "Workflow", "namespaced": True}}.items():
        kmock.resources[name] = kmock_lib.ResourceInfo(**info)
    return kmock


@pytest.fixture
def cluster(api_url: str, loop: asyncio.AbstractEventLoop) -> Iterator[Cluster]:
    shared = connect(make_settings(), api_url)
    yield shared
    loop.run_until_complete(shared.close())


def informer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("informer-")]


async def test_one_pod_watch_and_one_event_watch_serve_every_feature(
    kmock: ApiServerEmulator, kube: KubeClient, cluster: Cluster
) -> None:
    settings, others = cluster.settings, len(informer_threads())  # other tests' leftovers, if any
    notebooks = KubernetesNotebookBackend(settings.notebooks, cluster, sync_timeout=10)
    runs = ClusterPipelineRuns(settings.pipelines, cluster, sync_timeout=10)
    jobs = KubernetesJobBackend(settings.jobs, cluster, sync_timeout=10)
    for feature in (notebooks, runs, jobs):
        await feature.start()
    assert notebooks.pods is jobs.pods and notebooks.client is runs.client is jobs.client
    for resource in (PODS, EVENTS):
        assert len(kmock.requests_of("list", resource)) == 1, resource
        assert len(kmock.requests_of("watch", resource)) == 1, resource

    # A notebook server's pod and a training replica's pod, each found by its own feature's index.
    server_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "nb1-0",
            "namespace": "cube-alice",
            "labels": {"cube-jupyter/user": "alice", "notebook-name": "nb1"},
        },
        "spec": {"containers": [{"name": "nb1", "image": "jupyter"}]},
    }
    await asyncio.to_thread(kube.create, server_pod)
    replica = await replica_pod(kube, "ddp", "worker", 0, "Running")
    await scheduler_warns(kube, server_pod, "FailedScheduling", "0/3 nodes are available")
    await wait_until_async(lambda: notebooks.pods.by_index("server", "cube-alice/nb1"))
    await wait_until_async(lambda: notebooks.events.by_index("object", "Pod/cube-alice/nb1-0"))
    owned = await wait_until_async(lambda: jobs.pods.by_index("owner", "cube-alice/ddp"))
    assert [p["metadata"]["name"] for p in owned] == [replica]
    assert notebooks.pods.by_index("server", "cube-alice/ddp") == []  # each index sees its own
    for resource in (PODS, EVENTS):
        assert len(kmock.requests_of("watch", resource)) == 1, resource

    # A feature closing leaves the shared caches to the others; the cluster stops them all, once.
    await notebooks.close()
    await runs.close()
    assert jobs.pods.started and len(informer_threads()) == others + len(cluster.informers)
    await cluster.close()
    assert len(informer_threads()) == others and not any(i.started for i in cluster.informers)


async def test_the_registry_shares_an_informer_per_kind_and_selector_and_merges_its_indexes(
    kmock: ApiServerEmulator, kube: KubeClient, cluster: Cluster
) -> None:
    await replica_pod(kube, "ddp", "worker", 0, "Running")
    first = cluster.pods({"job": lambda pod: [pod["metadata"]["labels"].get("cube-jupyter/job", "")]})
    await cluster.start([first], 10)
    # An index added to a running informer covers what it already holds.
    same = cluster.pods({"name": lambda pod: [pod["metadata"]["name"]]})
    assert same is first
    assert [p["metadata"]["name"] for p in same.by_index("name", "ddp-worker-0")] == ["ddp-worker-0"]
    assert len(same.by_index("job", "ddp")) == 1
    with pytest.raises(ValueError, match="already has a different index 'job'"):
        cluster.pods({"job": lambda pod: []})
    other = cluster.informer("v1", "Pod", label_selector="cube-jupyter/job")
    assert other is not first  # another selector is another cache


async def test_filters_of_several_features_keep_the_union(
    kmock: ApiServerEmulator, kube: KubeClient, cluster: Cluster
) -> None:
    def keep_named(name: str) -> Any:
        return lambda event: event["involvedObject"]["name"] == name

    events = cluster.events({}, keep=keep_named("a"))
    assert cluster.events({}, keep=keep_named("b")) is events
    for name in ("a", "b", "c"):
        pod = {"kind": "Pod", "metadata": {"name": name, "namespace": "cube-alice"}}
        await scheduler_warns(kube, pod, "BackOff", "restarting")
    await cluster.start([events], 10)
    assert sorted(e["involvedObject"]["name"] for e in events.list()) == ["a", "b"]
    # Events it already dropped would not come back: a filter is given before the cache starts.
    with pytest.raises(RuntimeError, match="already started"):
        cluster.events({}, keep=keep_named("c"))


async def test_apis_are_discovered_from_the_discovery_documents_once(
    kmock: ApiServerEmulator, cluster: Cluster
) -> None:
    del kmock.resources["kubeflow.org/v1/tfjobs"]
    served = await cluster.discover(["kubeflow.org/v1", "trainer.kubeflow.org/v1alpha1", "example.com/v1"])
    assert served.serves("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert served.serves("kubeflow.org/v1", "PyTorchJob") and served.serves("kubeflow.org/v1", "Notebook")
    assert not served.serves("kubeflow.org/v1", "TFJob")
    assert not served.serves("kubeflow.org/v1beta1", "Experiment")  # not asked about
    again = await cluster.discover(["kubeflow.org/v1", "trainer.kubeflow.org/v1alpha1"])
    assert again.serves("kubeflow.org/v1", "PyTorchJob")
    paths = [str(r.url.path) for r in kmock if str(r.url.path).startswith("/apis") and r.resource is None]
    group_versions = [r for r in kmock if r.resource is not None and r.resource.plural is None]
    assert paths == ["/apis"] and len(group_versions) == 2  # example.com/v1 is not served: not asked


async def test_a_kubeflow_users_runs_and_jobs_go_to_the_profile_they_own(
    kmock: ApiServerEmulator, api_url: str
) -> None:
    kmock.preload(
        [
            kubeflow_profile("ml-team", "alice@example.com"),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-team"}},
        ]
    )
    settings = make_settings(namespace_source="kubeflow-profile")
    cluster = connect(settings, api_url)
    runs = ClusterPipelineRuns(settings.pipelines, cluster, sync_timeout=10)
    jobs = KubernetesJobBackend(settings.jobs, cluster, sync_timeout=10)
    try:
        for feature in (runs, jobs):
            await feature.start()
        name = await runs.submit(fan_out_fan_in(), "alice@example.com", "run-1", STORE)
        assert kmock.find(WORKFLOWS, "ml-team", name) is not None
        assert runs.get("alice@example.com", "run-1").name == name
        job = await jobs.submit("serving", ServingSpec.from_dict(SERVE, user="alice@example.com"))
        assert kmock.find("serving.kserve.io/v1beta1/inferenceservices", "ml-team", job.name) is not None
        assert jobs.get("alice@example.com", job.name) is not None

        # Without a Profile there is nowhere to run: a 404 naming the setting, and nothing created.
        with pytest.raises(NotFound, match=r"CubeWorkbench\.namespace_source is 'kubeflow-profile'"):
            await runs.submit(fan_out_fan_in(), "bob@example.com", "run-2", STORE)
        with pytest.raises(NotFound, match="owns no Kubeflow Profile"):
            await jobs.submit("serving", ServingSpec.from_dict(SERVE, user="bob@example.com"))
    finally:
        await cluster.close()

"""Notebook servers on a real control plane, made by the workbench with its own ServiceAccount's
token (every request through the RBAC authorizer): the StatefulSet controller makes the pod,
kube-scheduler places it (a GPU server on the GPU node, by its toleration and node selector), kwok
runs it; a GPU server past the node's capacity stays pending with kube-scheduler's own message; a
GPU pod past the user's quota is refused by the ResourceQuota admission plugin itself."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.errors import Conflict, NotFound, QuotaExceeded
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.render import render_notebook_objects
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.cluster import controlplane
from tests.cluster.conftest import USERS, api_client, service_account_kubeconfig
from tests.cluster.controlplane import State
from tests.cluster.servers import run_backends, until
from tests.kubernetes.actors import controller_objects
from tests.kubernetes.conftest import make_settings

T = TypeVar("T")
ALICE, BOB = "alice@example.com", "bob@example.com"


def settings_for(**workbench: Any) -> Settings:
    return make_settings(
        {"namespace_source": "kubeflow-profile", **workbench},
        resource_kind="StatefulSet",
        workspace_size="1Gi",
    )


@pytest.fixture
def on_cluster(workbench_kubeconfig: Path) -> Callable[..., Any]:
    """Run `scenario(backend)` with a started notebook backend connected as the workbench."""
    return partial(run_backends, workbench_kubeconfig)


def pod_of(admin: k8s.ApiClient, namespace: str, name: str) -> Any:
    return k8s.CoreV1Api(admin).read_namespaced_pod(f"{name}-0", namespace)


def test_servers_are_made_placed_and_run_by_the_clusters_own_controllers(
    installed: State, admin: k8s.ApiClient, on_cluster: Any
) -> None:
    settings = settings_for()

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        cpu = NotebookSpec(ALICE, "cpu-one", settings.notebooks.profile("cpu"))
        gpu = NotebookSpec(ALICE, "gpu-one", settings.notebooks.profile("gpu"))
        for spec in (cpu, gpu):
            await backend.create_server(spec)
        for spec in (cpu, gpu):
            server = await until(backend, ALICE, spec.name, lambda s: s.status == ServerStatus.RUNNING)
            assert server.namespace == USERS[ALICE]
        namespace = USERS[ALICE]
        assert pod_of(admin, namespace, "cpu-one").spec.node_name.startswith("cpu-node-")
        assert pod_of(admin, namespace, "gpu-one").spec.node_name == "gpu-node-1"

        await backend.set_stopped(ALICE, "cpu-one", True)
        await until(backend, ALICE, "cpu-one", lambda s: s.status == ServerStatus.STOPPED)
        await backend.set_stopped(ALICE, "cpu-one", False)
        await until(backend, ALICE, "cpu-one", lambda s: s.status == ServerStatus.RUNNING)
        for name in ("cpu-one", "gpu-one"):
            await backend.delete_server(ALICE, name)
        assert backend.get_server(ALICE, "gpu-one") is None

    on_cluster(settings, scenario)


def test_a_gpu_server_past_the_nodes_capacity_waits_with_the_schedulers_message(
    installed: State, on_cluster: Any
) -> None:
    settings = settings_for()  # the profiles of tests/kubernetes: `gpu` asks for one GPU

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        names = ("gpu-a", "gpu-b", "gpu-c")  # the GPU node has 2
        for user, name in zip((ALICE, BOB, BOB), names, strict=True):
            await backend.create_server(NotebookSpec(user, name, settings.notebooks.profile("gpu")))
        await until(backend, ALICE, "gpu-a", lambda s: s.status == ServerStatus.RUNNING)
        await until(backend, BOB, "gpu-b", lambda s: s.status == ServerStatus.RUNNING)
        waiting = await until(
            backend, BOB, "gpu-c", lambda s: "Insufficient nvidia.com/gpu" in (s.reason or "")
        )
        assert waiting.status == ServerStatus.PENDING
        assert "0/3 nodes are available" in (waiting.reason or ""), waiting.reason
        for user, name in zip((ALICE, BOB, BOB), names, strict=True):
            await backend.delete_server(user, name)

    on_cluster(settings, scenario)


def test_the_gpu_quota_is_enforced_by_the_api_servers_admission(
    installed: State, admin: k8s.ApiClient, on_cluster: Any, tmp_path: Path
) -> None:
    """The workbench's own 403 comes first for its creates; a pod the user makes directly with their
    `default-editor` token (as kubectl in a terminal would) meets the ResourceQuota plugin."""
    settings = settings_for(gpu_quota_per_user=1)
    namespace = USERS[ALICE]

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(ALICE, "quota-one", settings.notebooks.profile("gpu")))
        await until(backend, ALICE, "quota-one", lambda s: s.status == ServerStatus.RUNNING)

    on_cluster(settings, scenario)
    quota = k8s.CoreV1Api(admin).read_namespaced_resource_quota("cube-gpu-quota", namespace)
    assert quota.spec is not None and quota.spec.hard is not None, quota
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "1"  # each configured GPU resource is capped

    kubeconfig = service_account_kubeconfig(installed, namespace, "default-editor", tmp_path / "kc")
    editor = KubeClient(api_client(kubeconfig, agent="kubectl"))  # a person in a terminal, not the workbench
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sneaky-gpu", "namespace": namespace},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    with pytest.raises(QuotaExceeded) as refused:
        editor.create(pod)
    assert "exceeded quota: cube-gpu-quota" in refused.value.message, refused.value.message

    # An admin raises the quota: the next server brings the namespace's ResourceQuota up to date, and
    # deleting servers leaves it in place.
    raised = settings_for(gpu_quota_per_user=2)

    async def later(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(ALICE, "quota-two", raised.notebooks.profile("cpu")))
        for name in ("quota-one", "quota-two"):
            await backend.delete_server(ALICE, name)

    on_cluster(raised, later)
    quota = k8s.CoreV1Api(admin).read_namespaced_resource_quota("cube-gpu-quota", namespace)
    assert quota.spec is not None and quota.spec.hard is not None
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "2"


def test_the_caches_converge_after_an_api_server_crash_and_a_compaction(
    installed: State, admin: k8s.ApiClient, on_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The API server is killed mid-watch and etcd compacted before it comes back, so every watch
    resumes into a 410 Gone; a server created before the watches are back is seen; a workbench
    started afterwards lists the same servers."""
    settings = settings_for()
    namespace = USERS[ALICE]
    during = NotebookSpec(ALICE, "during", settings.notebooks.profile("cpu"))

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(ALICE, "before", settings.notebooks.profile("cpu")))
        await until(backend, ALICE, "before", lambda s: s.status == ServerStatus.RUNNING)
        await asyncio.to_thread(controlplane.stop, installed, "kube-apiserver")
        compacted = await asyncio.to_thread(controlplane.compact_etcd, installed)
        assert compacted > 0
        await asyncio.to_thread(controlplane.start, installed, "kube-apiserver")
        kube = KubeClient(admin)  # another workbench (or kubectl) makes a server while the watches are down
        for obj in render_notebook_objects(during, settings.notebooks, namespace):
            await asyncio.to_thread(kube.create, obj)
        await until(backend, ALICE, "during", lambda s: s.status == ServerStatus.RUNNING)
        assert backend.get_server(ALICE, "before").status == ServerStatus.RUNNING  # type: ignore[union-attr]

    with caplog.at_level(logging.INFO, logger="cube_jupyter.kube.informer"):
        on_cluster(settings, scenario)
    assert any("listing again" in record.getMessage() for record in caplog.records), "no 410 was met"

    async def restarted(backend: KubernetesNotebookBackend) -> None:
        assert {s.name for s in backend.list_servers(ALICE)} >= {"before", "during"}
        for name in ("before", "during"):
            await backend.delete_server(ALICE, name)

    on_cluster(settings, restarted)


def test_notebook_kind_servers_through_the_notebook_controllers_objects(
    installed: State, admin: k8s.ApiClient, on_cluster: Any
) -> None:
    """`resource_kind = "Notebook"`. Kubeflow's notebook controller cannot be built here (its module,
    github.com/kubeflow/kubeflow/components/notebook-controller, is not served by the Go module proxy),
    so the test plays it (tests/kubernetes/actors.py: its StatefulSet, Service and VirtualService,
    owned by the Notebook); the real StatefulSet controller, scheduler and garbage collector do the
    rest, and every request the workbench makes meets the real authorizer."""
    settings = make_settings(
        {"namespace_source": "kubeflow-profile"}, resource_kind="Notebook", workspace_size="1Gi"
    )
    kube = KubeClient(admin)
    namespace = USERS[ALICE]

    def notebook_controller(name: str) -> None:
        notebook = kube.get("kubeflow.org/v1", "Notebook", namespace, name)
        for obj in controller_objects(notebook):
            try:
                kube.create(obj)
            except Conflict:  # reconciling again: the stopped annotation decides the replicas
                if obj["kind"] == "StatefulSet":
                    kube.patch("apps/v1", "StatefulSet", namespace, name, {"spec": obj["spec"]})

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(ALICE, "kf-one", settings.notebooks.profile("cpu")))
        await asyncio.to_thread(notebook_controller, "kf-one")
        await until(backend, ALICE, "kf-one", lambda s: s.status == ServerStatus.RUNNING)
        await backend.set_stopped(ALICE, "kf-one", True)
        await asyncio.to_thread(notebook_controller, "kf-one")
        await until(backend, ALICE, "kf-one", lambda s: s.status == ServerStatus.STOPPED)
        await backend.delete_server(ALICE, "kf-one")
        assert backend.get_server(ALICE, "kf-one") is None

    on_cluster(settings, scenario)
    with pytest.raises(NotFound):  # the garbage collector took what the Notebook owned
        kube.get("apps/v1", "StatefulSet", namespace, "kf-one")

"""With `resource_kind = "Notebook"`, Kubeflow's notebook controller (emulated in `actors.py` from its
source) makes each server's StatefulSet, Service and VirtualService, and the workbench only what the
controller does not: the two never write the same object, together they make a working server, and
the garbage collector removes the controller's objects with the Notebook."""

from __future__ import annotations

import asyncio
from typing import Any

import kmock as kmock_lib

from cube_jupyter.kube.client import KubeClient
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.k8s_schemas import validate_object
from tests.kubernetes.actors import (
    ACTOR_AGENT,
    garbage_collector_runs,
    kubelet_sets_status,
    notebook_controller_reconciles,
    ready_status,
    statefulset_controller_creates_pod,
)
from tests.kubernetes.emulator import ApiServerEmulator
from tests.waiting import wait_until_async

NS = "cube-alice"
KINDS_IN_NAMESPACE = {
    "security.istio.io/v1/authorizationpolicies": "AuthorizationPolicy",
    "v1/persistentvolumeclaims": "PersistentVolumeClaim",
    "v1/configmaps": "ConfigMap",
    "kubeflow.org/v1/notebooks": "Notebook",
    "apps/v1/statefulsets": "StatefulSet",
    "v1/services": "Service",
    "networking.istio.io/v1/virtualservices": "VirtualService",
    "v1/pods": "Pod",
}


def workbench_writes(kmock: ApiServerEmulator, action: str) -> list[str]:
    """The resources the workbench (not the tests' cluster actors) sent `action` requests for."""
    return [
        str(r.resource.plural)
        for r in kmock
        if r.action == kmock_lib.action[action] and r.resource and r.headers.get("User-Agent") != ACTOR_AGENT
    ]


def in_namespace(kmock: ApiServerEmulator) -> set[tuple[str, str]]:
    return {(kind, name) for res, kind in KINDS_IN_NAMESPACE.items() for name in kmock.names(res, NS)}


async def make_server(backend: KubernetesNotebookBackend, kube: KubeClient) -> list[dict[str, Any]]:
    """The workbench creates; the controller reconciles; the StatefulSet controller and the kubelet run
    the pod. Returns what the notebook controller wrote."""
    spec = NotebookSpec(user="alice", name="nb1", profile=backend.settings.profile("cpu"))
    await backend.create_server(spec)
    written = await notebook_controller_reconciles(kube, NS, "nb1")
    pod = await statefulset_controller_creates_pod(kube, NS, "nb1")
    await kubelet_sets_status(kube, NS, pod["metadata"]["name"], ready_status())
    return written


async def test_the_workbench_and_the_controller_never_write_the_same_object(
    kmock: ApiServerEmulator, kube: KubeClient, backend: KubernetesNotebookBackend
) -> None:
    written = await make_server(backend, kube)
    assert workbench_writes(kmock, "CREATE") == [
        "authorizationpolicies",
        "persistentvolumeclaims",
        "configmaps",
        "notebooks",
    ]
    # The controller created its three (a 409 would have raised), each owned by the Notebook.
    notebook = kmock.find("kubeflow.org/v1/notebooks", NS, "nb1")
    assert notebook is not None
    assert [(o["kind"], o["metadata"]["name"]) for o in written] == [
        ("StatefulSet", "nb1"),
        ("Service", "nb1"),
        ("VirtualService", "notebook-cube-alice-nb1"),
    ]
    for obj in written:
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "Notebook",
            notebook["metadata"]["uid"],
            True,
        )
        validate_object(obj, strict=True)
    assert in_namespace(kmock) == {
        ("AuthorizationPolicy", "notebook-nb1"),
        ("PersistentVolumeClaim", "nb1-workspace"),
        ("ConfigMap", "nb1-cube-config"),
        ("Notebook", "nb1"),
        ("StatefulSet", "nb1"),
        ("Service", "nb1"),
        ("VirtualService", "notebook-cube-alice-nb1"),
        ("Pod", "nb1-0"),
    }
    # Its periodic reconcile finds its own objects as it left them: nothing to fight over.
    again = await notebook_controller_reconciles(kube, NS, "nb1")
    assert [o["spec"] for o in again] == [o["spec"] for o in written]


async def test_the_controllers_route_reaches_the_server_the_workbench_configured(
    kmock: ApiServerEmulator, kube: KubeClient, backend: KubernetesNotebookBackend
) -> None:
    """Jupyter's base_url, NB_PREFIX, the URL the workbench reports, the culler's address and the
    owner-only policy all agree with what the controller routes."""
    await make_server(backend, kube)
    server = await wait_until_async(
        lambda: backend.get_server("alice", "nb1"), until=lambda s: s and s.status is ServerStatus.RUNNING
    )
    vs = kmock.find("networking.istio.io/v1/virtualservices", NS, "notebook-cube-alice-nb1")
    service = kmock.find("v1/services", NS, "nb1")
    pod = kmock.find("v1/pods", NS, "nb1-0")
    policy = kmock.find("security.istio.io/v1/authorizationpolicies", NS, "notebook-nb1")
    assert vs is not None and service is not None and pod is not None and policy is not None
    [route] = vs["spec"]["http"]
    assert route["match"] == [{"uri": {"prefix": server.url}}] and route["rewrite"] == {"uri": server.url}
    assert server.url == "/notebook/cube-alice/nb1/"
    [container] = pod["spec"]["containers"]
    assert f"--ServerApp.base_url={server.url}" in container["args"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NB_PREFIX"] == server.url.rstrip("/")  # the controller kept the workbench's, equal to its own
    assert [e["name"] for e in container["env"]].count("NB_PREFIX") == 1
    [port] = service["spec"]["ports"]
    assert port["targetPort"] == container["readinessProbe"]["httpGet"]["port"] == 8888
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    host = route["route"][0]["destination"]["host"]
    assert backend.culler.server_url(NS, "nb1") == f"http://{host}{server.url}"


async def test_stop_start_and_delete_with_the_controller_and_the_garbage_collector(
    kmock: ApiServerEmulator, kube: KubeClient, backend: KubernetesNotebookBackend
) -> None:
    await make_server(backend, kube)
    await wait_until_async(
        lambda: backend.get_server("alice", "nb1"), until=lambda s: s and s.status is ServerStatus.RUNNING
    )
    # Stop: the workbench annotates the Notebook, the controller scales its StatefulSet to 0.
    await backend.set_stopped("alice", "nb1", True)
    [statefulset, *_] = await notebook_controller_reconciles(kube, NS, "nb1")
    assert statefulset["spec"]["replicas"] == 0
    await asyncio.to_thread(kube.delete, "v1", "Pod", NS, "nb1-0")
    await wait_until_async(
        lambda: backend.get_server("alice", "nb1"), until=lambda s: s and s.status is ServerStatus.STOPPED
    )
    await backend.set_stopped("alice", "nb1", False)
    [statefulset, *_] = await notebook_controller_reconciles(kube, NS, "nb1")
    assert statefulset["spec"]["replicas"] == 1
    await statefulset_controller_creates_pod(kube, NS, "nb1")

    # Delete: the workbench deletes the Notebook and its config; the garbage collector the rest.
    deleting = asyncio.create_task(backend.delete_server("alice", "nb1"))
    await wait_until_async(lambda: kmock.find("kubeflow.org/v1/notebooks", NS, "nb1") is None)
    assert await garbage_collector_runs(kube) == [
        f"StatefulSet {NS}/nb1",
        f"Service {NS}/nb1",
        f"VirtualService {NS}/notebook-cube-alice-nb1",
        f"Pod {NS}/nb1-0",
    ]
    await asyncio.wait_for(deleting, 30)
    assert workbench_writes(kmock, "DELETE") == ["notebooks", "configmaps", "authorizationpolicies"]
    assert in_namespace(kmock) == {("PersistentVolumeClaim", "nb1-workspace")}

    # The same name again: the workspace is adopted, the controller makes fresh objects of its own.
    await make_server(backend, kube)
    notebook = kmock.find("kubeflow.org/v1/notebooks", NS, "nb1")
    service = kmock.find("v1/services", NS, "nb1")
    assert notebook is not None and service is not None
    assert service["metadata"]["ownerReferences"][0]["uid"] == notebook["metadata"]["uid"]
    assert len(kmock.requests_of("create", "v1/persistentvolumeclaims")) == 2  # the second got a 409
    assert kmock.names("v1/persistentvolumeclaims", NS) == ["nb1-workspace"]

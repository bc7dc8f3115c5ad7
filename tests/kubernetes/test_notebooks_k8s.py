"""The Kubernetes notebook backend over real HTTP against the KMock API server emulator."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.render import STOPPED_ANNOTATION, render_notebook_objects
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.kubernetes.actors import (
    controller_creates_pod,
    kubelet_sets_status,
    ready_status,
    scheduler_warns,
    unschedulable_status,
)
from tests.kubernetes.conftest import connect, make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.waiting import wait_until_async

NOTEBOOKS = "kubeflow.org/v1/notebooks"
PVCS = "v1/persistentvolumeclaims"
VSVCS = "networking.istio.io/v1/virtualservices"
POLICIES = "security.istio.io/v1/authorizationpolicies"


def spec(settings: Settings, name: str = "nb1", user: str = "alice", profile: str = "cpu") -> NotebookSpec:
    return NotebookSpec(user=user, name=name, profile=settings.notebooks.profile(profile))


def server_objects(kmock: ApiServerEmulator, ns: str = "cube-alice") -> dict[str, list[str]]:
    return {res: kmock.names(res, ns) for res in (PVCS, NOTEBOOKS, VSVCS, POLICIES)}


def writes(kmock: ApiServerEmulator, action: str) -> list[str]:
    """The resources of every `action` ('CREATE', 'DELETE') request, in the order the API got them."""
    return [str(r.resource.plural) for r in kmock if r.action == kmock_lib.action[action] and r.resource]


async def test_create_makes_the_rendered_objects_with_api_metadata(
    kmock: ApiServerEmulator, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    server = await backend.create_server(spec(settings, profile="gpu"))

    assert server_objects(kmock) == {
        PVCS: ["nb1-workspace"],
        NOTEBOOKS: ["nb1"],
        VSVCS: [],  # the notebook controller's (test_kubeflow_controller_k8s)
        POLICIES: ["notebook-nb1"],
    }
    for rendered in render_notebook_objects(spec(settings, profile="gpu"), settings.notebooks):
        meta = rendered["metadata"]
        res = {
            "PersistentVolumeClaim": PVCS,
            "ConfigMap": "v1/configmaps",
            "Notebook": NOTEBOOKS,
            "AuthorizationPolicy": POLICIES,
        }[rendered["kind"]]
        stored = kmock.find(res, meta["namespace"], meta["name"])
        assert stored is not None
        body = "data" if rendered["kind"] == "ConfigMap" else "spec"
        assert stored[body] == rendered[body]
        assert stored["metadata"]["labels"] == meta["labels"]
        assert stored["metadata"]["annotations"] == meta["annotations"]
        # What the real API adds and the emulator subclass emulates.
        assert stored["metadata"]["uid"] and stored["metadata"]["resourceVersion"].isdigit()
        assert stored["metadata"]["creationTimestamp"].endswith("Z")
    creates = kmock.requests_of("create", NOTEBOOKS)
    assert len(creates) == 1

    assert server.user == "alice" and server.name == "nb1" and server.profile == "gpu"
    assert server.namespace == "cube-alice"
    assert server.url == "/notebook/cube-alice/nb1/"
    assert server.status is ServerStatus.PENDING
    assert server.resources.gpu == 1 and server.resources.gpu_resource == "nvidia.com/gpu"
    assert server.resources.cpu == "4" and server.resources.memory == "16Gi"
    assert server.created.endswith("Z")
    assert backend.get_server("alice", "nb1") is not None


async def test_vgpu_profile_reports_its_extended_resource(
    backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    server = await backend.create_server(spec(settings, profile="vgpu"))
    assert (server.resources.gpu, server.resources.gpu_resource) == (2, "tencent.com/vcuda-core")
    assert backend.get_server("alice", "nb1") == server


async def test_list_and_get_are_served_from_the_cache(
    kmock: ApiServerEmulator, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    await backend.create_server(spec(settings, "nb1"))
    await backend.create_server(spec(settings, "nb2", profile="gpu"))
    await backend.create_server(spec(settings, "other", user="bob"))
    lists_before = {res: len(kmock.requests_of("list", res)) for res in (NOTEBOOKS, "v1/pods", "v1/events")}
    requests_before = len(list(kmock))

    for _ in range(200):
        mine = backend.list_servers("alice")
        assert sorted(s.name for s in mine) == ["nb1", "nb2"]
        assert backend.get_server("alice", "nb2") is not None

    assert {res: len(kmock.requests_of("list", res)) for res in lists_before} == lists_before
    assert lists_before == {NOTEBOOKS: 1, "v1/pods": 1, "v1/events": 1}  # the informers' initial lists
    assert len(list(kmock)) == requests_before  # no API call of any kind per read
    assert [s.name for s in backend.list_servers("bob")] == ["other"]
    assert backend.get_server("bob", "nb1") is None  # users are separated
    assert backend.get_server("alice", "other") is None
    assert sorted(s.name for s in backend.list_servers(None)) == ["nb1", "nb2", "other"]


async def test_pod_turning_ready_makes_the_server_running(
    kube: KubeClient, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    await backend.create_server(spec(settings))
    server = backend.get_server("alice", "nb1")
    assert server is not None and server.status is ServerStatus.PENDING
    assert server.reason == "waiting for the server's pod to be created"

    pod = await controller_creates_pod(kube, "cube-alice", "nb1")
    await wait_until_async(lambda: backend.pods.get("cube-alice", pod["metadata"]["name"]))
    server = backend.get_server("alice", "nb1")
    assert server is not None and server.status is ServerStatus.PENDING

    await kubelet_sets_status(kube, "cube-alice", "nb1-0", ready_status())
    running = await wait_until_async(
        lambda: (s := backend.get_server("alice", "nb1")) and s.status is ServerStatus.RUNNING
    )
    assert running
    server = backend.get_server("alice", "nb1")
    assert server is not None and server.reason is None and server.gpus_held == 0


async def test_pending_server_shows_the_schedulers_message(
    kube: KubeClient, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    await backend.create_server(spec(settings, profile="gpu"))
    await controller_creates_pod(kube, "cube-alice", "nb1")
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."
    await kubelet_sets_status(kube, "cube-alice", "nb1-0", unschedulable_status(message))

    def reason() -> str | None:
        server = backend.get_server("alice", "nb1")
        return server.reason if server and server.status is ServerStatus.PENDING else None

    assert await wait_until_async(lambda: reason() == message)
    server = backend.get_server("alice", "nb1")
    assert server is not None and server.gpus_held == 1  # a pending server still holds its GPU quota


async def test_warning_events_explain_a_pending_pod(
    kube: KubeClient, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    await backend.create_server(spec(settings, profile="gpu"))
    pod = await controller_creates_pod(kube, "cube-alice", "nb1")
    # An event about an earlier pod of the same name (another uid) must not count.
    stale = {**pod, "metadata": {**pod["metadata"], "uid": "an-earlier-pod"}}
    await scheduler_warns(kube, stale, "FailedMount", "an old pod's problem", when="2030-01-01T00:00:00Z")
    await scheduler_warns(
        kube,
        pod,
        "FailedScheduling",
        "0/2 nodes are available: 2 Insufficient cpu.",
        when="2025-01-01T00:00:00Z",
    )
    await scheduler_warns(
        kube,
        pod,
        "FailedScheduling",
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        when="2025-01-01T00:01:00Z",
    )

    expected = "FailedScheduling: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    assert await wait_until_async(lambda: (s := backend.get_server("alice", "nb1")) and s.reason == expected)


async def test_warnings_on_the_workload_explain_a_pod_that_is_never_created(
    kube: KubeClient, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    """ResourceQuota exceeded (the usual GPU case), a missing service account, PodSecurity: the
    StatefulSet controller cannot create the pod and says so on the StatefulSet, not on a pod."""
    created = await backend.create_server(spec(settings, profile="gpu"))
    assert created.reason == "waiting for the server's pod to be created"
    notebook = await asyncio.to_thread(kube.get, "kubeflow.org/v1", "Notebook", "cube-alice", "nb1")
    # The Notebook controller's StatefulSet of the same name (not cached by the backend, not needed).
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "nb1", "namespace": "cube-alice"},
    }
    # An earlier server of the same name had its own problem: older than this Notebook, it must not count.
    await scheduler_warns(
        kube, statefulset, "FailedCreate", "an old server's problem", when="2020-01-01T00:00:00Z"
    )
    quota = (
        'create Pod nb1-0 in StatefulSet nb1 failed error: pods "nb1-0" is forbidden: exceeded quota: '
        "gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: "
        "requests.nvidia.com/gpu=4"
    )
    await scheduler_warns(kube, statefulset, "FailedCreate", quota, when="2099-01-01T00:00:00Z")
    assert notebook["metadata"]["creationTimestamp"] < "2099"

    expected = f"FailedCreate: {quota}"
    assert await wait_until_async(lambda: (s := backend.get_server("alice", "nb1")) and s.reason == expected)
    server = backend.get_server("alice", "nb1")
    assert server is not None and server.status is ServerStatus.PENDING and server.gpus_held == 1

    # Once the pod exists, its own state explains it.
    pod = await controller_creates_pod(kube, "cube-alice", "nb1")
    await scheduler_warns(kube, pod, "FailedScheduling", "0/3 nodes are available.")
    assert await wait_until_async(
        lambda: (
            (s := backend.get_server("alice", "nb1"))
            and s.reason == "FailedScheduling: 0/3 nodes are available."
        )
    )


async def test_only_warnings_about_servers_in_user_namespaces_are_cached(
    kmock: ApiServerEmulator, kube: KubeClient, backend: KubernetesNotebookBackend
) -> None:
    """The event cache holds Warning events of pods and workloads in namespaces the template makes,
    not every warning of the cluster."""
    kept = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "nb1", "namespace": "cube-alice"},
    }
    other_kind = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1", "namespace": "cube-alice"},
    }
    other_namespace = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "kube-system"},
    }
    kmock.preload([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}])
    for obj in (other_kind, other_namespace, kept):
        await scheduler_warns(kube, obj, "Failed", "something")

    def cached() -> list[tuple[str, str]]:
        return [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in backend.events.list()]

    # One watch delivers the events in the order they were made: once the last one is cached, the
    # others have been seen (and dropped) before it.
    await wait_until_async(lambda: ("StatefulSet", "nb1") in cached(), what="the StatefulSet's event")
    assert cached() == [("StatefulSet", "nb1")]


async def test_crash_looping_container_fails_the_server(
    kube: KubeClient, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    await backend.create_server(spec(settings))
    await controller_creates_pod(kube, "cube-alice", "nb1")
    status = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
        "containerStatuses": [
            {
                "name": "nb1",
                "ready": False,
                "restartCount": 4,
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": "back-off 1m20s restarting failed container",
                    }
                },
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }
        ],
    }
    await kubelet_sets_status(kube, "cube-alice", "nb1-0", status)
    server = await wait_until_async(
        lambda: (s := backend.get_server("alice", "nb1")) and s.status is ServerStatus.FAILED and s
    )
    assert server.reason == "CrashLoopBackOff: back-off 1m20s restarting failed container (last exit code 1)"
    assert server.gpus_held == 0


async def test_stop_and_start_patch_the_stop_annotation(
    kmock: ApiServerEmulator, kube: KubeClient, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    await backend.create_server(spec(settings, profile="gpu"))
    await controller_creates_pod(kube, "cube-alice", "nb1")
    await kubelet_sets_status(kube, "cube-alice", "nb1-0", ready_status())
    await wait_until_async(
        lambda: (s := backend.get_server("alice", "nb1")) and s.status is ServerStatus.RUNNING
    )

    server = await backend.set_stopped("alice", "nb1", True)
    notebook = kmock.find(NOTEBOOKS, "cube-alice", "nb1")
    assert notebook is not None
    assert notebook["metadata"]["annotations"][STOPPED_ANNOTATION].endswith("Z")
    assert server.status is ServerStatus.STOPPING  # the pod is still there
    # The notebook controller scales the StatefulSet to zero: the pod goes away.
    await asyncio.to_thread(kube.delete, "v1", "Pod", "cube-alice", "nb1-0")
    server = await wait_until_async(
        lambda: (s := backend.get_server("alice", "nb1")) and s.status is ServerStatus.STOPPED and s
    )
    assert server.gpus_held == 0

    server = await backend.set_stopped("alice", "nb1", False)
    notebook = kmock.find(NOTEBOOKS, "cube-alice", "nb1")
    assert notebook is not None and STOPPED_ANNOTATION not in notebook["metadata"]["annotations"]
    assert server.status is ServerStatus.PENDING
    patches = kmock.requests_of("update", NOTEBOOKS)
    assert [p.headers["Content-Type"] for p in patches] == ["application/merge-patch+json"] * 2


async def test_statefulset_kind_stops_by_replicas_and_deletes_its_service(
    kmock: ApiServerEmulator, make_backend: Any
) -> None:
    settings = make_settings(resource_kind="StatefulSet")
    backend: KubernetesNotebookBackend = await make_backend(settings)
    await backend.create_server(spec(settings))
    assert kmock.names("apps/v1/statefulsets", "cube-alice") == ["nb1"]
    assert kmock.names("v1/services", "cube-alice") == ["nb1"]
    assert kmock.names(NOTEBOOKS) == []

    server = await backend.set_stopped("alice", "nb1", True)
    statefulset = kmock.find("apps/v1/statefulsets", "cube-alice", "nb1")
    assert statefulset is not None and statefulset["spec"]["replicas"] == 0
    assert server.status is ServerStatus.STOPPED

    await backend.delete_server("alice", "nb1")
    assert kmock.names("apps/v1/statefulsets") == [] and kmock.names("v1/services") == []
    assert kmock.names(PVCS, "cube-alice") == ["nb1-workspace"]


async def test_delete_keeps_only_the_workspace_which_a_new_server_adopts(
    kmock: ApiServerEmulator, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    await backend.create_server(spec(settings))
    pvc_uid = kmock.find(PVCS, "cube-alice", "nb1-workspace")["metadata"]["uid"]  # type: ignore[index]

    await backend.delete_server("alice", "nb1")
    assert server_objects(kmock) == {PVCS: ["nb1-workspace"], NOTEBOOKS: [], VSVCS: [], POLICIES: []}
    assert backend.get_server("alice", "nb1") is None
    deletes = kmock.requests_of("delete", NOTEBOOKS)
    # Foreground: the Notebook stays (terminating) until its StatefulSet and pod are gone.
    assert deletes[0].data["propagationPolicy"] == "Foreground"

    with pytest.raises(NotFound, match="user 'alice' has no server named 'nb1'"):
        await backend.delete_server("alice", "nb1")

    await backend.create_server(spec(settings))  # the PVC answers 409 and is adopted
    assert kmock.find(PVCS, "cube-alice", "nb1-workspace")["metadata"]["uid"] == pvc_uid  # type: ignore[index]
    assert server_objects(kmock)[NOTEBOOKS] == ["nb1"]


async def test_failed_create_rolls_back_everything_it_made(
    kmock: ApiServerEmulator, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    kmock.fail_next(
        "create",
        NOTEBOOKS,
        403,
        "notebooks.kubeflow.org is forbidden: User "
        '"system:serviceaccount:kubeflow:cube" cannot create resource "notebooks"',
    )
    with pytest.raises(BackendUnavailable) as caught:
        await backend.create_server(spec(settings))
    assert caught.value.message.startswith("creating Notebook cube-alice/nb1 was refused by Kubernetes")
    assert "serviceaccount" not in caught.value.message  # the workbench's RBAC is not the user's business

    assert server_objects(kmock) == {PVCS: [], NOTEBOOKS: [], VSVCS: [], POLICIES: []}
    # Rolled back newest first: the policy that guards the pod goes last.
    assert writes(kmock, "DELETE") == ["configmaps", "persistentvolumeclaims", "authorizationpolicies"]
    await wait_until_async(lambda: backend.workloads.get("cube-alice", "nb1") is None)
    assert backend.list_servers("alice") == []

    server = await backend.create_server(spec(settings))  # the failure was transient: now it works
    assert server.name == "nb1"


async def test_rollback_never_deletes_an_adopted_workspace(
    kmock: ApiServerEmulator, kube: KubeClient, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    [workspace] = [
        o
        for o in render_notebook_objects(spec(settings), settings.notebooks)
        if o["kind"] == "PersistentVolumeClaim"
    ]
    await asyncio.to_thread(kube.create, workspace)  # kept from an earlier server named nb1
    kmock.fail_next("create", NOTEBOOKS, 500, "etcdserver: request timed out")

    with pytest.raises(
        BackendUnavailable, match="the Kubernetes API answered 500: etcdserver: request timed out"
    ):
        await backend.create_server(spec(settings))
    assert server_objects(kmock) == {PVCS: ["nb1-workspace"], NOTEBOOKS: [], VSVCS: [], POLICIES: []}
    assert kmock.requests_of("delete", PVCS) == []


async def test_duplicate_server_is_a_conflict(
    kmock: ApiServerEmulator, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    await backend.create_server(spec(settings))
    # The backend's own check is the API's 409 on the workload: atomic across replicas and the CLI.
    with pytest.raises(Conflict, match="user 'alice' already has a server named 'nb1'") as caught:
        await backend.create_server(spec(settings))
    assert caught.value.field == "name"
    assert len(kmock.requests_of("create", NOTEBOOKS)) == 2
    assert server_objects(kmock)[NOTEBOOKS] == ["nb1"] and server_objects(kmock)[POLICIES] == ["notebook-nb1"]
    # Through the service the cache answers first: no API call at all.
    with pytest.raises(Conflict, match="user 'alice' already has a server named 'nb1'"):
        await NotebookService(settings.notebooks, backend).create("alice", {"name": "nb1"})
    assert len(kmock.requests_of("create", NOTEBOOKS)) == 2


async def test_api_conflict_from_a_concurrent_create_keeps_the_other_servers_objects(
    kmock: ApiServerEmulator, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    """Another workbench replica created the same server between our cache check and our create."""
    await backend.create_server(spec(settings))
    objects = render_notebook_objects(spec(settings), settings.notebooks)
    with pytest.raises(Conflict, match="already has a server named 'nb1'"):
        await asyncio.to_thread(backend._create_all, spec(settings), "cube-alice", objects)
    assert server_objects(kmock) == {
        PVCS: ["nb1-workspace"],
        NOTEBOOKS: ["nb1"],
        VSVCS: [],
        POLICIES: ["notebook-nb1"],
    }
    assert kmock.requests_of("delete", PVCS) == []


async def test_missing_user_namespace_is_a_clear_error(
    kmock: ApiServerEmulator, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    with pytest.raises(NotFound) as caught:
        await backend.create_server(spec(settings, user="carol"))
    assert caught.value.message.startswith("namespace 'cube-carol' of user 'carol' does not exist")
    assert caught.value.field == "user"
    assert kmock.names(PVCS) == [] and kmock.names(NOTEBOOKS) == []


async def test_list_failure_at_startup_is_backend_unavailable(
    kmock: ApiServerEmulator, make_backend: Any
) -> None:
    kmock.fail_next("list", NOTEBOOKS, 500, "etcdserver: leader changed", times=None)
    with pytest.raises(BackendUnavailable) as caught:
        await make_backend(make_settings(), sync_timeout=1.0)
    message = caught.value.message
    assert message.startswith("could not load Notebook objects from the Kubernetes API at http://127.0.0.1:")
    assert message.endswith(
        "listing notebooks.kubeflow.org failed: the Kubernetes API answered 500: etcdserver: leader changed"
    )
    assert "Traceback" not in message
    assert len(kmock.requests_of("list", NOTEBOOKS)) >= 2  # it retried with backoff meanwhile


async def test_cluster_without_the_notebook_crd_is_a_clear_error(
    make_backend: Any, kmock: ApiServerEmulator
) -> None:
    del kmock.resources[NOTEBOOKS]
    with pytest.raises(
        BackendUnavailable,
        match=re.escape(
            "listing notebooks.kubeflow.org failed: not found: "
            "the server could not find the requested resource"
        ),
    ):
        await make_backend(make_settings(), sync_timeout=1.0)


async def test_unreachable_api_is_backend_unavailable() -> None:
    settings = make_settings()
    backend = KubernetesNotebookBackend(
        settings.notebooks, connect(settings, "http://127.0.0.1:9"), sync_timeout=1.0
    )
    try:
        with pytest.raises(
            BackendUnavailable, match=r"the Kubernetes API at http://127.0.0.1:9 is unreachable"
        ):
            await backend.start()
    finally:
        await backend.cluster.close()


async def test_list_latency_with_500_cached_servers() -> None:
    from tests.kubernetes.listbench import measure_list_latency

    result = await measure_list_latency(servers=500, users=50, rounds=20)
    print(result)
    assert result["servers_cached"] == 500
    assert result["api_list_calls_during_measurement"] == 0
    # The user index works, asserted on structure rather than on timings that vary with machine load:
    # one user's listing reads only that user's entries and never walks the whole cache.
    assert result["indexed_entries_per_user"] == 500 // 50
    assert result["full_cache_scans_for_one_user_lists"] == 0


async def test_start_without_supervision_never_culls(make_backend: Any, kmock: ApiServerEmulator) -> None:
    """The CLI starts the backend with supervise=False: informers for reads, but no culler."""
    settings = make_settings(cull_idle_seconds=60)
    backend = KubernetesNotebookBackend(
        settings.notebooks, connect(settings, str(kmock.url).rstrip("/")), sync_timeout=10
    )
    try:
        await backend.start(supervise=False)
        assert backend.workloads.has_synced and backend._culling is None
    finally:
        await backend.close()
        await backend.cluster.close()
    supervised: KubernetesNotebookBackend = await make_backend(settings)
    assert supervised._culling is not None and not supervised._culling.done()

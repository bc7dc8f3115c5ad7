"""The AuthorizationPolicy guards a tokenless pod: it is created before anything else and deleted only
after the pod is gone. Objects kept from an earlier server are reused only when they are the user's."""

from __future__ import annotations

import asyncio
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.config import Settings
from cube_jupyter.errors import Conflict
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.labels import USER_ANNOTATION
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.render import render_notebook_objects
from cube_jupyter.notebooks.spec import NotebookSpec
from tests.kubernetes.actors import controller_creates_pod
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.waiting import wait_until_async

NOTEBOOKS = "kubeflow.org/v1/notebooks"
PVCS = "v1/persistentvolumeclaims"
VSVCS = "networking.istio.io/v1/virtualservices"
POLICIES = "security.istio.io/v1/authorizationpolicies"


def spec(settings: Settings, name: str = "nb1", user: str = "alice") -> NotebookSpec:
    return NotebookSpec(user=user, name=name, profile=settings.notebooks.profile("cpu"))


def writes(kmock: ApiServerEmulator, action: str) -> list[str]:
    return [str(r.resource.plural) for r in kmock if r.action == kmock_lib.action[action] and r.resource]


def rendered(settings: Settings, kind: str, **kwargs: Any) -> dict[str, Any]:
    [obj] = [
        o for o in render_notebook_objects(spec(settings, **kwargs), settings.notebooks) if o["kind"] == kind
    ]
    return obj


async def test_policy_is_created_first_and_deleted_after_the_pod_is_gone(
    kmock: ApiServerEmulator,
    kube: KubeClient,
    backend: KubernetesNotebookBackend,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await backend.create_server(spec(settings))
    assert writes(kmock, "CREATE") == [
        "authorizationpolicies",
        "persistentvolumeclaims",
        "configmaps",
        "notebooks",  # its Service and VirtualService are the notebook controller's
    ]
    await controller_creates_pod(kube, "cube-alice", "nb1")
    await wait_until_async(lambda: backend.pods.get("cube-alice", "nb1-0"))

    # The delete waits on the pod cache; count its waits that begin once the workload is gone.
    waits_on_the_pod = 0
    wait_for = backend.pods.wait_for

    def counting_wait_for(predicate: Any, timeout: float | None = None) -> bool:
        nonlocal waits_on_the_pod
        if backend.workloads.get("cube-alice", "nb1") is None:
            waits_on_the_pod += 1
        return wait_for(predicate, timeout)

    monkeypatch.setattr(backend.pods, "wait_for", counting_wait_for)
    deleting = asyncio.create_task(backend.delete_server("alice", "nb1"))
    await wait_until_async(lambda: kmock.find(NOTEBOOKS, "cube-alice", "nb1") is None)
    await wait_until_async(lambda: waits_on_the_pod >= 2, what="the delete to wait on the running pod")
    # The route and the workload are gone, the pod still runs: it stays guarded.
    assert not deleting.done()
    assert kmock.find(POLICIES, "cube-alice", "notebook-nb1") is not None
    assert writes(kmock, "DELETE") == ["notebooks", "configmaps"]

    await asyncio.to_thread(kube.delete, "v1", "Pod", "cube-alice", "nb1-0")  # what the GC does
    await asyncio.wait_for(deleting, 10)
    assert kmock.find(POLICIES, "cube-alice", "notebook-nb1") is None
    assert writes(kmock, "DELETE") == ["notebooks", "configmaps", "pods", "authorizationpolicies"]
    assert kmock.names(PVCS, "cube-alice") == ["nb1-workspace"]


async def test_statefulset_kind_deletes_the_policy_after_workload_and_service(
    kmock: ApiServerEmulator, make_backend: Any
) -> None:
    settings = make_settings(resource_kind="StatefulSet")
    backend: KubernetesNotebookBackend = await make_backend(settings)
    await backend.create_server(spec(settings))
    assert writes(kmock, "CREATE")[0] == "authorizationpolicies"
    await backend.delete_server("alice", "nb1")
    assert writes(kmock, "DELETE") == [
        "virtualservices",
        "statefulsets",
        "services",
        "configmaps",
        "authorizationpolicies",
    ]


async def test_a_pod_that_will_not_go_keeps_its_policy_which_a_new_server_adopts(
    kmock: ApiServerEmulator, kube: KubeClient, make_backend: Any, settings: Settings
) -> None:
    backend: KubernetesNotebookBackend = await make_backend(settings, delete_wait_seconds=0.5)
    await backend.create_server(spec(settings))
    await controller_creates_pod(kube, "cube-alice", "nb1")
    await wait_until_async(lambda: backend.pods.get("cube-alice", "nb1-0"))

    await backend.delete_server("alice", "nb1")  # returns; the stuck pod stays guarded
    assert kmock.find(POLICIES, "cube-alice", "notebook-nb1") is not None
    assert backend.get_server("alice", "nb1") is None

    await asyncio.to_thread(kube.delete, "v1", "Pod", "cube-alice", "nb1-0")
    await backend.create_server(spec(settings))  # the kept policy is adopted and brought up to date
    policy = kmock.find(POLICIES, "cube-alice", "notebook-nb1")
    assert policy is not None and policy["spec"] == rendered(settings, "AuthorizationPolicy")["spec"]
    assert kmock.names(NOTEBOOKS, "cube-alice") == ["nb1"]


@pytest.mark.parametrize("kind", ["PersistentVolumeClaim", "AuthorizationPolicy"])
async def test_another_users_leftover_is_never_adopted(
    kmock: ApiServerEmulator,
    kube: KubeClient,
    backend: KubernetesNotebookBackend,
    settings: Settings,
    kind: str,
) -> None:
    """Names can meet in one namespace (a shared namespace template, a slug collision): alice must
    not get a workspace or a policy that carries someone else's name."""
    foreign = rendered(settings, kind)
    foreign["metadata"]["annotations"][USER_ANNOTATION] = "mallory"
    await asyncio.to_thread(kube.create, foreign)

    with pytest.raises(Conflict) as caught:
        await backend.create_server(spec(settings))
    assert caught.value.field == "name"
    assert "does not belong to user 'alice'" in caught.value.message
    assert kmock.names(NOTEBOOKS, "cube-alice") == [] and kmock.names(VSVCS, "cube-alice") == []
    # Only the foreign object is left, untouched; whatever this create made was rolled back.
    left = {res: kmock.names(res, "cube-alice") for res in (PVCS, POLICIES)}
    assert left == {
        PVCS: ["nb1-workspace"] if kind == "PersistentVolumeClaim" else [],
        POLICIES: ["notebook-nb1"] if kind == "AuthorizationPolicy" else [],
    }

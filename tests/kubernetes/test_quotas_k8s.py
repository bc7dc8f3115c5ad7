"""Quotas through the NotebookService on the Kubernetes backend (over the KMock emulator).

GPU quotas are tested here because the local backend of this machine has no GPU to hand out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from cube_jupyter.errors import Conflict, QuotaExceeded
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import ServerStatus
from tests.kubernetes.actors import controller_creates_pod, kubelet_sets_status
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.waiting import wait_until_async

NOTEBOOKS = "kubeflow.org/v1/notebooks"
POLICIES = "security.istio.io/v1/authorizationpolicies"
PVCS = "v1/persistentvolumeclaims"


def crash_loop_status() -> dict[str, Any]:
    return {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
        "containerStatuses": [
            {
                "name": "g1",
                "ready": False,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 1}},
            }
        ],
    }


async def test_gpu_quota_counts_running_servers_and_names_the_limit(
    kmock: ApiServerEmulator, make_backend: Callable[..., Any]
) -> None:
    settings = make_settings(gpu_quota_per_user=2)
    service = NotebookService(settings.notebooks, await make_backend(settings))
    await service.create("alice", {"name": "g1", "profile": "gpu"})
    with pytest.raises(QuotaExceeded, match="asks for 2 more"):  # vGPU units count as well
        await service.create("alice", {"name": "v1", "profile": "vgpu"})
    await service.create("alice", {"name": "g2", "profile": "gpu"})
    with pytest.raises(QuotaExceeded) as caught:
        await service.create("alice", {"name": "g3", "profile": "gpu"})
    assert caught.value.status == 403
    assert "limit is 2" in caught.value.message and "gpu_quota_per_user" in caught.value.message
    assert kmock.names(NOTEBOOKS, "cube-alice") == ["g1", "g2"]  # nothing half-created

    # another user's quota is their own; CPU servers need none
    await service.create("bob", {"name": "g1", "profile": "gpu"})
    await service.create("alice", {"name": "cpu1", "profile": "cpu"})

    # a stopped server holds no GPU: its GPU can go to a new server, and it cannot start again
    await service.set_stopped("alice", "g1", True)
    await wait_until_async(lambda: service.get("alice", "g1").status == ServerStatus.STOPPED)
    await service.create("alice", {"name": "g3", "profile": "gpu"})
    with pytest.raises(QuotaExceeded):
        await service.set_stopped("alice", "g1", False)
    await service.delete("alice", "g3")
    await wait_until_async(lambda: all(s.name != "g3" for s in service.list_servers("alice")))
    started = await service.set_stopped("alice", "g1", False)
    assert started.name == "g1"


async def test_server_count_quota(make_backend: Callable[..., Any]) -> None:
    settings = make_settings(max_servers_per_user=1)
    service = NotebookService(settings.notebooks, await make_backend(settings))
    await service.create("alice", {"name": "a"})
    with pytest.raises(QuotaExceeded, match="limit is 1"):
        await service.create("alice", {"name": "b"})


async def test_a_failed_gpu_server_still_counts_and_can_be_stopped(
    kmock: ApiServerEmulator, kube: KubeClient, make_backend: Callable[..., Any]
) -> None:
    """A pod in CrashLoopBackOff keeps its GPU: the server is failed but holds quota until stopped."""
    settings = make_settings(gpu_quota_per_user=1)
    service = NotebookService(settings.notebooks, await make_backend(settings))
    await service.create("alice", {"name": "g1", "profile": "gpu"})
    await controller_creates_pod(kube, "cube-alice", "g1")
    await kubelet_sets_status(kube, "cube-alice", "g1-0", crash_loop_status())
    failed = await wait_until_async(
        lambda: (s := service.get("alice", "g1")).status == ServerStatus.FAILED and s
    )
    assert failed.gpus_held == 1 and "stop" in failed.actions and "start" in failed.actions

    with pytest.raises(QuotaExceeded, match="holds 1 GPU"):
        await service.create("alice", {"name": "g2", "profile": "gpu"})

    await service.set_stopped("alice", "g1", True)
    await asyncio.to_thread(kube.delete, "v1", "Pod", "cube-alice", "g1-0")  # the controller scales to 0
    await wait_until_async(lambda: service.get("alice", "g1").status == ServerStatus.STOPPED)
    await service.create("alice", {"name": "g2", "profile": "gpu"})
    assert kmock.names(NOTEBOOKS, "cube-alice") == ["g1", "g2"]


async def test_concurrent_creates_never_exceed_the_server_limit(
    kmock: ApiServerEmulator, make_backend: Callable[..., Any]
) -> None:
    settings = make_settings(max_servers_per_user=2)
    service = NotebookService(settings.notebooks, await make_backend(settings))
    results = await asyncio.gather(
        *(service.create("alice", {"name": f"nb{i}"}) for i in range(6)), return_exceptions=True
    )
    created = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(created) == 2 and len(refused) == 4
    assert all(isinstance(r, QuotaExceeded) for r in refused), refused
    assert kmock.names(NOTEBOOKS, "cube-alice") == sorted(s.name for s in created)


async def test_concurrent_creates_of_one_name_make_one_server(
    kmock: ApiServerEmulator, make_backend: Callable[..., Any]
) -> None:
    settings = make_settings()
    service = NotebookService(settings.notebooks, await make_backend(settings))
    results = await asyncio.gather(
        *(service.create("alice", {"name": "same"}) for _ in range(5)), return_exceptions=True
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert [type(r) for r in results if isinstance(r, BaseException)] == [Conflict] * 4
    assert kmock.names(NOTEBOOKS, "cube-alice") == ["same"]
    assert len(kmock.requests_of("create", NOTEBOOKS)) == 1


async def test_concurrent_creates_from_two_replicas_make_one_server(
    kmock: ApiServerEmulator, make_backend: Callable[..., Any]
) -> None:
    """Two workbench replicas (two services, two caches): the API's 409 is the atomic check, and the
    loser rolls back only what it made."""
    settings = make_settings()
    replicas = [NotebookService(settings.notebooks, await make_backend(settings)) for _ in range(2)]
    results = await asyncio.gather(
        *(service.create("alice", {"name": "same"}) for service in replicas), return_exceptions=True
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert [type(r) for r in results if isinstance(r, BaseException)] == [Conflict]
    assert kmock.names(NOTEBOOKS, "cube-alice") == ["same"]
    assert kmock.names(POLICIES, "cube-alice") == ["notebook-same"]
    assert kmock.names(PVCS, "cube-alice") == ["same-workspace"]

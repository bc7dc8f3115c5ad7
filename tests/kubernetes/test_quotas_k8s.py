"""A crash-looping GPU server keeps its GPU quota until stopped: on the KMock emulator, where the test
plays the kubelet's CrashLoopBackOff (kwok on the real control plane runs every container healthy).
The other quota tests run on the real control plane: tests/cluster/test_quotas_on_cluster.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from cube_jupyter.errors import QuotaExceeded
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import ServerStatus
from tests.kubernetes.actors import controller_creates_pod, kubelet_sets_status
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.waiting import wait_until_async

NOTEBOOKS = "kubeflow.org/v1/notebooks"


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

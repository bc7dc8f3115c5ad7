"""Quotas through the NotebookService on the Kubernetes backend (over the KMock emulator).

GPU quotas are tested here because the local backend of this machine has no GPU to hand out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cube_jupyter.errors import QuotaExceeded
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import ServerStatus
from tests.kubernetes.actors import eventually
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator

NOTEBOOKS = "kubeflow.org/v1/notebooks"


async def test_gpu_quota_counts_running_servers_and_names_the_limit(
    kmock: ApiServerEmulator, make_backend: Callable[..., Any]
) -> None:
    settings = make_settings(gpu_quota_per_user=2)
    service = NotebookService(settings, await make_backend(settings))
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
    await eventually(lambda: service.get("alice", "g1").status == ServerStatus.STOPPED)
    await service.create("alice", {"name": "g3", "profile": "gpu"})
    with pytest.raises(QuotaExceeded):
        await service.set_stopped("alice", "g1", False)
    await service.delete("alice", "g3")
    await eventually(lambda: all(s.name != "g3" for s in service.list_servers("alice")))
    started = await service.set_stopped("alice", "g1", False)
    assert started.name == "g1"


async def test_server_count_quota(make_backend: Callable[..., Any]) -> None:
    settings = make_settings(max_servers_per_user=1)
    service = NotebookService(settings, await make_backend(settings))
    await service.create("alice", {"name": "a"})
    with pytest.raises(QuotaExceeded, match="limit is 1"):
        await service.create("alice", {"name": "b"})

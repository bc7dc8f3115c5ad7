"""Quotas through the NotebookService on the real control plane, the workbench connected with its
own ServiceAccount's token: the GPU and server-count quotas (servers really made by the StatefulSet
controller, a stopped server's pod really gone), and concurrent creates, where the API server's 409
on an existing name is the atomic check between two workbench replicas. (A crash-looping GPU server
keeping its quota: test_notebook_backend_on_cluster.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.errors import Conflict, QuotaExceeded
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.names import namespace_from_template
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import ServerStatus
from tests.cluster.conftest import requests_of
from tests.cluster.controlplane import State
from tests.cluster.servers import run_backends
from tests.kubernetes.conftest import make_settings
from tests.waiting import wait_until_async

TEMPLATE = "quota-{username}"


def quota_settings(**spawner: Any) -> Settings:
    return make_settings(
        {"create_namespaces": True, "namespace_template": TEMPLATE}, resource_kind="StatefulSet", **spawner
    )


def names(
    admin: k8s.ApiClient, user: str, api_version: str = "apps/v1", kind: str = "StatefulSet"
) -> list[str]:
    namespace = namespace_from_template(TEMPLATE, user, "namespace_template")
    return sorted(
        obj["metadata"]["name"] for obj in KubeClient(admin).list(api_version, kind, namespace).items
    )


async def delete_all(service: NotebookService, *users: str) -> None:
    """What a test made goes, so the GPU node's two GPUs are free for the next test."""
    for user in users:
        for server in service.list_servers(user):
            await service.delete(user, server.name)


def test_gpu_quota_counts_running_servers_and_names_the_limit(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    settings = quota_settings(gpu_quota_per_user=2)

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        service = NotebookService(settings.notebooks, backend)
        try:
            await service.create("kim", {"name": "g1", "profile": "gpu"})
            with pytest.raises(QuotaExceeded, match="asks for 2 more"):  # vGPU units count as well
                await service.create("kim", {"name": "v1", "profile": "vgpu"})
            await service.create("kim", {"name": "g2", "profile": "gpu"})
            with pytest.raises(QuotaExceeded) as caught:
                await service.create("kim", {"name": "g3", "profile": "gpu"})
            assert caught.value.status == 403
            assert "limit is 2" in caught.value.message and "gpu_quota_per_user" in caught.value.message
            assert await asyncio.to_thread(names, admin, "kim") == ["g1", "g2"]  # nothing half-created

            # another user's quota is their own; CPU servers need none
            await service.create("lee", {"name": "g1", "profile": "gpu"})
            await service.create("kim", {"name": "cpu1", "profile": "cpu"})

            # a stopped server holds no GPU (its pod is gone): its GPU goes to a new server, and it
            # cannot start again until one is free
            await service.set_stopped("kim", "g1", True)
            await wait_until_async(lambda: service.get("kim", "g1").status == ServerStatus.STOPPED)
            await service.create("kim", {"name": "g3", "profile": "gpu"})
            with pytest.raises(QuotaExceeded):
                await service.set_stopped("kim", "g1", False)
            await service.delete("kim", "g3")
            await wait_until_async(lambda: all(s.name != "g3" for s in service.list_servers("kim")))
            assert (await service.set_stopped("kim", "g1", False)).name == "g1"
        finally:
            await delete_all(service, "kim", "lee")

    run_backends(workbench_kubeconfig, settings, scenario)


def test_the_server_count_quota_holds_under_concurrent_creates(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    settings = quota_settings(max_servers_per_user=2)

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        service = NotebookService(settings.notebooks, backend)
        try:
            results = await asyncio.gather(
                *(service.create("mia", {"name": f"nb{i}"}) for i in range(6)), return_exceptions=True
            )
            created = [r for r in results if not isinstance(r, BaseException)]
            refused = [r for r in results if isinstance(r, BaseException)]
            assert len(created) == 2 and len(refused) == 4
            assert all(isinstance(r, QuotaExceeded) and "limit is 2" in r.message for r in refused), refused
            assert await asyncio.to_thread(names, admin, "mia") == sorted(s.name for s in created)
        finally:
            await delete_all(service, "mia")

    run_backends(workbench_kubeconfig, settings, scenario)


def test_concurrent_creates_of_one_name_make_one_server(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    settings = quota_settings()

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        service = NotebookService(settings.notebooks, backend)
        try:
            results = await asyncio.gather(
                *(service.create("ned", {"name": "same"}) for _ in range(5)), return_exceptions=True
            )
            assert sum(not isinstance(r, BaseException) for r in results) == 1
            assert [type(r) for r in results if isinstance(r, BaseException)] == [Conflict] * 4
            assert await asyncio.to_thread(names, admin, "ned") == ["same"]
        finally:
            await delete_all(service, "ned")

    run_backends(workbench_kubeconfig, settings, scenario)
    made = [
        r
        for r in requests_of(installed, request.node.nodeid)
        if r.verb == "create" and r.resource == "statefulsets"
    ]
    assert len(made) == 1  # the four others were refused before any request


def test_concurrent_creates_from_two_replicas_make_one_server(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    """Two workbench replicas (two services, two caches): the API server's 409 is the atomic check,
    and the loser rolls back only what it made."""
    settings = quota_settings(workspace_size="1Gi")

    async def scenario(first: KubernetesNotebookBackend, second: KubernetesNotebookBackend) -> None:
        replicas = [NotebookService(settings.notebooks, backend) for backend in (first, second)]
        try:
            results = await asyncio.gather(
                *(service.create("olga", {"name": "same"}) for service in replicas), return_exceptions=True
            )
            assert sum(not isinstance(r, BaseException) for r in results) == 1
            assert [type(r) for r in results if isinstance(r, BaseException)] == [Conflict]
            for api_version, kind, made in (
                ("apps/v1", "StatefulSet", "same"),
                ("v1", "Service", "same"),
                ("security.istio.io/v1", "AuthorizationPolicy", "notebook-same"),
                ("v1", "PersistentVolumeClaim", "same-workspace"),
            ):
                assert await asyncio.to_thread(names, admin, "olga", api_version, kind) == [made], kind
        finally:
            await wait_until_async(lambda: replicas[0].list_servers("olga"))
            await delete_all(replicas[0], "olga")

    run_backends(workbench_kubeconfig, settings, scenario, replicas=2)
    conflicts = [
        r for r in requests_of(installed, request.node.nodeid) if r.verb == "create" and r.code == 409
    ]
    assert conflicts, "the API server's 409 was never met"
    assert names(admin, "olga", "v1", "PersistentVolumeClaim") == [
        "same-workspace"
    ]  # kept, as a delete keeps it

"""The AuthorizationPolicy guards a tokenless pod on the real control plane: it is created before
anything else and deleted only after the pod is gone, which a finalizer (as a CSI driver or a
security agent might hold) delays for as long as it stays; the StatefulSet, deleted in the
foreground, stays with it. Objects kept from an earlier server are reused only when they are the
user's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.errors import Conflict, NotFound
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.labels import USER_ANNOTATION
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.render import render_notebook_objects
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.cluster.conftest import USERS, requests_of
from tests.cluster.controlplane import State
from tests.cluster.servers import eventually, run_backends, until
from tests.kubernetes.conftest import make_settings

ALICE = "alice@example.com"
NAMESPACE = USERS[ALICE]
HOLD = "example.com/hold"  # a finalizer of someone else's that keeps a pod terminating


def settings_for() -> Settings:
    return make_settings(
        {"namespace_source": "kubeflow-profile"}, resource_kind="StatefulSet", workspace_size="1Gi"
    )


def spec(settings: Settings, name: str) -> NotebookSpec:
    return NotebookSpec(ALICE, name, settings.notebooks.profile("cpu"))


def exists(kube: KubeClient, api_version: str, kind: str, name: str) -> bool:
    try:
        kube.get(api_version, kind, NAMESPACE, name)
    except NotFound:
        return False
    return True


def policy(kube: KubeClient, name: str) -> bool:
    return exists(kube, "security.istio.io/v1", "AuthorizationPolicy", f"notebook-{name}")


def hold(kube: KubeClient, pod: str, held: bool) -> None:
    kube.patch("v1", "Pod", NAMESPACE, pod, {"metadata": {"finalizers": [HOLD] if held else None}})


def test_the_policy_is_made_first_and_goes_only_after_the_pod(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    settings = settings_for()
    kube = KubeClient(admin)

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(spec(settings, "guarded"))
        await until(backend, ALICE, "guarded", lambda s: s.status == ServerStatus.RUNNING)
        await asyncio.to_thread(hold, kube, "guarded-0", True)
        deleting = asyncio.create_task(backend.delete_server(ALICE, "guarded"))
        # The route and Service are gone; the StatefulSet waits (foreground) on its terminating pod,
        # which stays guarded.
        await eventually(
            "the pod terminating",
            lambda: kube.get("v1", "Pod", NAMESPACE, "guarded-0")["metadata"].get("deletionTimestamp"),
            bool,
        )
        await eventually(
            "the Service gone", lambda: not exists(kube, "v1", "Service", "guarded") or None, bool
        )
        assert await asyncio.to_thread(policy, kube, "guarded")
        assert not deleting.done()
        await asyncio.to_thread(hold, kube, "guarded-0", False)
        await asyncio.wait_for(deleting, 60)
        assert not await asyncio.to_thread(policy, kube, "guarded")
        assert not await asyncio.to_thread(exists, kube, "apps/v1", "StatefulSet", "guarded")
        assert await asyncio.to_thread(exists, kube, "v1", "PersistentVolumeClaim", "guarded-workspace")

    run_backends(workbench_kubeconfig, settings, scenario)
    writes = [r for r in requests_of(installed, request.node.nodeid) if r.verb in ("create", "delete")]
    assert writes[0].verb == "create" and writes[0].resource == "authorizationpolicies", writes
    assert writes[-1].verb == "delete" and writes[-1].resource == "authorizationpolicies", writes


def test_a_pod_that_will_not_go_keeps_its_policy_which_a_new_server_adopts(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    settings = settings_for()
    kube = KubeClient(admin)

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(spec(settings, "stuck"))
        await until(backend, ALICE, "stuck", lambda s: s.status == ServerStatus.RUNNING)
        await asyncio.to_thread(hold, kube, "stuck-0", True)
        await backend.delete_server(ALICE, "stuck")  # returns after delete_wait_seconds; still guarded
        assert await asyncio.to_thread(policy, kube, "stuck")
        # the StatefulSet, deleted in the foreground, waits on its pod: the panel says so
        await until(backend, ALICE, "stuck", lambda s: s.status == ServerStatus.TERMINATING)

        await asyncio.to_thread(hold, kube, "stuck-0", False)
        await eventually(
            "the pod gone", lambda: not exists(kube, "apps/v1", "StatefulSet", "stuck") or None, bool
        )
        await backend.create_server(spec(settings, "stuck"))  # the kept policy adopted, brought up to date
        [wanted] = [
            o
            for o in render_notebook_objects(spec(settings, "stuck"), settings.notebooks, NAMESPACE)
            if o["kind"] == "AuthorizationPolicy"
        ]
        kept = await asyncio.to_thread(
            kube.get, "security.istio.io/v1", "AuthorizationPolicy", NAMESPACE, "notebook-stuck"
        )
        assert kept["spec"] == wanted["spec"]
        await until(backend, ALICE, "stuck", lambda s: s.status == ServerStatus.RUNNING)
        await backend.delete_server(ALICE, "stuck")

    run_backends(workbench_kubeconfig, settings, scenario, delete_wait_seconds=2.0)


@pytest.mark.parametrize("kind", ["PersistentVolumeClaim", "AuthorizationPolicy"])
def test_another_users_leftover_is_never_adopted(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, kind: str
) -> None:
    """Names can meet in one namespace (a shared namespace template, a slug collision): alice must
    not get a workspace or a policy that carries someone else's name."""
    settings = settings_for()
    kube = KubeClient(admin)
    name = f"taken-{kind.lower()}"
    [foreign] = [
        o
        for o in render_notebook_objects(spec(settings, name), settings.notebooks, NAMESPACE)
        if o["kind"] == kind
    ]
    foreign["metadata"]["annotations"][USER_ANNOTATION] = "mallory"
    kube.create(foreign)

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        with pytest.raises(Conflict) as caught:
            await backend.create_server(spec(settings, name))
        assert caught.value.field == "name"
        assert f"does not belong to user {ALICE!r}" in caught.value.message

    run_backends(workbench_kubeconfig, settings, scenario)
    # Only the foreign object is left, untouched; whatever this create made was rolled back.
    assert not exists(kube, "apps/v1", "StatefulSet", name)
    assert exists(kube, "v1", "PersistentVolumeClaim", f"{name}-workspace") == (
        kind == "PersistentVolumeClaim"
    )
    assert policy(kube, name) == (kind == "AuthorizationPolicy")
    left: dict[str, Any] = kube.get(foreign["apiVersion"], kind, NAMESPACE, foreign["metadata"]["name"])
    assert left["metadata"]["annotations"][USER_ANNOTATION] == "mallory"

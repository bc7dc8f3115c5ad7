"""Users' namespaces on the real control plane, as the workbench finds and makes them with its own
ServiceAccount's token: `create_namespaces` makes a new user's namespace, its pods' ServiceAccount,
their RoleBinding to `cube-jupyter-user` (the API server's escalation check lets the workbench bind
that role only because its ClusterRole grants `bind` on it by name) and a copy of the store's
credentials, and brings each back to the config when it drifts; with Kubeflow Profiles, a user who
owns none is told which namespaces they contribute to (KFAM's RoleBindings)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.errors import NotFound
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.namespace_objects import POD_ROLE_BINDING
from cube_jupyter.names import namespace_from_template
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.cluster.conftest import USERS, WORKBENCH_NAMESPACE, api_client
from tests.cluster.controlplane import State
from tests.cluster.test_notebooks_on_cluster import until
from tests.kubernetes.conftest import make_settings

CAROL = "carol@example.com"
SECRET = "cube-s3-credentials"


def template_settings() -> Settings:
    return make_settings(
        {
            "create_namespaces": True,
            "namespace_template": "cube-{username}",
            "namespace": WORKBENCH_NAMESPACE,
        },
        storage={"url": "s3://ml-artifacts", "endpoint": "http://minio:9000", "credentials_secret": SECRET},
        resource_kind="StatefulSet",
        workspace_size="1Gi",
    )


def run(kubeconfig: Path, settings: Settings, scenario: Any) -> Any:
    async def go() -> Any:
        cluster = Cluster(settings, api_client(kubeconfig))
        backend = KubernetesNotebookBackend(settings.notebooks, cluster, sync_timeout=60)
        await backend.start(supervise=False)
        try:
            return await scenario(backend)
        finally:
            await backend.close()
            await cluster.close()

    return asyncio.run(go())


def secret(namespace: str, value: str) -> dict[str, Any]:
    data = {
        key: base64.b64encode(value.encode()).decode()
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": namespace},
        "data": data,
    }


def test_a_new_users_namespace_is_made_and_brought_back_when_it_drifts(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    kube = KubeClient(admin)
    kube.create(secret(WORKBENCH_NAMESPACE, "first"))
    settings = template_settings()
    namespace = namespace_from_template("cube-{username}", CAROL, "namespace_template")

    async def first(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(CAROL, "nb1", settings.notebooks.profile("cpu")))
        await until(backend, CAROL, "nb1", lambda s: s.status == ServerStatus.RUNNING)

    run(workbench_kubeconfig, settings, first)
    made = kube.get("v1", "Namespace", None, namespace)
    assert made["metadata"]["labels"]["istio-injection"] == "enabled"
    binding = kube.get("rbac.authorization.k8s.io/v1", "RoleBinding", namespace, POD_ROLE_BINDING)
    assert binding["roleRef"]["name"] == "cube-jupyter-user"
    assert kube.get("v1", "Secret", namespace, SECRET)["data"] == secret(namespace, "first")["data"]

    # Drift, as an admin's hand or another tool makes it: each is brought back by the next create.
    kube.patch("v1", "Namespace", None, namespace, {"metadata": {"labels": {"istio-injection": None}}})
    kube.patch("v1", "Secret", WORKBENCH_NAMESPACE, SECRET, {"data": secret("", "rotated")["data"]})
    kube.delete("rbac.authorization.k8s.io/v1", "RoleBinding", namespace, POD_ROLE_BINDING)
    view = {**binding, "roleRef": {**binding["roleRef"], "name": "view"}}
    view["metadata"] = {
        "name": POD_ROLE_BINDING,
        "namespace": namespace,
        "labels": binding["metadata"]["labels"],
    }
    kube.create(view)

    async def second(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(CAROL, "nb2", settings.notebooks.profile("cpu")))
        for name in ("nb1", "nb2"):
            await backend.delete_server(CAROL, name)

    run(workbench_kubeconfig, settings, second)
    assert kube.get("v1", "Namespace", None, namespace)["metadata"]["labels"]["istio-injection"] == "enabled"
    assert kube.get("v1", "Secret", namespace, SECRET)["data"] == secret("", "rotated")["data"]
    rebound = kube.get("rbac.authorization.k8s.io/v1", "RoleBinding", namespace, POD_ROLE_BINDING)
    assert rebound["roleRef"]["name"] == "cube-jupyter-user"


def test_a_user_who_owns_no_profile_is_told_where_they_contribute(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    """KFAM gives a contributor a RoleBinding in the owner's namespace, annotated with their name."""
    shared = USERS["alice@example.com"]
    KubeClient(admin).create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {
                "name": "user-dave-example-com-clusterrole-edit",
                "namespace": shared,
                "annotations": {"user": "dave@example.com", "role": "edit"},
            },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kubeflow-edit",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave@example.com"}
            ],
        }
    )
    settings = make_settings({"namespace_source": "kubeflow-profile"}, resource_kind="StatefulSet")

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        with pytest.raises(NotFound) as refused:
            await backend.create_server(
                NotebookSpec("dave@example.com", "nb", settings.notebooks.profile("cpu"))
            )
        assert shared in refused.value.message, refused.value.message

    run(workbench_kubeconfig, settings, scenario)

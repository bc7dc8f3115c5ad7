"""A user's namespace on a cluster: made ready by the workbench with `create_namespaces` (idempotently,
leaving others' objects alone), a clear 404 naming the setting without it, and with
`namespace_source = "kubeflow-profile"` the namespace of the Kubeflow Profile the user owns."""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import pytest

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.namespace_objects import render_namespace_objects
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec
from tests.k8s_schemas import validate_object
from tests.kubernetes.actors import kubeflow_profile, scheduler_warns
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.waiting import wait_until_async

HOME = "kubeflow"  # the workbench's own namespace
SECRET = "cube-s3-credentials"  # the one Secret name deploy/base/rbac.yaml lets the workbench read
ACCESS, SECRET_KEY = "AKIA-ONLY-IN-SECRETS", "s3cr3t-only-in-secrets"
NAMESPACE_RESOURCES = {
    "Namespace": "v1/namespaces",
    "ServiceAccount": "v1/serviceaccounts",
    "RoleBinding": "rbac.authorization.k8s.io/v1/rolebindings",
    "Secret": "v1/secrets",
}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def creating(**spawner: Any) -> Settings:
    return make_settings(
        {"namespace": HOME}, storage={"credentials_secret": SECRET}, create_namespaces=True, **spawner
    )


def spec(settings: Settings, user: str = "carol", name: str = "nb1") -> NotebookSpec:
    return NotebookSpec(user=user, name=name, profile=settings.notebooks.profile("cpu"))


@pytest.fixture
def kmock(kmock: ApiServerEmulator) -> ApiServerEmulator:
    """The shared cluster, plus the workbench's namespace holding the store's credentials."""
    kmock.preload(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HOME}},
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": SECRET, "namespace": HOME},
                "data": {"AWS_ACCESS_KEY_ID": b64(ACCESS), "AWS_SECRET_ACCESS_KEY": b64(SECRET_KEY)},
            },
        ]
    )
    return kmock


def stored(kmock: ApiServerEmulator, obj: dict[str, Any]) -> dict[str, Any] | None:
    meta = obj["metadata"]
    return kmock.find(NAMESPACE_RESOURCES[obj["kind"]], meta.get("namespace"), meta["name"])


async def test_a_missing_namespace_is_made_ready_before_the_server(
    kmock: ApiServerEmulator, make_backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = creating()
    backend: KubernetesNotebookBackend = await make_backend(settings)
    with caplog.at_level(logging.DEBUG):
        server = await backend.create_server(spec(settings))
    assert server.namespace == "cube-carol"
    copied = {"AWS_ACCESS_KEY_ID": b64(ACCESS), "AWS_SECRET_ACCESS_KEY": b64(SECRET_KEY)}
    for rendered in render_namespace_objects(settings, "carol", "cube-carol", copied):
        found = stored(kmock, rendered)
        assert found is not None, rendered["metadata"]
        validate_object(rendered, strict=True)
        for part in ("labels", "annotations"):
            assert rendered["metadata"].get(part, {}).items() <= (found["metadata"].get(part) or {}).items()
        for body in ("roleRef", "subjects", "data"):
            assert found.get(body) == rendered.get(body)
    assert (
        kmock.find("v1/namespaces", None, "cube-carol")["metadata"]["labels"]["istio-injection"] == "enabled"
    )  # type: ignore[index]
    assert kmock.names("kubeflow.org/v1/notebooks", "cube-carol") == ["nb1"]
    # The namespace came first: every object after it was created in it.
    creates = [str(r.resource.plural) for r in kmock if r.action.name == "CREATE" and r.resource]
    assert creates[:4] == ["namespaces", "serviceaccounts", "rolebindings", "secrets"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for value in (ACCESS, SECRET_KEY, b64(ACCESS), b64(SECRET_KEY)):
        assert value not in logged


async def test_preparing_again_duplicates_nothing_and_brings_drift_back(
    kmock: ApiServerEmulator, kube: KubeClient, make_backend: Any
) -> None:
    settings = creating()
    backend: KubernetesNotebookBackend = await make_backend(settings)
    await backend.create_server(spec(settings, name="nb1"))
    names = {kind: kmock.names(res, "cube-carol") for kind, res in NAMESPACE_RESOURCES.items()}
    # The store's keys are rotated in the workbench's namespace; someone drops the mesh label.
    rotated = {"data": {"AWS_SECRET_ACCESS_KEY": b64("rotated")}}
    await asyncio.to_thread(kube.patch, "v1", "Secret", HOME, SECRET, rotated)
    await asyncio.to_thread(
        kube.patch, "v1", "Namespace", None, "cube-carol", {"metadata": {"labels": {"istio-injection": None}}}
    )

    await backend.create_server(spec(settings, name="nb2"))
    assert {kind: kmock.names(res, "cube-carol") for kind, res in NAMESPACE_RESOURCES.items()} == names
    copy = kmock.find("v1/secrets", "cube-carol", SECRET)
    assert copy is not None and copy["data"]["AWS_SECRET_ACCESS_KEY"] == b64("rotated")
    namespace = kmock.find("v1/namespaces", None, "cube-carol")
    assert namespace is not None and namespace["metadata"]["labels"]["istio-injection"] == "enabled"
    assert len(kmock.requests_of("create", "v1/namespaces")) == 2  # the second one was a 409

    # Another ClusterRole for the pods: a RoleBinding's roleRef cannot change, so it is replaced.
    other: KubernetesNotebookBackend = await make_backend(creating(user_cluster_role="ml-user"))
    await other.create_server(spec(settings, name="nb3"))
    binding = kmock.find("rbac.authorization.k8s.io/v1/rolebindings", "cube-carol", "cube-jupyter-pods")
    assert binding is not None and binding["roleRef"]["name"] == "ml-user"


async def test_what_others_made_is_left_as_it_is(
    kmock: ApiServerEmulator, kube: KubeClient, make_backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """cube-alice is an admin's (the shared fixture made it), and so is its Secret: the workbench
    adds what is missing and changes nothing of theirs."""
    theirs = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": "cube-alice"}}
    theirs["data"] = {"AWS_ACCESS_KEY_ID": b64("admin"), "AWS_SECRET_ACCESS_KEY": b64("admin")}
    await asyncio.to_thread(kube.create, theirs)
    settings = creating()
    backend: KubernetesNotebookBackend = await make_backend(settings)
    with caplog.at_level(logging.WARNING):
        await backend.create_server(spec(settings, user="alice"))
    assert kmock.requests_of("update", "v1/namespaces") == kmock.requests_of("update", "v1/secrets") == []
    assert kmock.find("v1/secrets", "cube-alice", SECRET)["data"]["AWS_ACCESS_KEY_ID"] == b64("admin")  # type: ignore[index]
    assert kmock.names("v1/serviceaccounts", "cube-alice") == ["default-editor"]
    assert "without istio-injection=enabled" in caplog.text


async def test_a_namespace_another_user_owns_is_refused(kmock: ApiServerEmulator, make_backend: Any) -> None:
    """Kubeflow's spelling of names is not collision-free: a.b@x.com and a-b@x.com share one."""
    settings = creating(namespace_template="kubeflow-{username_kubeflow}")
    backend: KubernetesNotebookBackend = await make_backend(settings)
    await backend.create_server(spec(settings, user="a.b@x.com"))
    with pytest.raises(
        Conflict, match=r"'kubeflow-a-b-x-com' belongs to user 'a\.b@x\.com', not 'a-b@x\.com'"
    ) as e:
        await backend.create_server(spec(settings, user="a-b@x.com"))
    assert e.value.field == "user"
    assert [s.user for s in backend.list_servers(None)] == ["a.b@x.com"]


async def test_credentials_the_workbench_cannot_copy_say_which_setting(
    kmock: ApiServerEmulator, kube: KubeClient, make_backend: Any
) -> None:
    settings = creating()
    backend: KubernetesNotebookBackend = await make_backend(settings)
    await asyncio.to_thread(kube.patch, "v1", "Secret", HOME, SECRET, {"data": {"AWS_ACCESS_KEY_ID": None}})
    with pytest.raises(
        BackendUnavailable,
        match=r"CubeStorage\.credentials_secret 'cube-s3-credentials' in the workbench's namespace",
    ):
        await backend.create_server(spec(settings))
    await asyncio.to_thread(kube.delete, "v1", "Secret", HOME, SECRET)
    with pytest.raises(BackendUnavailable, match="does not exist; user namespaces get a copy of it"):
        await backend.create_server(spec(settings))
    assert kmock.names("kubeflow.org/v1/notebooks") == []


async def test_without_create_namespaces_a_missing_namespace_names_the_setting(
    kmock: ApiServerEmulator, backend: KubernetesNotebookBackend, settings: Settings
) -> None:
    with pytest.raises(NotFound) as caught:
        await backend.create_server(spec(settings))
    assert caught.value.field == "user"
    assert caught.value.message.startswith("namespace 'cube-carol' of user 'carol' does not exist")
    assert "CubeWorkbench.create_namespaces = True" in caught.value.message
    assert kmock.names("v1/namespaces") == ["cube-alice", "cube-bob", HOME]


# -- Kubeflow Profiles ---------------------------------------------------------------------------------


def contributor(namespace: str, user: str, role: str) -> dict[str, Any]:
    """The RoleBinding KFAM writes when an owner shares their namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": f"user-{user.replace('@', '-').replace('.', '-')}-clusterrole-{role}",
            "namespace": namespace,
            "annotations": {"user": user, "role": role},
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"kubeflow-{role}",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


async def test_a_kubeflow_users_servers_go_to_the_profile_they_own(
    kmock: ApiServerEmulator, kube: KubeClient, make_backend: Any
) -> None:
    kmock.preload(
        [
            kubeflow_profile("ml-team", "alice@example.com"),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-team"}},
            contributor("ml-team", "bob@example.com", "edit"),
        ]
    )
    settings = make_settings(namespace_source="kubeflow-profile")
    backend: KubernetesNotebookBackend = await make_backend(settings)
    server = await backend.create_server(spec(settings, user="alice@example.com"))
    assert (server.namespace, server.url) == ("ml-team", "/notebook/ml-team/nb1/")
    assert backend.get_server("alice@example.com", "nb1") == server
    # Why it is stuck is cached, though a Profile's namespace matches no template.
    notebook = kmock.find("kubeflow.org/v1/notebooks", "ml-team", "nb1")
    assert notebook is not None
    await scheduler_warns(kube, notebook, "FailedCreate", "exceeded quota: kf-resource-quota")
    await wait_until_async(
        lambda: backend.get_server("alice@example.com", "nb1"),
        until=lambda s: s and s.reason == "FailedCreate: exceeded quota: kf-resource-quota",
    )
    stopped = await backend.set_stopped("alice@example.com", "nb1", True)
    assert stopped.namespace == "ml-team"

    # bob only contributes to alice's namespace: no server of his own, and the 404 says why.
    assert backend.get_server("bob@example.com", "nb1") is None
    with pytest.raises(NotFound) as caught:
        await backend.create_server(spec(settings, user="bob@example.com"))
    assert caught.value.field == "user"
    assert (
        "owns no Kubeflow Profile, and CubeWorkbench.namespace_source is 'kubeflow-profile'"
        in caught.value.message
    )
    assert caught.value.message.endswith("they are a contributor in: ml-team (edit)")
    with pytest.raises(NotFound, match="has no server named 'nb1'"):
        await backend.delete_server("bob@example.com", "nb1")

    # An admin gives bob a Profile; the workbench learns it from its watch, with no restart.
    await asyncio.to_thread(kube.create, kubeflow_profile("bob-lab", "bob@example.com"))
    await wait_until_async(lambda: backend.user_namespaces.lookup("bob@example.com"))
    with pytest.raises(NotFound, match="Kubeflow's profile controller has not made"):
        await backend.create_server(spec(settings, user="bob@example.com"))  # its namespace is not there yet
    await asyncio.to_thread(
        kube.create, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bob-lab"}}
    )
    assert (await backend.create_server(spec(settings, user="bob@example.com"))).namespace == "bob-lab"
    assert len(kmock.requests_of("list", "kubeflow.org/v1/profiles")) == 1  # reads use the cache

"""Users' namespaces on the real control plane, as the workbench finds and makes them with its own
ServiceAccount's token: `create_namespaces` makes a new user's namespace, its pods' ServiceAccount,
their RoleBinding to `cube-jupyter-user` (the API server's escalation check lets the workbench bind
that role only because its ClusterRole grants `bind` on it by name) and a copy of the store's
credentials, and brings each back to the config when it drifts; with Kubeflow Profiles, a user who
owns none is told which namespaces they contribute to (KFAM's RoleBindings)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.namespace_objects import POD_ROLE_BINDING, render_namespace_objects
from cube_jupyter.names import namespace_from_template
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.cluster.conftest import USERS, WORKBENCH_NAMESPACE, profile_objects, requests_of
from tests.cluster.controlplane import State
from tests.cluster.servers import run_backends, until
from tests.kubernetes.conftest import make_settings
from tests.waiting import wait_until_async

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
    put_secret(kube, "first")
    settings = template_settings()
    namespace = namespace_from_template("cube-{username}", CAROL, "namespace_template")

    async def first(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(CAROL, "nb1", settings.notebooks.profile("cpu")))
        await until(backend, CAROL, "nb1", lambda s: s.status == ServerStatus.RUNNING)

    run_backends(workbench_kubeconfig, settings, first)
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

    run_backends(workbench_kubeconfig, settings, second)
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

    run_backends(workbench_kubeconfig, settings, scenario)


def put_secret(kube: KubeClient, value: str) -> None:
    """The store's credentials in the workbench's namespace, whatever an earlier test left there."""
    with contextlib.suppress(NotFound):
        kube.delete("v1", "Secret", WORKBENCH_NAMESPACE, SECRET)
    kube.create(secret(WORKBENCH_NAMESPACE, value))


def test_the_namespace_comes_first_and_credentials_never_reach_the_log(
    installed: State,
    admin: k8s.ApiClient,
    workbench_kubeconfig: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = KubeClient(admin)
    put_secret(kube, "AKIA-ONLY-IN-SECRETS")
    settings = template_settings()
    user = "erin@example.com"
    namespace = namespace_from_template("cube-{username}", user, "namespace_template")

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(user, "nb", settings.notebooks.profile("cpu")))
        await backend.delete_server(user, "nb")

    with caplog.at_level(logging.DEBUG):
        run_backends(workbench_kubeconfig, settings, scenario)
    credentials = kube.get("v1", "Secret", WORKBENCH_NAMESPACE, SECRET)["data"]
    rendered_objects = render_namespace_objects(settings, user, namespace, credentials)
    for rendered in rendered_objects:
        meta = rendered["metadata"]
        found = kube.get(rendered["apiVersion"], rendered["kind"], meta.get("namespace"), meta["name"])
        for part in ("labels", "annotations"):
            assert meta.get(part, {}).items() <= (found["metadata"].get(part) or {}).items()
        for body in ("roleRef", "subjects", "data"):
            assert found.get(body) == rendered.get(body)
    creates = [r.resource for r in requests_of(installed, request.node.nodeid) if r.verb == "create"]
    plurals = [f"{obj['kind'].lower()}s" for obj in rendered_objects]
    assert creates[: len(plurals)] == plurals, creates  # the namespace first, then what goes in it
    for value in ("AKIA-ONLY-IN-SECRETS", base64.b64encode(b"AKIA-ONLY-IN-SECRETS").decode()):
        assert value not in caplog.text


def test_what_an_admin_made_is_left_as_it_is_and_another_users_namespace_is_refused(
    installed: State,
    admin: k8s.ApiClient,
    workbench_kubeconfig: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An admin's namespace (no mesh label) and Secret: the workbench adds what is missing and changes
    nothing of theirs. Kubeflow's spelling of names is not collision-free: a.b@x.com and a-b@x.com
    share one namespace, which stays the first one's."""
    kube = KubeClient(admin)
    put_secret(kube, "workbench")
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cube-team-admin"}})
    theirs = secret("cube-team-admin", "the-admins")
    kube.create(theirs)
    settings = make_settings(
        {
            "create_namespaces": True,
            "namespace_template": "cube-{username}",
            "namespace": WORKBENCH_NAMESPACE,
        },
        storage={"url": "s3://ml-artifacts", "endpoint": "http://minio:9000", "credentials_secret": SECRET},
        resource_kind="StatefulSet",
    )
    kubeflow_spelling = make_settings(
        {
            "create_namespaces": True,
            "namespace_template": "kubeflow-{username_kubeflow}",
            "namespace": WORKBENCH_NAMESPACE,
        },
        resource_kind="StatefulSet",
    )

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec("team-admin", "nb", settings.notebooks.profile("cpu")))
        await backend.delete_server("team-admin", "nb")

    async def collision(backend: KubernetesNotebookBackend) -> None:
        profile = kubeflow_spelling.notebooks.profile("cpu")
        await backend.create_server(NotebookSpec("a.b@x.com", "nb", profile))
        with pytest.raises(
            Conflict, match=r"'kubeflow-a-b-x-com' belongs to user 'a\.b@x\.com', not 'a-b@x\.com'"
        ) as e:
            await backend.create_server(NotebookSpec("a-b@x.com", "nb", profile))
        assert e.value.field == "user"
        assert [s.user for s in backend.list_servers(None)] == ["a.b@x.com"]
        await backend.delete_server("a.b@x.com", "nb")

    with caplog.at_level(logging.WARNING):
        run_backends(workbench_kubeconfig, settings, scenario)
    assert "without istio-injection=enabled" in caplog.text
    assert kube.get("v1", "Secret", "cube-team-admin", SECRET)["data"] == theirs["data"]
    changed = [
        r
        for r in requests_of(installed, request.node.nodeid)
        if r.verb in ("update", "patch") and r.resource in ("namespaces", "secrets")
    ]
    assert changed == []
    run_backends(workbench_kubeconfig, kubeflow_spelling, collision)


def test_credentials_the_workbench_cannot_copy_say_which_setting(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    kube = KubeClient(admin)
    put_secret(kube, "half")
    kube.patch("v1", "Secret", WORKBENCH_NAMESPACE, SECRET, {"data": {"AWS_ACCESS_KEY_ID": None}})
    settings = template_settings()
    user = "gina@example.com"
    namespace = namespace_from_template("cube-{username}", user, "namespace_template")

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        spec = NotebookSpec(user, "nb", settings.notebooks.profile("cpu"))
        with pytest.raises(
            BackendUnavailable,
            match=r"CubeStorage\.credentials_secret 'cube-s3-credentials' in the workbench's namespace",
        ):
            await backend.create_server(spec)
        await asyncio.to_thread(kube.delete, "v1", "Secret", WORKBENCH_NAMESPACE, SECRET)
        with pytest.raises(BackendUnavailable, match="does not exist; user namespaces get a copy of it"):
            await backend.create_server(spec)
        assert backend.list_servers(user) == []

    run_backends(workbench_kubeconfig, settings, scenario)
    assert kube.list("apps/v1", "StatefulSet", namespace).items == []


def test_without_create_namespaces_a_missing_namespace_names_the_setting(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    settings = make_settings({"namespace_template": "cube-{username}"}, resource_kind="StatefulSet")

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        with pytest.raises(NotFound) as caught:
            await backend.create_server(NotebookSpec("hal", "nb", settings.notebooks.profile("cpu")))
        assert caught.value.field == "user"
        assert caught.value.message.startswith("namespace 'cube-hal' of user 'hal' does not exist")
        assert "CubeWorkbench.create_namespaces = True" in caught.value.message

    run_backends(workbench_kubeconfig, settings, scenario)
    with pytest.raises(NotFound):
        KubeClient(admin).get("v1", "Namespace", None, "cube-hal")


def test_binding_a_role_the_workbench_may_not_bind_names_the_setting(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    """The API server's escalation check: the shipped ClusterRole lets the workbench bind
    `cube-jupyter-user` only, so another `user_cluster_role` needs the admin's grant too."""
    kube = KubeClient(admin)
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "ml-user"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
        }
    )
    settings = make_settings(
        {"create_namespaces": True, "namespace_template": "cube-{username}", "user_cluster_role": "ml-user"},
        resource_kind="StatefulSet",
    )

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        with pytest.raises(BackendUnavailable) as refused:
            await backend.create_server(NotebookSpec("ivan", "nb", settings.notebooks.profile("cpu")))
        assert "CubeWorkbench.user_cluster_role 'ml-user' needs `bind`" in refused.value.message
        assert backend.list_servers("ivan") == []

    run_backends(workbench_kubeconfig, settings, scenario)


def test_a_kubeflow_users_servers_go_to_the_profile_they_own_learnt_by_watch(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    kube = KubeClient(admin)
    settings = make_settings({"namespace_source": "kubeflow-profile"}, resource_kind="StatefulSet")
    user = "judy@example.com"

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        with pytest.raises(NotFound, match="owns no Kubeflow Profile"):
            await backend.create_server(NotebookSpec(user, "nb", settings.notebooks.profile("cpu")))
        # An admin gives judy a Profile; the workbench learns it from its watch, with no restart.
        profile, *made_by_its_controller = profile_objects(user, "judy-lab")
        await asyncio.to_thread(kube.create, profile)
        await wait_until_async(lambda: backend.user_namespaces.lookup(user))
        with pytest.raises(NotFound, match="Kubeflow's profile controller has not made"):
            await backend.create_server(NotebookSpec(user, "nb", settings.notebooks.profile("cpu")))
        for obj in made_by_its_controller:  # the namespace, its default-editor account and binding
            await asyncio.to_thread(kube.create, obj)
        server = await backend.create_server(NotebookSpec(user, "nb", settings.notebooks.profile("cpu")))
        assert (server.namespace, server.url) == ("judy-lab", "/notebook/judy-lab/nb/")
        await until(backend, user, "nb", lambda s: s.status == ServerStatus.RUNNING)
        await backend.delete_server(user, "nb")

    run_backends(workbench_kubeconfig, settings, scenario)
    lists = [
        r
        for r in requests_of(installed, request.node.nodeid)
        if r.resource == "profiles" and r.verb == "list"
    ]
    assert len(lists) == 1  # then the watch: reads use the cache

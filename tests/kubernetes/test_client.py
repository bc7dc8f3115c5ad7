"""The one Kubernetes client module: generic verbs by apiVersion/kind, and API failures as CubeErrors."""

from __future__ import annotations

import asyncio
import logging
import pathlib

import pytest

from cube_jupyter.errors import (
    BackendUnavailable,
    ConfigError,
    Conflict,
    Forbidden,
    InvalidInput,
    QuotaExceeded,
)
from cube_jupyter.kube.client import (
    ApiNotFound,
    KubeClient,
    ResourceGone,
    error_for_status,
    make_api_client,
    resource_type,
)
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator

CM = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "cfg", "namespace": "cube-alice"},
    "data": {"a": "1"},
}


async def test_verbs_on_core_and_custom_resources(kmock: ApiServerEmulator, kube: KubeClient) -> None:
    kmock.resources["v1/configmaps"] = kmock.ResourceInfo(kind="ConfigMap", namespaced=True)
    created = await asyncio.to_thread(kube.create, CM)
    assert created["metadata"]["uid"] and created["data"] == {"a": "1"}
    assert (
        kmock.requests_of("create", "v1/configmaps")[0].url.path == "/api/v1/namespaces/cube-alice/configmaps"
    )

    patched = await asyncio.to_thread(
        kube.patch, "v1", "ConfigMap", "cube-alice", "cfg", {"data": {"a": None, "b": "2"}}
    )
    assert patched["data"] == {"b": "2"}
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    fetched = await asyncio.to_thread(kube.get, "v1", "ConfigMap", "cube-alice", "cfg")
    assert fetched == patched

    notebook = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "metadata": {"name": "nb", "namespace": "cube-alice", "labels": {"x": "1"}},
        "spec": {},
    }
    await asyncio.to_thread(kube.create, notebook)
    assert kmock.requests_of("create", "kubeflow.org/v1/notebooks")[0].url.path == (
        "/apis/kubeflow.org/v1/namespaces/cube-alice/notebooks"
    )
    result = await asyncio.to_thread(kube.list, "kubeflow.org/v1", "Notebook", label_selector="x=1")
    assert [o["metadata"]["name"] for o in result.items] == ["nb"]
    assert result.resource_version == str(kmock.resource_version)
    assert (
        await asyncio.to_thread(kube.list, "kubeflow.org/v1", "Notebook", label_selector="x=2")
    ).items == []

    await asyncio.to_thread(kube.delete, "kubeflow.org/v1", "Notebook", "cube-alice", "nb")
    assert (
        await asyncio.to_thread(
            kube.delete, "kubeflow.org/v1", "Notebook", "cube-alice", "nb", missing_ok=True
        )
        is None
    )


async def test_api_failures_become_messages_a_user_can_act_on(
    kmock: ApiServerEmulator, kube: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ApiNotFound) as missing:
        await asyncio.to_thread(kube.get, "v1", "Pod", "cube-alice", "nope")
    assert missing.value.message == 'reading Pod cube-alice/nope failed: not found: pods "nope" not found'
    assert missing.value.missing_kind == "pods"

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "cube-alice"},
        "spec": {},
    }
    await asyncio.to_thread(kube.create, pod)
    with pytest.raises(
        Conflict,
        match="creating Pod cube-alice/p failed: already exists or was changed "
        'concurrently: pods "p" already exists',
    ):
        await asyncio.to_thread(kube.create, pod)

    # Optimistic concurrency: a patch that names an old resourceVersion is a 409 too.
    with pytest.raises(Conflict, match="the object has been modified"):
        await asyncio.to_thread(
            kube.patch, "v1", "Pod", "cube-alice", "p", {"metadata": {"resourceVersion": "1"}}
        )

    # A 422 comes from what the workbench rendered (user input is validated first): a 503 that does not
    # blame the caller, with the API's words in the log for the admin.
    kmock.fail_next("create", "v1/pods", 422, 'Pod "q" is invalid: spec.containers: Required value')
    logger = "cube_jupyter.kube.client"
    with caplog.at_level(logging.WARNING, logger=logger), pytest.raises(BackendUnavailable) as invalid:
        await asyncio.to_thread(kube.create, {**pod, "metadata": {"name": "q", "namespace": "cube-alice"}})
    assert invalid.value.status == 503
    assert invalid.value.message.startswith("creating Pod cube-alice/q was rejected as invalid by Kubernetes")
    assert "workbench's configuration" in invalid.value.message
    assert 'Pod "q" is invalid: spec.containers: Required value' in caplog.text

    # A 403 is the workbench's service account lacking RBAC: 503, and its name stays out of the message.
    kmock.fail_next(
        "delete",
        "v1/pods",
        403,
        'pods "p" is forbidden: User "system:serviceaccount:kubeflow:cube" cannot delete resource "pods"',
    )
    with caplog.at_level(logging.WARNING, logger=logger), pytest.raises(BackendUnavailable) as refused:
        await asyncio.to_thread(kube.delete, "v1", "Pod", "cube-alice", "p")
    assert refused.value.status == 503 and not isinstance(refused.value, Forbidden)
    assert refused.value.message.startswith("deleting Pod cube-alice/p was refused by Kubernetes")
    assert "serviceaccount" not in refused.value.message and "forbidden" not in refused.value.message
    assert "system:serviceaccount:kubeflow:cube" in caplog.text

    kmock.fail_next("list", "v1/pods", 503, "the server is currently unable to handle the request")
    with pytest.raises(
        BackendUnavailable, match="listing pods failed: the Kubernetes API answered 503: the server"
    ):
        await asyncio.to_thread(kube.list, "v1", "Pod")


def test_status_translation_table() -> None:
    body = b'{"kind":"Status","message":"too old resource version: 1 (5)","reason":"Expired","code":410}'
    gone = error_for_status(410, body, "watching pods")
    assert isinstance(gone, ResourceGone)
    assert gone.message == (
        "watching pods failed: the resource version is too old: too old resource version: 1 (5)"
    )
    rejected = error_for_status(400, "not json at all", "x")
    assert isinstance(rejected, BackendUnavailable) and not isinstance(rejected, InvalidInput)
    assert rejected.status == 503 and rejected.message.startswith("x was rejected as invalid by Kubernetes")
    assert error_for_status(502, b"<html>bad gateway</html>", "listing pods").message == (
        "listing pods failed: the Kubernetes API answered 502: <html>bad gateway</html>"
    )
    quota = (
        b'{"kind":"Status","reason":"Forbidden","code":403,"message":"pods \\"p\\" is forbidden: '
        b'exceeded quota: cube-gpu-quota, requested: requests.nvidia.com/gpu=1"}'
    )
    exceeded = error_for_status(403, quota, "creating Pod p")
    assert isinstance(exceeded, QuotaExceeded) and exceeded.status == 403
    assert "exceeded quota: cube-gpu-quota" in exceeded.message
    assert isinstance(error_for_status(403, b'{"message":"forbidden"}', "x"), BackendUnavailable)
    unauthorized = error_for_status(401, None, "x")
    assert isinstance(unauthorized, BackendUnavailable) and unauthorized.status == 503
    assert unauthorized.message == "x failed: Kubernetes rejected the workbench's credentials"


def test_resource_types() -> None:
    assert resource_type("v1", "Pod").path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert (
        resource_type("kubeflow.org/v1", "Notebook").path("ns")
        == "/apis/kubeflow.org/v1/namespaces/ns/notebooks"
    )
    assert resource_type("v1", "Namespace").path("ignored", "n") == "/api/v1/namespaces/n"
    assert resource_type("kubeflow.org/v1", "PyTorchJob").plural == "pytorchjobs"
    assert resource_type("example.com/v1", "Ingress").plural == "ingresses"


def test_no_credentials_is_a_config_error_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError) as caught:
        make_api_client(make_settings())
    assert caught.value.field == "CubeWorkbench.kubernetes_context"
    assert "no cluster credentials were found" in caught.value.message


async def test_kubeconfig_context_and_token_are_used(
    kmock: ApiServerEmulator, api_url: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: elsewhere\n"
        "clusters:\n- name: elsewhere\n  cluster: {server: 'https://elsewhere.example:6443'}\n"
        f"- name: here\n  cluster: {{server: '{api_url}'}}\n"
        "users:\n- name: u\n  user: {token: t0ken}\n"
        "contexts:\n- name: elsewhere\n  context: {cluster: elsewhere, user: u}\n"
        "- name: here\n  context: {cluster: here, user: u}\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert make_api_client(make_settings()).configuration.host == "https://elsewhere.example:6443"
    client = KubeClient(make_api_client(make_settings({"kubernetes_context": "here"})))
    await asyncio.to_thread(client.list, "v1", "Pod")
    assert kmock.requests_of("list", "v1/pods")[-1].headers["Authorization"] == "Bearer t0ken"
    client.close()

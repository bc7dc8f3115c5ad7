"""The one Kubernetes client module: API failures as CubeErrors (the status table), resource paths,
and what a real API server cannot answer on demand (a 503). Verbs, the API's own 404/409/422/403 and
kubeconfig contexts run against the real one: tests/cluster/test_client_on_cluster.py."""

from __future__ import annotations

import asyncio

import pytest

from cube_jupyter.errors import (
    BackendUnavailable,
    ConfigError,
    InvalidInput,
    QuotaExceeded,
)
from cube_jupyter.kube.client import (
    KubeClient,
    ResourceGone,
    error_for_status,
    make_api_client,
    resource_type,
)
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator


async def test_an_unavailable_api_is_named_with_its_answer(
    kmock: ApiServerEmulator, kube: KubeClient
) -> None:
    """A 503 a real server gives only when it is overloaded: injected here."""
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
    # An admission webhook's denial (here Trainer v2's, as the real one worded it) is about the object:
    # its words reach the user, as a 403 that is not the workbench's failing.
    webhook = (
        b'{"kind":"Status","code":403,"message":"admission webhook \\"validator.trainjob.trainer.kubeflow'
        b'.org\\" denied the request: spec.runtimePatches.manager: Invalid value: \\"x\\": must be a '
        b'domain-prefixed path"}'
    )
    denied = error_for_status(403, webhook, "creating TrainJob ns/t")
    assert denied.status == 403 and not isinstance(denied, BackendUnavailable)
    assert denied.message == (
        "creating TrainJob ns/t was refused by the cluster's admission policy: admission webhook "
        '"validator.trainjob.trainer.kubeflow.org" denied the request: spec.runtimePatches.manager: '
        'Invalid value: "x": must be a domain-prefixed path'
    )
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

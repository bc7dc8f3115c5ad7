"""The one Kubernetes client against the real API server: generic verbs by apiVersion/kind on core and
custom resources, the API's own failures (404 naming the missing kind, 409 on a name and on an old
resourceVersion, 422 on an invalid object, the authorizer's 403) as messages a user can act on, and a
kubeconfig's context, CA and token used as given.

What a real server cannot answer on demand (a 503, a 502 page from a proxy) stays on the emulator:
tests/kubernetes/test_client.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from cube_jupyter.errors import BackendUnavailable, Conflict, Forbidden
from cube_jupyter.kube.client import ApiForbidden, ApiNotFound, KubeClient, make_api_client
from tests.cluster.conftest import SANDBOX, api_client
from tests.cluster.controlplane import State
from tests.kubernetes.conftest import make_settings

CM = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "cfg", "namespace": SANDBOX},
    "data": {"a": "1"},
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": SANDBOX},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}


def test_verbs_on_core_and_custom_resources(admin: k8s.ApiClient, sandbox_kubeconfig: Path) -> None:
    kube = KubeClient(admin)
    created = kube.create(CM)
    assert created["metadata"]["uid"] and created["data"] == {"a": "1"}
    patched = kube.patch("v1", "ConfigMap", SANDBOX, "cfg", {"data": {"a": None, "b": "2"}})
    assert patched["data"] == {"b": "2"}
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert kube.get("v1", "ConfigMap", SANDBOX, "cfg") == patched
    kube.delete("v1", "ConfigMap", SANDBOX, "cfg")

    notebook = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "metadata": {"name": "nb", "namespace": SANDBOX, "labels": {"x": "1"}},
        "spec": {"template": {"spec": {"containers": [{"name": "nb", "image": "jupyter"}]}}},
    }
    kube.create(notebook)
    result = kube.list("kubeflow.org/v1", "Notebook", label_selector="x=1")
    assert [o["metadata"]["name"] for o in result.items] == ["nb"]
    assert int(result.resource_version) > 0
    assert kube.list("kubeflow.org/v1", "Notebook", label_selector="x=2").items == []
    assert kube.list("kubeflow.org/v1", "Notebook", SANDBOX).items[0]["metadata"]["name"] == "nb"

    kube.delete("kubeflow.org/v1", "Notebook", SANDBOX, "nb")
    assert kube.delete("kubeflow.org/v1", "Notebook", SANDBOX, "nb", missing_ok=True) is None


def test_api_failures_become_messages_a_user_can_act_on(
    installed: State, sandbox_kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kube = KubeClient(api_client(sandbox_kubeconfig))
    with pytest.raises(ApiNotFound) as missing:
        kube.get("v1", "Pod", SANDBOX, "nope")
    assert missing.value.message == f'reading Pod {SANDBOX}/nope failed: not found: pods "nope" not found'
    assert missing.value.missing_kind == "pods"

    kube.create(POD)
    with pytest.raises(
        Conflict,
        match=f"creating Pod {SANDBOX}/p failed: already exists or was changed concurrently: "
        'pods "p" already exists',
    ):
        kube.create(POD)
    # Optimistic concurrency: a patch that names an old resourceVersion is a 409 too.
    with pytest.raises(Conflict, match="the object has been modified"):
        kube.patch("v1", "Pod", SANDBOX, "p", {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}})

    # A 422 comes from what the workbench rendered (user input is validated first): a 503 that does
    # not blame the caller, with the API's words in the log for the admin.
    logger = "cube_jupyter.kube.client"
    invalid_pod = {**POD, "metadata": {"name": "q", "namespace": SANDBOX}, "spec": {"containers": []}}
    with caplog.at_level(logging.WARNING, logger=logger), pytest.raises(BackendUnavailable) as invalid:
        kube.create(invalid_pod)
    assert invalid.value.status == 503
    assert invalid.value.message.startswith(f"creating Pod {SANDBOX}/q was rejected as invalid by Kubernetes")
    assert "workbench's configuration" in invalid.value.message
    assert 'Pod "q" is invalid: spec.containers: Required value' in caplog.text

    # The authorizer's 403 is the workbench's service account lacking RBAC: 503, its name in the log only.
    with caplog.at_level(logging.WARNING, logger=logger), pytest.raises(ApiForbidden) as refused:
        kube.delete("v1", "Pod", "kube-system", "p")
    assert refused.value.status == 503 and not isinstance(refused.value, Forbidden)
    assert refused.value.message.startswith("deleting Pod kube-system/p was refused by Kubernetes")
    assert "serviceaccount" not in refused.value.message and "forbidden" not in refused.value.message
    assert f"system:serviceaccount:{SANDBOX}:editor" in caplog.text
    kube.delete("v1", "Pod", SANDBOX, "p")


def test_the_kubeconfigs_context_ca_and_token_are_used(
    installed: State, sandbox_kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The current context points elsewhere; `CubeWorkbench.kubernetes_context` picks the real one,
    whose CA and ServiceAccount token the API server checks (SelfSubjectReview says who it saw)."""
    real = yaml.safe_load(sandbox_kubeconfig.read_text())
    config = {
        **real,
        "clusters": [
            *real["clusters"],
            {"name": "elsewhere", "cluster": {"server": "https://elsewhere.example:6443"}},
        ],
        "contexts": [
            {"name": "here", "context": real["contexts"][0]["context"]},
            {"name": "elsewhere", "context": {**real["contexts"][0]["context"], "cluster": "elsewhere"}},
        ],
        "current-context": "elsewhere",
    }
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert make_api_client(make_settings()).configuration.host == "https://elsewhere.example:6443"
    kube = KubeClient(make_api_client(make_settings({"kubernetes_context": "here"})))
    review = kube.create({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{SANDBOX}:editor"
    kube.close()

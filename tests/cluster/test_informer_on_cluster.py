"""The informer against the real API server: list once, then follow the watch (the selector applied
by the API, leaving it a DELETED event); a server-side watch timeout resumed from where it left off
with no new list; a large list read in pages; an idle watch interrupted by stop. Each request is
read back from the API server's audit log.

What a real server cannot do on demand stays on the emulator (tests/kubernetes/test_informer.py): a
410 on a watch held open while history is compacted past it, an HTTP 410 on a new watch, a failing
list. A real 410 Gone after an API server crash and an etcd compaction is in
test_notebooks_on_cluster.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.errors import BackendUnavailable
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.informer import Informer, start_synced, stop_all
from tests.cluster.conftest import SANDBOX as NAMESPACE
from tests.cluster.conftest import Kubectl, api_client, requests_of, wait_for
from tests.cluster.controlplane import State

SELECTOR = "app.kubernetes.io/managed-by=cube-jupyter"


def config_map(name: str, managed: bool = True, **labels: str) -> dict[str, Any]:
    if managed:
        labels["app.kubernetes.io/managed-by"] = "cube-jupyter"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
    }


@pytest.fixture
def kube(sandbox_kubeconfig: Path, kubectl: Kubectl) -> Iterator[KubeClient]:
    client = KubeClient(api_client(sandbox_kubeconfig))
    yield client
    client.close()
    kubectl("delete", "configmaps", "--all", "--namespace", NAMESPACE, "--wait=false")


@pytest.fixture
def informers() -> Iterator[list[Informer]]:
    started: list[Informer] = []
    yield started
    stop_all(started)


def start(informers: list[Informer], kube: KubeClient, **kwargs: Any) -> Informer:
    kwargs.setdefault("label_selector", SELECTOR)
    informer = Informer(kube, "v1", "ConfigMap", namespace=NAMESPACE, **kwargs)
    informers.append(informer)
    informer.start()
    assert informer.wait_synced(30)
    return informer


def lists_and_watches(installed: State, request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    made = [r for r in requests_of(installed, request.node.nodeid) if r.resource == "configmaps"]
    watches = [r for r in made if r.verb == "watch"]
    return [r for r in made if r.verb == "list"], watches


def names(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def test_lists_once_then_follows_the_watch(
    installed: State, kube: KubeClient, informers: list[Informer], request: pytest.FixtureRequest
) -> None:
    kube.create(config_map("a"))
    kube.create(config_map("unmanaged", managed=False))
    informer = start(informers, kube, indexers={"team": lambda o: [o["metadata"]["labels"].get("team", "")]})
    assert names(informer.list()) == ["a"]  # the selector is applied by the API

    kube.create(config_map("b", team="ml"))
    wait_for("b in the cache", lambda: informer.get(NAMESPACE, "b"))
    assert names(informer.by_index("team", "ml")) == ["b"]
    kube.patch("v1", "ConfigMap", NAMESPACE, "b", {"metadata": {"labels": {"team": "cv"}}})
    wait_for("b indexed under cv", lambda: names(informer.by_index("team", "cv")) == ["b"])
    assert informer.by_index("team", "ml") == []

    # Leaving the selection is a DELETED event for a selective watch.
    kube.patch(
        "v1", "ConfigMap", NAMESPACE, "a", {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}}
    )
    wait_for("a out of the cache", lambda: informer.get(NAMESPACE, "a") is None)
    kube.delete("v1", "ConfigMap", NAMESPACE, "b")
    wait_for("an empty cache", lambda: len(informer) == 0)

    lists, _ = lists_and_watches(installed, request)  # an open watch is logged when it ends
    assert informer.list_calls == 1 and len(lists) == 1 and lists[0].query["labelSelector"] == SELECTOR


def test_a_server_side_watch_timeout_resumes_without_listing(
    installed: State, kube: KubeClient, informers: list[Informer], request: pytest.FixtureRequest
) -> None:
    informer = start(informers, kube, watch_timeout_seconds=1)
    kube.create(config_map("x", managed=False))  # not ours: the cache never sees it
    wait_for("three watches", lambda: informer.watch_calls >= 3)
    kube.create(config_map("y"))
    wait_for("y in the cache", lambda: informer.get(NAMESPACE, "y"))
    assert informer.list_calls == 1 and names(informer.list()) == ["y"]
    _, watches = lists_and_watches(installed, request)
    assert all(w.query["allowWatchBookmarks"] == "true" and w.query["timeoutSeconds"] == "1" for w in watches)
    versions = [int(w.query["resourceVersion"]) for w in watches]
    assert versions == sorted(versions) and versions[0] > 0  # each resumes where the last left off


def test_a_large_list_is_read_in_pages(
    installed: State, kube: KubeClient, informers: list[Informer], request: pytest.FixtureRequest
) -> None:
    for i in range(1100):
        kube.create(config_map(f"c{i:04d}"))
    informer = start(informers, kube)
    assert len(informer) == 1100
    lists, _ = lists_and_watches(installed, request)
    assert [bool(r.query.get("continue")) for r in lists] == [False, True, True]
    assert all(r.query["limit"] == "500" for r in lists)


def test_stop_interrupts_an_idle_watch(kube: KubeClient, informers: list[Informer]) -> None:
    informer = start(informers, kube)  # its watch would stay open for 300 s
    wait_for("the watch", lambda: informer.watch_calls == 1)
    thread = informer._thread
    assert thread is not None
    informer.stop(10)
    # Only an interrupted read lets the thread end within stop's join; else it is still blocked.
    assert not thread.is_alive() and informer._thread is None


def test_a_cluster_wide_list_the_authorizer_refuses_says_which_settings_scope_it(
    kube: KubeClient, informers: list[Informer]
) -> None:
    """Credentials for one namespace (this ServiceAccount's) cannot list every namespace: the error
    names what makes the workbench (or the CLI) watch only its own."""
    informer = Informer(kube, "v1", "ConfigMap", label_selector=SELECTOR, backoff_initial=0.05)
    informers.append(informer)
    with pytest.raises(BackendUnavailable) as refused:
        asyncio.run(start_synced([informer], 5))
    assert "was refused by Kubernetes" in refused.value.message
    assert "need CubeWorkbench.role = 'user' and CubeWorkbench.namespace" in refused.value.message

"""The informer against the emulator, for what a real API server cannot do on demand: a 410 on a watch
held open while history is compacted past it, an HTTP 410 answering a new watch, a failing list.
Listing, watching, bookmarks, paging and stop run against the real one:
tests/cluster/test_informer_on_cluster.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.informer import Informer
from tests.kubernetes.emulator import ApiServerEmulator
from tests.waiting import wait_until_async

PODS = "v1/pods"
SELECTOR = "app.kubernetes.io/managed-by=cube-jupyter"


def pod(name: str, ns: str = "cube-alice", managed: bool = True, **labels: str) -> dict[str, Any]:
    if managed:
        labels["app.kubernetes.io/managed-by"] = "cube-jupyter"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest.fixture
def informers(kube: KubeClient, loop: asyncio.AbstractEventLoop) -> Iterator[list[Informer]]:
    started: list[Informer] = []
    yield started

    def stop_all() -> None:
        for informer in started:
            informer.stop()

    # The loop keeps serving while the threads stop: a request in flight must get its answer.
    loop.run_until_complete(asyncio.to_thread(stop_all))


async def start(informers: list[Informer], kube: KubeClient, **kwargs: Any) -> Informer:
    kwargs.setdefault("label_selector", SELECTOR)
    informer = Informer(kube, "v1", "Pod", **kwargs)
    informers.append(informer)
    informer.start()
    assert await asyncio.to_thread(informer.wait_synced, 10)
    return informer


async def test_watch_error_410_makes_it_list_again_and_catch_up(
    kmock: ApiServerEmulator, kube: KubeClient, informers: list[Informer]
) -> None:
    await asyncio.to_thread(kube.create, pod("a"))
    informer = await start(informers, kube)
    assert len(kmock.requests_of("list", PODS)) == 1
    await wait_until_async(lambda: kmock.open_watches == 1)

    kmock.hold_watches()
    kmock.compact()  # the open watch ends with an ERROR event, code 410
    await wait_until_async(lambda: len(kmock.requests_of("list", PODS)) == 2)  # re-listed at once
    await wait_until_async(lambda: len(kmock.requests_of("watch", PODS)) == 2)  # and is watching again (held)

    # While its watch is held, a change happens and the history is compacted past it: the change
    # can only reach the cache through another list.
    await asyncio.to_thread(kube.create, pod("missed"))
    kmock.compact(expire_open_watches=False)
    assert informer.get("cube-alice", "missed") is None
    kmock.release_watches()

    await wait_until_async(lambda: informer.get("cube-alice", "missed"))
    assert len(kmock.requests_of("list", PODS)) == 3 and informer.list_calls == 3
    # And it keeps following the watch afterwards.
    await asyncio.to_thread(kube.create, pod("after"))
    await wait_until_async(lambda: informer.get("cube-alice", "after"))
    assert informer.list_calls == 3


async def test_http_410_on_watch_makes_it_list_again(
    kmock: ApiServerEmulator, kube: KubeClient, informers: list[Informer]
) -> None:
    informer = await start(informers, kube)
    await wait_until_async(lambda: kmock.open_watches == 1)
    kmock.gone_on_next_watch(PODS)
    kmock.compact()  # the open watch ends; its next watch request is answered with HTTP 410
    await wait_until_async(lambda: informer.list_calls == 3)
    await asyncio.to_thread(kube.create, pod("later"))
    await wait_until_async(lambda: informer.get("cube-alice", "later"))
    assert informer.list_calls == 3 and len(kmock.requests_of("list", PODS)) == 3


async def test_list_errors_are_retried_with_backoff_and_reported(
    kmock: ApiServerEmulator, kube: KubeClient, informers: list[Informer]
) -> None:
    kmock.fail_next(
        "list",
        PODS,
        403,
        'pods is forbidden: User "system:serviceaccount:kubeflow:cube" cannot '
        'list resource "pods" in API group "" at the cluster scope',
        times=2,
    )
    informer = Informer(kube, "v1", "Pod", label_selector=SELECTOR, backoff_initial=0.05)
    informers.append(informer)
    informer.start()
    assert await asyncio.to_thread(informer.wait_synced, 10)
    assert informer.list_calls == 3 and informer.last_error is None

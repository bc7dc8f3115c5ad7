"""The informer against the emulator: list once, then watch; re-list on 410 Gone; bookmarks; paging; stop."""

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


async def test_lists_once_then_follows_the_watch(
    kmock: ApiServerEmulator, kube: KubeClient, informers: list[Informer]
) -> None:
    await asyncio.to_thread(kube.create, pod("a"))
    await asyncio.to_thread(kube.create, pod("unmanaged", managed=False))
    informer = await start(
        informers, kube, indexers={"team": lambda o: [o["metadata"]["labels"].get("team", "")]}
    )
    assert [o["metadata"]["name"] for o in informer.list()] == ["a"]  # the selector is applied by the API
    assert informer.resource_version == str(kmock.resource_version)

    await asyncio.to_thread(kube.create, pod("b", team="ml"))
    await wait_until_async(lambda: informer.get("cube-alice", "b"))
    assert [o["metadata"]["name"] for o in informer.by_index("team", "ml")] == ["b"]

    await asyncio.to_thread(
        kube.patch, "v1", "Pod", "cube-alice", "b", {"metadata": {"labels": {"team": "cv"}}}
    )
    await wait_until_async(lambda: [o["metadata"]["name"] for o in informer.by_index("team", "cv")] == ["b"])
    assert informer.by_index("team", "ml") == []

    # Leaving the selection is a DELETED event for a selective watch, as on a real API server.
    await asyncio.to_thread(
        kube.patch,
        "v1",
        "Pod",
        "cube-alice",
        "a",
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}},
    )
    await wait_until_async(lambda: informer.get("cube-alice", "a") is None)
    await asyncio.to_thread(kube.delete, "v1", "Pod", "cube-alice", "b")
    await wait_until_async(lambda: len(informer) == 0)

    assert informer.list_calls == 1 and len(kmock.requests_of("list", PODS)) == 1
    assert informer.resource_version == str(kmock.resource_version)


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


async def test_server_side_watch_timeout_resumes_without_listing(
    kmock: ApiServerEmulator, kube: KubeClient, informers: list[Informer]
) -> None:
    informer = await start(informers, kube, watch_timeout_seconds=1)
    await asyncio.to_thread(kube.create, pod("x", managed=False))  # not ours: only a bookmark shows it
    await wait_until_async(lambda: informer.watch_calls >= 3, timeout=10)
    assert informer.list_calls == 1
    params = [r.params for r in kmock.requests_of("watch", PODS)]
    assert all(p["allowWatchBookmarks"] == "true" and p["timeoutSeconds"] == "1" for p in params)
    # Each watch resumes where the last one (or its closing BOOKMARK) left off.
    assert params[-1]["resourceVersion"] == str(kmock.resource_version)


async def test_paged_list_of_a_large_cluster(
    kmock: ApiServerEmulator, kube: KubeClient, informers: list[Informer]
) -> None:
    kmock.preload(pod(f"p{i:04d}") for i in range(1100))
    informer = await start(informers, kube)
    assert len(informer) == 1100
    pages = kmock.requests_of("list", PODS)
    assert [bool(p.params.get("continue")) for p in pages] == [False, True, True]


async def test_stop_interrupts_an_idle_watch(
    kmock: ApiServerEmulator, kube: KubeClient, informers: list[Informer]
) -> None:
    informer = await start(informers, kube)  # its watch would stay open for 300 s
    await wait_until_async(lambda: informer.watch_calls == 1 and kmock.open_watches == 1)
    thread = informer._thread
    assert thread is not None
    await asyncio.to_thread(informer.stop, 10)
    # Only an interrupted read lets the thread end within stop's join; else it is still blocked.
    assert not thread.is_alive() and informer._thread is None


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

"""Idle culling on the kubernetes backend, over real HTTP both ways: the KMock API emulator for the
cluster, and a real Jupyter server with the rendered pod's flags for the pod the workbench asks
(`server_url_template` points at it on loopback; the code path is the in-cluster one)."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.fields import parse_timestamp
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.local.processes import LOOPBACK, free_port
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.kubernetes.culler import IdleCuller, RunningServer
from cube_jupyter.notebooks.render import LAST_ACTIVITY_ANNOTATION, STOP_REASON_ANNOTATION, STOPPED_ANNOTATION
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.kubernetes.actors import (
    controller_creates_pod,
    controller_deletes_pod,
    kubelet_sets_status,
    ready_status,
)
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.kubernetes.podserver import PodServer
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(90)

NOTEBOOKS = "kubeflow.org/v1/notebooks"
LIMIT = 2  # cull_idle_seconds
POLL = 0.3  # seconds between culling passes


@pytest.fixture
def culling(
    kube: KubeClient, kmock: ApiServerEmulator, make_backend: Callable[..., Any], tmp_path: Path
) -> Iterator[Callable[..., Awaitable[tuple[KubernetesNotebookBackend, PodServer | None]]]]:
    """A culling backend with alice/nb1 created and its pod made by the controller; with `pod`, a
    stand-in server runs the pod's Jupyter on the loopback port the backend asks, else nothing
    listens there. Every stand-in (and its kernels) is killed at teardown."""
    made: list[PodServer] = []

    async def make(pod: bool = True) -> tuple[KubernetesNotebookBackend, PodServer | None]:
        port = free_port()
        backend: KubernetesNotebookBackend = await make_backend(
            make_settings(
                {"poll_seconds": POLL},
                cull_idle_seconds=LIMIT,
                server_url_template=f"http://{LOOPBACK}:{port}",
            )
        )
        await backend.create_server(NotebookSpec("alice", "nb1", backend.settings.profile("cpu")))
        await controller_creates_pod(kube, "cube-alice", "nb1")
        if not pod:
            return backend, None
        notebook = kmock.find(NOTEBOOKS, "cube-alice", "nb1")
        assert notebook is not None
        [container] = notebook["spec"]["template"]["spec"]["containers"]
        server = PodServer(container, port, tmp_path / "pod")
        made.append(server)
        await server.start()
        assert server.base_url == "/notebook/cube-alice/nb1/"  # the route prefix: what the culler asks
        return backend, server

    yield make
    for server in made:
        server.stop()


async def make_ready(kube: KubeClient, backend: KubernetesNotebookBackend) -> None:
    """The kubelet reports the pod Ready; returns once the backend sees it running."""
    await kubelet_sets_status(kube, "cube-alice", "nb1-0", ready_status())
    await wait_until_async(lambda: status(backend) == ServerStatus.RUNNING)


@dataclass(frozen=True)
class Check:
    """A check of alice/nb1 the culler finished: when it began, and for how long the pod had been
    Ready then (from the kubelet's whole-second Ready time, the floor of the server's activity)."""

    began: datetime
    ready_for: float


def record_checks(backend: KubernetesNotebookBackend, monkeypatch: pytest.MonkeyPatch) -> list[Check]:
    done: list[Check] = []
    check = backend.culler._check

    async def recording(server: RunningServer) -> None:
        began = datetime.now(UTC)
        await check(server)
        done.append(Check(began, (began - server.started).total_seconds()))

    monkeypatch.setattr(backend.culler, "_check", recording)
    return done


async def a_check_past_the_limit(checks: list[Check]) -> Check:
    """The first finished check that began with the pod Ready for longer than the limit: with no
    activity since, it would have culled the server."""
    past: list[Check] = await wait_until_async(
        lambda: [c for c in checks if c.ready_for > LIMIT], what=f"a finished check past the {LIMIT} s limit"
    )
    return past[0]


def status(backend: KubernetesNotebookBackend) -> ServerStatus | None:
    server = backend.get_server("alice", "nb1")
    return server.status if server else None


def stored_annotations(kmock: ApiServerEmulator) -> dict[str, str]:
    notebook = kmock.find(NOTEBOOKS, "cube-alice", "nb1")
    assert notebook is not None
    return dict(notebook["metadata"].get("annotations") or {})


async def test_idle_server_is_culled_and_says_why(
    kube: KubeClient, kmock: ApiServerEmulator, culling: Callable[..., Any]
) -> None:
    backend, pod = await culling()
    await make_ready(kube, backend)

    await wait_until_async(lambda: STOPPED_ANNOTATION in stored_annotations(kmock))
    stored = stored_annotations(kmock)
    assert stored[STOP_REASON_ANNOTATION] == "culled after 2 s idle"
    # Stopped no sooner than the limit after the last activity it recorded (both in whole seconds).
    last, stopped = (
        parse_timestamp(stored[LAST_ACTIVITY_ANNOTATION]),
        parse_timestamp(stored[STOPPED_ANNOTATION]),
    )
    assert last is not None and stopped is not None and stopped - last >= timedelta(seconds=LIMIT)

    # The controller scales the server to 0: its pod goes. The reason shows while it is stopped.
    await controller_deletes_pod(kube, "cube-alice", "nb1-0")
    pod.stop()
    await wait_until_async(lambda: status(backend) == ServerStatus.STOPPED)
    server = backend.get_server("alice", "nb1")
    assert server is not None
    assert server.reason == "culled after 2 s idle"
    assert server.last_activity == stored[LAST_ACTIVITY_ANNOTATION]
    # The informer's first list was the only one: culling reads the cache.
    assert len(kmock.requests_of("list", NOTEBOOKS)) == 1

    # A user's start clears the reason.
    started = await backend.set_stopped("alice", "nb1", False)
    assert started.reason != "culled after 2 s idle"
    assert STOP_REASON_ANNOTATION not in stored_annotations(
        kmock
    ) and STOPPED_ANNOTATION not in stored_annotations(kmock)


async def test_busy_kernel_keeps_the_server_and_its_activity_is_recorded(
    kube: KubeClient, kmock: ApiServerEmulator, culling: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, pod = await culling()
    checks = record_checks(backend, monkeypatch)
    ws = await pod.busy_kernel("import time; time.sleep(600)")
    try:
        await make_ready(kube, backend)
        await a_check_past_the_limit(checks)  # the cell began before the pod was Ready
        assert status(backend) == ServerStatus.RUNNING
        stored = stored_annotations(kmock)
        assert STOPPED_ANNOTATION not in stored and STOP_REASON_ANNOTATION not in stored
        last = parse_timestamp(stored[LAST_ACTIVITY_ANNOTATION])
        # Busy means active "now" when checked, not when the cell began (before the pod was Ready).
        assert last is not None and last >= checks[0].began.replace(microsecond=0)
        server = backend.get_server("alice", "nb1")
        assert server is not None and server.last_activity == stored[LAST_ACTIVITY_ANNOTATION]
    finally:
        ws.close()


async def test_a_cull_decided_on_an_outdated_version_is_refused(
    kube: KubeClient, kmock: ApiServerEmulator, culling: Callable[..., Any]
) -> None:
    """The stop patch carries the resourceVersion the decision was made on: if a user changed the
    server meanwhile (here: an annotation), the API answers 409 and nothing is stopped."""
    backend, _pod = await culling()
    outdated = copy.deepcopy(kmock.find(NOTEBOOKS, "cube-alice", "nb1"))
    touch = {"metadata": {"annotations": {"example.com/touched": "yes"}}}
    await asyncio.to_thread(kube.patch, "kubeflow.org/v1", "Notebook", "cube-alice", "nb1", touch)
    long_idle = RunningServer(workload=outdated, started=datetime.now(UTC) - timedelta(hours=1))
    culler = IdleCuller(backend.settings, kube, "kubeflow.org/v1", "Notebook", lambda: [long_idle])
    await culler.check_once()
    assert STOPPED_ANNOTATION not in stored_annotations(kmock)
    # The same decision on the current version goes through.
    current = RunningServer(workload=kmock.find(NOTEBOOKS, "cube-alice", "nb1"), started=long_idle.started)
    culler.running = lambda: [current]
    await culler.check_once()
    assert stored_annotations(kmock)[STOP_REASON_ANNOTATION] == "culled after 2 s idle"


async def test_unreachable_server_is_never_culled(
    kube: KubeClient,
    kmock: ApiServerEmulator,
    culling: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG, logger="cube_jupyter.notebooks.kubernetes.culler")
    backend, _ = await culling(pod=False)  # nobody listens where the backend asks
    checks = record_checks(backend, monkeypatch)
    await make_ready(kube, backend)

    await a_check_past_the_limit(checks)
    assert status(backend) == ServerStatus.RUNNING
    assert not {STOPPED_ANNOTATION, STOP_REASON_ANNOTATION, LAST_ACTIVITY_ANNOTATION} & set(
        stored_annotations(kmock)
    )
    skipped = [r for r in caplog.records if "cube-alice/nb1 unavailable, not culling" in r.getMessage()]
    assert len(skipped) >= len(checks), "every finished check should have skipped the server"

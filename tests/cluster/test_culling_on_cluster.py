"""Idle culling on the real control plane: the workbench's culler (its ServiceAccount's token) asks
each running server's Jupyter how long it has been idle, and stops an idle one by patching its
StatefulSet, which the real StatefulSet controller then scales to nothing. The pod's Jupyter is a real
one with the rendered container's flags, on loopback (`server_url_template` points at it; the code
path is the in-cluster one); kwok's pod itself runs nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.fields import parse_timestamp
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.labels import STOP_REASON_ANNOTATION
from cube_jupyter.local.processes import LOOPBACK, free_port
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.kubernetes.culler import IdleCuller, RunningServer
from cube_jupyter.notebooks.render import (
    LAST_ACTIVITY_ANNOTATION,
    STOPPED_ANNOTATION,
    render_notebook_objects,
)
from cube_jupyter.notebooks.spec import NotebookServer, NotebookSpec, ServerStatus
from tests.cluster.conftest import USERS, api_client
from tests.cluster.controlplane import State
from tests.cluster.servers import eventually, run_backends, until
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.podserver import PodServer

ALICE = "alice@example.com"
NAMESPACE = USERS[ALICE]
LIMIT = 2  # cull_idle_seconds
CULLED = f"culled after {LIMIT} s idle"


def culling_settings(port: int) -> Settings:
    return make_settings(
        {"namespace_source": "kubeflow-profile", "poll_seconds": 0.3},
        resource_kind="StatefulSet",
        workspace_size="1Gi",
        cull_idle_seconds=LIMIT,
        server_url_template=f"http://{LOOPBACK}:{port}",
    )


def stored_annotations(admin: k8s.ApiClient, name: str) -> dict[str, str]:
    stored = KubeClient(admin).get("apps/v1", "StatefulSet", NAMESPACE, name)
    return dict(stored["metadata"].get("annotations") or {})


@pytest.fixture
def jupyter_of(tmp_path: Path) -> Iterator[Callable[[Settings, NotebookSpec, int], PodServer]]:
    """The Jupyter of a server's pod, as rendered (its StatefulSet's container), on `port` (it may
    start before the server is made); killed with its kernels at teardown."""
    started: list[PodServer] = []

    def make(settings: Settings, spec: NotebookSpec, port: int) -> PodServer:
        [workload] = [
            o
            for o in render_notebook_objects(spec, settings.notebooks, NAMESPACE)
            if o["kind"] == "StatefulSet"
        ]
        [container] = workload["spec"]["template"]["spec"]["containers"]
        server = PodServer(container, port, tmp_path / spec.name)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def test_an_idle_server_is_culled_and_the_statefulset_controller_stops_it(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, jupyter_of: Any
) -> None:
    port = free_port()
    settings = culling_settings(port)

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        idle = NotebookSpec(ALICE, "idle", settings.notebooks.profile("cpu"))
        await backend.create_server(idle)
        jupyter = jupyter_of(settings, idle, port)
        await jupyter.start()
        assert jupyter.base_url == f"/notebook/{NAMESPACE}/idle/"  # the route prefix the culler asks
        server = await until(backend, ALICE, "idle", lambda s: s.status is ServerStatus.STOPPED)
        assert server.reason == CULLED
        stored = stored_annotations(admin, "idle")
        assert stored[STOP_REASON_ANNOTATION] == CULLED
        assert server.last_activity == stored[LAST_ACTIVITY_ANNOTATION]
        # Stopped no sooner than the limit after the last activity it recorded (whole seconds).
        last, stopped = (
            parse_timestamp(stored[LAST_ACTIVITY_ANNOTATION]),
            parse_timestamp(stored[STOPPED_ANNOTATION]),
        )
        assert last is not None and stopped is not None and stopped - last >= timedelta(seconds=LIMIT)
        assert KubeClient(admin).get("apps/v1", "StatefulSet", NAMESPACE, "idle")["spec"]["replicas"] == 0

        jupyter.stop()  # a user's start clears the reason (and nothing answers now: never culled)
        started = await backend.set_stopped(ALICE, "idle", False)
        assert started.reason != CULLED
        assert not {STOP_REASON_ANNOTATION, STOPPED_ANNOTATION} & set(stored_annotations(admin, "idle"))
        await until(backend, ALICE, "idle", lambda s: s.status is ServerStatus.RUNNING)
        await backend.delete_server(ALICE, "idle")

    run_backends(workbench_kubeconfig, settings, scenario, supervise=True)


def test_a_busy_kernel_keeps_the_server_and_its_activity_is_recorded(
    installed: State,
    admin: k8s.ApiClient,
    workbench_kubeconfig: Path,
    jupyter_of: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    settings = culling_settings(port)

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        checks = record_checks(backend, monkeypatch)
        busy = NotebookSpec(ALICE, "busy", settings.notebooks.profile("cpu"))
        jupyter = jupyter_of(settings, busy, port)
        await jupyter.start()
        ws = await jupyter.busy_kernel("import time; time.sleep(600)")  # begun before the pod is Ready
        await backend.create_server(busy)
        try:
            await past_the_limit(checks)
            stored = stored_annotations(admin, "busy")
            assert not {STOPPED_ANNOTATION, STOP_REASON_ANNOTATION} & set(stored)
            # Busy means active "now" when checked, not when the cell began (before the pod was Ready).
            first = checks[0].began.replace(microsecond=0)
            last = parse_timestamp(stored[LAST_ACTIVITY_ANNOTATION])
            assert last is not None and last >= first

            def seen(server: NotebookServer) -> bool:  # by the panel, once the watch brings the patch
                shown = parse_timestamp(server.last_activity or "")
                return shown is not None and shown >= first

            server = await until(backend, ALICE, "busy", seen)
            assert server.status is ServerStatus.RUNNING
        finally:
            ws.close()
        await backend.delete_server(ALICE, "busy")

    run_backends(workbench_kubeconfig, settings, scenario, supervise=True)


def test_a_cull_decided_on_an_outdated_version_is_refused_by_the_api_server(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, jupyter_of: Any
) -> None:
    """The stop patch carries the resourceVersion the decision was made on: if the server changed
    meanwhile, the API server's precondition answers 409 and nothing is stopped."""
    port = free_port()
    settings = culling_settings(port)
    kube = KubeClient(admin)

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        raced = NotebookSpec(ALICE, "raced", settings.notebooks.profile("cpu"))
        await backend.create_server(raced)
        await jupyter_of(settings, raced, port).start()  # idle: only the version stands in the way
        outdated = kube.get("apps/v1", "StatefulSet", NAMESPACE, "raced")
        touch = {"metadata": {"annotations": {"example.com/touched": "yes"}}}
        kube.patch("apps/v1", "StatefulSet", NAMESPACE, "raced", touch)
        long_idle = RunningServer(workload=outdated, started=datetime.now(UTC) - timedelta(hours=1))
        workbench = KubeClient(api_client(workbench_kubeconfig))
        culler = IdleCuller(settings.notebooks, workbench, "apps/v1", "StatefulSet", lambda: [long_idle])
        await culler.check_once()
        assert STOPPED_ANNOTATION not in stored_annotations(admin, "raced")
        # The same decision on the current version goes through.
        current = kube.get("apps/v1", "StatefulSet", NAMESPACE, "raced")
        culler.running = lambda: [RunningServer(workload=current, started=long_idle.started)]
        await culler.check_once()
        assert stored_annotations(admin, "raced")[STOP_REASON_ANNOTATION] == CULLED
        await backend.delete_server(ALICE, "raced")

    run_backends(workbench_kubeconfig, settings, scenario)


@dataclass(frozen=True)
class Check:
    """A check of a server the culler finished: when it began, and for how long the pod had been
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


async def past_the_limit(checks: list[Check]) -> None:
    """Until a check finished that began with the pod Ready for longer than the limit: with no
    activity since, it would have culled the server."""
    await eventually("a check past the limit", lambda: [c for c in checks if c.ready_for > LIMIT], bool)


def test_a_server_whose_jupyter_does_not_answer_is_never_culled(
    installed: State,
    admin: k8s.ApiClient,
    workbench_kubeconfig: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = culling_settings(free_port())  # nothing listens there

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        checks = record_checks(backend, monkeypatch)
        await backend.create_server(NotebookSpec(ALICE, "silent", settings.notebooks.profile("cpu")))
        await until(backend, ALICE, "silent", lambda s: s.status is ServerStatus.RUNNING)
        await past_the_limit(checks)
        assert backend.get_server(ALICE, "silent").status is ServerStatus.RUNNING  # type: ignore[union-attr]
        assert not {STOPPED_ANNOTATION, STOP_REASON_ANNOTATION, LAST_ACTIVITY_ANNOTATION} & set(
            stored_annotations(admin, "silent")
        )
        unavailable = f"{NAMESPACE}/silent unavailable, not culling"
        assert any(unavailable in r.getMessage() for r in caplog.records)
        await backend.delete_server(ALICE, "silent")

    with caplog.at_level(logging.DEBUG, logger="cube_jupyter.notebooks.kubernetes.culler"):
        run_backends(workbench_kubeconfig, settings, scenario, supervise=True)

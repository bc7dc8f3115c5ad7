"""The notebook backend's own contract, met on the real control plane with the workbench's token: the
objects it makes and what the API server adds to them, reads served from its caches (counted in the
audit log), the reasons it shows for a server that does not run (from kube-scheduler's events, the
StatefulSet controller's refusal under a ResourceQuota, a crash loop), and creates that fail (a real
409, 404 or quota refusal) leaving nothing of theirs behind. For `resource_kind = "Notebook"` the test
plays Kubeflow's notebook controller (test_notebooks_on_cluster.py says why)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound, QuotaExceeded
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.render import STOPPED_ANNOTATION, render_notebook_objects
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookSpec, ServerStatus
from tests.cluster.conftest import USERS, Kubectl, requests_of, resource_quota, without_crd
from tests.cluster.controlplane import State
from tests.cluster.servers import eventually, run_backends, until
from tests.kubernetes.conftest import make_settings

ALICE, BOB = "alice@example.com", "bob@example.com"
WAITING_FOR_POD = "waiting for the server's pod to be created"
NOTEBOOK = ("kubeflow.org/v1", "Notebook")


def settings_for(kind: str, **workbench: Any) -> Settings:
    return make_settings(
        {"namespace_source": "kubeflow-profile", **workbench}, resource_kind=kind, workspace_size="1Gi"
    )


def spec(settings: Settings, name: str, user: str = ALICE, profile: str = "cpu") -> NotebookSpec:
    return NotebookSpec(user, name, settings.notebooks.profile(profile))


@pytest.fixture
def on_cluster(workbench_kubeconfig: Path) -> Callable[..., Any]:
    return partial(run_backends, workbench_kubeconfig)


@pytest.fixture
def made(installed: State, request: pytest.FixtureRequest) -> Callable[..., list[tuple[str, str, int]]]:
    """(verb, resource, code) of the workbench's requests in this test, watches left out; `since`
    skips that many (a count taken earlier)."""

    def read(*verbs: str) -> list[tuple[str, str, int]]:
        return [
            (r.verb, r.resource, r.code)
            for r in requests_of(installed, request.node.nodeid)
            if r.verb != "watch" and (not verbs or r.verb in verbs)
        ]

    return read


def names(admin: k8s.ApiClient, namespace: str, api_version: str, kind: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in KubeClient(admin).list(api_version, kind, namespace).items)


def server_objects(admin: k8s.ApiClient, namespace: str, name: str) -> dict[str, bool]:
    """Which of a server's objects exist."""
    kube = KubeClient(admin)
    found = {}
    for api_version, kind, object_name in (
        ("v1", "PersistentVolumeClaim", f"{name}-workspace"),
        ("v1", "ConfigMap", f"{name}-cube-config"),
        (*NOTEBOOK, name),
        ("apps/v1", "StatefulSet", name),
        ("security.istio.io/v1", "AuthorizationPolicy", f"notebook-{name}"),
    ):
        try:
            kube.get(api_version, kind, namespace, object_name)
            found[kind] = True
        except NotFound:
            found[kind] = False
    return found


@pytest.fixture
def quota(admin: k8s.ApiClient) -> Iterator[Callable[[str, dict[str, str]], None]]:
    """`quota(namespace, hard)`: an admin's own ResourceQuota there for the rest of the test."""
    with ExitStack() as held:
        yield lambda namespace, hard: held.enter_context(resource_quota(admin, namespace, "team-quota", hard))


def warn(admin: k8s.ApiClient, namespace: str, about: dict[str, str], message: str, **fields: str) -> None:
    """A Warning event about the object `about` (kind, name, and uid if any), as a controller posts it."""
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{about['name']}.", "namespace": namespace},
        "involvedObject": {**about, "namespace": namespace},
        "type": "Warning",
        "reason": "Failed",
        "message": message,
        **fields,
    }
    KubeClient(admin).create(event)


def test_create_makes_the_rendered_objects_and_the_api_fills_their_metadata(
    installed: State, admin: k8s.ApiClient, on_cluster: Any, made: Any
) -> None:
    settings = settings_for("Notebook")
    namespace = USERS[ALICE]
    server_spec = spec(settings, "made", profile="gpu")

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        server = await backend.create_server(server_spec)
        assert (server.user, server.name, server.profile) == (ALICE, "made", "gpu")
        assert server.namespace == namespace and server.url == f"/notebook/{namespace}/made/"
        assert server.status is ServerStatus.PENDING and server.reason == WAITING_FOR_POD
        assert server.resources.gpu == 1 and server.resources.gpu_resource == "nvidia.com/gpu"
        assert server.resources.cpu == "4" and server.resources.memory == "16Gi"
        assert server.created.endswith("Z") and server.gpus_held == 1
        assert backend.get_server(ALICE, "made") == server

        kube = KubeClient(admin)
        for rendered in render_notebook_objects(server_spec, settings.notebooks, namespace):
            meta = rendered["metadata"]
            stored = kube.get(rendered["apiVersion"], rendered["kind"], namespace, meta["name"])
            body = "data" if rendered["kind"] == "ConfigMap" else "spec"
            for key, value in rendered[body].items():  # what the API server defaulted comes on top
                assert stored[body][key] == value, (rendered["kind"], key)
            assert stored["metadata"]["labels"] == meta["labels"]
            # the PV controller adds its own (bind-completed, bound-by-controller) to a claim's
            assert meta["annotations"].items() <= stored["metadata"]["annotations"].items()
            assert stored["metadata"]["uid"] and stored["metadata"]["resourceVersion"].isdigit()
            assert stored["metadata"]["creationTimestamp"].endswith("Z")
        await backend.delete_server(ALICE, "made")

        vgpu = await backend.create_server(spec(settings, "shared-gpu", profile="vgpu"))
        assert (vgpu.resources.gpu, vgpu.resources.gpu_resource) == (2, "tencent.com/vcuda-core")
        await backend.delete_server(ALICE, "shared-gpu")

    on_cluster(settings, scenario)
    assert made("create").count(("create", "notebooks", 201)) == 2
    # Foreground: the Notebook stays (terminating) until what it owns is gone.
    assert ("delete", "notebooks", 200) in made("delete")


def test_list_and_get_are_served_from_the_caches(installed: State, on_cluster: Any, made: Any) -> None:
    settings = settings_for("StatefulSet")

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        for user, name in ((ALICE, "read-1"), (ALICE, "read-2"), (BOB, "read-3")):
            await backend.create_server(spec(settings, name, user))
        before = made()
        for _ in range(200):
            assert sorted(s.name for s in backend.list_servers(ALICE) if s.name.startswith("read-")) == [
                "read-1",
                "read-2",
            ]
            assert backend.get_server(ALICE, "read-2") is not None
        assert made() == before  # no API call of any kind per read
        assert backend.get_server(BOB, "read-1") is None and backend.get_server(ALICE, "read-3") is None
        assert "read-3" in {s.name for s in backend.list_servers(None)}
        for user, name in ((ALICE, "read-1"), (ALICE, "read-2"), (BOB, "read-3")):
            await backend.delete_server(user, name)

    on_cluster(settings, scenario)
    lists = [resource for verb, resource, _ in made("list")]
    # One initial list per informer, paged or not, and nothing listed again.
    assert sorted(set(lists)) == sorted(lists), lists
    assert {"statefulsets", "pods", "events"} <= set(lists)


def test_the_reason_of_a_pending_server_is_kube_schedulers_event_about_its_own_pod(
    installed: State, admin: k8s.ApiClient, on_cluster: Any
) -> None:
    """A pod no node fits: kube-scheduler's FailedScheduling event is the reason; an event about an
    earlier pod of the same name (another uid), however recent, never is."""
    settings = settings_for("StatefulSet")
    namespace = USERS[ALICE]
    cpu = settings.notebooks.profile("cpu")
    nowhere = replace(cpu, node_selector={"cube-jupyter.test/pool": "none"})

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(NotebookSpec(ALICE, "nowhere", nowhere))
        unmatched = "didn't match Pod's node affinity/selector"
        server = await until(backend, ALICE, "nowhere", lambda s: unmatched in (s.reason or ""))
        assert server.status is ServerStatus.PENDING
        pod = KubeClient(admin).get("v1", "Pod", namespace, "nowhere-0")
        assert pod["metadata"]["uid"] != "earlier"
        earlier = {"kind": "Pod", "name": "nowhere-0", "uid": "earlier"}
        message = "an earlier pod's problem"
        when = "2099-01-01T00:00:00Z"
        await asyncio.to_thread(
            warn, admin, namespace, earlier, message, reason="FailedMount", lastTimestamp=when
        )
        await eventually(
            "the stale event cached",
            lambda: [e for e in backend.events.list() if e["message"] == message],
            bool,
        )
        # The scheduler's own words still (from its event, or the pod's PodScheduled condition once
        # it writes that), never the earlier pod's.
        reason = backend.get_server(ALICE, "nowhere").reason or ""  # type: ignore[union-attr]
        assert unmatched in reason and message not in reason, reason
        await backend.delete_server(ALICE, "nowhere")

    on_cluster(settings, scenario)


def test_a_pod_the_statefulset_controller_may_not_create_is_explained_by_its_refusal(
    installed: State, on_cluster: Any, quota: Any
) -> None:
    """A team's ResourceQuota (an admin's, not the workbench's) leaves no GPU: the StatefulSet
    controller's FailedCreate event on the StatefulSet carries the ResourceQuota plugin's words; once
    the admin lifts it, the controller makes the pod and the server runs."""
    settings = settings_for("StatefulSet")
    namespace = USERS[BOB]
    quota(namespace, {"requests.nvidia.com/gpu": "0"})

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(spec(settings, "refused", BOB, "gpu"))
        server = await until(backend, BOB, "refused", lambda s: "FailedCreate" in (s.reason or ""))
        assert server.status is ServerStatus.PENDING and server.gpus_held == 1
        assert "exceeded quota: team-quota" in (server.reason or ""), server.reason
        assert "requested: requests.nvidia.com/gpu=1" in (server.reason or "")
        await backend.delete_server(BOB, "refused")

    on_cluster(settings, scenario)


def test_only_warnings_about_servers_in_user_namespaces_are_cached(
    installed: State, kubectl: Kubectl, admin: k8s.ApiClient, on_cluster: Any
) -> None:
    """Namespaces by template here (a Profile's namespace may have any name: there, every one is)."""
    settings = make_settings(resource_kind="StatefulSet")  # namespace_template "cube-{username}"
    users = "cube-events-test"
    kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": users}}])

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        warn(admin, users, {"kind": "Node", "name": "cpu-node-1"}, "not a server's kind")
        warn(admin, "kube-system", {"kind": "Pod", "name": "elsewhere"}, "not a user's namespace")
        warn(admin, users, {"kind": "StatefulSet", "name": "kept"}, "a server's workload")

        def cached() -> list[str]:
            return [e["message"] for e in backend.events.list()]

        # One watch delivers events in the order they were made: once the last is cached, the
        # others were seen (and dropped) before it.
        await eventually("the StatefulSet's event", cached, lambda seen: "a server's workload" in seen)
        assert not {"not a server's kind", "not a user's namespace"} & set(cached())

    on_cluster(settings, scenario)
    kubectl("delete", "namespace", users, "--wait=false")


def test_a_crash_looping_gpu_server_fails_and_holds_its_gpu_until_stopped(
    installed: State, admin: k8s.ApiClient, on_cluster: Any
) -> None:
    """The kubelet's report of a crash loop (written here as kwok's node would; it runs nothing): the
    server is failed, keeps its GPU against the quota, and can be stopped, which frees it."""
    settings = settings_for("StatefulSet", gpu_quota_per_user=1)
    namespace = USERS[BOB]

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        service = NotebookService(settings.notebooks, backend)
        await service.create(BOB, {"name": "crashing", "profile": "gpu"})
        await until(backend, BOB, "crashing", lambda s: s.status is ServerStatus.RUNNING)
        status = {
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {
                    "name": "crashing",
                    "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-03-17",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 4,
                    "state": {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": "back-off 1m20s restarting failed container",
                        }
                    },
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
                }
            ],
        }
        await asyncio.to_thread(
            KubeClient(admin).patch,
            "v1",
            "Pod",
            namespace,
            "crashing-0",
            {"status": status},
            subresource="status",
        )
        failed = await until(backend, BOB, "crashing", lambda s: s.status is ServerStatus.FAILED)
        assert (
            failed.reason == "CrashLoopBackOff: back-off 1m20s restarting failed container (last exit code 1)"
        )
        shown = service.get(BOB, "crashing")
        assert shown.gpus_held == 1 and {"stop", "start"} <= set(shown.actions)
        with pytest.raises(QuotaExceeded, match="holds 1 GPU"):
            await service.create(BOB, {"name": "next", "profile": "gpu"})

        await service.set_stopped(BOB, "crashing", True)  # the StatefulSet controller takes the pod
        await until(backend, BOB, "crashing", lambda s: s.status is ServerStatus.STOPPED)
        await service.create(BOB, {"name": "next", "profile": "gpu"})
        for name in ("crashing", "next"):
            await backend.delete_server(BOB, name)

    on_cluster(settings, scenario)
    KubeClient(admin).delete("v1", "ResourceQuota", namespace, "cube-gpu-quota")


def test_stop_and_delete_keep_the_workspace_which_a_new_server_adopts(
    installed: State, admin: k8s.ApiClient, on_cluster: Any, made: Any
) -> None:
    kube = KubeClient(admin)
    namespace = USERS[ALICE]

    async def by_replicas(backend: KubernetesNotebookBackend) -> None:
        settings = settings_for("StatefulSet")
        await backend.create_server(spec(settings, "kept"))
        workspace = kube.get("v1", "PersistentVolumeClaim", namespace, "kept-workspace")
        why = "stopped after its GPU memory sat at 0% utilization for 2.0 h (c.CubeGPU.cull_idle_gpu_seconds)"
        stopped = await backend.set_stopped(ALICE, "kept", True, reason=why)  # as GPU culling stops it
        obj = kube.get("apps/v1", "StatefulSet", namespace, "kept")
        assert obj["spec"]["replicas"] == 0
        assert obj["metadata"]["annotations"]["cube-jupyter/stop-reason"] == why
        assert stopped.status in (ServerStatus.STOPPING, ServerStatus.STOPPED) and stopped.reason == why
        await backend.delete_server(ALICE, "kept")
        assert server_objects(admin, namespace, "kept")["PersistentVolumeClaim"]
        with pytest.raises(NotFound, match="has no server named 'kept'"):
            await backend.delete_server(ALICE, "kept")
        await eventually(
            "the old server gone",
            lambda: not server_objects(admin, namespace, "kept")["StatefulSet"] or None,
            bool,
        )
        assert "kept" not in names(admin, namespace, "v1", "Service")

        await backend.create_server(spec(settings, "kept"))  # the PVC answers 409 and is adopted
        again = kube.get("v1", "PersistentVolumeClaim", namespace, "kept-workspace")
        assert again["metadata"]["uid"] == workspace["metadata"]["uid"]
        await backend.delete_server(ALICE, "kept")

    on_cluster(settings_for("StatefulSet"), by_replicas)
    assert ("create", "persistentvolumeclaims", 409) in made("create")

    async def by_annotation(backend: KubernetesNotebookBackend) -> None:
        settings = settings_for("Notebook")
        await backend.create_server(spec(settings, "annotated"))
        await backend.set_stopped(ALICE, "annotated", True)
        annotations = kube.get(*NOTEBOOK, namespace, "annotated")["metadata"]["annotations"]
        assert annotations[STOPPED_ANNOTATION].endswith("Z")
        await backend.set_stopped(ALICE, "annotated", False)
        annotations = kube.get(*NOTEBOOK, namespace, "annotated")["metadata"]["annotations"]
        assert STOPPED_ANNOTATION not in annotations
        await backend.delete_server(ALICE, "annotated")

    on_cluster(settings_for("Notebook"), by_annotation)
    assert made("patch").count(("patch", "notebooks", 200)) == 2


def test_a_create_refused_by_admission_rolls_back_what_it_made_but_never_an_adopted_workspace(
    installed: State, admin: k8s.ApiClient, on_cluster: Any, made: Any, quota: Any
) -> None:
    """A quota of no Notebooks (object-count quota on a custom resource): the API server refuses the
    Notebook after its ConfigMap, workspace and policy are made; those go again, newest first."""
    settings = settings_for("Notebook")
    namespace = USERS[BOB]
    quota(namespace, {"count/notebooks.kubeflow.org": "0"})

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        with pytest.raises(QuotaExceeded, match="exceeded quota: team-quota") as refused:
            await backend.create_server(spec(settings, "no-room", BOB))
        assert refused.value.message.startswith("creating Notebook")
        await eventually(  # the claim's pvc-protection finalizer goes a moment after the delete
            "the rollback",
            lambda: not any(server_objects(admin, namespace, "no-room").values()) or None,
            bool,
        )
        assert "no-room" not in {s.name for s in backend.list_servers(BOB)}

        [workspace] = [
            o
            for o in render_notebook_objects(spec(settings, "kept-ws", BOB), settings.notebooks, namespace)
            if o["kind"] == "PersistentVolumeClaim"
        ]
        KubeClient(admin).create(workspace)  # kept from an earlier server named kept-ws
        with pytest.raises(QuotaExceeded):
            await backend.create_server(spec(settings, "kept-ws", BOB))
        assert server_objects(admin, namespace, "kept-ws") == {
            "PersistentVolumeClaim": True,
            "ConfigMap": False,
            "Notebook": False,
            "StatefulSet": False,
            "AuthorizationPolicy": False,
        }
        KubeClient(admin).delete("v1", "PersistentVolumeClaim", namespace, "kept-ws-workspace")

    on_cluster(settings, scenario)
    deletes = [resource for verb, resource, _ in made("delete")]
    # Rolled back newest first: the policy that guards the pod goes last; the adopted PVC never.
    first = ["configmaps", "persistentvolumeclaims", "authorizationpolicies"]
    assert deletes == [*first, "configmaps", "authorizationpolicies"], deletes


def test_duplicates_missing_namespaces_and_concurrent_creates(
    installed: State, admin: k8s.ApiClient, on_cluster: Any, made: Any
) -> None:
    settings = settings_for("Notebook")
    namespace = USERS[ALICE]

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        await backend.create_server(spec(settings, "twice"))
        # The backend's own check is the API's 409 on the workload: atomic across replicas and the CLI.
        with pytest.raises(Conflict, match="already has a server named 'twice'") as caught:
            await backend.create_server(spec(settings, "twice"))
        assert caught.value.field == "name"
        assert server_objects(admin, namespace, "twice")["AuthorizationPolicy"]
        creates = made("create")
        with pytest.raises(Conflict):  # through the service the cache answers first: no API call
            await NotebookService(settings.notebooks, backend).create(ALICE, {"name": "twice"})
        assert made("create") == creates

        # Another replica made the server between our cache check and our create: its objects stay.
        objects = render_notebook_objects(spec(settings, "twice"), settings.notebooks, namespace)
        with pytest.raises(Conflict, match="already has a server named 'twice'"):
            await asyncio.to_thread(backend._create_all, spec(settings, "twice"), namespace, objects)
        assert all(
            server_objects(admin, namespace, "twice")[k] for k in ("PersistentVolumeClaim", "Notebook")
        )
        await backend.delete_server(ALICE, "twice")

        with pytest.raises(NotFound) as missing:
            await backend.create_server(spec(settings, "nb", "carol@example.com"))
        assert missing.value.field == "user"

    on_cluster(settings, scenario)
    assert made("create").count(("create", "notebooks", 409)) == 2
    assert ("delete", "persistentvolumeclaims", 200) not in made("delete")


def test_start_without_supervision_never_culls(installed: State, on_cluster: Any) -> None:
    """The CLI starts the backend with supervise=False: informers for reads, but no culler."""

    async def scenario(backend: KubernetesNotebookBackend) -> None:
        assert backend.workloads.has_synced and backend._culling is None

    settings = make_settings(
        {"namespace_source": "kubeflow-profile"}, resource_kind="StatefulSet", cull_idle_seconds=60
    )
    on_cluster(settings, scenario)


def test_a_cluster_without_the_notebook_crd_is_a_clear_error(
    installed: State, kubectl: Kubectl, on_cluster: Any
) -> None:
    async def never(backend: KubernetesNotebookBackend) -> None:
        raise AssertionError("started without the CRD")

    with without_crd(kubectl, "notebooks.kubeflow.org"), pytest.raises(BackendUnavailable) as refused:
        on_cluster(settings_for("Notebook"), never)
    assert refused.value.message == (
        "CubeSpawner.resource_kind = 'Notebook': Notebook needs the CRD notebooks.kubeflow.org, which "
        "this cluster does not serve; install Kubeflow's notebook controller, or set "
        "CubeSpawner.resource_kind = 'StatefulSet'"
    )

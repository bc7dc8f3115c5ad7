"""Fixtures: a KMock API server emulator on loopback, settings, and the backend pointed at it over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

import kmock as kmock_lib
import pytest
from traitlets.config import Config

from cube_jupyter.config import Settings, load_settings
from cube_jupyter.kube.client import KubeClient, make_api_client
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.services import Workbench
from cube_jupyter.workbench import MOVED_TO_WORKBENCH
from tests.kubernetes.actors import ACTOR_AGENT
from tests.kubernetes.emulator import ApiServerEmulator

# The resource types a Kubeflow + Istio cluster serves: core kinds plus the installed CRDs.
CLUSTER_RESOURCES: dict[str, dict[str, Any]] = {
    "v1/namespaces": {"kind": "Namespace", "namespaced": False, "subresources": {"status"}},
    "v1/pods": {"kind": "Pod", "namespaced": True, "subresources": {"status"}},
    "v1/events": {"kind": "Event", "namespaced": True},
    "v1/services": {"kind": "Service", "namespaced": True, "subresources": {"status"}},
    "v1/persistentvolumeclaims": {
        "kind": "PersistentVolumeClaim",
        "namespaced": True,
        "subresources": {"status"},
    },
    "v1/configmaps": {"kind": "ConfigMap", "namespaced": True},
    "v1/resourcequotas": {"kind": "ResourceQuota", "namespaced": True, "subresources": {"status"}},
    "v1/serviceaccounts": {"kind": "ServiceAccount", "namespaced": True},
    "v1/secrets": {"kind": "Secret", "namespaced": True},
    "rbac.authorization.k8s.io/v1/rolebindings": {"kind": "RoleBinding", "namespaced": True},
    # Kubeflow's profile controller: a Profile is cluster-scoped and names its namespace.
    "kubeflow.org/v1/profiles": {"kind": "Profile", "namespaced": False, "subresources": {"status"}},
    "apps/v1/statefulsets": {"kind": "StatefulSet", "namespaced": True, "subresources": {"status"}},
    "kubeflow.org/v1/notebooks": {"kind": "Notebook", "namespaced": True, "subresources": {"status"}},
    "networking.istio.io/v1/virtualservices": {"kind": "VirtualService", "namespaced": True},
    "security.istio.io/v1/authorizationpolicies": {"kind": "AuthorizationPolicy", "namespaced": True},
    # Kubeflow Trainer v2, as a Kubeflow installed today has it.
    "trainer.kubeflow.org/v1alpha1/trainjobs": {
        "kind": "TrainJob",
        "namespaced": True,
        "subresources": {"status"},
    },
    "trainer.kubeflow.org/v1alpha1/clustertrainingruntimes": {
        "kind": "ClusterTrainingRuntime",
        "namespaced": False,
    },
}
USERS = ("alice", "bob")

PROFILES = [
    {
        "name": "cpu",
        "image": "quay.io/jupyter/scipy-notebook:2025-03-17",
        "cpu": "1",
        "memory": "2Gi",
        "default": True,
    },
    {
        "name": "gpu",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-03-17",
        "cpu": "4",
        "memory": "16Gi",
        "gpu": 1,
        "node_selector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
    {
        "name": "vgpu",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-03-17",
        "cpu": "2",
        "memory": "8Gi",
        "gpu": 2,
        "gpu_resource": "tencent.com/vcuda-core",
    },
]


def make_settings(
    workbench: dict[str, Any] | None = None,
    *,
    jobs: dict[str, Any] | None = None,
    storage: dict[str, Any] | None = None,
    queues: dict[str, Any] | None = None,
    **spawner: Any,
) -> Settings:
    config = Config()
    config.CubeWorkbench.backend = "kubernetes"
    for key, value in (workbench or {}).items():
        setattr(config.CubeWorkbench, key, value)
    for key, value in (jobs or {}).items():
        setattr(config.CubeJobs, key, value)
    for key, value in (storage or {}).items():
        setattr(config.CubeStorage, key, value)
    for key, value in (queues or {}).items():
        setattr(config.CubeQueues, key, value)
    config.CubeSpawner.profiles = PROFILES
    for key, value in spawner.items():
        setattr(config.CubeWorkbench if key in MOVED_TO_WORKBENCH else config.CubeSpawner, key, value)
    return load_settings(config)


def make_emulator(resources: dict[str, dict[str, Any]] | None = None) -> ApiServerEmulator:
    emulator = ApiServerEmulator()
    for name, info in (CLUSTER_RESOURCES if resources is None else resources).items():
        emulator.resources[name] = kmock_lib.ResourceInfo(**info)
    emulator.preload(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"cube-{user}"}} for user in USERS]
    )
    return emulator


def connect(settings: Settings, api_url: str) -> Cluster:
    """The workbench's connection to the emulator: one client and informer registry, as in the server."""
    return Cluster(settings, make_api_client(settings, host=api_url))


@pytest.fixture
def loop(jp_asyncio_loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
    """The loop pytest-jupyter runs async tests on (the suite loads its plugin): the emulator must
    serve on the same loop the test awaits in, or nothing answers the backend's HTTP requests."""
    return jp_asyncio_loop


@pytest.fixture
def kmock(loop: asyncio.AbstractEventLoop) -> Iterator[ApiServerEmulator]:
    """Overrides KMock's own fixture: our emulator subclass, with a Kubeflow cluster's resources."""
    emulator = make_emulator()
    server = kmock_lib.Server(emulator)
    loop.run_until_complete(emulator.__aenter__())
    loop.run_until_complete(server.__aenter__())
    yield emulator
    loop.run_until_complete(server.__aexit__(None, None, None))
    loop.run_until_complete(emulator.__aexit__(None, None, None))


@pytest.fixture
def api_url(kmock: ApiServerEmulator) -> str:
    return str(kmock.url).rstrip("/")


@pytest.fixture
def settings() -> Settings:
    return make_settings()


@pytest.fixture
def kube(api_url: str) -> Iterator[KubeClient]:
    """A plain client for tests acting as the cluster's controllers, kubelet and scheduler: its
    User-Agent tells its requests from the workbench's."""
    client = KubeClient(make_api_client(host=api_url))
    client.api_client.user_agent = ACTOR_AGENT
    yield client
    client.close()


class Startable(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...


S = TypeVar("S", bound=Startable)
StartOnEmulator = Callable[[Settings, Callable[[Cluster], S]], Awaitable[S]]


def started_on_emulator(api_url: str, loop: asyncio.AbstractEventLoop) -> Iterator[StartOnEmulator[Any]]:
    """A fixture's body: `await start(settings, build)` starts what `build(cluster)` makes (a notebook
    or job backend, pipeline runs) on a connection of its own to the emulator, as a CLI command's
    are; everything started is closed, informer threads joined, at teardown."""
    started: list[tuple[Startable, Cluster]] = []

    async def start(settings: Settings, build: Callable[[Cluster], S]) -> S:
        cluster = connect(settings, api_url)
        part = build(cluster)
        started.append((part, cluster))
        await part.start()
        return part

    yield start
    for part, cluster in started:
        loop.run_until_complete(part.close())
        loop.run_until_complete(cluster.close())


@pytest.fixture
def start_on_emulator(api_url: str, loop: asyncio.AbstractEventLoop) -> Iterator[StartOnEmulator[Any]]:
    yield from started_on_emulator(api_url, loop)


@pytest.fixture
def workbench_on_emulator(
    api_url: str, loop: asyncio.AbstractEventLoop
) -> Iterator[Callable[[Settings], Workbench]]:
    """The composition root's services over one connection to the emulator; closed at teardown."""
    made: list[Workbench] = []

    def make(settings: Settings) -> Workbench:
        made.append(Workbench(settings, cluster=connect(settings, api_url)))
        return made[-1]

    yield make
    for workbench in made:
        loop.run_until_complete(workbench.close())


@pytest.fixture
def make_backend(start_on_emulator: StartOnEmulator[Any]) -> Callable[..., Any]:
    """Start notebook backends against the emulator."""

    async def make(settings: Settings, **kwargs: Any) -> KubernetesNotebookBackend:
        kwargs.setdefault("sync_timeout", 10.0)
        return await start_on_emulator(
            settings, lambda cluster: KubernetesNotebookBackend(settings.notebooks, cluster, **kwargs)
        )

    return make


@pytest.fixture
def backend(
    make_backend: Callable[..., Any], settings: Settings, loop: asyncio.AbstractEventLoop
) -> KubernetesNotebookBackend:
    result: KubernetesNotebookBackend = loop.run_until_complete(make_backend(settings))
    return result

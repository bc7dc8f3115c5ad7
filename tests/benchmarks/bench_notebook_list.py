"""`/notebooks` listing with 500 servers in the informer cache, vs. listing the API per request.

The cluster is the KMock emulator over real HTTP, preloaded as a running cluster would be (each
server's objects and its pod). A real `jupyter server` with the workbench on the kubernetes backend
(reaching the emulator through a kubeconfig, as it would a cluster) answers `GET /cube/api/v1/notebooks`;
the in-process rows show the backend's cache read plus JSON serialization alone. The baseline is the
naive design: one API list of the workloads and one of the pods, across namespaces, per request.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import kmock as kmock_lib
import yaml
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from cube_jupyter.kube.client import KubeClient, make_api_client
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.labels import MANAGED_BY, MANAGED_BY_LABEL
from cube_jupyter.local.processes import free_port
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from tests.benchmarks.server import jupyter_server_argv
from tests.benchmarks.timing import print_table
from tests.kubernetes.conftest import PROFILES, make_emulator, make_settings
from tests.kubernetes.listbench import cluster_objects
from tests.waiting import wait_until_async

SERVERS, USERS, ROUNDS, API_ROUNDS, HTTP_ROUNDS = 500, 50, 200, 20, 50
ADMIN = "platform-admin"


def start_workbench(tmp: Path, cluster_url: str, port: int) -> subprocess.Popen[bytes]:
    """A real `jupyter server` on the kubernetes backend, its kubeconfig naming the emulator."""
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "bench",
                "clusters": [{"name": "bench", "cluster": {"server": cluster_url}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
                "users": [{"name": "bench", "user": {}}],
            }
        )
    )
    config = tmp / "jupyter_server_config.py"
    config.write_text(
        'c.ServerApp.identity_provider_class = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"\n'
        'c.ServerApp.authorizer_class = "cube_jupyter_server.authorizer.CubeAuthorizer"\n'
        'c.ServerApp.jpserver_extensions = {"cube_jupyter_server": True}\n'
        'c.CubeWorkbench.backend = "kubernetes"\n'
        f"c.CubeWorkbench.state_dir = {str(tmp / 'state')!r}\n"
        f"c.CubeSpawner.profiles = {PROFILES!r}\n"
        f"c.CubeWorkbench.admin_users = [{ADMIN!r}]\n"
    )
    argv = jupyter_server_argv(config, port, tmp)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": ""}
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def time_http(url: str, user: str, rounds: int, expected: int) -> list[float]:
    client = AsyncHTTPClient()

    async def listed() -> int:
        body = json.loads((await client.fetch(url, headers={"kubeflow-userid": user})).body)
        return len(body["notebooks"])

    await wait_until_async(  # until the server is up and its informers have synced
        listed,
        60,
        f"{url} to list {expected} servers",
        until=lambda count: count == expected,
        ignoring=(HTTPClientError, OSError),
        interval=0.2,
    )
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await client.fetch(url, headers={"kubeflow-userid": user})
        samples.append(time.perf_counter() - t0)
    return samples


async def main() -> None:
    settings = make_settings()
    emulator = make_emulator()
    emulator.preload(cluster_objects(settings, SERVERS, USERS))
    async with emulator, kmock_lib.Server(emulator):
        api_client = make_api_client(host=str(emulator.url).rstrip("/"))
        backend = KubernetesNotebookBackend(settings.notebooks, Cluster(settings, api_client))
        await backend.start()
        one_user, everyone, per_request_api = [], [], []
        try:
            lists_before = len(list(emulator[kmock_lib.action.LIST]))
            for i in range(ROUNDS):
                t0 = time.perf_counter()
                json.dumps([s.to_dict() for s in backend.list_servers(f"user{i % USERS:03d}")])
                t1 = time.perf_counter()
                json.dumps([s.to_dict() for s in backend.list_servers(None)])
                one_user.append(t1 - t0)
                everyone.append(time.perf_counter() - t1)
            cache_api_lists = len(list(emulator[kmock_lib.action.LIST])) - lists_before
            cached = len(backend.list_servers(None))
            client = KubeClient(api_client)
            selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
            for _ in range(API_ROUNDS):
                t0 = time.perf_counter()
                await asyncio.to_thread(
                    client.list, "kubeflow.org/v1", "Notebook", None, label_selector=selector
                )
                await asyncio.to_thread(client.list, "v1", "Pod", None, label_selector=selector)
                per_request_api.append(time.perf_counter() - t0)
        finally:
            await backend.close()
            await backend.cluster.close()
        with tempfile.TemporaryDirectory(prefix="cube-bench-") as tmp:
            port = free_port()
            server = start_workbench(Path(tmp), str(emulator.url).rstrip("/"), port)
            try:
                url = f"http://127.0.0.1:{port}/cube/api/v1/notebooks"
                http_user = await time_http(url, "user000", HTTP_ROUNDS, SERVERS // USERS)
                http_admin = await time_http(url + "?all=1", ADMIN, HTTP_ROUNDS, SERVERS)
            finally:
                # Waited off the event loop: the emulator it may still talk to while it shuts down
                # runs on this loop (a blocking wait here left it unanswered until the wait timed out).
                server.terminate()
                try:
                    await asyncio.to_thread(server.wait, 30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
    baseline = "API list of workloads + pods per request (baseline)"
    print_table(
        f"Notebook listing, {cached} servers of {USERS} users in the informer cache "
        f"({cache_api_lists} API list calls while serving {2 * ROUNDS} cached listings)",
        [
            (baseline, per_request_api),
            ("GET /notebooks, one user (real server, HTTP)", http_user),
            ("GET /notebooks?all=1, admin (real server, HTTP)", http_admin),
            ("in-process cache read: one user (+ JSON)", one_user),
            ("in-process cache read: every user (+ JSON)", everyone),
        ],
        unit="ms",
        baseline=baseline,
    )

"""`list_servers` latency with N servers in the informer cache, measured against the KMock emulator.

Used by the lead's `make bench` (`python -m tests.kubernetes.listbench`) and, with few rounds, by a test.
The cluster is preloaded the way the notebook controller and kubelet would leave it: each server's
rendered objects plus its pod, half of them Ready and half Pending with a scheduler event.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import kmock as kmock_lib

from cube_jupyter.config import Settings
from cube_jupyter.kube.client import make_api_client
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.render import NOTEBOOK_LABEL, STATEFULSET_LABEL, render_notebook_objects
from cube_jupyter.notebooks.spec import NotebookSpec
from tests.kubernetes.actors import ready_status, unschedulable_status
from tests.kubernetes.conftest import make_emulator, make_settings


def cluster_objects(settings: Settings, servers: int, users: int) -> list[dict[str, Any]]:
    """Namespaces, each server's rendered objects and its pod, as a running cluster would hold them."""
    objects: list[dict[str, Any]] = []
    names = [f"user{u:03d}" for u in range(users)]
    for user in names:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": settings.namespace_for(user)},
            }
        )
    profiles = [p.name for p in settings.notebooks.profiles]
    for i in range(servers):
        user = names[i % users]
        spec = NotebookSpec(
            user=user, name=f"nb{i:04d}", profile=settings.notebooks.profile(profiles[i % len(profiles)])
        )
        rendered = render_notebook_objects(spec, settings.notebooks)
        objects += rendered
        workload = next(o for o in rendered if o["kind"] == settings.notebooks.spawner.resource_kind)
        meta = workload["metadata"]
        labels = {**meta["labels"], NOTEBOOK_LABEL: spec.name, STATEFULSET_LABEL: spec.name}
        status = (
            ready_status()
            if i % 2 == 0
            else unschedulable_status("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
        )
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{spec.name}-0", "namespace": meta["namespace"], "labels": labels},
                "spec": workload["spec"]["template"]["spec"],
                "status": status,
            }
        )
    return objects


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


async def measure_list_latency(servers: int = 500, users: int = 50, rounds: int = 200) -> dict[str, Any]:
    """Time `list_servers(user)` and `list_servers(None)` (plus JSON serialization, as the REST handler
    does) with `servers` servers cached; also report the API list calls made while measuring (0)."""
    settings = make_settings()
    emulator = make_emulator()
    emulator.preload(cluster_objects(settings, servers, users))
    async with emulator, kmock_lib.Server(emulator):
        api_client = make_api_client(settings, host=str(emulator.url).rstrip("/"))
        backend = KubernetesNotebookBackend(settings.notebooks, Cluster(settings, api_client))
        began = time.perf_counter()
        await backend.start()
        sync_s = time.perf_counter() - began
        try:
            lists_before = len(list(emulator[kmock_lib.action.LIST]))
            one_user, everyone = [], []
            scans = 0
            for i in range(rounds):
                user = f"user{i % users:03d}"
                t0 = time.perf_counter()
                scans_before = backend.workloads.full_scans
                json.dumps([s.to_dict() for s in backend.list_servers(user)])
                scans += backend.workloads.full_scans - scans_before
                t1 = time.perf_counter()
                json.dumps([s.to_dict() for s in backend.list_servers(None)])
                t2 = time.perf_counter()
                one_user.append(t1 - t0)
                everyone.append(t2 - t1)
            api_lists = len(list(emulator[kmock_lib.action.LIST])) - lists_before
            cached = len(backend.list_servers(None))
            per_user = len(backend.workloads.by_index("user", "user000"))
        finally:
            await backend.close()
            await backend.cluster.close()
    return {
        "servers_cached": cached,
        "users": users,
        "rounds": rounds,
        "initial_sync_s": round(sync_s, 3),
        "list_one_user": _stats(one_user),
        "list_all_users": _stats(everyone),
        "api_list_calls_during_measurement": api_lists,
        "indexed_entries_per_user": per_user,
        "full_cache_scans_for_one_user_lists": scans,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure_list_latency()), indent=2))

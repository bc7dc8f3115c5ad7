"""The cluster's other actors, played by tests over real HTTP: the notebook controller, the scheduler
and the kubelet. The backend must learn what they do only through its watches."""

from __future__ import annotations

import asyncio
from typing import Any

from cube_jupyter.kube.client import KubeClient
from cube_jupyter.notebooks.render import NOTEBOOK_LABEL, STATEFULSET_LABEL
from tests.kubernetes.emulator import now_rfc3339


async def controller_creates_pod(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """What Kubeflow's notebook controller does: a StatefulSet pod `{name}-0` carrying the Notebook's
    labels plus `notebook-name` and `statefulset`, with the Notebook's pod template spec."""
    notebook = await asyncio.to_thread(kube.get, "kubeflow.org/v1", "Notebook", namespace, name)
    labels = {**notebook["metadata"].get("labels", {}), NOTEBOOK_LABEL: name, STATEFULSET_LABEL: name}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0", "namespace": namespace, "labels": labels},
        "spec": notebook["spec"]["template"]["spec"],
    }
    created: dict[str, Any] = await asyncio.to_thread(kube.create, pod)
    return created


async def kubelet_sets_status(kube: KubeClient, namespace: str, pod: str, status: dict[str, Any]) -> None:
    await asyncio.to_thread(kube.patch, "v1", "Pod", namespace, pod, {"status": status}, subresource="status")


def ready_status() -> dict[str, Any]:
    now = now_rfc3339()
    return {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {"name": "c", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": now}}}
        ],
    }


def unschedulable_status(message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": now_rfc3339(),
            }
        ],
    }


async def scheduler_warns(
    kube: KubeClient, pod: dict[str, Any], reason: str, message: str, *, when: str | None = None
) -> dict[str, Any]:
    """A Warning event about `pod` (or any object: a StatefulSet, a Notebook), as the scheduler, the
    kubelet or a controller records it (core/v1 Event)."""
    meta = pod["metadata"]
    stamp = when or now_rfc3339()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "kind": pod.get("kind", "Pod"),
            "apiVersion": pod.get("apiVersion", "v1"),
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        },
        "type": "Warning",
        "reason": reason,
        "message": message,
        "source": {"component": "default-scheduler"},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    created: dict[str, Any] = await asyncio.to_thread(kube.create, event)
    return created


async def controller_deletes_pod(kube: KubeClient, namespace: str, pod: str) -> None:
    """What the StatefulSet controller does once a stopped server is scaled to 0."""
    await asyncio.to_thread(kube.delete, "v1", "Pod", namespace, pod)

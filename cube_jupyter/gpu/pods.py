"""GPUs by pod, as DCGM attributes them: which pods are notebook servers, which are job replicas.

A notebook server `nb1` runs as the StatefulSet pod `nb1-0`; a training operator's replica is named
`<job>-<role>-<index>` (TFJob, PyTorchJob, XGBoostJob, MPIJob roles). Anything else holding a GPU in
a user's namespace is shown as "other" rather than hidden.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal

from cube_jupyter.gpu.model import GpuDevice, PodGpu

JOB_ROLES = "master|worker|chief|ps|evaluator|launcher"  # TFJob, PyTorchJob, XGBoostJob, MPIJob
JOB_REPLICA = re.compile(rf"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-({JOB_ROLES})-\d+$")
STATEFULSET_POD = re.compile(r"^(?P<name>.+)-\d+$")
PodKind = Literal["notebook", "job", "other"]


def pod_kind(pod: str, notebook_names: Iterable[str]) -> PodKind:
    """ "notebook" when `pod` is a StatefulSet pod of one of `notebook_names` (servers in the pod's
    namespace), "job" when it is named like an operator replica, else "other"."""
    match = STATEFULSET_POD.match(pod)
    if match and match.group("name") in set(notebook_names):
        return "notebook"
    if JOB_REPLICA.match(pod):
        return "job"
    return "other"


def server_of_pod(pod: str) -> str:
    """The notebook server whose StatefulSet pod `pod` is (`nb1-0` → `nb1`); `pod` itself otherwise."""
    match = STATEFULSET_POD.match(pod)
    return match.group("name") if match else pod


def group_pods(
    devices: Iterable[GpuDevice],
    notebooks: Mapping[str, set[str]],
    owners: Mapping[str, str],
) -> list[PodGpu]:
    """One PodGpu per (namespace, pod) holding GPUs; `notebooks` maps a namespace to its servers'
    names, `owners` a namespace to the workbench user it belongs to. Unallocated GPUs are skipped."""
    held: dict[tuple[str, str], list[GpuDevice]] = {}
    for device in devices:
        if device.namespace and device.pod:
            held.setdefault((device.namespace, device.pod), []).append(device)
    pods = []
    for (namespace, pod), gpus in sorted(held.items()):
        utilizations = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
        pods.append(
            PodGpu(
                namespace=namespace,
                pod=pod,
                kind=pod_kind(pod, notebooks.get(namespace, set())),
                gpus=tuple(g.uuid for g in gpus),
                utilization_pct=sum(utilizations) / len(utilizations) if utilizations else None,
                memory_used_mib=_total(g.memory_used_mib for g in gpus),
                memory_total_mib=_total(g.memory_total_mib for g in gpus),
                owner=owners.get(namespace),
            )
        )
    return pods


def _total(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None

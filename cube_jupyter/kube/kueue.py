"""What Kueue says of a queued workload: pure reads of its `Workload` (kueue.x-k8s.io), so servers,
jobs and steps show `Queued` with Kueue's own reason (quota, preempted, inadmissible) or `Admitted`.

Kueue makes one Workload per job it manages (owned by the job: a TrainJob, PyTorchJob, batch Job...)
or per pod group (owned by the pods: a notebook server's StatefulSet pod, a pipeline step's pod), and
keeps the job suspended, or the pods scheduling-gated, until the Workload is admitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.discovery import ServedApis
from cube_jupyter.kube.informer import Informer
from cube_jupyter.kube.objects import Obj, labels_of, namespace_of, uid_of
from cube_jupyter.kube.resources import ResourceType, register_resource_type
from cube_jupyter.queues import QUEUE_LABEL

GROUP = "kueue.x-k8s.io"
# Kueue serves v1beta2 (stored) and v1beta1; the Workload's conditions read alike in both.
WORKLOADS = {
    version: ResourceType(f"{GROUP}/{version}", "Workload", "workloads") for version in ("v1beta2", "v1beta1")
}
for _resource in WORKLOADS.values():
    register_resource_type(_resource)
GROUP_VERSIONS = tuple(resource.api_version for resource in WORKLOADS.values())
ADMISSION_GATE = "kueue.x-k8s.io/admission"  # the scheduling gate on a queued pod


@dataclass(frozen=True)
class Admission:
    """A workload's place with Kueue: admitted or not, its LocalQueue, and why it waits."""

    admitted: bool
    queue: str
    reason: str


def index_owner_uid(workload: Obj) -> list[str]:
    """A Workload under each owner's uid (a job, or each pod of a pod group)."""
    return [ref["uid"] for ref in workload.get("metadata", {}).get("ownerReferences") or [] if ref.get("uid")]


def follow_workloads(cluster: Cluster, served: ServedApis) -> Informer | None:
    """The cluster's one Workload informer (indexed by owner uid), when it serves Kueue; else None."""
    for resource in WORKLOADS.values():
        if served.serves(resource.api_version, resource.kind):
            return cluster.informer(resource.api_version, resource.kind, indexers={"owner": index_owner_uid})
    return None


def admission(workload: Obj) -> Admission:
    """Admitted once its `Admitted` condition is true (and not evicted since); else waiting, with the
    newest message Kueue gave: eviction (preempted, its queue stopped) over the quota reservation's."""
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    queue = (workload.get("spec") or {}).get("queueName") or labels_of(workload).get(QUEUE_LABEL, "")
    evicted = conditions.get("Evicted")
    if evicted and evicted.get("status") == "True":
        return Admission(False, queue, _reason(evicted, "evicted"))
    admitted = conditions.get("Admitted")
    if admitted and admitted.get("status") == "True":
        return Admission(True, queue, "")
    reserved = conditions.get("QuotaReserved")
    if reserved and reserved.get("status") == "False":
        return Admission(False, queue, _reason(reserved, "waiting for quota"))
    if reserved and reserved.get("status") == "True":
        return Admission(False, queue, "quota reserved; waiting for admission checks")
    return Admission(False, queue, f"waiting in LocalQueue {namespace_of(workload)}/{queue}")


def _reason(condition: Obj, default: str) -> str:
    """Kueue's reason and message: 'Preempted: ...', or the message alone for a plain Pending."""
    reason, message = condition.get("reason") or "", condition.get("message") or default
    return message if reason in ("", "Pending") else f"{reason}: {message}"


def pod_reason(pod: Obj, workloads: Informer | None) -> str:
    """Why Kueue holds a gated pod back (a server's, a pipeline step's): its Workload's words, with
    the LocalQueue."""
    queue = labels_of(pod).get(QUEUE_LABEL, "")
    found = workloads.by_index("owner", uid_of(pod)) if workloads is not None else []
    if not found:
        return f"waiting for Kueue to take it into LocalQueue {queue}"
    state = admission(found[0])
    return f"{state.reason} (LocalQueue {state.queue or queue})"


def is_gated(pod: Obj) -> bool:
    """A pod Kueue holds back until its workload is admitted (the pod integration's scheduling gate)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == ADMISSION_GATE for gate in gates)

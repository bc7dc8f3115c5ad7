"""What Kueue says of a queued workload: pure reads of its `Workload` (kueue.x-k8s.io), so servers,
jobs and steps show `Queued` with Kueue's own reason (quota, preempted, inadmissible) or `Admitted`.

Kueue makes one Workload per job it manages (owned by the job: a TrainJob, PyTorchJob, batch Job...)
or per pod group (owned by the pods: a notebook server's StatefulSet pod, a pipeline step's pod), and
keeps the job suspended, or the pods scheduling-gated, until the Workload is admitted.

Where a pending Workload stands in its ClusterQueue only Kueue's visibility API says (an aggregated
API, `visibility.kueue.x-k8s.io`, asked per LocalQueue): `QueuePositions` asks it in the background,
at most every few seconds per queue, so a status read never waits on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from cube_jupyter.errors import CubeError
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.discovery import ServedApis
from cube_jupyter.kube.informer import Informer
from cube_jupyter.kube.objects import Obj, current, labels_of, name_of, namespace_of, uid_of
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
VISIBILITY = "visibility.kueue.x-k8s.io/v1beta2"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admission:
    """A workload's place with Kueue: admitted or not, its LocalQueue, why it waits, and its place
    in its ClusterQueue (from 1) where Kueue's visibility API has said."""

    admitted: bool
    queue: str
    reason: str
    position: int | None = None

    @property
    def place(self) -> str:
        """`#2: reason`, or the reason alone while the place is not known."""
        return f"#{self.position}: {self.reason}" if self.position else self.reason


def index_owner_uid(workload: Obj) -> list[str]:
    """A Workload under each owner's uid (a job, or each pod of a pod group)."""
    return [ref["uid"] for ref in workload.get("metadata", {}).get("ownerReferences") or [] if ref.get("uid")]


class PathReader(Protocol):
    """What `QueuePositions` asks through: the shared KubeClient's plain GET."""

    def get_path(self, path: str, action: str) -> dict[str, Any]: ...


class QueuePositions:
    """Each pending Workload's place in its ClusterQueue, as Kueue's visibility API lists a
    LocalQueue's pending workloads. A read returns what was last heard (None before) and, when that
    is older than `refresh_seconds`, asks again in the background; where the API is not served or
    not allowed, it is asked again only after `retry_seconds`."""

    def __init__(
        self,
        client: PathReader,
        spawn: Callable[[Callable[[], None]], None],
        *,
        refresh_seconds: float = 3.0,
        retry_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`spawn` runs an ask: on a thread in a server, inline in a one-shot command."""
        self.client, self.spawn = client, spawn
        self.refresh_seconds, self.retry_seconds = refresh_seconds, retry_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._places: dict[tuple[str, str], dict[str, int]] = {}  # (namespace, queue) → name → place
        self._asked: dict[tuple[str, str], float] = {}
        self._asking: set[tuple[str, str]] = set()
        self._unserved_until = float("-inf")

    def position(self, namespace: str, queue: str, workload: str) -> int | None:
        key, now = (namespace, queue), self.clock()
        with self._lock:
            known = self._places.get(key, {}).get(workload)
            due = (
                key not in self._asking
                and now >= self._unserved_until
                and now - self._asked.get(key, float("-inf")) >= self.refresh_seconds
            )
            if due:
                self._asking.add(key)
                self._asked[key] = now
        if not due:
            return known
        self.spawn(lambda: self.refresh(namespace, queue))
        with self._lock:  # an ask run inline has answered already
            return self._places.get(key, {}).get(workload)

    def refresh(self, namespace: str, queue: str) -> None:
        """Ask Kueue for the LocalQueue's pending workloads, with their places in the ClusterQueue."""
        path = f"/apis/{VISIBILITY}/namespaces/{namespace}/localqueues/{queue}/pendingworkloads"
        places: dict[str, int] | None = None
        try:
            found = self.client.get_path(path, f"read LocalQueue {namespace}/{queue}'s pending workloads")
            items = found.get("items") or []
            places = {name_of(item): int(item.get("positionInClusterQueue", 0)) + 1 for item in items}
        except CubeError as exc:  # not served (no visibility server), not allowed, or down
            log.info("Kueue's visibility API gave no queue positions: %s", exc)
        with self._lock:
            self._asking.discard((namespace, queue))
            if places is None:
                self._unserved_until = self.clock() + self.retry_seconds
            else:
                self._places[(namespace, queue)] = places


class KueueWorkloads:
    """Kueue's Workloads as the workbench reads them: the cluster's one Workload informer (indexed by
    owner uid) and the places Kueue's visibility API gives the pending ones."""

    def __init__(self, informer: Informer, positions: QueuePositions) -> None:
        self.informer, self.positions = informer, positions

    def of_owner(self, owner: Obj) -> Admission | None:
        """A job's admission (None while Kueue has made no Workload for it)."""
        workload = self.workload_of(owner)
        return None if workload is None else self.admission(workload)

    def workload_of(self, owner: Obj) -> Obj | None:
        """The Workload Kueue made for a job (None while it has made none)."""
        return current(self.informer.by_index("owner", uid_of(owner)))

    def admission(self, workload: Obj) -> Admission:
        """`admission`, with the place of one not admitted."""
        state = admission(workload)
        if state.admitted or not state.queue:
            return state
        where = self.positions.position(namespace_of(workload), state.queue, name_of(workload))
        return replace(state, position=where)

    def of_pod(self, pod: Obj) -> Admission:
        """Why Kueue holds a gated pod back (a server's, a pipeline step's): its Workload's words, with
        the LocalQueue, and its place."""
        queue = labels_of(pod).get(QUEUE_LABEL, "")
        workload = current(self.informer.by_index("owner", uid_of(pod)))
        if workload is None:
            return Admission(False, queue, f"waiting for Kueue to take it into LocalQueue {queue}")
        state = self.admission(workload)
        return replace(state, reason=f"{state.reason} (LocalQueue {state.queue or queue})")


def follow_workloads(cluster: Cluster, served: ServedApis) -> KueueWorkloads | None:
    """The cluster's one Workload informer and queue positions, when it serves Kueue; else None."""
    for resource in WORKLOADS.values():
        if served.serves(resource.api_version, resource.kind):
            informer = cluster.informer(
                resource.api_version, resource.kind, indexers={"owner": index_owner_uid}
            )
            positions = cluster.shared(
                QueuePositions, lambda: QueuePositions(cluster.client, cluster.in_background)
            )
            return KueueWorkloads(informer, positions)
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


def is_gated(pod: Obj) -> bool:
    """A pod Kueue holds back until its workload is admitted (the pod integration's scheduling gate)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == ADMISSION_GATE for gate in gates)

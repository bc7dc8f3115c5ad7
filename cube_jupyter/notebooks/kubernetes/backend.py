"""Notebook servers as Kubernetes objects: create/stop/delete through the API, read from informers.

Writes go to the API (in a worker thread: the official client blocks); every read — list, get, the
status and the reason a server is not running — is answered from three informer caches (the servers'
Notebooks or StatefulSets, and the cluster's pod and Warning event caches, which every feature shares
and this one indexes by server), so polling the panel never lists the cluster. A create either leaves
all of a server's objects behind or none of them. The AuthorizationPolicy is created first and deleted
last, after the pod is gone: the pod has no token, and without an ALLOW policy Istio would let anyone
reach it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cube_jupyter.errors import BackendUnavailable, Conflict, CubeError, NotFound
from cube_jupyter.fields import parse_timestamp
from cube_jupyter.kube import kueue
from cube_jupyter.kube.client import ApiNotFound, resource_type
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.discovery import missing_crd
from cube_jupyter.kube.labels import MANAGED_BY, MANAGED_BY_LABEL, STOP_REASON_ANNOTATION, USER_LABEL
from cube_jupyter.kube.namespaces import UserNamespaces, is_missing_namespace, missing_namespace
from cube_jupyter.kube.objects import (
    Obj,
    annotations_of,
    condition_of,
    container_named,
    created_at,
    current,
    event_time,
    gpu_request,
    index_owner,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    namespace_of,
    newest_warning,
    owner_of,
    pod_spec_of,
    pod_state,
    uid_of,
)
from cube_jupyter.names import namespace_pattern
from cube_jupyter.notebooks import enforcement
from cube_jupyter.notebooks.config import NotebookSettings
from cube_jupyter.notebooks.kubernetes.culler import IdleCuller, RunningServer
from cube_jupyter.notebooks.render import (
    LAST_ACTIVITY_ANNOTATION,
    NOTEBOOK_LABEL,
    PROFILE_ANNOTATION,
    STATEFULSET_LABEL,
    STOPPED_ANNOTATION,
    authorization_policy_name,
    render_notebook_objects,
    route_prefix,
    stop_annotation_patch,
    user_config_name,
    virtual_service_name,
)
from cube_jupyter.notebooks.spec import (
    DEFAULT_GPU_RESOURCE,
    NotebookServer,
    NotebookSpec,
    Profile,
    Resources,
    ServerStatus,
    server_exists,
)
from cube_jupyter.queues import QUEUE_LABEL

log = logging.getLogger(__name__)

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
# The cluster caches Warning events only: the reason a server is not running is always a warning —
# on its pod (FailedScheduling, FailedMount, BackOff, ...) or, when the pod is never created
# (ResourceQuota exceeded, missing service account, PodSecurity), on its StatefulSet or Notebook
# (FailedCreate). Field selectors cannot say "one of these kinds", so the informer drops the rest
# itself (`keep`).
EVENT_KINDS = ("Pod", "StatefulSet", "Notebook")
# Objects a create may find already there (kept from an earlier server of the same name) and reuse.
# Kept from an earlier server of the same name and user, and reused (policy and config refreshed).
ADOPTABLE = ("PersistentVolumeClaim", "AuthorizationPolicy", "ConfigMap")
# The namespace's, not a server's: brought to what the config says whoever created it.
NAMESPACE_WIDE = ("ResourceQuota",)
# How long a write waits for its watch event, so the caller's next read sees what it just did.
CACHE_WAIT_SECONDS = 5.0
# How long a delete waits for the server's pod to go before it removes the AuthorizationPolicy.
DELETE_WAIT_SECONDS = 90.0


def _index_pod_server(pod: Obj) -> list[str]:
    """A pod belongs to the server named by Kubeflow's `notebook-name` (or `statefulset`) label."""
    labels = labels_of(pod)
    server = labels.get(NOTEBOOK_LABEL) or labels.get(STATEFULSET_LABEL)
    return [f"{namespace_of(pod)}/{server}"] if server else []


def _event_key(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


def _index_event_object(event: Obj) -> list[str]:
    involved = event.get("involvedObject") or {}
    return [_event_key(involved.get("kind", ""), involved.get("namespace", ""), involved.get("name", ""))]


def _event_filter(settings: NotebookSettings) -> Callable[[Obj], bool]:
    # A Profile's namespace can have any name: then every namespace may be a user's.
    by_profile = settings.workbench.namespace_source == "kubeflow-profile"
    namespaces = namespace_pattern("{username}" if by_profile else settings.workbench.namespace_template)

    def keep(event: Obj) -> bool:
        """Only warnings about pods and workloads in user namespaces are cached."""
        involved = event.get("involvedObject") or {}
        return involved.get("kind") in EVENT_KINDS and bool(namespaces.match(involved.get("namespace") or ""))

    return keep


class KubernetesNotebookBackend:
    """`NotebookBackend` on a cluster: a Notebook (its controller routes it) or a StatefulSet, Service
    and VirtualService; a workspace PVC and the owner-only policy; in the user's namespace, made
    ready first when `create_namespaces` says so."""

    def __init__(
        self,
        settings: NotebookSettings,
        cluster: Cluster | None = None,
        *,
        sync_timeout: float = 30.0,
        delete_wait_seconds: float = DELETE_WAIT_SECONDS,
    ) -> None:
        """`cluster` is the workbench's shared one; without it the backend connects on its own
        (the CLI) and closes that connection with itself."""
        self.settings = settings
        self.delete_wait_seconds = delete_wait_seconds
        self._owns_cluster = cluster is None
        self.cluster = cluster if cluster is not None else Cluster(settings)
        self.client = self.cluster.client
        self.sync_timeout = sync_timeout
        self.resource_kind = settings.spawner.resource_kind
        self.workload_api_version = "apps/v1" if self.resource_kind == "StatefulSet" else "kubeflow.org/v1"
        self.workloads = self.cluster.informer(
            self.workload_api_version,
            self.resource_kind,
            label_selector=SELECTOR,
            indexers={"user": index_owner},
        )
        self.pods = self.cluster.pods({"server": _index_pod_server})
        self.events = self.cluster.events({"object": _index_event_object}, keep=_event_filter(settings))
        self.user_namespaces = UserNamespaces(settings, self.cluster)
        self.informers = [self.workloads, self.pods, self.events, *self.user_namespaces.informers]
        self.kueue_workloads: kueue.KueueWorkloads | None = None  # Kueue's, when the cluster serves them
        self.culler = IdleCuller(
            settings, self.client, self.workload_api_version, self.resource_kind, self.running_servers
        )
        self._culling: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self, *, supervise: bool = True) -> None:
        """Start the informers and wait for their first list, so the first request sees the cluster;
        then cull idle servers in the background when `cull_idle_seconds` asks for it (not with
        `supervise=False`: the CLI reads and writes, the workbench server culls)."""
        try:
            await self._require_workload_kind()
            await self.cluster.start(self.informers, self.sync_timeout)
        except BackendUnavailable:
            await self.close()
            raise
        if not supervise:
            return
        if self.settings.spawner.cull_idle_seconds > 0 and (self._culling is None or self._culling.done()):
            self._culling = asyncio.create_task(self.culler.run(), name="cube-kubernetes-culler")

    async def _require_workload_kind(self) -> None:
        """A cluster without the Notebook CRD is said so at once (naming the setting that chose it),
        instead of after the informers' retries run out on the API server's 404."""
        served = await self.cluster.discover([self.workload_api_version, *kueue.GROUP_VERSIONS])
        self.kueue_workloads = kueue.follow_workloads(self.cluster, served)
        if self.kueue_workloads is not None and self.kueue_workloads.informer not in self.informers:
            self.informers.append(self.kueue_workloads.informer)
        if not served.serves(self.workload_api_version, self.resource_kind):
            raise BackendUnavailable(
                f"CubeSpawner.resource_kind = {self.resource_kind!r}: "
                f"{missing_crd(self.workload_api_version, self.resource_kind)}; install Kubeflow's "
                "notebook controller, or set CubeSpawner.resource_kind = 'StatefulSet'"
            )

    async def close(self) -> None:
        if self._culling is not None:
            self._culling.cancel()
            await asyncio.gather(self._culling, return_exceptions=True)
            self._culling = None
        if self._owns_cluster:  # a shared cluster's informers stop with it, for every feature
            await self.cluster.close()

    # -- reads: informer caches only ---------------------------------------------------------------

    def list_servers(self, user: str | None) -> list[NotebookServer]:
        objs = self.workloads.list() if user is None else self.workloads.by_index("user", user)
        return [self._to_server(obj) for obj in objs if owner_of(obj)]

    def get_server(self, user: str, name: str) -> NotebookServer | None:
        obj = self._workload(user, name)
        return self._to_server(obj) if obj is not None else None

    def running_servers(self) -> list[RunningServer]:
        """Every running server in the cache, with when its pod became ready (for the culler)."""
        running = []
        for obj in self.workloads.list():
            if not owner_of(obj):
                continue
            pod = self._pod_for(namespace_of(obj), name_of(obj))
            if pod is not None and self._status(obj, pod)[0] == ServerStatus.RUNNING:
                started = _ready_since(pod) or created_at(obj) or datetime.now(UTC)
                running.append(RunningServer(workload=obj, started=started))
        return running

    def namespace(self, user: str) -> str | None:
        """Where `user`'s servers are (None: a Kubeflow user who owns no Profile has none)."""
        return self.user_namespaces.lookup(user)

    def _workload(self, user: str, name: str) -> Obj | None:
        namespace = self.namespace(user)
        obj = self.workloads.get(namespace, name) if namespace is not None else None
        if obj is None or owner_of(obj) != user:
            return None
        return obj

    def _existing(self, user: str, name: str) -> tuple[str, Obj]:
        """The namespace and workload of `user`'s server `name`, or NotFound."""
        obj = self._workload(user, name)
        if obj is None:
            raise NotFound(f"user {user!r} has no server named {name!r}", field="name")
        return str(obj["metadata"]["namespace"]), obj

    # -- writes ------------------------------------------------------------------------------------

    async def create_server(self, spec: NotebookSpec) -> NotebookServer:
        """Create the rendered objects in order; the API's 409 on the workload is the atomic
        duplicate check (the service checks its cache first)."""
        namespace = await asyncio.to_thread(self.user_namespaces.prepare, spec.user)
        objects = render_notebook_objects(spec, self.settings, namespace)
        workload = await asyncio.to_thread(self._create_all, spec, namespace, objects)
        key = (namespace, spec.name)
        if not await asyncio.to_thread(
            self.workloads.wait_for, lambda: self.workloads.get(*key) is not None, CACHE_WAIT_SECONDS
        ):
            self.workloads.upsert(workload)  # read-your-writes even if the watch lags
        return self._to_server(self.workloads.get(*key) or workload)

    def _create_all(self, spec: NotebookSpec, namespace: str, objects: list[Obj]) -> Obj:
        """Create in order; on any failure delete what this call created, newest first, and raise.

        A workspace PVC or an AuthorizationPolicy that already exists and belongs to the same user
        (kept from an earlier server of this name) is adopted, never rolled back; one of another
        user's is a Conflict.
        """
        created: list[Obj] = []
        workload: Obj | None = None
        try:
            for obj in objects:
                kind = obj["kind"]
                try:
                    result = self.client.create(obj)
                except Conflict:
                    if kind in NAMESPACE_WIDE:
                        self.client.patch(obj["apiVersion"], kind, namespace, obj["metadata"]["name"], obj)
                        continue
                    if kind in ADOPTABLE:
                        self._adopt(spec, obj)
                        continue
                    if kind == self.resource_kind:
                        # Another request made this server first: the PVC and policy it adopted may be
                        # the ones this call created; they are not ours to roll back.
                        created = [o for o in created if o["kind"] not in ADOPTABLE]
                        raise server_exists(spec.user, spec.name) from None
                    raise Conflict(
                        f"{kind} {namespace}/{obj['metadata']['name']} already exists (left over from an "
                        f"earlier server?); delete it or choose another name than {spec.name!r}",
                        field="name",
                    ) from None
                except ApiNotFound as exc:
                    raise self._not_found_on_create(spec, namespace, obj, exc) from None
                if kind not in NAMESPACE_WIDE:  # never rolled back: other servers rely on it
                    created.append(result or obj)
                if kind == self.resource_kind:
                    workload = result
        except CubeError as exc:
            leftovers = self._delete_objects(reversed(created))
            if leftovers:
                exc.message += f"; cleaning up also failed, delete by hand: {', '.join(leftovers)}"
                exc.args = (exc.message,)
            raise
        assert workload is not None  # render_notebook_objects always includes the workload
        return workload

    def _adopt(self, spec: NotebookSpec, obj: Obj) -> None:
        """Reuse an existing PVC or policy of this user's (the policy gets the current rules)."""
        meta = obj["metadata"]
        namespace, name, kind = meta["namespace"], meta["name"], obj["kind"]
        existing = self.client.get(obj["apiVersion"], kind, namespace, name)
        owner = owner_of(existing)
        if owner != spec.user:
            raise Conflict(
                f"{kind} {namespace}/{name} already exists and does not belong to user {spec.user!r}; "
                f"choose another name than {spec.name!r} or ask an admin",
                field="name",
            )
        if kind in ("AuthorizationPolicy", "ConfigMap"):  # today's rules and config
            patch = {"metadata": {"labels": meta["labels"], "annotations": meta["annotations"]}}
            body = "spec" if kind == "AuthorizationPolicy" else "data"
            patch[body] = obj[body]
            self.client.patch(obj["apiVersion"], kind, namespace, name, patch)
        log.info("adopting existing %s %s/%s of user %r", kind, namespace, name, spec.user)

    def _not_found_on_create(
        self, spec: NotebookSpec, namespace: str, obj: Obj, exc: ApiNotFound
    ) -> CubeError:
        if is_missing_namespace(exc, namespace):
            return missing_namespace(self.settings, spec.user, namespace)
        rtype = resource_type(obj["apiVersion"], obj["kind"])
        return BackendUnavailable(
            f"the cluster does not serve {rtype.describe()} ({obj['apiVersion']} {obj['kind']}): "
            f"is its CRD installed? ({exc.message})"
        )

    def _delete_objects(self, objects: Any, foreground_kind: str = "") -> list[str]:
        """Delete each object (404 is fine); return 'Kind ns/name' of those that could not be. Objects
        of `foreground_kind` stay (terminating) until what they own is gone; the rest go at once, so
        a new server of the same name can be made as soon as its pod is gone (a Service deleted in
        the foreground would wait on the EndpointSlices the garbage collector has yet to delete)."""
        leftovers = []
        for obj in objects:
            propagation = "Foreground" if obj["kind"] == foreground_kind else "Background"
            try:
                self.client.delete_object(obj, missing_ok=True, propagation=propagation)
            except CubeError as exc:
                meta = obj["metadata"]
                where = f"{obj['kind']} {meta.get('namespace')}/{meta['name']}"
                log.error("could not delete %s: %s", where, exc.message)
                leftovers.append(where)
        return leftovers

    async def set_stopped(
        self, user: str, name: str, stopped: bool, reason: str | None = None
    ) -> NotebookServer:
        namespace, _ = self._existing(user, name)
        patch = stop_annotation_patch(stopped, datetime.now(UTC), self.resource_kind, reason=reason)
        result = await asyncio.to_thread(
            self.client.patch, self.workload_api_version, self.resource_kind, namespace, name, patch
        )

        def applied() -> bool:
            obj = self.workloads.get(namespace, name)
            return obj is not None and _is_stopped(obj) == stopped

        await asyncio.to_thread(self.workloads.wait_for, applied, CACHE_WAIT_SECONDS)
        return self._to_server(self.workloads.get(namespace, name) or result)

    async def delete_server(self, user: str, name: str) -> None:
        """Delete the route, the workload (and its Service), then — once its pod is gone — the policy;
        keep the workspace PVC.

        The workload is deleted in the foreground, so it stays (terminating) until its pods are gone.
        If the pod outlives `delete_wait_seconds` the policy is kept: it selects only this server's
        pods, and a later server of the same name adopts it. Deleting again retries.
        """
        namespace, _ = self._existing(user, name)
        leftovers = await asyncio.to_thread(
            self._delete_objects, self._route_and_workload(namespace, name), self.resource_kind
        )
        if leftovers:
            raise BackendUnavailable(
                f"server {name!r} of user {user!r} was only partly deleted; "
                f"still there: {', '.join(leftovers)}"
            )
        if not await asyncio.to_thread(self._wait_gone, namespace, name, self.delete_wait_seconds):
            log.warning(
                "the pod of %s/%s outlived %.0f s: its AuthorizationPolicy stays "
                "(a new server of this name adopts it)",
                namespace,
                name,
                self.delete_wait_seconds,
            )
            return
        policy = {
            "apiVersion": "security.istio.io/v1",
            "kind": "AuthorizationPolicy",
            "metadata": {"namespace": namespace, "name": authorization_policy_name(name)},
        }
        leftovers = await asyncio.to_thread(self._delete_objects, [policy])
        if leftovers:
            raise BackendUnavailable(
                f"server {name!r} of user {user!r} was deleted but its access policy could not be: "
                f"{', '.join(leftovers)}"
            )

    def queues(self, profile: str) -> bool:
        """Kueue queues the profile's servers when the admin gave them a LocalQueue (and Kueue is
        served): its ClusterQueue admits them, so the GPU quota does not refuse them at create."""
        return self.kueue_workloads is not None and QUEUE_LABEL in self.settings.queues.choose(
            "notebook", profile=profile
        )

    def enforcement(self, profile: Profile) -> enforcement.Enforcement:
        return enforcement.on_cluster(profile)

    def _route_and_workload(self, namespace: str, name: str) -> list[Obj]:
        """A Notebook's StatefulSet, Service and VirtualService are its controller's: the garbage
        collector deletes them with it (their ownerReferences); a StatefulSet's are the workbench's."""
        doomed = [(self.workload_api_version, self.resource_kind, name)]
        if self.resource_kind == "StatefulSet":
            route = ("networking.istio.io/v1", "VirtualService", virtual_service_name(namespace, name))
            doomed = [route, *doomed, ("v1", "Service", name)]
        doomed.append(("v1", "ConfigMap", user_config_name(name)))
        return [
            {"apiVersion": v, "kind": k, "metadata": {"namespace": namespace, "name": n}}
            for v, k, n in doomed
        ]

    def _wait_gone(self, namespace: str, name: str, timeout: float) -> bool:
        """Wait until neither the workload nor any of its pods is in the caches."""
        deadline = time.monotonic() + timeout

        def gone() -> bool:
            return self.workloads.get(namespace, name) is None and self._pod_for(namespace, name) is None

        while not gone():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.pods.stopping:
                return False
            # Either cache may change last: wake up on pod changes, re-check the workload often.
            self.pods.wait_for(gone, min(remaining, 0.25))
        return True

    # -- mapping cache objects to what users see ---------------------------------------------------

    def _to_server(self, obj: Obj) -> NotebookServer:
        annotations = annotations_of(obj)
        namespace, name = namespace_of(obj), name_of(obj)
        container = container_named(pod_spec_of(obj), name)
        pod = self._pod_for(namespace, name)
        status, reason = self._status(obj, pod)
        queued = status == ServerStatus.QUEUED
        held = self.kueue_workloads.of_pod(pod) if queued and pod and self.kueue_workloads else None
        return NotebookServer(
            user=owner_of(obj) or labels_of(obj).get(USER_LABEL, ""),
            name=name,
            profile=annotations.get(PROFILE_ANNOTATION, ""),
            status=status,
            url=route_prefix(self.settings, namespace, name),
            resources=_resources(container, self.settings.gpu_resources),
            created=metadata_of(obj).get("creationTimestamp") or "",
            image=container.get("image", ""),
            reason=reason,
            last_activity=annotations.get(LAST_ACTIVITY_ANNOTATION) or None,
            namespace=namespace,
            queue_position=held.position if held else None,
            queue_reason=reason if queued else None,
        )

    def _pod_for(self, namespace: str, name: str) -> Obj | None:
        # During a restart the old pod may linger.
        return current(self.pods.by_index("server", f"{namespace}/{name}"))

    def _status(self, obj: Obj, pod: Obj | None) -> tuple[ServerStatus, str | None]:
        if is_deleting(obj):
            return ServerStatus.TERMINATING, None
        if _is_stopped(obj):
            why = annotations_of(obj).get(STOP_REASON_ANNOTATION) or None
            return (ServerStatus.STOPPING if pod is not None else ServerStatus.STOPPED), why
        if pod is None:
            return ServerStatus.PENDING, self._workload_warning(
                obj
            ) or "waiting for the server's pod to be created"
        if is_deleting(pod):
            return ServerStatus.PENDING, "the previous pod is shutting down"
        if kueue.is_gated(pod):
            held = self.kueue_workloads.of_pod(pod).reason if self.kueue_workloads else "held by Kueue"
            return ServerStatus.QUEUED, held
        state = pod_state(pod)
        if state.ready:
            return ServerStatus.RUNNING, None
        if state.failed:
            return ServerStatus.FAILED, state.reason
        return ServerStatus.PENDING, state.reason or self._warning_for(pod)

    def _warning_for(self, pod: Obj) -> str | None:
        events = self.events.by_index("object", _event_key("Pod", namespace_of(pod), name_of(pod)))
        # Events outlive pods of the same name: only those about this pod (uid) count, when known.
        uid = uid_of(pod)
        return newest_warning(
            [e for e in events if not uid or (e.get("involvedObject") or {}).get("uid") in (None, "", uid)]
        )

    def _workload_warning(self, obj: Obj) -> str | None:
        """Why the pod was never created: a Warning on the StatefulSet (the Notebook controller's, or
        ours) or on the Notebook, newer than this server (an earlier one of the same name had its own)."""
        namespace, name = namespace_of(obj), name_of(obj)
        created = created_at(obj)
        kinds = {"StatefulSet", self.resource_kind}
        events = [
            e for kind in kinds for e in self.events.by_index("object", _event_key(kind, namespace, name))
        ]

        def current(event: Obj) -> bool:
            involved = event.get("involvedObject") or {}
            if involved.get("kind") == self.resource_kind and involved.get("uid") not in (
                "",
                None,
                uid_of(obj),
            ):
                return False
            stamp = parse_timestamp(event_time(event))
            return created is None or stamp is None or stamp >= created

        return newest_warning(e for e in events if current(e))


def _is_stopped(obj: Obj) -> bool:
    return STOPPED_ANNOTATION in annotations_of(obj)


def _ready_since(pod: Obj) -> datetime | None:
    """When the pod last became Ready: activity never predates it, so a restarted server is not
    culled for idleness it had before its stop."""
    return parse_timestamp(condition_of(pod, "Ready").get("lastTransitionTime"))


def _resources(container: dict[str, Any], gpu_resources: tuple[str, ...]) -> Resources:
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    gpu_resource, gpu = gpu_request(resources, gpu_resources) or (DEFAULT_GPU_RESOURCE, 0)
    return Resources(
        cpu=str(requests.get("cpu") or limits.get("cpu") or ""),
        memory=str(requests.get("memory") or limits.get("memory") or ""),
        gpu=gpu,
        gpu_resource=gpu_resource,
    )

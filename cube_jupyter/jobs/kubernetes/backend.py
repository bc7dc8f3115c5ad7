"""Training, tuning and serving jobs on the cluster: the operators' objects, followed by informers.

A training job is a Kubeflow Trainer v2 TrainJob or a kubeflow.org/v1 TFJob/PyTorchJob/XGBoostJob/
MPIJob (`render.training_api` picks), a tuning job a Katib `Experiment` (its `Trial`s make the trial
table) and a served model a KServe `InferenceService`. At start the backend asks the cluster which of
these it serves and follows only those: a job needing one it does not serve is refused (NotServed,
naming the CRD), everything else works. Writes go to the API in a worker thread; every read is
answered from the shared informer caches (list once, then watch, re-list on 410), including the
replica pods, so the Jobs panel polling a job never lists the cluster. Logs are read from the
replica's pod with the pods log API, streamed with `follow`.
"""

from __future__ import annotations

import asyncio
import builtins
import codecs
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3

from cube_jupyter.errors import BackendUnavailable, Conflict, CubeError, InvalidInput, NotFound
from cube_jupyter.fields import format_timestamp
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.kubernetes.apis import (
    GROUP_VERSIONS,
    JOB_RESOURCES,
    TRIALS,
    cluster_availability,
    require_served,
)
from cube_jupyter.jobs.kubernetes.status import (
    EXPERIMENT_LABEL,
    REPLICA_INDEX_LABEL,
    TRAINING_KINDS,
    index_experiment,
    index_pod_owner,
    serving_job,
    spec_annotation,
    stopped_by_workbench,
    training_job,
    trainjob_job,
    tuning_job,
    with_admission,
)
from cube_jupyter.jobs.model import Job, JobKind
from cube_jupyter.jobs.package import ship_to_cluster
from cube_jupyter.jobs.render import render_spec
from cube_jupyter.kube import kueue
from cube_jupyter.kube.client import ApiNotFound, error_for_status
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.discovery import ServedApis
from cube_jupyter.kube.informer import Informer
from cube_jupyter.kube.labels import SELECTOR, STOP_REASON_ANNOTATION, STOPPED_AT_ANNOTATION
from cube_jupyter.kube.namespaces import (
    UserNamespaces,
    is_missing_namespace,
    missing_namespace,
    prepare_namespace,
)
from cube_jupyter.kube.objects import (
    Obj,
    index_owner,
    labels_of,
    metadata_of,
    name_of,
    namespace_of,
    owner_of,
    qualified_name,
)
from cube_jupyter.queues import QUEUE_LABEL

log = logging.getLogger(__name__)

# How a training job of each kind is suspended (a merge patch of its spec): its operator then removes
# its pods and keeps the job.
SUSPEND: dict[str, dict[str, Any]] = {
    "TrainJob": {"suspend": True},
    **{kind: {"runPolicy": {"suspend": True}} for kind in TRAINING_KINDS},
}
# How long a write waits for its watch event, so the caller's next read sees what it just did.
CACHE_WAIT_SECONDS = 5.0
LOG_READ_TIMEOUT = 3600.0


class KubernetesJobBackend:
    """Jobs as operator objects in each user's namespace, read from informer caches."""

    def __init__(
        self,
        settings: JobSettings,
        cluster: Cluster | None = None,
        *,
        sync_timeout: float = 30.0,
        root_dir: str | None = None,
    ) -> None:
        """`cluster` is the workbench's shared one; without it the backend connects on its own
        (the CLI) and closes that connection with itself."""
        self.settings = settings
        self.root_dir = Path(root_dir or os.getcwd())  # where specs' scripts and notebooks are
        self._owns_cluster = cluster is None
        self.cluster = cluster if cluster is not None else Cluster(settings)
        self.client = self.cluster.client
        self.sync_timeout = sync_timeout
        self.served: ServedApis | None = None  # what the cluster serves, once start() asked
        self.kinds: dict[str, Informer] = {}  # the job kinds it serves: TrainJob, PyTorchJob, ...
        self.trials: Informer | None = None
        self.workloads: kueue.KueueWorkloads | None = None  # Kueue's, when the cluster serves them
        # The replica, node, trial and predictor pods: the one pod cache of the cluster.
        self.pods = self.cluster.pods({"owner": index_pod_owner})
        self.user_namespaces = UserNamespaces(settings, self.cluster)

    @property
    def informers(self) -> list[Informer]:
        workloads = self.workloads.informer if self.workloads else None
        extra = [i for i in (self.trials, workloads) if i is not None]
        return [*self.kinds.values(), *extra, self.pods, *self.user_namespaces.informers]

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self, *, supervise: bool = True) -> None:
        """Ask the cluster which job kinds it serves, then start their informers and wait for their
        first lists, so the first read sees the cluster."""
        try:
            self.served = await self.cluster.discover([*GROUP_VERSIONS, *kueue.GROUP_VERSIONS])
            self._follow(self.served)
            await self.cluster.start(self.informers, self.sync_timeout)
        except CubeError:
            await self.close()
            raise

    def _follow(self, served: ServedApis) -> None:
        for resource in JOB_RESOURCES:
            if served.serves(resource.api_version, resource.kind):
                self.kinds[resource.kind] = self.cluster.informer(
                    resource.api_version,
                    resource.kind,
                    label_selector=SELECTOR,
                    indexers={"user": index_owner},
                )
        if "Experiment" in self.kinds and served.serves(TRIALS.api_version, TRIALS.kind):
            self.trials = self.cluster.informer(
                TRIALS.api_version,
                TRIALS.kind,
                label_selector=EXPERIMENT_LABEL,
                indexers={"experiment": index_experiment},
            )

        self.workloads = kueue.follow_workloads(self.cluster, served)

    async def close(self) -> None:
        if self._owns_cluster:  # a shared cluster's informers stop with it, for every feature
            await self.cluster.close()

    def queues(self, kind: JobKind) -> bool:
        """Kueue queues the kind's jobs when the admin gave the kind a LocalQueue: its ClusterQueue's
        quota admits them, so the GPU quota is not checked at submit (a job waits, not a 403)."""
        if kind == "serving" or self.workloads is None:
            return False  # KServe is no Kueue integration
        return QUEUE_LABEL in self.settings.queues.choose(kind)

    def availability(self) -> dict[str, Any]:
        return cluster_availability(self.settings, self.served)

    # -- reads: the informer caches only -----------------------------------------------------------

    def namespace(self, user: str) -> str | None:
        """CubeJobs.namespace_template's when set, else the user's own (a Kubeflow Profile's, or
        CubeWorkbench.namespace_template's); None when they own no Profile."""
        if self.settings.jobs_namespace_template and not self.settings.user_server:
            return self.settings.jobs_namespace_for(user)
        return self.user_namespaces.lookup(user)

    def _target_namespace(self, user: str) -> str:
        """Where a new job of `user` goes; NotFound naming the setting when nowhere. Blocking (it may
        ask the API why): run it in a thread."""
        return self.namespace(user) or self.user_namespaces.require(user)

    def list(self, user: str | None) -> list[Job]:
        jobs: builtins.list[Job] = []
        for informer in self.kinds.values():
            objs = informer.list() if user is None else informer.by_index("user", user)
            jobs.extend(self._job(obj) for obj in objs if owner_of(obj))
        return jobs

    def get(self, user: str, name: str) -> Job | None:
        obj = self._object(user, name)
        return None if obj is None else self._job(obj)

    def _object(self, user: str, name: str) -> Obj | None:
        """The user's job `name`: in the namespace their jobs go to now, else in one they were left in
        (the namespace template or their Profile changed since), as `list` shows them."""
        namespace = self.namespace(user)
        for informer in self.kinds.values():
            obj = informer.get(namespace, name)
            if obj is not None and owner_of(obj) == user:
                return obj
        for informer in self.kinds.values():
            for obj in informer.by_index("user", user):
                if name_of(obj) == name:
                    return obj
        return None

    def _pods_of(self, obj: Obj) -> builtins.list[Obj]:
        return self.pods.by_index("owner", qualified_name(obj))

    def _job(self, obj: Obj) -> Job:
        job = self._operator_job(obj)
        stopped = stopped_by_workbench(job, obj)
        if stopped is not None:
            return stopped
        if self.workloads is None:
            return job
        return with_admission(job, obj, self.workloads.of_owner(obj))

    def _operator_job(self, obj: Obj) -> Job:
        kind = obj.get("kind") or ""
        spec = spec_annotation(obj)
        gpus = self.settings.gpu_resources
        if kind == "TrainJob":
            return trainjob_job(obj, self._pods_of(obj), gpus, spec)
        if kind in TRAINING_KINDS:
            return training_job(obj, self._pods_of(obj), gpus, spec)
        if kind == "Experiment":
            trials = (
                self.trials.by_index("experiment", qualified_name(obj)) if self.trials is not None else []
            )
            return tuning_job(obj, trials, gpus, spec)
        return serving_job(obj, self._pods_of(obj), gpus, spec)

    # -- writes ------------------------------------------------------------------------------------

    async def submit(self, kind: JobKind, spec: Any) -> Job:
        """Ship local code to the store, then create the rendered objects in order; if one fails,
        delete those made before it. A job needing a kind the cluster does not serve is refused
        before anything is shipped or created."""
        require_served(kind, spec, self.settings, self.served)
        spec = await asyncio.to_thread(ship_to_cluster, spec, self.settings.storage, self.root_dir)
        namespace = await asyncio.to_thread(self._target_namespace, spec.user)
        objects = render_spec(kind, spec, self.settings, self.served, namespace)
        primary = next(o for o in objects if o["kind"] in self.kinds)
        target = metadata_of(primary)["namespace"]
        await asyncio.to_thread(prepare_namespace, self.client, self.settings, spec.user, target)
        created: builtins.list[Obj] = []
        try:
            for obj in objects:
                created.append(await asyncio.to_thread(self.client.create, obj))
        except Conflict:
            await self._undo(created)
            raise Conflict(
                f"user {spec.user!r} already has a job named {spec.name!r}", field="name"
            ) from None
        except CubeError as exc:
            await self._undo(created)
            if isinstance(exc, ApiNotFound) and is_missing_namespace(exc, target):
                raise missing_namespace(self.settings, spec.user, target) from None
            raise
        made = next(o for o in created if o["kind"] == primary["kind"])
        informer = self.kinds[made["kind"]]
        if not await asyncio.to_thread(
            informer.wait_for, lambda: informer.get(target, spec.name) is not None, CACHE_WAIT_SECONDS
        ):
            informer.upsert(made)  # the watch is slow: serve what the API answered until it catches up
        return self._job(informer.get(target, spec.name) or made)

    async def roll_out(self, spec: Any) -> Job:
        """A new revision of a served model: merge-patch the InferenceService's spec, as `kubectl
        apply` would; KServe keeps the previous revision for the rest of a canary's traffic."""
        rendered = next(
            o for o in render_spec("serving", spec, self.settings) if o["kind"] == "InferenceService"
        )
        current = self._object(spec.user, spec.name)
        if current is None:
            raise NotFound(f"user {spec.user!r} has no served model named {spec.name!r}", field="name")
        new_spec = rendered["spec"]
        predictor = dict(new_spec.get("predictor") or {})
        # A merge patch keeps keys it doesn't name: clear a canary that the new spec no longer has.
        predictor.setdefault("canaryTrafficPercent", None)
        patch = {
            "metadata": {"annotations": rendered["metadata"].get("annotations") or {}},
            "spec": {**new_spec, "predictor": predictor},
        }
        meta = metadata_of(current)
        updated = await asyncio.to_thread(
            self.client.patch,
            current["apiVersion"],
            current["kind"],
            meta.get("namespace"),
            meta["name"],
            patch,
        )
        informer = self.kinds["InferenceService"]
        informer.upsert(updated)
        return self._job(updated)

    async def _undo(self, created: builtins.list[Obj]) -> None:
        for obj in reversed(created):
            try:
                await asyncio.to_thread(self.client.delete_object, obj, missing_ok=True)
            except CubeError as exc:
                log.warning(
                    "could not remove %s %s after a failed submit: %s", obj["kind"], name_of(obj), exc
                )

    async def delete(self, user: str, name: str) -> None:
        """Delete with foreground propagation: the job object stays until its pods are gone."""
        obj = self._object(user, name)
        if obj is None:
            raise NotFound(f"user {user!r} has no job named {name!r}", field="name")
        try:
            await asyncio.to_thread(self.client.delete_object, obj, propagation="Foreground")
        except ApiNotFound:
            raise NotFound(f"user {user!r} has no job named {name!r}", field="name") from None

    async def stop(self, user: str, name: str, why: str) -> Job:
        """Suspend a training job, saying why in its annotations: its operator removes its pods and
        it stays, shown Failed with reason IdleGPU (`stopped_by_workbench`). One on a Kueue queue is
        stopped as Kueue stops one, by deactivating its Workload (Kueue resumes a job suspended under
        an admitted Workload); Kueue then suspends it."""
        obj = self._object(user, name)
        if obj is None:
            raise NotFound(f"user {user!r} has no job named {name!r}", field="name")
        suspend = SUSPEND.get(obj.get("kind") or "")
        if suspend is None:
            raise InvalidInput(f"only a training job can be stopped; {name!r} is a {obj.get('kind')}")
        annotations = {
            STOP_REASON_ANNOTATION: why,
            STOPPED_AT_ANNOTATION: format_timestamp(datetime.now(UTC)),
        }
        workload = self.workloads.workload_of(obj) if self.workloads is not None else None
        patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if workload is None:
            patch["spec"] = suspend
        else:  # first: the annotation shows it stopped, which it is only once Kueue has it so
            await asyncio.to_thread(
                self.client.patch,
                workload["apiVersion"],
                workload["kind"],
                namespace_of(workload),
                name_of(workload),
                {"spec": {"active": False}},
            )
        meta = metadata_of(obj)
        updated = await asyncio.to_thread(
            self.client.patch, obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], patch
        )
        self.kinds[obj["kind"]].upsert(updated)
        return self._job(updated)

    # -- logs --------------------------------------------------------------------------------------

    def logs(
        self, job: Job, replica: str | None, *, follow: bool = False, tail: int | None = None
    ) -> AsyncIterator[str]:
        pod = self._replica_pod(job.user, job, replica)
        return _stream_in_thread(lambda: self._open_log(metadata_of(pod)["namespace"], pod, follow, tail))

    def _replica_pod(self, user: str, job: Job, replica: str | None) -> Obj:
        chosen = next((r for r in job.replicas if replica in (None, r.name)), None)
        if chosen is None:
            raise NotFound(f"job {job.name!r} has no replica {replica!r}", field="replica")
        obj = self._object(user, job.name) or {}
        pods = self._pods_of(obj)
        if job.kind == "tuning":
            trial = job.trials[chosen.index].name if chosen.index < len(job.trials) else ""
            pods = self.pods.by_index("owner", f"{self.namespace(user)}/{trial}")
            pods = sorted(
                pods,
                key=lambda p: (labels_of(p).get(REPLICA_INDEX_LABEL, ""), str(metadata_of(p).get("name"))),
            )
        elif chosen.pod:
            pods = [p for p in pods if metadata_of(p).get("name") == chosen.pod]
        else:
            pods = []
        if not pods:
            raise NotFound(
                f"replica {chosen.name} of job {job.name!r} has no pod yet (it is {chosen.state})",
                field="replica",
            )
        return pods[0]

    def _open_log(self, namespace: str, pod: Obj, follow: bool, tail: int | None) -> PodLog:
        name = str(metadata_of(pod).get("name"))
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        query = [("container", str(containers[0].get("name") or ""))]
        if follow:
            query.append(("follow", "true"))
        if tail is not None:
            query.append(("tailLines", str(tail)))
        action = f"reading the log of pod {namespace}/{name}"
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
        # KubeClient sends it (auth, TLS, error translation); the body is text, read as it comes.
        response = self.client._request(
            "GET", path, action, query=query, timeout=(5.0, LOG_READ_TIMEOUT if follow else 60.0)
        )
        if not 200 <= response.status < 300:
            body = response.read()
            response.close()
            raise error_for_status(response.status, body, action)
        return PodLog(response, action)


class PodLog:
    """One open pods/log response: iterate for byte chunks as they arrive; `close()` from another
    thread interrupts a blocked read (urllib3 2.3+ `shutdown`)."""

    def __init__(self, response: urllib3.BaseHTTPResponse, action: str) -> None:
        self.response = response
        self.action = action
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            while True:
                data = self.response.read1(65536)
                if not data:
                    return
                yield data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if not self.closed:
                raise BackendUnavailable(f"{self.action}: the connection to the API broke ({exc})") from None
        finally:
            self.response.close()

    def close(self) -> None:
        self.closed = True
        shutdown = getattr(self.response, "shutdown", None)
        # After the body was read to its end the socket is gone and shutdown() raises ValueError.
        with contextlib.suppress(OSError, ValueError, urllib3.exceptions.HTTPError):
            (shutdown or self.response.close)()


def _stream_in_thread(open_log: Callable[[], PodLog]) -> AsyncIterator[str]:
    """Read a blocking log response in a thread and hand its text to the event loop as it arrives;
    closing the async iterator (the client left) closes the response, so the thread ends too."""

    async def generate() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        lock = threading.Lock()
        state: dict[str, Any] = {"log": None, "stopped": False}

        def put(item: tuple[str, Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is reading
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def pump() -> None:
            try:
                log = open_log()
                with lock:
                    state["log"] = log
                    stopped = state["stopped"]
                if stopped:
                    log.close()
                    return
                for data in log:
                    put(("data", data))
                put(("end", None))
            except Exception as exc:  # handed to the loop, raised there
                put(("error", exc))

        threading.Thread(target=pump, name="pod-log", daemon=True).start()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            while True:
                what, value = await queue.get()
                if what == "error":
                    raise value
                text = decoder.decode(b"" if what == "end" else value, final=what == "end")
                if text:
                    yield text
                if what == "end":
                    return
        finally:
            with lock:
                state["stopped"] = True
                log = state["log"]
            if log is not None:
                log.close()

    return generate()

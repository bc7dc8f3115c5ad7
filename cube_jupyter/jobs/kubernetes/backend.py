"""Training, tuning and serving jobs on the cluster: the operators' objects, followed by informers.

A training job is a kubeflow.org/v1 TFJob/PyTorchJob/XGBoostJob/MPIJob, a tuning job a Katib
`Experiment` (its `Trial`s make the trial table) and a served model a KServe `InferenceService`. Writes
go to the API in a worker thread; every read is answered from one informer cache per kind (list once,
then watch, re-list on 410), including the replica pods, so the Jobs panel polling a job never lists
the cluster. Logs are read from the replica's pod with the pods log API, streamed with `follow`.
"""

from __future__ import annotations

import asyncio
import builtins
import codecs
import contextlib
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client import ApiClient

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, Conflict, CubeError, NotFound
from cube_jupyter.jobs.config import jobs_config
from cube_jupyter.jobs.model import Condition, Job, JobKind, Replica, Trial
from cube_jupyter.jobs.package import ship_to_cluster
from cube_jupyter.jobs.render import render_spec
from cube_jupyter.jobs.render.pods import SPEC_ANNOTATION
from cube_jupyter.kube.client import (
    ApiNotFound,
    KubeClient,
    ResourceType,
    error_for_status,
    make_api_client,
    register_resource_type,
)
from cube_jupyter.kube.informer import Informer, Obj
from cube_jupyter.names import user_slug
from cube_jupyter.notebooks.render import MANAGED_BY, MANAGED_BY_LABEL, USER_ANNOTATION

log = logging.getLogger(__name__)

# The operators' kinds: apiVersion, kind, plural, and for training the replica specs' key.
TRAINING_KINDS: dict[str, tuple[str, str]] = {
    # kind: (replica specs key, framework)
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch"),
    "TFJob": ("tfReplicaSpecs", "tensorflow"),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost"),
    "MPIJob": ("mpiReplicaSpecs", "mpi"),
}
TRAINING_API = "kubeflow.org/v1"
KATIB_API = "kubeflow.org/v1beta1"
KSERVE_API = "serving.kserve.io/v1beta1"
RESOURCES = [
    ResourceType(TRAINING_API, "PyTorchJob", "pytorchjobs"),
    ResourceType(TRAINING_API, "TFJob", "tfjobs"),
    ResourceType(TRAINING_API, "XGBoostJob", "xgboostjobs"),
    ResourceType(TRAINING_API, "MPIJob", "mpijobs"),
    ResourceType(KATIB_API, "Experiment", "experiments"),
    ResourceType(KATIB_API, "Trial", "trials"),
    ResourceType(KSERVE_API, "InferenceService", "inferenceservices"),
]
for _resource in RESOURCES:
    register_resource_type(_resource)

# Labels the operators put on what they create.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
TRIAL_LABEL = "katib.kubeflow.org/trial"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
POD_OWNER_LABELS = (JOB_NAME_LABEL, TRIAL_LABEL, ISVC_LABEL)
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
JOB_LABEL = "cube-jupyter/job"  # on every job object and pod template (cube_jupyter.jobs.render.pods)
JOB_PHASES = ("Created", "Running", "Restarting", "Succeeded", "Failed")
TRIAL_STATES = {
    "Created": "Pending",
    "Running": "Running",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
    "Killed": "Failed",
    "MetricsUnavailable": "Failed",
    "EarlyStopped": "Pruned",
}
POD_STATES = {"Pending": "Pending", "Running": "Running", "Succeeded": "Succeeded", "Failed": "Failed"}
# How long a write waits for its watch event, so the caller's next read sees what it just did.
CACHE_WAIT_SECONDS = 5.0
LOG_READ_TIMEOUT = 3600.0


def _meta(obj: Obj) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Obj) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def _user_of(obj: Obj) -> str:
    return str((_meta(obj).get("annotations") or {}).get(USER_ANNOTATION) or "")


def _index_user(obj: Obj) -> list[str]:
    user = _user_of(obj)
    return [user] if user else []


def _index_pod_owner(obj: Obj) -> list[str]:
    """A pod under `namespace/job` for each job-ish label it carries (training job, trial, model)."""
    namespace = _meta(obj).get("namespace") or ""
    labels = _labels(obj)
    return [f"{namespace}/{labels[key]}" for key in POD_OWNER_LABELS if labels.get(key)]


def _index_experiment(obj: Obj) -> list[str]:
    experiment = _labels(obj).get(EXPERIMENT_LABEL)
    return [f"{_meta(obj).get('namespace') or ''}/{experiment}"] if experiment else []


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _conditions(obj: Obj) -> tuple[Condition, ...]:
    result = []
    for raw in (obj.get("status") or {}).get("conditions") or []:
        status = str(raw.get("status") or "Unknown")
        result.append(
            Condition(
                type=str(raw.get("type") or ""),
                status=status if status in ("True", "False") else "Unknown",  # type: ignore[arg-type]
                reason=str(raw.get("reason") or ""),
                message=str(raw.get("message") or ""),
                last_transition_time=_timestamp(raw.get("lastTransitionTime") or raw.get("lastUpdateTime"))
                or 0.0,
            )
        )
    return tuple(result)


def _phase(conditions: tuple[Condition, ...], phases: tuple[str, ...] = JOB_PHASES) -> str:
    """The operator's phase: the type of the last true condition it knows (Created before any)."""
    phase = "Created"
    for condition in conditions:
        if condition.status == "True" and condition.type in phases:
            phase = condition.type
    return phase


def _failure_message(conditions: tuple[Condition, ...]) -> str | None:
    for condition in reversed(conditions):
        if condition.status == "True" and condition.type == "Failed":
            return condition.message or condition.reason or None
    return None


def container_gpus(containers: list[dict[str, Any]]) -> int:
    """GPUs the containers ask for: any extended resource named `.../gpu` (nvidia.com, amd.com)."""
    total = 0
    for container in containers:
        resources = container.get("resources") or {}
        limits = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for key, value in limits.items():
            if key.endswith("/gpu"):
                with contextlib.suppress(TypeError, ValueError):
                    total += int(value)
    return total


def _pod_replica(role: str, index: int, pod: Obj | None, gpus: int, default_state: str) -> Replica:
    if pod is None:
        return Replica(role=role, index=index, state=default_state, gpus=gpus)  # type: ignore[arg-type]
    status = pod.get("status") or {}
    state = POD_STATES.get(str(status.get("phase") or ""), "Pending")
    exit_code: int | None = None
    message: str | None = None
    for container in status.get("containerStatuses") or []:
        current = container.get("state") or {}
        if "terminated" in current:
            exit_code = current["terminated"].get("exitCode")
            if exit_code:
                message = current["terminated"].get("reason") or message
        elif "waiting" in current:
            waiting = current["waiting"]
            message = ": ".join(x for x in (waiting.get("reason"), waiting.get("message")) if x) or message
        break  # the first container is the replica's own; sidecars come after it
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = condition.get("message") or condition.get("reason") or message
    return Replica(
        role=role,
        index=index,
        state=state,  # type: ignore[arg-type]
        gpus=gpus,
        exit_code=exit_code,
        pod=_meta(pod).get("name"),
        message=message,
    )


def _base_job(obj: Obj, kind: JobKind, framework: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    meta = _meta(obj)
    return {
        "name": str(meta.get("name") or ""),
        "kind": kind,
        "user": _user_of(obj),
        "created": _timestamp(meta.get("creationTimestamp")) or 0.0,
        "framework": framework,
        "backend": "kubernetes",
        "spec": spec,
    }


def training_job(obj: Obj, pods: list[Obj], spec: dict[str, Any] | None = None) -> Job:
    """A Job from a TFJob/PyTorchJob/XGBoostJob/MPIJob and its pods (cached)."""
    key, framework = TRAINING_KINDS[obj["kind"]]
    conditions = _conditions(obj)
    phase = _phase(conditions)
    if _meta(obj).get("deletionTimestamp"):
        phase = "Deleting"
    status = obj.get("status") or {}
    by_replica = {
        (_labels(p).get(REPLICA_TYPE_LABEL, "").lower(), _labels(p).get(REPLICA_INDEX_LABEL, "")): p
        for p in pods
        if _labels(p).get(JOB_NAME_LABEL) == _meta(obj).get("name")
    }
    replicas: list[Replica] = []
    for role, role_spec in ((obj.get("spec") or {}).get(key) or {}).items():
        count = int(role_spec.get("replicas", 1) or 0)
        containers = ((role_spec.get("template") or {}).get("spec") or {}).get("containers") or []
        gpus = container_gpus(containers)
        counts = (status.get("replicaStatuses") or {}).get(role) or {}
        # Without a pod (not made yet, or cleaned up), the operator's counts say what became of it.
        fallback = (
            ["Succeeded"] * int(counts.get("succeeded") or 0)
            + ["Failed"] * int(counts.get("failed") or 0)
            + ["Running"] * int(counts.get("active") or 0)
        )
        for index in range(count):
            pod = by_replica.get((role.lower(), str(index)))
            default = fallback[index] if index < len(fallback) else "Pending"
            replicas.append(_pod_replica(role, index, pod, gpus, default))
    return Job(
        **_base_job(obj, "training", framework, spec or {}),
        phase=phase,  # type: ignore[arg-type]
        conditions=conditions,
        replicas=tuple(replicas),
        gpus=sum(r.gpus for r in replicas),
        message=_failure_message(conditions),
        completed=_timestamp(status.get("completionTime")),
    )


def _metric_value(metrics: list[dict[str, Any]], name: str, strategy: str) -> float | None:
    for metric in metrics:
        if metric.get("name") == name:
            with contextlib.suppress(TypeError, ValueError):
                return float(metric.get(strategy if strategy in ("min", "max") else "latest"))  # type: ignore[arg-type]
    return None


def _all_metrics(metrics: list[dict[str, Any]]) -> dict[str, float]:
    values = {}
    for metric in metrics:
        with contextlib.suppress(TypeError, ValueError):
            values[str(metric.get("name"))] = float(metric.get("latest"))  # type: ignore[arg-type]
    return values


def _assignments(raw: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {str(a.get("name")): a.get("value") for a in raw or []}


def _trial_gpus(experiment: Obj) -> int:
    """GPUs one trial asks for: its trial job's containers, times their replicas."""
    trial_spec = (((experiment.get("spec") or {}).get("trialTemplate") or {}).get("trialSpec")) or {}
    kind = trial_spec.get("kind")
    spec = trial_spec.get("spec") or {}
    if kind in TRAINING_KINDS:
        total = 0
        for role_spec in (spec.get(TRAINING_KINDS[kind][0]) or {}).values():
            containers = ((role_spec.get("template") or {}).get("spec") or {}).get("containers") or []
            total += int(role_spec.get("replicas", 1) or 0) * container_gpus(containers)
        return total
    return container_gpus(((spec.get("template") or {}).get("spec") or {}).get("containers") or [])


def tuning_job(obj: Obj, trials: list[Obj], spec: dict[str, Any] | None = None) -> Job:
    """A Job from a Katib Experiment and its Trials (cached): the trial table and the best trial."""
    conditions = _conditions(obj)
    phase = "Deleting" if _meta(obj).get("deletionTimestamp") else _phase(conditions)
    objective = (obj.get("spec") or {}).get("objective") or {}
    metric = str(objective.get("objectiveMetricName") or "")
    strategies = {s.get("name"): s.get("value") for s in objective.get("metricStrategies") or []}
    strategy = str(strategies.get(metric) or ("max" if objective.get("type") == "maximize" else "min"))
    rows: list[Trial] = []
    replicas: list[Replica] = []
    ordered = sorted(trials, key=lambda t: (_meta(t).get("creationTimestamp") or "", _meta(t).get("name")))
    for index, trial in enumerate(ordered):
        state = TRIAL_STATES.get(_phase(_conditions(trial), tuple(TRIAL_STATES)), "Pending")
        observed = ((trial.get("status") or {}).get("observation") or {}).get("metrics") or []
        rows.append(
            Trial(
                name=str(_meta(trial).get("name")),
                parameters=_assignments((trial.get("spec") or {}).get("parameterAssignments")),
                state=state,  # type: ignore[arg-type]
                metrics=_all_metrics(observed),
                objective=_metric_value(observed, metric, strategy),
            )
        )
        replica_state = {"Pruned": "Succeeded"}.get(state, state)
        replicas.append(
            Replica(role="Trial", index=index, state=replica_state, pod=None)  # type: ignore[arg-type]
        )
    status = obj.get("status") or {}
    parallel = int((obj.get("spec") or {}).get("parallelTrialCount") or 1)
    return Job(
        **_base_job(obj, "tuning", None, spec or {}),
        phase=phase,  # type: ignore[arg-type]
        conditions=conditions,
        replicas=tuple(replicas),
        gpus=parallel * _trial_gpus(obj),
        message=_failure_message(conditions),
        trials=tuple(rows),
        best_trial=((status.get("currentOptimalTrial") or {}).get("bestTrialName")) or None,
        completed=_timestamp(status.get("completionTime")),
    )


def serving_job(obj: Obj, pods: list[Obj], spec: dict[str, Any] | None = None) -> Job:
    """A Job from a KServe InferenceService and its predictor pods (cached); the endpoint is status.url."""
    conditions = _conditions(obj)
    status = obj.get("status") or {}
    predictor = (obj.get("spec") or {}).get("predictor") or {}
    model = predictor.get("model") or {}
    model_state = (status.get("modelStatus") or {}).get("transitionStatus")
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if _meta(obj).get("deletionTimestamp"):
        phase = "Deleting"
    elif model_state in ("BlockedByFailedLoad", "InvalidSpec"):
        phase = "Failed"
    elif ready is not None and ready.status == "True":
        phase = "Ready"
    elif pods or conditions:
        phase = "Running"
    else:
        phase = "Created"
    containers = [model, *(predictor.get("containers") or [])]
    gpus = container_gpus(containers)
    replicas = tuple(
        _pod_replica("Predictor", index, pod, gpus, "Pending")
        for index, pod in enumerate(sorted(pods, key=lambda p: str(_meta(p).get("name"))))
    ) or (Replica(role="Predictor", index=0, state="Pending", gpus=gpus),)
    min_replicas = int(predictor.get("minReplicas", 1) or 1)
    message = None
    if phase == "Failed":
        failed = (status.get("modelStatus") or {}).get("lastFailureInfo") or {}
        message = failed.get("message") or failed.get("reason")
    elif ready is not None and ready.status == "False":
        message = ready.message or ready.reason or None
    return Job(
        **_base_job(obj, "serving", (model.get("modelFormat") or {}).get("name"), spec or {}),
        phase=phase,  # type: ignore[arg-type]
        conditions=conditions,
        replicas=replicas,
        gpus=max(min_replicas, len(pods)) * gpus,
        message=message,
        endpoint=status.get("url") or None,
    )


class KubernetesJobBackend:
    """Jobs as operator objects in each user's namespace, read from informer caches."""

    def __init__(
        self,
        settings: Settings,
        api_client: ApiClient | None = None,
        *,
        sync_timeout: float = 30.0,
        watch_timeout_seconds: int = 300,
        root_dir: str | None = None,
    ) -> None:
        self.settings = settings
        self.root_dir = Path(root_dir or os.getcwd())  # where specs' scripts and notebooks are
        self.config = jobs_config(settings)
        self._owns_client = api_client is None
        self.client = KubeClient(api_client if api_client is not None else make_api_client(settings))
        self.sync_timeout = sync_timeout

        def informer(api_version: str, kind: str, **kwargs: Any) -> Informer:
            return Informer(
                self.client, api_version, kind, watch_timeout_seconds=watch_timeout_seconds, **kwargs
            )

        self.kinds: dict[str, Informer] = {
            kind: informer(TRAINING_API, kind, label_selector=SELECTOR, indexers={"user": _index_user})
            for kind in TRAINING_KINDS
        }
        self.kinds["Experiment"] = informer(
            KATIB_API, "Experiment", label_selector=SELECTOR, indexers={"user": _index_user}
        )
        self.kinds["InferenceService"] = informer(
            KSERVE_API, "InferenceService", label_selector=SELECTOR, indexers={"user": _index_user}
        )
        self.trials = informer(
            KATIB_API, "Trial", label_selector=EXPERIMENT_LABEL, indexers={"experiment": _index_experiment}
        )
        # The replica pods: the operators copy the template's labels, so the job label selects them
        # (not managed-by: the notebook backend's pod informer selects on that).
        self.pods = informer("v1", "Pod", label_selector=JOB_LABEL, indexers={"owner": _index_pod_owner})

    @property
    def informers(self) -> list[Informer]:
        return [*self.kinds.values(), self.trials, self.pods]

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the informers and wait for their first lists, so the first read sees the cluster."""
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            if not await asyncio.to_thread(informer.wait_synced, self.sync_timeout):
                why = informer.last_error or "no answer"
                await self.close()
                raise BackendUnavailable(
                    f"could not load {informer.kind} objects from the Kubernetes API at {self.client.host} "
                    f"within {self.sync_timeout:.0f}s: {why} (are the Training Operator, Katib and KServe "
                    "installed?)"
                )

    async def close(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(i.stop) for i in self.informers))
        if self._owns_client:
            self.client.close()

    # -- reads: the informer caches only -----------------------------------------------------------

    def namespace(self, user: str) -> str:
        return self.config.namespace_for(self.settings, user_slug(user))

    def list(self, user: str | None) -> list[Job]:
        jobs: builtins.list[Job] = []
        for informer in self.kinds.values():
            objs = informer.list() if user is None else informer.by_index("user", user)
            jobs.extend(self._job(obj) for obj in objs if _user_of(obj))
        return jobs

    def get(self, user: str, name: str) -> Job | None:
        obj = self._object(user, name)
        return None if obj is None else self._job(obj)

    def _object(self, user: str, name: str) -> Obj | None:
        namespace = self.namespace(user)
        for informer in self.kinds.values():
            obj = informer.get(namespace, name)
            if obj is not None and _user_of(obj) == user:
                return obj
        return None

    def _pods_of(self, obj: Obj) -> builtins.list[Obj]:
        return self.pods.by_index("owner", f"{_meta(obj).get('namespace') or ''}/{_meta(obj).get('name')}")

    def _job(self, obj: Obj) -> Job:
        kind = obj.get("kind") or ""
        spec = _spec_annotation(obj)
        if kind in TRAINING_KINDS:
            return training_job(obj, self._pods_of(obj), spec)
        if kind == "Experiment":
            key = f"{_meta(obj).get('namespace') or ''}/{_meta(obj).get('name')}"
            return tuning_job(obj, self.trials.by_index("experiment", key), spec)
        return serving_job(obj, self._pods_of(obj), spec)

    # -- writes ------------------------------------------------------------------------------------

    async def submit(self, kind: JobKind, spec: Any) -> Job:
        """Ship local code to the store, then create the rendered objects in order; if one fails,
        delete those made before it."""
        spec = await asyncio.to_thread(ship_to_cluster, spec, self.config.storage, self.root_dir)
        objects = render_spec(kind, spec, self.config, self.settings)
        primary = next(o for o in objects if o["kind"] in self.kinds)
        created: builtins.list[Obj] = []
        try:
            for obj in objects:
                created.append(await asyncio.to_thread(self.client.create, obj))
        except Conflict:
            await self._undo(created)
            raise Conflict(
                f"user {spec.user!r} already has a job named {spec.name!r}", field="name"
            ) from None
        except CubeError:
            await self._undo(created)
            raise
        made = next(o for o in created if o["kind"] == primary["kind"])
        informer = self.kinds[made["kind"]]
        namespace = _meta(made).get("namespace")
        if not await asyncio.to_thread(
            informer.wait_for, lambda: informer.get(namespace, spec.name) is not None, CACHE_WAIT_SECONDS
        ):
            informer.upsert(made)  # the watch is slow: serve what the API answered until it catches up
        return self._job(informer.get(namespace, spec.name) or made)

    async def roll_out(self, spec: Any) -> Job:
        """A new revision of a served model: merge-patch the InferenceService's spec, as `kubectl
        apply` would; KServe keeps the previous revision for the rest of a canary's traffic."""
        rendered = next(
            o
            for o in render_spec("serving", spec, self.config, self.settings)
            if o["kind"] == "InferenceService"
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
        meta = _meta(current)
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
            meta = _meta(obj)
            try:
                await asyncio.to_thread(
                    self.client.delete,
                    obj["apiVersion"],
                    obj["kind"],
                    meta.get("namespace"),
                    meta["name"],
                    missing_ok=True,
                )
            except CubeError as exc:
                log.warning(
                    "could not remove %s %s after a failed submit: %s", obj["kind"], meta["name"], exc
                )

    async def delete(self, user: str, name: str) -> None:
        """Delete with foreground propagation: the job object stays until its pods are gone."""
        obj = self._object(user, name)
        if obj is None:
            raise NotFound(f"user {user!r} has no job named {name!r}", field="name")
        meta = _meta(obj)
        try:
            await asyncio.to_thread(
                self.client.delete,
                obj["apiVersion"],
                obj["kind"],
                meta.get("namespace"),
                name,
                propagation="Foreground",
            )
        except ApiNotFound:
            raise NotFound(f"user {user!r} has no job named {name!r}", field="name") from None

    # -- logs --------------------------------------------------------------------------------------

    def logs(
        self, user: str, name: str, replica: str | None, *, follow: bool = False, tail: int | None = None
    ) -> AsyncIterator[str]:
        job = self.get(user, name)
        if job is None:
            raise NotFound(f"user {user!r} has no job named {name!r}", field="name")
        pod = self._replica_pod(user, job, replica)
        return _stream_in_thread(lambda: self._open_log(self.namespace(user), pod, follow, tail))

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
                pods, key=lambda p: (_labels(p).get(REPLICA_INDEX_LABEL, ""), str(_meta(p).get("name")))
            )
        elif chosen.pod:
            pods = [p for p in pods if _meta(p).get("name") == chosen.pod]
        else:
            pods = []
        if not pods:
            raise NotFound(
                f"replica {chosen.name} of job {job.name!r} has no pod yet (it is {chosen.state})",
                field="replica",
            )
        return pods[0]

    def _open_log(self, namespace: str, pod: Obj, follow: bool, tail: int | None) -> PodLog:
        name = str(_meta(pod).get("name"))
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


def _spec_annotation(obj: Obj) -> dict[str, Any]:
    raw = (_meta(obj).get("annotations") or {}).get(SPEC_ANNOTATION)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}

"""Jobs as the operators report them: pure functions from the objects in the informer caches
(Trainer v2 TrainJobs, PyTorchJob/TFJob/XGBoostJob/MPIJob, and their pods, Katib Experiments and
Trials, KServe InferenceServices and their pods) to the `Job` the API shows. No I/O: the backend
feeds them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from cube_jupyter.fields import parse_timestamp
from cube_jupyter.jobs.model import IDLE_GPU_REASON, Condition, Job, JobKind, QueuePlace, Replica, Trial
from cube_jupyter.jobs.render.pods import SPEC_ANNOTATION
from cube_jupyter.jobs.render.trainjob import NODE
from cube_jupyter.kube.kueue import Admission
from cube_jupyter.kube.labels import STOP_REASON_ANNOTATION, STOPPED_AT_ANNOTATION
from cube_jupyter.kube.objects import (
    Obj,
    annotations_of,
    container_gpus,
    containers_of,
    current,
    is_deleting,
    labels_of,
    metadata_of,
    name_of,
    namespace_of,
    owner_of,
    pod_spec_of,
    pod_state,
)
from cube_jupyter.queues import QUEUE_LABEL

TRAINING_API = "kubeflow.org/v1"
KATIB_API = "kubeflow.org/v1beta1"
KSERVE_API = "serving.kserve.io/v1beta1"

# The operators' kinds: apiVersion, kind, plural, and for training the replica specs' key.
TRAINING_KINDS: dict[str, tuple[str, str]] = {
    # kind: (replica specs key, framework)
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch"),
    "TFJob": ("tfReplicaSpecs", "tensorflow"),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost"),
    "MPIJob": ("mpiReplicaSpecs", "mpi"),
}
# Labels the operators put on what they create.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
TRIAL_LABEL = "katib.kubeflow.org/trial"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
# What a TrainJob's pods carry: JobSet names its JobSet (and so its pods) after the TrainJob; an
# indexed Job numbers its pods, which are the nodes' ranks.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
POD_OWNER_LABELS = (JOB_NAME_LABEL, TRIAL_LABEL, ISVC_LABEL, JOBSET_NAME_LABEL)
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


def index_pod_owner(obj: Obj) -> list[str]:
    """A pod under `namespace/job` for each job-ish label it carries (training job, trial, model)."""
    labels = labels_of(obj)
    return [f"{namespace_of(obj)}/{labels[key]}" for key in POD_OWNER_LABELS if labels.get(key)]


def index_experiment(obj: Obj) -> list[str]:
    experiment = labels_of(obj).get(EXPERIMENT_LABEL)
    return [f"{namespace_of(obj)}/{experiment}"] if experiment else []


def _timestamp(value: object) -> float | None:
    stamp = parse_timestamp(value)
    return None if stamp is None else stamp.timestamp()


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


def _pod_replica(role: str, index: int, pod: Obj | None, gpus: int, default_state: str) -> Replica:
    if pod is None:
        return Replica(role=role, index=index, state=default_state, gpus=gpus)  # type: ignore[arg-type]
    state = pod_state(pod)
    return Replica(
        role=role,
        index=index,
        state=POD_STATES.get(state.phase, "Pending"),  # type: ignore[arg-type]
        gpus=gpus,
        exit_code=state.exit_code,
        pod=name_of(pod),
        message=state.reason,
    )


def _pod_gpus(obj: dict[str, Any], gpu_resources: Collection[str]) -> int:
    """GPUs each pod of `obj` (a pod template, or a workload with one) asks for."""
    return container_gpus(containers_of(pod_spec_of(obj)), gpu_resources)


def _base_job(obj: Obj, kind: JobKind, framework: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    meta = metadata_of(obj)
    return {
        "name": str(meta.get("name") or ""),
        "kind": kind,
        "user": owner_of(obj),
        "created": _timestamp(meta.get("creationTimestamp")) or 0.0,
        "framework": framework,
        "backend": "kubernetes",
        "namespace": meta.get("namespace"),
        "spec": spec,
    }


def training_job(
    obj: Obj, pods: list[Obj], gpu_resources: Collection[str], spec: dict[str, Any] | None = None
) -> Job:
    """A Job from a TFJob/PyTorchJob/XGBoostJob/MPIJob and its pods (cached); `gpu_resources` are the
    configured GPU resource names (`kube.objects.gpu_request`)."""
    key, framework = TRAINING_KINDS[obj["kind"]]
    conditions = _conditions(obj)
    phase = _phase(conditions)
    if is_deleting(obj):
        phase = "Deleting"
    status = obj.get("status") or {}
    by_replica = {
        (labels_of(p).get(REPLICA_TYPE_LABEL, "").lower(), labels_of(p).get(REPLICA_INDEX_LABEL, "")): p
        for p in pods
        if labels_of(p).get(JOB_NAME_LABEL) == name_of(obj)
    }
    replicas: list[Replica] = []
    for role, role_spec in ((obj.get("spec") or {}).get(key) or {}).items():
        count = int(role_spec.get("replicas", 1) or 0)
        gpus = _pod_gpus(role_spec.get("template") or {}, gpu_resources)
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


def trainjob_job(
    obj: Obj, pods: list[Obj], gpu_resources: Collection[str], spec: dict[str, Any] | None = None
) -> Job:
    """A Job from a Trainer v2 TrainJob and its node pods (cached): one replica per node, ranked by
    the indexed Job's completion index. Trainer reports only how it ended (Complete, Failed) or that
    it is Suspended; in between, a node pod running makes it Running."""
    conditions = _conditions(obj)
    true = {c.type: c for c in conditions if c.status == "True"}
    trainer = (obj.get("spec") or {}).get("trainer") or {}
    nodes = int(trainer.get("numNodes") or 1)
    gpus = container_gpus([{"resources": trainer.get("resourcesPerNode") or {}}], gpu_resources)
    name = name_of(obj)
    node_pods = [
        p
        for p in pods
        if labels_of(p).get(JOBSET_NAME_LABEL) == name and labels_of(p).get(REPLICATED_JOB_LABEL) == NODE
    ]
    ended = "Succeeded" if "Complete" in true else "Failed" if "Failed" in true else "Pending"
    # A retried node leaves its failed pod beside the new one (generated names, one index): the new one
    # counts.
    replicas = tuple(
        _pod_replica(
            "Node",
            rank,
            current(p for p in node_pods if labels_of(p).get(COMPLETION_INDEX_LABEL) == str(rank)),
            gpus,
            ended,
        )
        for rank in range(nodes)
    )
    if is_deleting(obj):
        phase = "Deleting"
    elif ended != "Pending":
        phase = ended
    elif "Suspended" not in true and any(r.state != "Pending" for r in replicas):
        phase = "Running"
    else:
        phase = "Created"
    message = _failure_message(conditions)
    if message is None and "Suspended" in true:
        message = true["Suspended"].message or "suspended"
    finished = true.get("Complete") or true.get("Failed")
    return Job(
        **_base_job(obj, "training", str((spec or {}).get("framework") or "") or None, spec or {}),
        phase=phase,  # type: ignore[arg-type]
        conditions=conditions,
        replicas=replicas,
        gpus=nodes * gpus,
        message=message,
        completed=(finished.last_transition_time or None) if finished is not None else None,
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


def _trial_gpus(experiment: Obj, gpu_resources: Collection[str]) -> int:
    """GPUs one trial asks for: its trial job's containers, times their replicas."""
    trial_spec = (((experiment.get("spec") or {}).get("trialTemplate") or {}).get("trialSpec")) or {}
    kind = trial_spec.get("kind")
    spec = trial_spec.get("spec") or {}
    if kind in TRAINING_KINDS:
        return sum(
            int(role_spec.get("replicas", 1) or 0) * _pod_gpus(role_spec.get("template") or {}, gpu_resources)
            for role_spec in (spec.get(TRAINING_KINDS[kind][0]) or {}).values()
        )
    return _pod_gpus(trial_spec, gpu_resources)


def tuning_job(
    obj: Obj, trials: list[Obj], gpu_resources: Collection[str], spec: dict[str, Any] | None = None
) -> Job:
    """A Job from a Katib Experiment and its Trials (cached): the trial table and the best trial."""
    conditions = _conditions(obj)
    phase = "Deleting" if is_deleting(obj) else _phase(conditions)
    objective = (obj.get("spec") or {}).get("objective") or {}
    metric = str(objective.get("objectiveMetricName") or "")
    strategies = {s.get("name"): s.get("value") for s in objective.get("metricStrategies") or []}
    strategy = str(strategies.get(metric) or ("max" if objective.get("type") == "maximize" else "min"))
    rows: list[Trial] = []
    replicas: list[Replica] = []
    ordered = sorted(trials, key=lambda t: (metadata_of(t).get("creationTimestamp") or "", name_of(t)))
    for index, trial in enumerate(ordered):
        state = TRIAL_STATES.get(_phase(_conditions(trial), tuple(TRIAL_STATES)), "Pending")
        observed = ((trial.get("status") or {}).get("observation") or {}).get("metrics") or []
        rows.append(
            Trial(
                name=name_of(trial),
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
        gpus=parallel * _trial_gpus(obj, gpu_resources),
        message=_failure_message(conditions),
        trials=tuple(rows),
        best_trial=((status.get("currentOptimalTrial") or {}).get("bestTrialName")) or None,
        completed=_timestamp(status.get("completionTime")),
    )


def serving_job(
    obj: Obj, pods: list[Obj], gpu_resources: Collection[str], spec: dict[str, Any] | None = None
) -> Job:
    """A Job from a KServe InferenceService and its predictor pods (cached); the endpoint is status.url."""
    conditions = _conditions(obj)
    status = obj.get("status") or {}
    predictor = (obj.get("spec") or {}).get("predictor") or {}
    model = predictor.get("model") or {}
    model_state = (status.get("modelStatus") or {}).get("transitionStatus")
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if is_deleting(obj):
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
    gpus = container_gpus(containers, gpu_resources)
    replicas = tuple(
        _pod_replica("Predictor", index, pod, gpus, "Pending")
        for index, pod in enumerate(sorted(pods, key=name_of))
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


def spec_annotation(obj: Obj) -> dict[str, Any]:
    raw = annotations_of(obj).get(SPEC_ANNOTATION)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def stopped_by_workbench(job: Job, obj: Obj) -> Job | None:
    """A job the workbench stopped (its GPUs sat idle: `STOP_REASON_ANNOTATION`) as a local one
    shows: Failed with reason IdleGPU, its unfinished replicas Failed, saying why, whatever its
    operator (or Kueue, evicting it) reports while its pods go. None for any other job."""
    annotations = annotations_of(obj)
    why = annotations.get(STOP_REASON_ANNOTATION)
    if not why or job.phase == "Deleting":
        return None
    at = _timestamp(annotations.get(STOPPED_AT_ANNOTATION)) or 0.0
    stopped = Condition("Failed", "True", IDLE_GPU_REASON, why, at)
    replicas = tuple(
        replace(r, state="Failed", message=r.message or why) if r.state in ("Pending", "Running") else r
        for r in job.replicas
    )
    return replace(
        job,
        phase="Failed",
        message=f"{obj.get('kind')} {job.name} failed: {why}",
        conditions=(*job.conditions, stopped),
        replicas=replicas,
        completed=at or job.completed,
        queue=None,
    )


def with_admission(job: Job, obj: Obj, state: Admission | None) -> Job:
    """A job on a Kueue queue as Kueue has it (`state`, of its Workload): `Queued` (with its
    LocalQueue, Kueue's reason and its place) until admitted, then `Admitted` until a replica starts.
    Queued, it holds nothing: its `gpus` are what it asks for, counted toward nothing (`JobBackend`
    leaves queued jobs out)."""
    queue = labels_of(obj).get(QUEUE_LABEL)
    if not queue or job.finished or job.phase == "Deleting":
        return job
    if state is None:  # Kueue has not made its Workload yet (or is not running)
        state = Admission(False, queue, f"waiting for Kueue to take it into LocalQueue {queue}")
    if not state.admitted:
        place = QueuePlace(state.position, state.reason, state.queue or queue)
        return replace(job, phase="Queued", queue=place)
    if job.phase == "Created" and all(r.state == "Pending" for r in job.replicas):
        return replace(job, phase="Admitted")
    return job

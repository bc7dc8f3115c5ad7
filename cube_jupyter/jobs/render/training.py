"""Render a TrainingSpec as the Training Operator's kubeflow.org/v1 job: PyTorchJob, TFJob, XGBoostJob
or MPIJob, one replicaSpec per role.

Container names are the ones each operator looks for (`pytorch`, `tensorflow`, `xgboost`, `mpi`), and
each gets the port the operator wires into MASTER_PORT / TF_CONFIG. MPI's Launcher runs the code under
`mpirun`; its Workers keep the image's command (the operator keeps them alive for mpirun to reach).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.render.pods import (
    ShippedCode,
    Workload,
    env_list,
    job_metadata,
    pod_template,
    set_metadata,
)
from cube_jupyter.jobs.training_spec import RoleSpec, TrainingSpec
from cube_jupyter.queues import QUEUE_LABEL

API_VERSION = "kubeflow.org/v1"


@dataclass(frozen=True)
class OperatorKind:
    """How one framework's job looks to its operator."""

    kind: str
    replica_specs: str  # the spec key holding the replicaSpecs
    container: str  # the container name the operator requires
    port_name: str | None
    port: int | None


OPERATOR_KINDS: dict[str, OperatorKind] = {
    "pytorch": OperatorKind("PyTorchJob", "pytorchReplicaSpecs", "pytorch", "pytorchjob-port", 23456),
    "tensorflow": OperatorKind("TFJob", "tfReplicaSpecs", "tensorflow", "tfjob-port", 2222),
    "xgboost": OperatorKind("XGBoostJob", "xgbReplicaSpecs", "xgboost", "xgboostjob-port", 9999),
    "mpi": OperatorKind("MPIJob", "mpiReplicaSpecs", "mpi", None, None),
}
# The role whose pod Katib reads metrics from, and whose success ends the job.
PRIMARY_ROLES: dict[str, tuple[str, ...]] = {
    "pytorch": ("Master", "Worker"),
    "tensorflow": ("Chief", "Worker"),
    "xgboost": ("Master",),
    "mpi": ("Launcher",),
}
MPIRUN = ["mpirun", "--allow-run-as-root", "-bind-to", "none", "-map-by", "slot"]
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"


def render_training(
    spec: TrainingSpec, config: JobSettings, *, workspace_claim: str | None = None
) -> list[dict[str, Any]]:
    """The one object the kubernetes backend creates for `spec`."""
    obj = training_object(spec, config, workspace_claim=workspace_claim)
    set_metadata(obj, job_metadata("training", spec.name, spec.user, config.jobs_namespace_for(spec.user)))
    queued(obj, config.queues.choose("training", queue=spec.queue, priority=spec.priority))
    return [obj]


def queued(obj: dict[str, Any], labels: dict[str, str]) -> None:
    """Give a job object (a v1 job, or a Katib trial's batch Job or v1 job) its Kueue labels; one on
    a queue is created suspended, as Kueue expects, and unsuspended when admitted."""
    if not labels:
        return
    metadata = obj.get("metadata", {})
    metadata.setdefault("labels", {}).update(labels)
    set_metadata(obj, metadata)
    if QUEUE_LABEL in labels:
        spec = obj["spec"]
        spec.get("runPolicy", spec)["suspend"] = True


def training_object(
    spec: TrainingSpec, config: JobSettings, *, workspace_claim: str | None = None
) -> dict[str, Any]:
    """apiVersion, kind and spec of the job, without metadata: also a Katib trial's template."""
    operator = OPERATOR_KINDS[spec.framework]
    run_policy: dict[str, Any] = {"cleanPodPolicy": spec.clean_pod_policy}
    ttl = spec.ttl_seconds_after_finished
    if ttl is None:
        ttl = config.jobs.ttl_seconds_after_finished
    if ttl is not None:
        run_policy["ttlSecondsAfterFinished"] = ttl
    if spec.backoff_limit is not None:
        run_policy["backoffLimit"] = spec.backoff_limit
    if spec.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = spec.active_deadline_seconds
    body: dict[str, Any] = {
        operator.replica_specs: {
            role.role: _replica_spec(spec, role, operator, config, workspace_claim) for role in spec.roles
        },
        "runPolicy": run_policy,
    }
    if spec.framework == "mpi":
        body["slotsPerWorker"] = spec.slots_per_worker
        body["mainContainer"] = operator.container
    if config.queues.gang_scheduler == "volcano":
        _volcano_gang(body, operator, config)
    return {"apiVersion": API_VERSION, "kind": operator.kind, "spec": body}


def _volcano_gang(body: dict[str, Any], operator: OperatorKind, config: JobSettings) -> None:
    """Volcano gang scheduling (`CubeQueues.gang_scheduler`): every replica's pod is Volcano's, and the
    operator's PodGroup asks for all of them at once, so no replica holds a GPU waiting for the rest."""
    replicas = body[operator.replica_specs].values()
    policy: dict[str, Any] = {"minAvailable": sum(r["replicas"] for r in replicas)}
    if config.queues.volcano_queue:
        policy["queue"] = config.queues.volcano_queue
    body["runPolicy"]["schedulingPolicy"] = policy
    for replica in replicas:
        replica["template"]["spec"]["schedulerName"] = "volcano"


def primary_role(spec: TrainingSpec) -> RoleSpec:
    """The replica whose pod reports the job's metrics: Master, Chief or Launcher, else worker 0."""
    for name in PRIMARY_ROLES[spec.framework]:
        role = spec.role(name)
        if role is not None:
            return role
    return spec.roles[0]


def primary_pod_labels(spec: TrainingSpec) -> dict[str, str]:
    """The labels the operator puts on the primary replica's pod (lower-case replica type, index 0)."""
    return {REPLICA_TYPE_LABEL: primary_role(spec).role.lower(), REPLICA_INDEX_LABEL: "0"}


def container_name(spec: TrainingSpec) -> str:
    return OPERATOR_KINDS[spec.framework].container


def _replica_spec(
    spec: TrainingSpec,
    role: RoleSpec,
    operator: OperatorKind,
    config: JobSettings,
    workspace_claim: str | None,
) -> dict[str, Any]:
    shipped = ShippedCode(spec.code, config)
    container: dict[str, Any] = {
        "name": operator.container,
        "image": role.image or spec.image or config.image_for(spec.framework),
    }
    command = _command(spec, role, shipped.command)
    if command is not None:
        container["command"] = command
    if operator.port is not None:
        container["ports"] = [{"name": operator.port_name, "containerPort": operator.port, "protocol": "TCP"}]
    template = pod_template(container, role_workload(spec, role, shipped, workspace_claim), config)
    return {"replicas": role.replicas, "restartPolicy": spec.restart_policy, "template": template}


def role_workload(
    spec: TrainingSpec, role: RoleSpec, shipped: ShippedCode, workspace_claim: str | None = None
) -> Workload:
    """What each pod of `role` runs, as a v1 replica or a TrainJob node alike."""
    return Workload(
        name=spec.name,
        user=spec.user,
        shipped=shipped,
        env=env_list(spec.env, role.env),
        resources=role.resources,
        volumes=spec.volumes,
        workspace=spec.workspace,
        workspace_claim=workspace_claim,
    )


def _command(spec: TrainingSpec, role: RoleSpec, code_command: list[str]) -> list[str] | None:
    """The role's own command, else the code's; MPI workers keep the image's (None)."""
    if role.command is not None:
        return list(role.command)
    if spec.framework != "mpi":
        return code_command
    if role.role != "Launcher":
        return None
    processes = spec.replicas_of("Worker") * (spec.slots_per_worker or 1)
    return [*MPIRUN, "-np", str(processes), *code_command]

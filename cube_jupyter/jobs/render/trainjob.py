"""Render a TrainingSpec as a Kubeflow Trainer v2 `TrainJob` (trainer.kubeflow.org/v1alpha1) on the
cluster's ClusterTrainingRuntime for its framework (`CubeJobs.training_runtimes`).

A TrainJob runs `numNodes` alike nodes. What the trainer container runs (image, command, env,
resources per node) is `spec.trainer`; the rest of the pod a replica of a v1 job would have
(`pods.pod_template`: labels, the no-sidecar annotation, service account, volumes and mounts, GPU
placement) goes into a `runtimePatches` entry of ours, which Trainer merges into the runtime's `node`
pod template. A patch can set only some fields: not init containers (so not the runtime an image
without cube-jupyter gets) and not the container's working directory, which the job entrypoint
takes from `CUBE_WORKDIR` instead. What a TrainJob cannot say is `trainjob_problem`'s answer, so
`CubeJobs.training_api = "auto"` renders such a job as the Training Operator's kind instead.

The runtime sets the rendezvous env on every node (torch: PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR,
PET_MASTER_PORT; xgboost: DMLC_*), which the job entrypoint turns into the names the Training
Operator sets (`cube_jupyter.jobs.trainer_env`): the same code runs under either API, without torchrun.
"""

from __future__ import annotations

from typing import Any

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.render.pods import (
    ShippedCode,
    job_metadata,
    pod_template,
)
from cube_jupyter.jobs.render.training import queued, role_workload
from cube_jupyter.jobs.trainer_env import WORKDIR_ENV
from cube_jupyter.jobs.training_spec import RoleSpec, TrainingSpec

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
RUNTIME_KIND = "ClusterTrainingRuntime"
# The presets' trainer step: the replicated job, and its container, are both named `node`.
NODE = "node"
# Who owns our `runtimePatches` entry: Trainer's webhook takes only a domain-prefixed path.
PATCH_MANAGER = "cube-jupyter.io/workbench"
# The pod spec fields a runtime patch may set (trainer.kubeflow.org PodSpecPatch), and a container's.
POD_PATCH_FIELDS = frozenset(
    {
        "serviceAccountName",
        "volumes",
        "nodeSelector",
        "affinity",
        "tolerations",
        "securityContext",
        "imagePullSecrets",
        "schedulingGates",
        "terminationGracePeriodSeconds",
    }
)
CONTAINER_PATCH_FIELDS = frozenset({"volumeMounts", "securityContext"})
# A container's fields that go to `spec.trainer`, or are known to the runtime already.
TRAINER_FIELDS = frozenset({"name", "image", "command", "env", "resources", "workingDir"})
# Spec fields a TrainJob has no place for, with the value that asks nothing of it.
UNEXPRESSED: dict[str, Any] = {
    "restart_policy": "Never",
    "backoff_limit": None,
    "clean_pod_policy": "Running",
    "ttl_seconds_after_finished": None,
}


def render_trainjob(spec: TrainingSpec, config: JobSettings) -> list[dict[str, Any]]:
    """The one TrainJob the kubernetes backend creates for `spec`; InvalidInput when it cannot be one."""
    problem = trainjob_problem(spec, config)
    if problem is not None:
        raise problem
    template = node_template(spec, config)
    container = template["spec"]["containers"][0]
    trainer: dict[str, Any] = {"numNodes": sum(role.replicas for role in spec.roles)}
    trainer["image"] = container["image"]
    trainer["command"] = container["command"]
    env = list(container.get("env") or [])
    if "workingDir" in container:
        env.append({"name": WORKDIR_ENV, "value": container["workingDir"]})
    trainer["env"] = env
    trainer["resourcesPerNode"] = container["resources"]
    if spec.framework == "pytorch":
        trainer["numProcPerNode"] = 1  # the entrypoint runs the code once per node
    body: dict[str, Any] = {
        "runtimeRef": {
            "apiGroup": API_VERSION.split("/")[0],
            "kind": RUNTIME_KIND,
            "name": config.training_runtimes[spec.framework],
        },
        "trainer": trainer,
        "runtimePatches": [_runtime_patch(template)],
    }
    if spec.active_deadline_seconds is not None:
        body["activeDeadlineSeconds"] = spec.active_deadline_seconds
    metadata = job_metadata("training", spec.name, spec.user, config.jobs_namespace_for(spec.user))
    obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body}
    queued(obj, config.queues.choose("training", queue=spec.queue, priority=spec.priority))
    return [obj]


def trainjob_problem(spec: TrainingSpec, config: JobSettings) -> InvalidInput | None:
    """Why `spec` cannot be a TrainJob (naming the field), or None when it can."""
    if spec.framework not in config.training_runtimes:
        return InvalidInput(
            f"framework {spec.framework} has no Trainer v2 runtime (CubeJobs.training_runtimes); "
            "its jobs run on the Training Operator",
            field="framework",
        )
    first = spec.roles[0]
    for role in spec.roles[1:]:
        if _node_shape(role) != _node_shape(first):
            where = f"replicas.{role.role.lower()}"
            return InvalidInput(
                f"{where}: a TrainJob runs every node alike; give {first.role.lower()} and "
                f"{role.role.lower()} the same resources, image, command and env",
                field=where,
            )
    for key, neutral in UNEXPRESSED.items():
        if getattr(spec, key) != neutral:
            return InvalidInput(f"{key}: a TrainJob has no such setting", field=key)
    if spec.framework == "xgboost" and first.resources.gpu > 1:
        where = f"replicas.{first.role.lower()}.resources.gpu"
        return InvalidInput(
            f"{where}: Trainer runs an XGBoost worker per GPU; a node of this job runs one, so it "
            "may ask for at most 1 GPU",
            field=where,
        )
    if spec.code.kind == "command" and spec.workspace:
        return InvalidInput(
            "workspace: a TrainJob cannot set a command's working directory; run a script, notebook "
            "or function instead",
            field="workspace",
        )
    template = node_template(spec, config)
    unpatchable = sorted(set(template["spec"]) - POD_PATCH_FIELDS - {"containers"})
    unpatchable += sorted(set(template["spec"]["containers"][0]) - TRAINER_FIELDS - CONTAINER_PATCH_FIELDS)
    if unpatchable:
        image = template["spec"]["containers"][0]["image"]
        return InvalidInput(
            f"image: a TrainJob cannot give its pods {', '.join(unpatchable)}, which image {image!r} "
            "needs (it has no cube-jupyter: CubeWorkload.runtime_injection); use an image with it",
            field="image",
        )
    return None


def node_template(spec: TrainingSpec, config: JobSettings) -> dict[str, Any]:
    """The pod template of one node, as a v1 replica's would be (`pods.pod_template`)."""
    role = spec.roles[0]
    shipped = ShippedCode(spec.code, config)
    container: dict[str, Any] = {
        "name": NODE,
        "image": role.image or spec.image or config.image_for(spec.framework),
        "command": list(role.command) if role.command is not None else shipped.command,
    }
    return pod_template(container, role_workload(spec, role, shipped), config)


def _node_shape(role: RoleSpec) -> tuple[Any, ...]:
    return (role.resources, role.image, role.command, role.env)


def _runtime_patch(template: dict[str, Any]) -> dict[str, Any]:
    """Our entry of `runtimePatches`: the node pod's metadata and the pod fields a patch may set."""
    pod = template["spec"]
    container = pod["containers"][0]
    pod_patch = {key: value for key, value in pod.items() if key in POD_PATCH_FIELDS}
    container_patch = {key: value for key, value in container.items() if key in CONTAINER_PATCH_FIELDS}
    if container_patch:
        pod_patch["containers"] = [{"name": NODE, **container_patch}]
    node = {"metadata": template["metadata"], "spec": pod_patch}
    replicated_job = {"name": NODE, "template": {"spec": {"template": node}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated_job]}}},
    }

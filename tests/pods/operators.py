"""The operators' part of running jobs, for the pod harness: which pods a job object becomes, and what
the operator adds to them.

- Training Operator (kubeflow.org/v1): one pod per replica of each replicaSpec, named
  `{job}-{type}-{index}`, labelled with its replica type and index; the operator's env for its
  container from `cube_jupyter.jobs.local.rendezvous` (what the local backend gives each replica,
  MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK...), with this machine's loopback address and a free
  port in place of the master's Service.
- Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): a TrainJob's nodes are the pods of its
  ClusterTrainingRuntime's `node` replicated job (the cluster's runtimes are the presets in
  Trainer's module, manifests/base/runtimes), with our `runtimePatches` merged in, the TrainJob's
  trainer (image, command, env, resources) put on the `node` container, and the torch plugin's env:
  PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (a fieldRef to the Job's completion index
  annotation), PET_MASTER_ADDR and PET_MASTER_PORT (the loopback address and a free port, in place of
  node 0's headless Service `{name}-node-0-0.{name}:29400`);
- Katib: a trial is the Experiment's trialSpec with `${trialParameters.NAME}` replaced by the value
  of the parameter it references (and `${trialSpec.Name}` / `${trialSpec.Namespace}` by the trial's),
  its metrics what the StdOut collector reads from the primary container's log.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import yaml

from cube_jupyter.jobs.local import rendezvous
from cube_jupyter.jobs.render.training import OPERATOR_KINDS, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from cube_jupyter.jobs.render.trainjob import NODE
from cube_jupyter.local.processes import free_port
from tests.pods.harness import POD_IP, Cluster, Pod
from tests.upstream import trainer_runtimes

# The annotation the Job controller puts on each pod of an Indexed Job.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def training_pods(cluster: Cluster, job: dict[str, Any]) -> list[Pod]:
    """The pods the Training Operator creates for `job`, each with the operator's env."""
    framework, operator = next((f, k) for f, k in OPERATOR_KINDS.items() if k.kind == job["kind"])
    specs = job["spec"][operator.replica_specs]
    roles = [(role, spec["replicas"]) for role, spec in specs.items()]
    rdv = rendezvous.plan(framework, roles)
    pods = []
    for slot in rendezvous.slots(roles):
        template = specs[slot.role]["template"]
        metadata = {
            "name": f"{job['metadata']['name']}-{slot.name}",
            "labels": {
                **template["metadata"].get("labels", {}),
                REPLICA_TYPE_LABEL: slot.role.lower(),
                REPLICA_INDEX_LABEL: str(slot.index),
            },
            "annotations": template["metadata"].get("annotations", {}),
        }
        env = rendezvous.replica_env(framework, roles, slot, rdv)
        pods.append(
            Pod(
                cluster,
                {"metadata": metadata, "spec": template["spec"]},
                operator_env={operator.container: env},
            )
        )
    return pods


def cluster_training_runtime(name: str) -> dict[str, Any]:
    """The cluster's ClusterTrainingRuntime `name`: one of Kubeflow Trainer's presets."""
    for path in trainer_runtimes():
        runtime: dict[str, Any] = yaml.safe_load(path.read_text())
        if runtime["metadata"]["name"] == name:
            return runtime
    raise AssertionError(f"the cluster has no ClusterTrainingRuntime {name!r}")


def _merged(base: Any, patch: Any) -> Any:
    """Server-side apply of a patch: maps merged key by key, lists of named items merged by name,
    anything else replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{key: _merged(base.get(key), value) for key, value in patch.items()}}
    named = (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(i, dict) and "name" in i for i in base + patch)
    )
    if named:
        items = {item["name"]: item for item in base}
        for item in patch:
            items[item["name"]] = _merged(items.get(item["name"]), item)
        return list(items.values())
    return copy.deepcopy(patch)


def _upsert(env: list[dict[str, Any]], *variables: dict[str, Any]) -> list[dict[str, Any]]:
    names = {var["name"] for var in variables}
    return [*(var for var in env if var["name"] not in names), *variables]


def trainjob_pods(cluster: Cluster, trainjob: dict[str, Any]) -> list[Pod]:
    """The node pods Kubeflow Trainer (through JobSet) creates for a torch `trainjob`."""
    spec = trainjob["spec"]
    runtime = cluster_training_runtime(spec["runtimeRef"]["name"])
    assert "torch" in runtime["spec"]["mlPolicy"], "the harness plays only the torch plugin"
    [node] = [job for job in runtime["spec"]["template"]["spec"]["replicatedJobs"] if job["name"] == NODE]
    template = copy.deepcopy(node["template"]["spec"]["template"])
    for patch in spec.get("runtimePatches", []):
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            if job["name"] == NODE:
                template = _merged(template, job["template"]["spec"]["template"])
    trainer = spec["trainer"]
    [container] = [c for c in template["spec"]["containers"] if c["name"] == NODE]
    container.update({key: trainer[key] for key in ("image", "command", "args") if key in trainer})
    container["resources"] = trainer.get("resourcesPerNode", container.get("resources", {}))
    container["env"] = _upsert(
        _upsert(container.get("env", []), *trainer.get("env", [])),
        {"name": "PET_NNODES", "value": str(trainer["numNodes"])},
        {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode", "auto"))},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
        },
        {"name": "PET_MASTER_ADDR", "value": POD_IP},
        {"name": "PET_MASTER_PORT", "value": str(free_port())},
    )
    name = trainjob["metadata"]["name"]
    pods = []
    for index in range(trainer["numNodes"]):
        metadata = copy.deepcopy(template.get("metadata", {}))
        metadata["name"] = f"{name}-{NODE}-0-{index}"
        metadata["annotations"] = {**metadata.get("annotations", {}), COMPLETION_INDEX: str(index)}
        pods.append(Pod(cluster, {"metadata": metadata, "spec": template["spec"]}))
    return pods


def katib_trial(experiment: dict[str, Any], name: str, assignments: dict[str, str]) -> dict[str, Any]:
    """The object Katib creates for one trial: the trialSpec with the trial's values put in."""
    template = experiment["spec"]["trialTemplate"]
    values = {
        f"trialParameters.{p['name']}": assignments[p["reference"]] for p in template["trialParameters"]
    }
    values |= {"trialSpec.Name": name, "trialSpec.Namespace": experiment["metadata"]["namespace"]}

    def replace(match: re.Match[str]) -> str:
        assert match.group(1) in values, f"Katib cannot resolve ${{{match.group(1)}}}"
        return json.dumps(values[match.group(1)])[1:-1]

    text = re.sub(r"\$\{((?:trialParameters|trialSpec)\.[^}]+)\}", replace, json.dumps(template["trialSpec"]))
    trial: dict[str, Any] = json.loads(text)
    trial["metadata"] = {"name": name, "namespace": experiment["metadata"]["namespace"]}
    return trial


def job_pod(cluster: Cluster, job: dict[str, Any]) -> Pod:
    """The one pod of a batch/v1 Job (backoffLimit 0, parallelism 1)."""
    template = job["spec"]["template"]
    metadata = {**template["metadata"], "name": f"{job['metadata']['name']}-0"}
    return Pod(cluster, {"metadata": metadata, "spec": template["spec"]})


def katib_metrics(log: str, metrics_format: str) -> dict[str, list[float]]:
    """What Katib's StdOut collector reads from a log: every `name=value` its format matches."""
    found: dict[str, list[float]] = {}
    for line in log.splitlines():
        for match in re.finditer(metrics_format, line):
            found.setdefault(match.group(1), []).append(float(match.group(2)))
    return found

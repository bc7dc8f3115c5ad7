"""Argo's part of running a Workflow, for the pod harness: its `{{...}}` substitutions, its DAG order,
and the pod of each task (the template's container, init containers and volumes; its input artifacts
put at their paths, as Argo's executor does before the main container starts).

Substitution is Argo's: over the text of the Workflow, global tags (`{{workflow.name}}`,
`{{workflow.namespace}}`, `{{workflow.parameters.X}}`) when it starts, a task's template's
`{{inputs.parameters.X}}` from the task's arguments when the task runs. A value lands inside a JSON
string, so it is JSON-escaped, as Argo's template.Replace does. A tag nobody can resolve fails, as
Argo fails the Workflow; `{{inputs.artifacts.X}}` hands a DAG's input artifact to its task.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.pods.harness import Cluster, Pod, PodRun, run_pods

TAG = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
ARTIFACT_FROM = re.compile(r"^\{\{inputs\.artifacts\.([^{}]+)\}\}$")


def _substitute(obj: Any, values: dict[str, str], keep: tuple[str, ...]) -> Any:
    def replace(match: re.Match[str]) -> str:
        tag = match.group(1)
        if tag in values:
            return json.dumps(values[tag])[1:-1]
        if tag.startswith(keep):
            return match.group(0)
        raise AssertionError(f"Argo cannot resolve {{{{{tag}}}}}")

    return json.loads(TAG.sub(replace, json.dumps(obj)))


def started(workflow: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    """The Workflow as Argo runs it: named (generateName + suffix) and its global tags resolved."""
    values = {"workflow.name": name, "workflow.namespace": namespace}
    for parameter in workflow["spec"].get("arguments", {}).get("parameters", []):
        values[f"workflow.parameters.{parameter['name']}"] = parameter["value"]
    resolved: dict[str, Any] = _substitute(workflow, values, keep=("inputs.", "tasks."))
    resolved["metadata"] = {**resolved["metadata"], "name": name, "namespace": namespace}
    return resolved


def templates(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in workflow["spec"]["templates"]}


def dag_tasks(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    entry = templates(workflow)[workflow["spec"]["entrypoint"]]
    return {task["name"]: task for task in entry["dag"]["tasks"]}


def _artifact_data(workflow: dict[str, Any], argument: dict[str, Any]) -> str:
    """A task's artifact argument: raw data, or the DAG's input artifact (the Workflow's argument)."""
    if "raw" in argument:
        return str(argument["raw"]["data"])
    source = ARTIFACT_FROM.match(argument.get("from", ""))
    assert source is not None, f"the harness passes only raw and DAG input artifacts, not {argument}"
    arguments = {a["name"]: a for a in workflow["spec"]["arguments"]["artifacts"]}
    return str(arguments[source[1]]["raw"]["data"])


def task_pod(cluster: Cluster, workflow: dict[str, Any], task: dict[str, Any]) -> Pod:
    """The pod Argo creates for `task`: its template with the task's arguments, input artifacts in place."""
    template = templates(workflow)[task["template"]]
    arguments = task.get("arguments", {})
    parameters = {f"inputs.parameters.{p['name']}": p["value"] for p in arguments.get("parameters", [])}
    template = _substitute(template, parameters, keep=())
    given = {a["name"]: a for a in arguments.get("artifacts", [])}
    files = {
        artifact["path"]: _artifact_data(workflow, given[artifact["name"]])
        for artifact in template.get("inputs", {}).get("artifacts", [])
    }
    pod_metadata = workflow["spec"].get("podMetadata", {})
    own = template.get("metadata", {})
    metadata = {
        "name": f"{workflow['metadata']['name']}-{task['name']}",
        "labels": {**pod_metadata.get("labels", {}), **own.get("labels", {})},
        "annotations": {**pod_metadata.get("annotations", {}), **own.get("annotations", {})},
    }
    spec = {
        "containers": [template["container"]],
        "initContainers": template.get("initContainers", []),
        "volumes": [*workflow["spec"].get("volumes", []), *template.get("volumes", [])],
        "serviceAccountName": workflow["spec"].get("serviceAccountName", "default"),
    }
    return Pod(cluster, {"metadata": metadata, "spec": spec}, files=files)


def run_workflow(cluster: Cluster, workflow: dict[str, Any]) -> dict[str, PodRun]:
    """Every task of the DAG, each once all its dependencies succeeded, those ready together run at
    once; the first failed task stops the run (its run is returned with the others)."""
    tasks = dag_tasks(workflow)
    runs: dict[str, PodRun] = {}
    while len(runs) < len(tasks):
        ready = [n for n, t in tasks.items() if n not in runs and set(t.get("dependencies", [])) <= set(runs)]
        assert ready, f"the DAG cannot go on after {sorted(runs)}"
        for name, run in zip(
            ready, run_pods([task_pod(cluster, workflow, tasks[n]) for n in ready]), strict=True
        ):
            runs[name] = run
        if not all(run.succeeded for run in runs.values()):
            break
    return runs

"""Compile a pipeline into an Argo `Workflow`: one DAG task per step, each running the step runner.

The Workflow is self-contained, so `cube-jupyter pipeline compile NB --target argo -o wf.yaml` followed
by `argo submit wf.yaml` runs the same thing the workbench submits:

- The pipeline's JSON travels inside the Workflow as a `raw` artifact, declared once in
  `spec.arguments` and handed to every task from the DAG's inputs (`{{inputs.artifacts.pipeline}}`):
  no ConfigMap to create beside it, roll back, garbage-collect or forget when submitting by hand.
  Argo substitutes `{{...}}` across a template's whole text, and notebooks are full of braces
  (f-strings, Jinja), so every `{{` in embedded JSON is written `{\\u007b` — the same JSON, no tag.
- One container template per step (`step-<name>`), not one parameterized template: image, resources,
  GPUs, tolerations, retries and deadline differ per step, and Argo cannot template quantities.
- Pipeline parameters become workflow parameters (JSON values) passed to every step as
  `-p NAME {{workflow.parameters.NAME}}`, so `argo submit -p lr=0.1` overrides them.
- Store credentials reach pods only as `secretKeyRef`s to `CubeStorage.credentials_secret`.
- Step pods are shaped like job replicas where both apply (`kube.pods`): no Istio sidecar, and
  the runtime installed from the wheelhouse when a step's image lacks cube-jupyter.
- Without a run id (a compiled file), `{{workflow.name}}` is the run id, unique per submission.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any
from urllib.parse import urlsplit

from cube_jupyter import fields
from cube_jupyter.errors import InvalidInput
from cube_jupyter.kube import pods
from cube_jupyter.kube.labels import MANAGED_BY, MANAGED_BY_LABEL, USER_ANNOTATION, USER_LABEL
from cube_jupyter.names import user_slug
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.model import Pipeline, PipelineError, Step
from cube_jupyter.storage.config import pod_store_env

API_VERSION = "argoproj.io/v1alpha1"
KIND = "Workflow"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "pipeline-run"
PIPELINE_LABEL = "cube-jupyter/pipeline"
RUN_ID_LABEL = "cube-jupyter/run-id"
STEP_LABEL = "cube-jupyter/step"
NOTEBOOK_ANNOTATION = "cube-jupyter/notebook"
# Keys a step's `label:`/`annotation:` tags may not set.
RESERVED_METADATA_PREFIXES = (
    "cube-jupyter/",
    "app.kubernetes.io/",
    "sidecar.istio.io/",
    "workflows.argoproj.io/",
    "kueue.x-k8s.io/",  # a queue only through `queue:`, among those the admin offers
)
ENTRYPOINT = "pipeline"
STEP_TEMPLATE_PREFIX = "step-"
PIPELINE_ARTIFACT = "pipeline"
PIPELINE_PATH = "/cube/pipeline.json"
# Argo keeps the whole Workflow in one etcd object (1.5 MiB at most, status included).
MAX_WORKFLOW_BYTES = 1024 * 1024
# A label value, and a path segment of the run's keys in the store.
RUN_ID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
ARGO_PARAMETER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
GENERATED_SUFFIX = 5  # characters the API server appends to generateName


def step_template_name(step: str) -> str:
    return STEP_TEMPLATE_PREFIX + step


def compile_workflow(
    pipeline: Pipeline,
    config: PipelineSettings,
    *,
    run_id: str | None = None,
    store_url: str | None = None,
    parameters: dict[str, Any] | None = None,
    user: str | None = None,
    parallel: int | None = None,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The Workflow running `pipeline` on the cluster.

    `user` places it in the user's namespace (`namespace` when the cluster decides it, as a Kubeflow
    Profile's; else CubeWorkbench.namespace_template's) and labels it; `run_id` names the run's
    artifacts in the store (None: the Workflow's own name, for `argo submit`); `store_url` defaults to
    CubeStorage.url and must be S3, the only store pods can reach; `parameters` override the
    notebook's defaults; `labels` are added to the Workflow's (a scheduled run's schedule and logical
    time, so the run for one logical time is found by label).
    """
    store = _cluster_store(store_url or config.storage.url)
    if run_id is not None and not RUN_ID.match(run_id):
        raise InvalidInput(
            f"run id {run_id!r} must be 1-63 letters, digits, '-', '_' or '.', starting and ending "
            "with a letter or digit",
            field="run_id",
        )
    if parallel is not None and (isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1):
        raise InvalidInput(f"parallel must be a whole number >= 1, got {parallel!r}", field="parallel")
    if not pipeline.steps:
        raise PipelineError(f"{pipeline.path}: the notebook has no steps to run", field="steps")
    arguments = _workflow_parameters(pipeline, parameters or {})
    run = run_id if run_id is not None else "{{workflow.name}}"
    steps = [
        _step_template(pipeline, step, config, run, store, [p["name"] for p in arguments])
        for step in pipeline.steps
    ]
    spec: dict[str, Any] = {
        "entrypoint": ENTRYPOINT,
        "arguments": {
            "parameters": arguments,
            "artifacts": [{"name": PIPELINE_ARTIFACT, "raw": {"data": _pipeline_json(pipeline)}}],
        },
        "templates": [_dag_template(pipeline), *steps],
        "podMetadata": {"labels": _pod_labels(pipeline, run_id, user)},
    }
    pipelines = config.pipelines
    if pipelines.service_account:
        spec["serviceAccountName"] = pipelines.service_account
    if parallel is not None:
        spec["parallelism"] = parallel
    if pipelines.pod_gc_strategy:
        spec["podGC"] = {"strategy": pipelines.pod_gc_strategy}
    ttl = {
        key: seconds
        for key, seconds in (
            ("secondsAfterSuccess", pipelines.ttl_seconds_after_success),
            ("secondsAfterFailure", pipelines.ttl_seconds_after_failure),
        )
        if seconds > 0
    }
    if ttl:
        spec["ttlStrategy"] = ttl
    metadata = _metadata(pipeline, config, run_id, user, namespace)
    metadata["labels"].update(labels or {})
    workflow = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata}
    workflow["spec"] = spec
    size = len(json.dumps(workflow))
    if size > MAX_WORKFLOW_BYTES:
        raise PipelineError(
            f"{pipeline.path}: the compiled Workflow is {size} bytes; Argo keeps a Workflow in one "
            f"Kubernetes object, which must stay under {MAX_WORKFLOW_BYTES} bytes. Move large literals "
            "(data, long strings) out of the notebook's code into files or the artifact store.",
            field="path",
        )
    return workflow


def _no_argo_tags(json_text: str) -> str:
    """JSON text without `{{`, which Argo would take for a template tag. `{{` never occurs between
    JSON tokens and no escape sequence contains `{`, so each one lies inside a string, where
    `\\u007b` is the same character."""
    return json_text.replace("{{", "{\\u007b")


def _pipeline_json(pipeline: Pipeline) -> str:
    try:
        text = json.dumps(pipeline.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PipelineError(
            f"{pipeline.path}: the pipeline cannot be written as JSON for the step pods ({exc}); "
            "parameter defaults must be JSON values",
            field="parameters",
        ) from None
    return _no_argo_tags(text)


def _cluster_store(url: str) -> str:
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment or "{" in url:
        shown = repr(url) if url else "no store"
        raise InvalidInput(
            f"cluster runs need an S3 store the step pods can reach, got {shown}: pass "
            "s3://bucket/prefix (--store) or set c.CubeStorage.url",
            field="store",
        )
    return url


def _workflow_parameters(pipeline: Pipeline, overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """Workflow parameters: each pipeline parameter with a JSON value (override, else the notebook's
    literal default). A default that is an expression (`lr = 1 / 3`) is left to the step's
    parameters cell unless overridden."""
    known = {p.name: p for p in pipeline.parameters}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        offered = ", ".join(sorted(known)) or "none"
        raise InvalidInput(
            f"parameter {unknown[0]!r} is not in the notebook's parameters cell (parameters: {offered})",
            field=f"parameters.{unknown[0]}",
        )
    result = []
    for parameter in pipeline.parameters:
        if parameter.name in overrides:
            value = overrides[parameter.name]
        elif parameter.default is not None or parameter.default_source.strip() == "None":
            value = parameter.default
        else:
            continue
        field = f"parameters.{parameter.name}"
        if not ARGO_PARAMETER.match(parameter.name):
            raise InvalidInput(
                f"parameter {parameter.name!r} cannot be an Argo parameter: use ASCII letters, digits "
                "and '_'",
                field=field,
            )
        try:
            text = json.dumps(value, allow_nan=False, sort_keys=True)
        except (TypeError, ValueError):
            raise InvalidInput(
                f"parameter {parameter.name!r} must be a JSON value (number, string, bool, null, list, "
                f"dict), got {type(value).__name__}",
                field=field,
            ) from None
        result.append({"name": parameter.name, "value": _no_argo_tags(text)})
    return result


def _dag_template(pipeline: Pipeline) -> dict[str, Any]:
    names = {step.name for step in pipeline.steps}
    tasks = []
    for step in pipeline.steps:
        upstream = set(step.after) | {e.upstream for e in pipeline.edges if e.downstream == step.name}
        missing = sorted(upstream - names)
        if missing:
            raise PipelineError(
                f"step {step.name!r} runs after {missing[0]!r}, which is not a step",
                field=f"steps.{step.name}.after",
            )
        task: dict[str, Any] = {
            "name": step.name,
            "template": step_template_name(step.name),
            "arguments": {
                "artifacts": [{"name": PIPELINE_ARTIFACT, "from": "{{inputs.artifacts.pipeline}}"}]
            },
        }
        if upstream:
            task["dependencies"] = sorted(upstream)
        tasks.append(task)
    return {
        "name": ENTRYPOINT,
        "inputs": {"artifacts": [{"name": PIPELINE_ARTIFACT}]},
        # Like local runs: a failed step stops its dependents, independent branches still finish.
        "dag": {"failFast": False, "tasks": tasks},
    }


def _step_template(
    pipeline: Pipeline,
    step: Step,
    config: PipelineSettings,
    run: str,
    store: str,
    parameter_names: list[str],
) -> dict[str, Any]:
    options = step.options
    pipelines = config.pipelines
    field = f"steps.{step.name}"
    try:  # the one rule each value met where it was given (a tag, the config), met again here
        image = fields.image_reference(options.image or config.default_image, f"{field}.image")
        cpu = fields.quantity(options.cpu or pipelines.default_cpu, f"{field}.cpu")
        memory = fields.quantity(options.memory or pipelines.default_memory, f"{field}.memory")
    except InvalidInput as exc:
        raise PipelineError(f"step {step.name!r}: {exc.message}", field=exc.field) from None
    args = ["--pipeline", PIPELINE_PATH, "--step", step.name, "--run-id", run, "--store", store]
    for name in parameter_names:
        args += ["-p", name, f"{{{{workflow.parameters.{name}}}}}"]
    template: dict[str, Any] = {
        "name": step_template_name(step.name),
        "metadata": {
            "labels": {
                **_users_metadata(options.labels, f"{field}.labels"),
                STEP_LABEL: step.name,
                **config.step_queue_labels(step.name, options),
            },
            "annotations": {
                **_users_metadata(options.annotations, f"{field}.annotations"),
                **pods.NO_ISTIO_SIDECAR,
            },
        },
        "inputs": {"artifacts": [{"name": PIPELINE_ARTIFACT, "path": PIPELINE_PATH}]},
        "container": {
            "name": "main",
            "image": image,
            "command": list(pipelines.runner_command),
            "args": args,
            "env": _store_env(config),
            "resources": pods.container_resources(cpu, memory, options.gpu, pipelines.gpu_resource),
        },
    }
    pods.inject_runtime(template, template["container"], pipelines)
    template |= pods.gpu_placement(options.gpu, pipelines)
    if options.retries > 0:
        template["retryStrategy"] = {
            "limit": options.retries,
            # Also after errors (evicted pod, lost node), as a local retry follows any failure.
            "retryPolicy": "Always",
            "backoff": {"duration": f"{pipelines.retry_backoff_seconds}s", "factor": 2},
        }
    if options.timeout is not None:
        if options.timeout <= 0:
            raise PipelineError(
                f"step {step.name!r}: timeout must be > 0 seconds, got {options.timeout}",
                field=f"{field}.timeout",
            )
        template["activeDeadlineSeconds"] = max(1, math.ceil(options.timeout))  # per attempt, as locally
    return template


def _users_metadata(given: dict[str, str], field: str) -> dict[str, str]:
    """A step's own pod labels or annotations (Kale's `label:`/`annotation:` tags), none of them one
    the workbench or Argo sets: those say whose pod it is and how it is run."""
    for key in given:
        if key.startswith(RESERVED_METADATA_PREFIXES):
            raise PipelineError(
                f"{field}: {key!r} is set by the workbench itself; pick another key", field=field
            )
    return dict(given)


def _store_env(config: PipelineSettings) -> list[dict[str, Any]]:
    """How a step pod reopens the store from its URL (credentials only as Secret references)."""
    return [{"name": "PYTHONUNBUFFERED", "value": "1"}, *pod_store_env(config.storage)]


def _metadata(
    pipeline: Pipeline, config: PipelineSettings, run_id: str | None, user: str | None, namespace: str | None
) -> dict[str, Any]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: COMPONENT, PIPELINE_LABEL: pipeline.name}
    annotations = {NOTEBOOK_ANNOTATION: pipeline.path}
    if run_id is not None:
        labels[RUN_ID_LABEL] = run_id
    meta: dict[str, Any] = {
        # Argo copies the Workflow's name into a label of every pod: it must fit in 63 characters.
        "generateName": pipeline.name[: 63 - 1 - GENERATED_SUFFIX].rstrip("-") + "-",
    }
    if user is not None:
        meta["namespace"] = namespace or config.namespace_for(user)
        labels[USER_LABEL] = user_slug(user)
        annotations[USER_ANNOTATION] = user
    meta["labels"] = labels
    meta["annotations"] = annotations
    return meta


def _pod_labels(pipeline: Pipeline, run_id: str | None, user: str | None) -> dict[str, str]:
    """Labels on every step pod, so GPU metrics and logs can be found by run (no managed-by label:
    the notebook backend's pod informer selects on that)."""
    labels = {PIPELINE_LABEL: pipeline.name}
    if run_id is not None:
        labels[RUN_ID_LABEL] = run_id
    if user is not None:
        labels[USER_LABEL] = user_slug(user)
    return labels

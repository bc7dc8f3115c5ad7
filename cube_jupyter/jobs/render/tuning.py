"""Render a TuningSpec as a Katib kubeflow.org/v1beta1 `Experiment`.

Each trial is either the rendered training job (its code gets `--NAME=${trialParameters.NAME}`
arguments) or a batch/v1 Job running the notebook with papermill (`-p NAME ${trialParameters.NAME}`)
through the job entrypoint. Metrics come from the primary container's output in Katib's StdOut format
(`name=value` lines).
"""

from __future__ import annotations

from typing import Any

from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.render import pods
from cube_jupyter.jobs.render.training import container_name, primary_pod_labels, queued, training_object
from cube_jupyter.jobs.training_spec import CodeSpec
from cube_jupyter.jobs.tuning_spec import ParameterSpec, TuningSpec

API_VERSION = "kubeflow.org/v1beta1"
NOTEBOOK_TRIAL_CONTAINER = "trial"
# gjson paths Katib evaluates on the trial object's status.
SUCCEEDED = {"Job": "Complete", "training": "Succeeded"}
CONDITION = 'status.conditions.#(type=="{type}")#|#(status=="True")#'


def placeholder(name: str) -> str:
    """What Katib replaces with a trial's value of parameter `name`."""
    return "${trialParameters." + name + "}"


def render_tuning(
    spec: TuningSpec, config: JobSettings, *, workspace_claim: str | None = None
) -> list[dict[str, Any]]:
    """The one Experiment the kubernetes backend creates for `spec`."""
    body: dict[str, Any] = {
        "objective": _objective(spec),
        "algorithm": _algorithm(spec.algorithm.name, spec.algorithm.settings),
        "parallelTrialCount": spec.parallel_trials,
        "maxTrialCount": spec.max_trials,
        "maxFailedTrialCount": spec.max_failed_trials,
        "resumePolicy": config.jobs.katib_resume_policy,
        "metricsCollectorSpec": {
            "collector": {"kind": "StdOut"},
            "source": {"filter": {"metricsFormat": [config.jobs.katib_metrics_format]}},
        },
        "parameters": [_parameter(p) for p in spec.parameters],
        "trialTemplate": _trial_template(spec, config, workspace_claim),
    }
    if spec.early_stopping is not None:
        body["earlyStopping"] = _algorithm(spec.early_stopping.algorithm, spec.early_stopping.settings)
    metadata = pods.job_metadata("tuning", spec.name, spec.user, config.jobs_namespace_for(spec.user))
    return [{"apiVersion": API_VERSION, "kind": "Experiment", "metadata": metadata, "spec": body}]


def _algorithm(name: str, settings: dict[str, str]) -> dict[str, Any]:
    """Katib's AlgorithmSpec / EarlyStoppingSpec: a name and `{name, value}` string settings."""
    body: dict[str, Any] = {"algorithmName": name}
    if settings:
        body["algorithmSettings"] = [{"name": k, "value": v} for k, v in settings.items()]
    return body


def _objective(spec: TuningSpec) -> dict[str, Any]:
    objective: dict[str, Any] = {"type": spec.objective.type, "objectiveMetricName": spec.objective.metric}
    if spec.objective.goal is not None:
        objective["goal"] = spec.objective.goal
    if spec.objective.additional_metrics:
        objective["additionalMetricNames"] = list(spec.objective.additional_metrics)
    return objective


def _parameter(parameter: ParameterSpec) -> dict[str, Any]:
    """Katib keeps every bound as a string: ints without a decimal point, lists as strings."""
    space: dict[str, Any] = {}
    if parameter.values:
        space["list"] = [_text(v) for v in parameter.values]
    else:
        number = (lambda v: str(int(v))) if parameter.type == "int" else _text
        space["min"], space["max"] = number(parameter.min), number(parameter.max)
        if parameter.step is not None:
            space["step"] = number(parameter.step)
        if parameter.log:
            space["distribution"] = "logUniform"
    return {"name": parameter.name, "parameterType": parameter.type, "feasibleSpace": space}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _trial_template(spec: TuningSpec, config: JobSettings, workspace_claim: str | None) -> dict[str, Any]:
    values = {p.name: placeholder(p.name) for p in spec.parameters}
    template: dict[str, Any] = {
        "trialParameters": [
            {"name": p.name, "description": f"{p.type} parameter {p.name}", "reference": p.name}
            for p in spec.parameters
        ],
    }
    if spec.trial_training is not None:
        training = spec.trial_training_with(values)
        trial_spec = training_object(training, config, workspace_claim=workspace_claim)
        template["primaryContainerName"] = container_name(training)
        template["primaryPodLabels"] = primary_pod_labels(training)
        succeeded = SUCCEEDED["training"]
    else:
        trial_spec = _notebook_job(spec, values, config, workspace_claim)
        template["primaryContainerName"] = NOTEBOOK_TRIAL_CONTAINER
        succeeded = SUCCEEDED["Job"]
    trial = spec.trial_training
    queued(
        trial_spec,
        config.queues.choose(
            "tuning",
            queue=spec.queue or (trial.queue if trial else None),
            priority=spec.priority or (trial.priority if trial else None),
        ),
    )
    template["trialSpec"] = trial_spec
    template["successCondition"] = CONDITION.format(type=succeeded)
    template["failureCondition"] = CONDITION.format(type="Failed")
    return template


def _notebook_job(
    spec: TuningSpec, values: dict[str, str], config: JobSettings, workspace_claim: str | None
) -> dict[str, Any]:
    """A batch/v1 Job that runs the notebook once with the trial's parameters (papermill `-p`)."""
    papermill_args: list[str] = []
    for p in spec.parameters:
        papermill_args += ["-p", p.name, values[p.name]]
    code = CodeSpec(
        kind="notebook",
        path=spec.trial_notebook,
        package_uri=spec.trial_package_uri,
        args=tuple(papermill_args),
    )
    container: dict[str, Any] = {
        "name": NOTEBOOK_TRIAL_CONTAINER,
        "image": spec.trial_image or config.default_image,
    }
    workload = pods.Workload(
        name=spec.name,
        user=spec.user,
        shipped=pods.ShippedCode(code, config, field="trial.package"),
        env=pods.env_list(spec.trial_env),
        resources=spec.trial_resources,
        workspace=spec.trial_workspace,
        workspace_claim=workspace_claim,
    )
    container["command"] = workload.shipped.command
    template = pods.pod_template(container, workload, config)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {
            "backoffLimit": 0,
            "template": template,
        },
    }

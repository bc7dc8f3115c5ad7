"""Render a ServingSpec as a KServe serving.kserve.io/v1beta1 `InferenceService`.

Built-in formats use the predictor's `model` (KServe picks the runtime, or the admin's
`CubeJobs.serving_runtimes` entry); `custom` runs the given image as the predictor's container, with
the model downloaded to /mnt/models by KServe's storage initializer (its `STORAGE_URI`).

Autoscaling: concurrency and rps are Knative's (`scaleMetric`/`scaleTarget`); cpu is utilization in
percent; gpu follows the seeds (Cube Studio scales on GPU utilization): a RawDeployment scaled by KEDA on
a Prometheus query of DCGM's `DCGM_FI_DEV_GPU_UTIL` for the predictor's pods. S3 credentials come from
the service account's Secrets (KServe's convention), never from the object.
"""

from __future__ import annotations

from typing import Any

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.render.pods import container_resources, job_metadata, pod_labels
from cube_jupyter.jobs.serving_spec import ServingSpec

API_VERSION = "serving.kserve.io/v1beta1"
CUSTOM_CONTAINER = "kserve-container"  # the name KServe gives (and expects of) a predictor's container
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
AUTOSCALER_CLASS_ANNOTATION = "serving.kserve.io/autoscalerClass"


def render_serving(spec: ServingSpec, config: JobSettings) -> list[dict[str, Any]]:
    """The one InferenceService the kubernetes backend creates for `spec`."""
    namespace = config.jobs_namespace_for(spec.user)
    if spec.storage_scheme == "file":
        raise InvalidInput(
            f"storage_uri {spec.storage_uri!r} is a path on this machine; on the cluster use s3:// (the "
            "artifact store) or pvc://CLAIM/PATH",
            field="storage_uri",
        )
    predictor: dict[str, Any] = {}
    if config.serving_service_account:
        predictor["serviceAccountName"] = config.serving_service_account
    predictor["labels"] = pod_labels(spec.name, spec.user)
    predictor["minReplicas"] = spec.min_replicas
    predictor["maxReplicas"] = spec.max_replicas
    metadata = job_metadata("serving", spec.name, spec.user, namespace)
    if spec.scale_metric == "gpu":
        predictor["autoScaling"] = _gpu_autoscaling(spec, config, namespace)
        metadata["annotations"][DEPLOYMENT_MODE_ANNOTATION] = "RawDeployment"
        metadata["annotations"][AUTOSCALER_CLASS_ANNOTATION] = "keda"
    else:
        predictor["scaleMetric"] = spec.scale_metric
        if spec.scale_metric == "cpu":
            predictor["scaleMetricType"] = "Utilization"
        if spec.scale_target is not None:
            predictor["scaleTarget"] = spec.scale_target
    if spec.canary_traffic_percent is not None:
        predictor["canaryTrafficPercent"] = spec.canary_traffic_percent
    if spec.resources.gpu:
        if config.gpu_node_selector:
            predictor["nodeSelector"] = dict(config.gpu_node_selector)
        if config.gpu_tolerations:
            predictor["tolerations"] = [dict(t) for t in config.gpu_tolerations]
    if spec.model_format == "custom":
        predictor["containers"] = [_custom_container(spec, config)]
    else:
        predictor["model"] = _model(spec, config)
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceService",
            "metadata": metadata,
            "spec": {"predictor": predictor},
        }
    ]


def _model(spec: ServingSpec, config: JobSettings) -> dict[str, Any]:
    model: dict[str, Any] = {"modelFormat": {"name": spec.model_format}}
    runtime = config.serving_runtimes.get(spec.model_format)
    if runtime:
        model["runtime"] = runtime
    model["storageUri"] = spec.storage_uri
    model["protocolVersion"] = spec.protocol_version
    if spec.runtime_version is not None:
        model["runtimeVersion"] = spec.runtime_version
    if spec.env:
        model["env"] = [{"name": k, "value": v} for k, v in spec.env.items()]
    model["resources"] = container_resources(spec.resources, config)
    return model


def _custom_container(spec: ServingSpec, config: JobSettings) -> dict[str, Any]:
    container: dict[str, Any] = {"name": CUSTOM_CONTAINER, "image": spec.image}
    if spec.command is not None:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    env = [{"name": k, "value": v} for k, v in spec.env.items()]
    if spec.storage_uri is not None:
        env.append({"name": "STORAGE_URI", "value": spec.storage_uri})  # KServe's storage initializer
    if env:
        container["env"] = env
    container["resources"] = container_resources(spec.resources, config)
    return container


def _gpu_autoscaling(spec: ServingSpec, config: JobSettings, namespace: str) -> dict[str, Any]:
    if not config.prometheus_url:
        raise InvalidInput(
            "scale_metric gpu needs a Prometheus with DCGM metrics: the admin sets "
            "CubeJobs.serving_prometheus_url (or CubeGPU.prometheus_url)",
            field="scale_metric",
        )
    query = config.jobs.gpu_utilization_query.format(namespace=namespace, name=spec.name)
    metric = {"backend": "prometheus", "serverAddress": config.prometheus_url, "query": query}
    target = {"type": "Value", "value": str(spec.scale_target)}
    return {"metrics": [{"type": "External", "external": {"metric": metric, "target": target}}]}

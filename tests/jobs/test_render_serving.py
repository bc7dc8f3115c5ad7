"""render_serving: KServe InferenceServices valid against the CRD in strict mode, for every model format
and scale metric, with credentials only by reference."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.render.serving import render_serving
from cube_jupyter.jobs.serving_spec import MODEL_FORMATS, SCALE_METRICS, ServingSpec
from tests.jobs.helpers import make_config
from tests.k8s_schemas import validate_object

PROMETHEUS = "http://prometheus.monitoring:9090"


def spec_of(**overrides: Any) -> ServingSpec:
    raw: dict[str, Any] = {"name": "iris", "model_format": "sklearn", "storage_uri": "s3://models/iris/v1"}
    raw.update(overrides)
    return ServingSpec.from_dict({k: v for k, v in raw.items() if v is not None}, user="alice")


@pytest.mark.parametrize("model_format", MODEL_FORMATS)
@pytest.mark.parametrize("scale_metric", SCALE_METRICS)
def test_every_format_and_metric_renders_a_valid_inference_service(
    model_format: str, scale_metric: str
) -> None:
    config = make_config(CubeJobs={"serving_prometheus_url": PROMETHEUS})
    spec = spec_of(
        model_format=model_format,
        image="registry.example.com/ml/server:1" if model_format == "custom" else None,
        args=["--port", "8080"] if model_format == "custom" else None,
        resources={"cpu": "2", "memory": "4Gi", "gpu": 1},
        min_replicas=1,
        max_replicas=5,
        scale_metric=scale_metric,
        scale_target=60,
        canary_traffic_percent=25,
        runtime_version="1.14.0" if model_format != "custom" else None,
        env={"LOG_LEVEL": "debug"},
    )
    [isvc] = render_serving(spec, config)
    validate_object(isvc, strict=True)
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1" and isvc["kind"] == "InferenceService"
    assert isvc["metadata"]["name"] == "iris" and isvc["metadata"]["namespace"] == "cube-alice"
    predictor = isvc["spec"]["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 5)
    assert predictor["canaryTrafficPercent"] == 25
    assert predictor["tolerations"]  # the GPU pod can land on tainted GPU nodes
    if model_format == "custom":
        [server] = predictor["containers"]
        assert server["name"] == "kserve-container" and server["image"] == "registry.example.com/ml/server:1"
        assert {"name": "STORAGE_URI", "value": "s3://models/iris/v1"} in server["env"]
        resources = server["resources"]
    else:
        model = predictor["model"]
        assert model["modelFormat"] == {"name": model_format}
        assert model["storageUri"] == "s3://models/iris/v1"
        assert model["protocolVersion"] == ("v2" if model_format == "onnx" else "v1")
        assert model["runtimeVersion"] == "1.14.0"
        assert model["env"] == [{"name": "LOG_LEVEL", "value": "debug"}]
        resources = model["resources"]
    assert resources["limits"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    annotations = isvc["metadata"]["annotations"]
    if scale_metric == "gpu":
        assert "scaleMetric" not in predictor
        [metric] = predictor["autoScaling"]["metrics"]
        assert metric["type"] == "External"
        external = metric["external"]
        assert external["metric"]["backend"] == "prometheus"
        assert external["metric"]["serverAddress"] == PROMETHEUS + "/"
        assert "DCGM_FI_DEV_GPU_UTIL" in external["metric"]["query"]
        assert (
            'namespace="cube-alice"' in external["metric"]["query"]
            and "iris-predictor-" in external["metric"]["query"]
        )
        assert external["target"] == {"type": "Value", "value": "60"}
        assert annotations["serving.kserve.io/autoscalerClass"] == "keda"
        assert annotations["serving.kserve.io/deploymentMode"] == "RawDeployment"
    else:
        assert (predictor["scaleMetric"], predictor["scaleTarget"]) == (scale_metric, 60)
        assert predictor.get("scaleMetricType") == ("Utilization" if scale_metric == "cpu" else None)
        assert "autoScaling" not in predictor and "serving.kserve.io/autoscalerClass" not in annotations


def test_defaults_and_config() -> None:
    config = make_config(
        CubeJobs={
            "serving_runtimes": {"sklearn": "kserve-sklearnserver"},
            "serving_service_account": "kserve-s3",
            "default_cpu": "500m",
        }
    )
    [isvc] = render_serving(spec_of(), config)
    validate_object(isvc, strict=True)
    predictor = isvc["spec"]["predictor"]
    assert predictor["serviceAccountName"] == "kserve-s3"  # S3 credentials come through its Secrets
    assert predictor["scaleMetric"] == "concurrency" and "scaleTarget" not in predictor
    assert "canaryTrafficPercent" not in predictor and "tolerations" not in predictor
    assert predictor["model"]["runtime"] == "kserve-sklearnserver"
    assert predictor["model"]["resources"]["requests"] == {"cpu": "500m", "memory": "2Gi"}
    assert predictor["labels"] == {"cube-jupyter/user": "alice", "cube-jupyter/job": "iris"}
    assert "env" not in predictor["model"]


def test_pvc_storage_and_scale_to_zero() -> None:
    config = make_config()
    spec = spec_of(
        model_format="xgboost", storage_uri="pvc://models/xgb/model.bst", min_replicas=0, max_replicas=2
    )
    [isvc] = render_serving(spec, config)
    validate_object(isvc, strict=True)
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == "pvc://models/xgb/model.bst"
    assert isvc["spec"]["predictor"]["minReplicas"] == 0


def test_no_store_credentials_are_inlined() -> None:
    config = make_config(
        CubeStorage={
            "access_key": "AKIAEXAMPLEKEY",
            "secret_key": "very-secret-value",
            "credentials_secret": "s3",
        }
    )
    [isvc] = render_serving(spec_of(), config)
    assert "AKIAEXAMPLEKEY" not in repr(isvc) and "very-secret-value" not in repr(isvc)


def test_local_model_path_is_refused_on_the_cluster(tmp_path: Path) -> None:
    config = make_config()
    model = tmp_path / "model.joblib"
    model.write_bytes(b"x")
    with pytest.raises(InvalidInput) as caught:
        render_serving(spec_of(storage_uri=str(model)), config)
    assert caught.value.field == "storage_uri"


def test_gpu_scaling_needs_a_prometheus() -> None:
    config = make_config()
    with pytest.raises(InvalidInput) as caught:
        render_serving(spec_of(scale_metric="gpu", resources={"gpu": 1}), config)
    assert caught.value.field == "scale_metric" and "prometheus_url" in caught.value.message


def test_strict_validation_catches_a_misspelt_field() -> None:
    config = make_config()
    [isvc] = render_serving(spec_of(), config)
    broken = copy.deepcopy(isvc)
    broken["spec"]["predictor"]["model"]["storageURI"] = "s3://x/y"
    with pytest.raises(AssertionError, match="storageURI"):
        validate_object(broken, strict=True)
    broken = copy.deepcopy(isvc)
    broken["spec"]["predictor"]["scaleMetric"] = "gpu"  # not in the CRD's enum: why gpu uses autoScaling
    with pytest.raises(AssertionError, match="scaleMetric"):
        validate_object(broken, strict=True)

"""ServingSpec: model format, storage, replicas, autoscaling and canary, each bad input naming its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.serving_spec import MODEL_FORMATS, SCALE_METRICS, ServingSpec


def raw(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "iris", "model_format": "sklearn", "storage_uri": "s3://models/iris/v1"}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def parse(**overrides: Any) -> ServingSpec:
    return ServingSpec.from_dict(raw(**overrides), user="alice")


def field_of(**overrides: Any) -> str | None:
    with pytest.raises(InvalidInput) as caught:
        parse(**overrides)
    return caught.value.field


def test_defaults() -> None:
    spec = parse()
    assert (spec.min_replicas, spec.max_replicas) == (1, 1)
    assert spec.scale_metric == "concurrency" and spec.scale_target is None
    assert spec.protocol_version == "v1" and spec.storage_scheme == "s3"
    assert parse(model_format="onnx").protocol_version == "v2"  # Triton speaks only v2
    assert parse(scale_metric="cpu").scale_target == 80


@pytest.mark.parametrize("model_format", MODEL_FORMATS)
@pytest.mark.parametrize("scale_metric", SCALE_METRICS)
def test_to_dict_parses_back(model_format: str, scale_metric: str) -> None:
    spec = parse(
        model_format=model_format,
        image="registry.example.com/ml/server:1" if model_format == "custom" else None,
        command=["python", "-m", "server"] if model_format == "custom" else None,
        resources={"cpu": "2", "memory": "4Gi", "gpu": 1},
        min_replicas=0 if scale_metric in ("concurrency", "rps") else 1,
        max_replicas=4,
        scale_metric=scale_metric,
        scale_target=50,
        canary_traffic_percent=20,
        runtime_version="1.5.0" if model_format != "custom" else None,
        env={"LOG_LEVEL": "debug"},
    )
    assert ServingSpec.from_dict(spec.to_dict(), user="alice") == spec
    assert spec.total_gpus == 4


def test_local_path_must_exist_and_comes_back_absolute(tmp_path: Path) -> None:
    model = tmp_path / "model.joblib"
    model.write_bytes(b"not really a model")
    assert parse(storage_uri=str(model)).storage_uri == str(model)
    assert parse(storage_uri=f"file://{model}").storage_uri == str(model)
    relative = ServingSpec.from_dict(raw(storage_uri="model.joblib"), user="alice", base_dir=tmp_path)
    assert relative.storage_uri == str(model) and relative.storage_scheme == "file"
    with pytest.raises(InvalidInput) as caught:
        parse(storage_uri=str(tmp_path / "missing.joblib"))
    assert caught.value.field == "storage_uri" and "model file not found" in caught.value.message


def test_pvc_uri() -> None:
    spec = parse(storage_uri="pvc://models-claim/iris/model.joblib")
    assert spec.storage_scheme == "pvc"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"min_replicas": 3, "max_replicas": 2}, "min_replicas"),
        ({"min_replicas": -1}, "min_replicas"),
        ({"max_replicas": 0}, "max_replicas"),
        ({"model_format": "tensorflow"}, "model_format"),
        ({"model_format": None}, "model_format"),
        ({"storage_uri": None}, "storage_uri"),
        ({"storage_uri": "/nonexistent/model.joblib"}, "storage_uri"),
        ({"storage_uri": "gs://bucket/model"}, "storage_uri"),
        ({"storage_uri": "s3://B/model"}, "storage_uri"),
        ({"storage_uri": "s3://models/../other"}, "storage_uri"),
        ({"storage_uri": "pvc://Bad_Claim/model"}, "storage_uri"),
        ({"image": "x/y:1"}, "image"),
        ({"model_format": "custom"}, "image"),
        ({"model_format": "custom", "image": "bad image"}, "image"),
        ({"command": ["serve"]}, "command"),
        ({"scale_metric": "memory"}, "scale_metric"),
        ({"scale_metric": "gpu"}, "scale_metric"),  # no GPU to measure
        ({"scale_metric": "cpu", "scale_target": 150}, "scale_target"),
        ({"scale_target": 0}, "scale_target"),
        ({"canary_traffic_percent": 101}, "canary_traffic_percent"),
        ({"canary_traffic_percent": -5}, "canary_traffic_percent"),
        ({"protocol_version": "v3"}, "protocol_version"),
        ({"model_format": "onnx", "protocol_version": "v1"}, "protocol_version"),
        ({"runtime_version": "1.0 beta"}, "runtime_version"),
        ({"resources": {"gpu": -1}}, "resources.gpu"),
        ({"resources": {"memory": "big"}}, "resources.memory"),
        ({"resources": {"cpus": 1}}, "resources.cpus"),
        ({"env": {"bad name": "x"}}, "env.bad name"),
        ({"name": "Iris"}, "name"),
        ({"replicas": 2}, "replicas"),
    ],
)
def test_bad_input_names_the_field(overrides: dict[str, Any], field: str) -> None:
    assert field_of(**overrides) == field

"""The schema helper other tests trust: it must accept valid objects of every kind we render, and
reject unknown fields, wrong types, bad names and values the API server would refuse."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests import k8s_schemas, upstream
from tests.k8s_schemas import crd_schema, validate_object

META = {"name": "job1", "namespace": "cube-alice"}
POD = {
    "spec": {"containers": [{"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
}
VALID: list[dict[str, Any]] = [
    {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": META,
        "spec": {
            "tfReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": POD}}
        },
    },
    {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": META,
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": POD}}},
    },
    {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "run-", "namespace": "cube-alice"},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "img"}}]},
    },
    {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": META,
        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "s3://b/m"}}},
    },
    {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": META,
        "spec": {
            "objective": {"type": "maximize", "goal": 0.99, "objectiveMetricName": "accuracy"},
            "algorithm": {"algorithmName": "random"},
            "parameters": [
                {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.01", "max": "0.1"}}
            ],
            "trialTemplate": {
                "primaryContainerName": "main",
                "trialParameters": [{"name": "lr", "reference": "lr"}],
                "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": POD}},
            },
        },
    },
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": META, "data": {"a": "b"}},
]


@pytest.mark.parametrize("obj", VALID, ids=lambda o: o["kind"])
def test_valid_objects_pass_and_an_unknown_spec_field_fails(obj: dict[str, Any]) -> None:
    validate_object(obj)
    bad = copy.deepcopy(obj)
    target = bad.get("spec", bad)  # a ConfigMap's data takes any key, its top level not
    target["bogusField"] = "x"
    with pytest.raises(AssertionError, match="bogusField"):
        validate_object(bad)


def test_experiment_is_checked_against_katib_swagger_not_the_schemaless_crd() -> None:
    experiment = copy.deepcopy(VALID[4])
    experiment["spec"]["parallelTrialCount"] = "2"
    with pytest.raises(AssertionError, match=r"spec\.parallelTrialCount: '2' is not of type 'integer'"):
        validate_object(experiment)


def test_notebook_schema_comes_from_the_kustomized_crd() -> None:
    containers = crd_schema("kubeflow.org/v1", "Notebook")["properties"]["spec"]["properties"]["template"][
        "properties"
    ]["spec"]["properties"]["containers"]
    assert containers["minItems"] == 1
    assert containers["items"]["required"] == ["name", "image"]
    assert containers["items"]["additionalProperties"] is False
    assert (
        "additionalProperties"
        not in crd_schema("kubeflow.org/v1", "Notebook", strict=False)["properties"]["spec"]
    )


def test_istio_schema_gets_apiversion_kind_and_metadata_declared() -> None:
    schema = crd_schema("networking.istio.io/v1", "VirtualService")
    assert set(schema["required"]) >= {"apiVersion", "kind", "metadata"}
    obj = {
        "apiVersion": "networking.istio.io/v1beta1",
        "kind": "VirtualService",
        "metadata": META,
        "spec": {},
    }
    validate_object(obj)  # another served version of the same CRD
    obj["apiVersion"] = "networking.istio.io/v2"
    with pytest.raises(AssertionError, match="no version 'v2'"):
        validate_object(obj)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"namespace": "ns"}, r"metadata\.name: required"),
        ({"name": "Job_1"}, "not a DNS-1123 subdomain"),
        ({"name": "ok", "namespace": "Alice@x"}, "not a DNS-1123 label"),
        ({"name": "ok", "labels": {"user": "Alice@Example.com"}}, "not a valid label value"),
        ({"name": "ok", "labels": {"bad key!": "v"}}, "not a qualified name"),
        ({"name": "ok", "annotations": {"a": 1}}, "annotations"),
        ({"name": "ok", "uidd": "x"}, r"metadata\.uidd"),
    ],
)
def test_metadata_is_checked_like_the_api_server(metadata: dict[str, Any], message: str) -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    with pytest.raises(AssertionError, match=message):
        validate_object(obj)


def test_durations_follow_istios_cel_rule() -> None:
    parse = k8s_schemas._parse_duration
    assert parse("1m30s") == 90
    assert parse("1.5ms") == pytest.approx(0.0015)
    assert parse("0") == 0
    assert parse("5 seconds") is None
    vs: dict[str, Any] = {
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": META,
        "spec": {"http": [{"route": [{"destination": {"host": "h"}}], "timeout": "1ms"}]},
    }
    validate_object(vs)
    for bad in ("0s", "500us", "soon"):
        vs["spec"]["http"][0]["timeout"] = bad
        with pytest.raises(AssertionError, match="greater than 1ms"):
            validate_object(vs)


def test_schemas_are_loaded_once() -> None:
    obj = copy.deepcopy(VALID[3])  # InferenceService: a 2 MB CRD
    validate_object(obj)
    k8s_schemas._crd_schema.cache_clear()
    k8s_schemas._validator.cache_clear()
    for _ in range(20):
        validate_object(obj)
    assert k8s_schemas._validator.cache_info().misses == 1  # one validator built, then reused
    assert k8s_schemas._crd_schema.cache_info().misses == 1


def test_crds_come_from_the_modules_pinned_in_tools_crds() -> None:
    """No test reads anything beside the clone: every CRD is a pinned module's file or kept here."""
    pinned = dict(
        line.split()[:2]
        for line in (upstream.CRD_MODULE / "go.mod").read_text().splitlines()
        if line.startswith("\t")
    )
    assert set(pinned) == set(upstream.CRD_SOURCES)
    for module, folder in upstream.module_dirs().items():
        assert folder.name.endswith(f"@{pinned[module]}"), (module, folder)
    beside = upstream.REPO.parent / "shared"  # what only this project's own machines have
    for path in upstream.crd_files():
        assert beside not in path.parents, path
    names = {path.name for path in upstream.crd_files()}
    assert {"argoproj.io_workflows.yaml", "notebook.kubeflow.org_v1.yaml"} <= names
    with pytest.raises(AssertionError, match="no CRD for kind 'Nonsense'"):
        k8s_schemas._find_crd("kubeflow.org", "Nonsense")

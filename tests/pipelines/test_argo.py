"""The Argo compiler: Workflows valid against the upstream CRD in strict mode, shaped like the pipeline."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from typing import Any

import pytest
import yaml
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.images import NOTEBOOK_IMAGE, RUNTIME_IMAGE
from cube_jupyter.kube.pods import RUNTIME_PATHS
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.kubernetes.argo import (
    PIPELINE_PATH,
    RUN_ID_LABEL,
    STEP_LABEL,
    compile_workflow,
    step_template_name,
)
from cube_jupyter.pipelines.model import Edge, Parameter, Pipeline, PipelineError, Step, StepOptions
from tests.k8s_schemas import validate_object
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY


def make_settings(**traits: dict[str, Any]) -> PipelineSettings:
    """The pipelines' settings from a Config with `CubeStorage`/`CubePipelines`/... traits, as an
    admin's file sets them."""
    config = Config()
    config.CubeStorage.url = "s3://ml-artifacts/pipelines"
    for section, values in traits.items():
        for key, value in values.items():
            setattr(config[section], key, value)
    return load_settings(config).pipelines


def step(name: str, after: tuple[str, ...] = (), source: str = "x = 1", **options: Any) -> Step:
    return Step(
        name=name,
        cells=(1,),
        source=(source,),
        after=after,
        inputs=(),
        outputs=(),
        options=StepOptions(**options),
    )


def fan_out_fan_in(**prep_options: Any) -> Pipeline:
    """prepare → (train-a, train-b, evaluate) → report: three branches, joined again."""
    steps = (
        step("prepare", source="df = load(f'{{path}}/data.csv')", **prep_options),
        step("train-a", ("prepare",), source="model_a = fit(df)", gpu=2, retries=3, timeout=30.5),
        step("train-b", ("prepare",), source="model_b = fit(df)", image="registry.example.com/ml/xgb:1.7"),
        step("evaluate", ("prepare",), cpu="500m", memory="1Gi"),
        step("report", ("evaluate", "train-a", "train-b")),
    )
    edges = (
        Edge("prepare", "train-a", ("df",)),
        Edge("prepare", "train-b", ("df",)),
        Edge("prepare", "evaluate", ()),
        Edge("train-a", "report", ("model_a",)),
        Edge("train-b", "report", ("model_b",)),
        Edge("evaluate", "report", ()),
    )
    return Pipeline(
        name="churn",
        path="work/churn.ipynb",
        steps=steps,
        edges=edges,
        imports=("import pandas as pd",),
        functions=("def fit(df):\n    return {'n': len(df)}",),
        parameters=(
            Parameter("lr", 0.01, "0.01"),
            Parameter("template", "{{x}}", "'{{x}}'"),
            Parameter("epochs", None, "2 * 5"),
            Parameter("seed", None, "None"),
        ),
        parameters_source="lr = 0.01\ntemplate = '{{x}}'\nepochs = 2 * 5\nseed = None",
        metrics=(),
        kernel_name="python3",
    )


def templates(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in workflow["spec"]["templates"]}


def dag_tasks(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    entry = templates(workflow)[workflow["spec"]["entrypoint"]]
    return {task["name"]: task for task in entry["dag"]["tasks"]}


def container(workflow: dict[str, Any], step_name: str) -> dict[str, Any]:
    result: dict[str, Any] = templates(workflow)[step_template_name(step_name)]["container"]
    return result


def test_fan_out_fan_in_is_a_valid_dag_of_step_runner_tasks() -> None:
    settings = make_settings()
    workflow = compile_workflow(fan_out_fan_in(), settings, run_id="run-1", user="alice")
    validate_object(workflow)  # strict: every field must exist in the upstream Workflow CRD

    assert workflow["metadata"]["generateName"] == "churn-"
    assert workflow["metadata"]["namespace"] == "cube-alice"
    assert workflow["metadata"]["labels"][RUN_ID_LABEL] == "run-1"
    assert workflow["metadata"]["labels"]["cube-jupyter/user"] == "alice"
    assert workflow["metadata"]["labels"]["cube-jupyter/pipeline"] == "churn"
    assert workflow["metadata"]["annotations"]["cube-jupyter/notebook"] == "work/churn.ipynb"
    tasks = dag_tasks(workflow)
    assert list(tasks) == ["prepare", "train-a", "train-b", "evaluate", "report"]
    assert "dependencies" not in tasks["prepare"]
    assert tasks["train-a"]["dependencies"] == ["prepare"]
    assert tasks["report"]["dependencies"] == ["evaluate", "train-a", "train-b"]
    entry = templates(workflow)["pipeline"]
    assert entry["dag"]["failFast"] is False  # independent branches finish, as in local runs
    for name, task in tasks.items():
        template = templates(workflow)[task["template"]]
        assert template["metadata"]["labels"] == {"cube-jupyter/step": name}
        main = template["container"]
        assert main["command"] == ["python", "-m", "cube_jupyter.pipelines.runner"]
        assert main["args"][:8] == [
            "--pipeline",
            PIPELINE_PATH,
            "--step",
            name,
            "--run-id",
            "run-1",
            "--store",
            "s3://ml-artifacts/pipelines",
        ]
        assert template["inputs"]["artifacts"] == [{"name": "pipeline", "path": PIPELINE_PATH}]
        assert task["arguments"]["artifacts"] == [
            {"name": "pipeline", "from": "{{inputs.artifacts.pipeline}}"}
        ]
    spec = workflow["spec"]
    assert spec["serviceAccountName"] == "default-editor"
    assert spec["podGC"] == {"strategy": "OnPodSuccess"}
    assert spec["ttlStrategy"] == {"secondsAfterSuccess": 86400, "secondsAfterFailure": 604800}
    assert spec["podMetadata"]["labels"] == {
        "cube-jupyter/pipeline": "churn",
        RUN_ID_LABEL: "run-1",
        "cube-jupyter/user": "alice",
    }


def test_dependencies_include_data_flow_edges_and_unknown_upstreams_fail() -> None:
    pipeline = fan_out_fan_in()
    # An edge the `after` list lacks still orders the tasks.
    lone = replace(pipeline, steps=(*pipeline.steps[:4], step("report", ("evaluate",))))
    tasks = dag_tasks(compile_workflow(lone, make_settings(), run_id="r"))
    assert tasks["report"]["dependencies"] == ["evaluate", "train-a", "train-b"]

    broken = replace(pipeline, steps=(*pipeline.steps[:4], step("report", ("nowhere",))))
    with pytest.raises(PipelineError) as info:
        compile_workflow(broken, make_settings(), run_id="r")
    assert info.value.field == "steps.report.after" and "'nowhere'" in info.value.message


def test_gpu_steps_ask_for_the_gpu_resource_in_limits_and_tolerate_gpu_nodes() -> None:
    workflow = compile_workflow(fan_out_fan_in(), make_settings(), run_id="r")
    gpu = templates(workflow)[step_template_name("train-a")]
    assert gpu["container"]["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "2"},
    }
    assert gpu["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "nodeSelector" not in gpu
    plain = templates(workflow)[step_template_name("evaluate")]
    assert plain["container"]["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "500m", "memory": "1Gi"},
    }
    assert "tolerations" not in plain and "nodeSelector" not in plain

    amd = make_settings(
        CubePipelines={
            "gpu_resource": "amd.com/gpu",
            "gpu_node_selector": {"amd.com/gpu.present": "true"},
            "gpu_tolerations": [],
            "default_cpu": "2",
            "default_memory": "4Gi",
        }
    )
    workflow = compile_workflow(fan_out_fan_in(), amd, run_id="r")
    validate_object(workflow)
    gpu = templates(workflow)[step_template_name("train-a")]
    assert gpu["container"]["resources"]["limits"] == {"cpu": "2", "memory": "4Gi", "amd.com/gpu": "2"}
    assert gpu["nodeSelector"] == {"amd.com/gpu.present": "true"}
    assert "tolerations" not in gpu


def test_retries_and_timeouts_become_retry_strategy_and_deadline() -> None:
    workflow = compile_workflow(fan_out_fan_in(), make_settings(), run_id="r")
    train = templates(workflow)[step_template_name("train-a")]
    assert train["retryStrategy"] == {
        "limit": 3,
        "retryPolicy": "Always",
        "backoff": {"duration": "10s", "factor": 2},
    }
    assert train["activeDeadlineSeconds"] == 31  # 30.5 s, rounded up to whole seconds
    other = templates(workflow)[step_template_name("evaluate")]
    assert "retryStrategy" not in other and "activeDeadlineSeconds" not in other

    bad = replace(fan_out_fan_in(), steps=(step("prepare", timeout=0),))
    with pytest.raises(PipelineError) as info:
        compile_workflow(bad, make_settings(), run_id="r")
    assert info.value.field == "steps.prepare.timeout"


def test_kale_label_and_annotation_tags_are_the_step_pods_own_beside_the_workbenchs() -> None:
    pipeline = replace(
        fan_out_fan_in(),
        steps=(step("prepare", labels={"team": "ml"}, annotations={"example.com/owner": "alice:smith"}),),
    )
    metadata = templates(compile_workflow(pipeline, make_settings(), run_id="r"))[
        step_template_name("prepare")
    ]["metadata"]
    assert metadata["labels"] == {"team": "ml", STEP_LABEL: "prepare"}
    assert metadata["annotations"] == {"example.com/owner": "alice:smith", "sidecar.istio.io/inject": "false"}
    for options in (
        {"labels": {"cube-jupyter/user": "bob"}},
        {"annotations": {"sidecar.istio.io/inject": "true"}},
    ):
        sneaky = replace(fan_out_fan_in(), steps=(step("prepare", **options),))
        with pytest.raises(PipelineError) as info:
            compile_workflow(sneaky, make_settings(), run_id="r")
        assert info.value.field in ("steps.prepare.labels", "steps.prepare.annotations")


def test_store_credentials_reach_pods_only_as_secret_references() -> None:
    settings = make_settings(
        CubeStorage={
            "endpoint": "minio-service.kubeflow:9000",
            "secure": False,
            "region": "eu-west-1",
            "access_key": ACCESS_KEY,
            "secret_key": SECRET_KEY,
            "credentials_secret": "pipeline-store",
        }
    )
    workflow = compile_workflow(fan_out_fan_in(), settings, run_id="r", user="alice")
    validate_object(workflow)
    text = yaml.safe_dump(workflow)
    assert SECRET_KEY not in text and ACCESS_KEY not in text
    for name in dag_tasks(workflow):
        env = {e["name"]: e for e in container(workflow, name)["env"]}
        assert env["MINIO_ENDPOINT"] == {
            "name": "MINIO_ENDPOINT",
            "value": "http://minio-service.kubeflow:9000",
        }
        assert env["AWS_REGION"]["value"] == "eu-west-1"
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert env[key] == {
                "name": key,
                "valueFrom": {"secretKeyRef": {"name": "pipeline-store", "key": key}},
            }
        inline = [e for e in env.values() if "value" in e]
        runtime = RUNTIME_PATHS if name == "train-b" else {}  # its image lacks cube-jupyter
        allowed = ("PYTHONUNBUFFERED", "MINIO_ENDPOINT", "AWS_REGION", *runtime)
        assert all(e["name"] in allowed for e in inline)

    # No Secret configured: no credential variables at all (pods may get them from workload identity).
    bare = compile_workflow(fan_out_fan_in(), make_settings(), run_id="r")
    names = {e["name"] for e in container(bare, "prepare")["env"]}
    assert names == {"PYTHONUNBUFFERED"}


def test_pipeline_parameters_become_overridable_workflow_parameters() -> None:
    settings = make_settings()
    workflow = compile_workflow(fan_out_fan_in(), settings, run_id="r", parameters={"lr": 0.5})
    validate_object(workflow)
    arguments = {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}
    # `epochs = 2 * 5` is an expression: the step's parameters cell computes it unless overridden.
    assert set(arguments) == {"lr", "template", "seed"}
    assert json.loads(arguments["lr"]) == 0.5
    assert json.loads(arguments["seed"]) is None
    assert json.loads(arguments["template"]) == "{{x}}"
    assert "{{" not in arguments["template"]  # Argo would take it for a tag
    args = container(workflow, "report")["args"]
    assert args[8:] == [
        "-p",
        "lr",
        "{{workflow.parameters.lr}}",
        "-p",
        "template",
        "{{workflow.parameters.template}}",
        "-p",
        "seed",
        "{{workflow.parameters.seed}}",
    ]
    overridden = compile_workflow(fan_out_fan_in(), settings, run_id="r", parameters={"epochs": 3})
    assert {p["name"] for p in overridden["spec"]["arguments"]["parameters"]} == {
        "lr",
        "template",
        "epochs",
        "seed",
    }

    with pytest.raises(InvalidInput) as info:
        compile_workflow(fan_out_fan_in(), settings, run_id="r", parameters={"lrr": 1})
    assert info.value.field == "parameters.lrr" and "lr, seed, template" in info.value.message
    with pytest.raises(InvalidInput) as info:
        compile_workflow(fan_out_fan_in(), settings, run_id="r", parameters={"lr": object()})
    assert info.value.field == "parameters.lr" and "JSON" in info.value.message
    with pytest.raises(InvalidInput) as info:
        compile_workflow(fan_out_fan_in(), settings, run_id="r", parameters={"lr": float("nan")})
    assert info.value.field == "parameters.lr"


def test_the_pipeline_travels_as_one_raw_artifact_argo_will_not_template() -> None:
    pipeline = fan_out_fan_in()
    workflow = compile_workflow(pipeline, make_settings(), run_id="r")
    artifacts = workflow["spec"]["arguments"]["artifacts"]
    assert [a["name"] for a in artifacts] == ["pipeline"]
    data = artifacts[0]["raw"]["data"]
    assert json.loads(data) == json.loads(json.dumps(pipeline.to_dict()))
    assert "f'{{path}}/data.csv'" in json.loads(data)["steps"][0]["source"][0]
    assert text_of(workflow).count("data.csv") == 1  # once, however many steps
    # The only tags left anywhere are the ones meant for Argo.
    tags = set(re.findall(r"\{\{([^}]*)\}\}", text_of(workflow)))
    assert tags == {
        "inputs.artifacts.pipeline",
        "workflow.parameters.lr",
        "workflow.parameters.template",
        "workflow.parameters.seed",
    }


def text_of(workflow: dict[str, Any]) -> str:
    return json.dumps(workflow)


def test_without_a_run_id_each_submission_is_its_own_run() -> None:
    workflow = compile_workflow(fan_out_fan_in(), make_settings())
    validate_object(workflow)
    assert RUN_ID_LABEL not in workflow["metadata"]["labels"]
    assert "namespace" not in workflow["metadata"]  # `argo submit -n NS` decides
    assert container(workflow, "prepare")["args"][4:6] == ["--run-id", "{{workflow.name}}"]

    for bad in ("", "-r", "a/b", "r" * 64, "{{workflow.uid}}"):
        with pytest.raises(InvalidInput) as info:
            compile_workflow(fan_out_fan_in(), make_settings(), run_id=bad)
        assert info.value.field == "run_id"


def test_cluster_runs_need_an_s3_store() -> None:
    no_store = load_settings(Config()).pipelines
    for url in (None, "/data/artifacts", "file:///data/artifacts", "s3://", "s3://b/p?x=1"):
        with pytest.raises(InvalidInput) as info:
            compile_workflow(fan_out_fan_in(), no_store, run_id="r", store_url=url)
        assert info.value.field == "store" and "s3://bucket/prefix" in info.value.message
    workflow = compile_workflow(fan_out_fan_in(), no_store, run_id="r", store_url="s3://other/x")
    assert container(workflow, "prepare")["args"][6:8] == ["--store", "s3://other/x"]


def test_step_images_come_from_tags_config_or_the_runtime_image() -> None:
    workflow = compile_workflow(fan_out_fan_in(), make_settings(), run_id="r")
    assert container(workflow, "train-b")["image"] == "registry.example.com/ml/xgb:1.7"
    assert container(workflow, "prepare")["image"] == RUNTIME_IMAGE
    configured = make_settings(CubePipelines={"default_image": "registry.example.com/ml/runner:2"})
    workflow = compile_workflow(fan_out_fan_in(), configured, run_id="r")
    assert container(workflow, "prepare")["image"] == "registry.example.com/ml/runner:2"
    assert container(workflow, "train-b")["image"] == "registry.example.com/ml/xgb:1.7"
    kale_like = make_settings(CubePipelines={"default_image": ""})  # the notebook servers' image
    workflow = compile_workflow(fan_out_fan_in(), kale_like, run_id="r")
    assert container(workflow, "prepare")["image"] == kale_like.default_image == NOTEBOOK_IMAGE

    bad = replace(fan_out_fan_in(), steps=(step("prepare", image="not an image"),))
    with pytest.raises(PipelineError) as info:
        compile_workflow(bad, make_settings(), run_id="r")
    assert info.value.field == "steps.prepare.image"


def test_bad_step_resources_name_the_step() -> None:
    bad = replace(fan_out_fan_in(), steps=(step("prepare", memory="lots"),))
    with pytest.raises(PipelineError) as info:
        compile_workflow(bad, make_settings(), run_id="r")
    assert info.value.field == "steps.prepare.memory"


def test_long_pipeline_names_leave_room_for_the_generated_suffix() -> None:
    name = "a" * 55 + "-" + "b" * 7
    pipeline = replace(fan_out_fan_in(), name=name)
    workflow = compile_workflow(pipeline, make_settings(), run_id="r", parallel=2)
    validate_object(workflow)
    generate = workflow["metadata"]["generateName"]
    assert len(generate) + 5 <= 63 and generate.endswith("-") and not generate.endswith("--")
    assert workflow["spec"]["parallelism"] == 2
    with pytest.raises(InvalidInput) as info:
        compile_workflow(pipeline, make_settings(), run_id="r", parallel=0)
    assert info.value.field == "parallel"


def test_a_workflow_too_big_for_one_object_is_refused() -> None:
    huge = replace(fan_out_fan_in(), imports=("DATA = " + repr("x" * 1_100_000),))
    with pytest.raises(PipelineError) as info:
        compile_workflow(huge, make_settings(), run_id="r")
    assert info.value.field == "path" and "bytes" in info.value.message


def test_admin_config_is_validated_naming_the_field() -> None:
    cases: list[tuple[dict[str, dict[str, Any]], str]] = [
        ({"CubePipelines": {"default_cpu": "two"}}, "CubePipelines.default_cpu"),
        ({"CubePipelines": {"gpu_resource": "gpu"}}, "CubePipelines.gpu_resource"),
        (
            {"CubePipelines": {"gpu_tolerations": [{"operator": "Sometimes"}]}},
            "CubePipelines.gpu_tolerations[0].operator",
        ),
        ({"CubePipelines": {"service_account": "Runner_SA"}}, "CubePipelines.service_account"),
        ({"CubePipelines": {"runner_command": []}}, "CubePipelines.runner_command"),
        ({"CubeStorage": {"credentials_secret": "Bad Secret"}}, "CubeStorage.credentials_secret"),
    ]
    for traits, field in cases:
        with pytest.raises(ConfigError) as info:  # at startup, with the rest of the config
            make_settings(**traits)
        assert info.value.field == field, traits
    with pytest.raises(ConfigError) as info:
        make_settings(CubePipelines={"pod_gc_strategy": "Sometimes"})
    assert "pod_gc_strategy" in info.value.message
    assert info.value.field == "CubePipelines.pod_gc_strategy"
    quiet = make_settings(
        CubePipelines={"pod_gc_strategy": "", "ttl_seconds_after_success": 0, "ttl_seconds_after_failure": 0}
    )
    spec = compile_workflow(fan_out_fan_in(), quiet, run_id="r")["spec"]
    assert "podGC" not in spec and "ttlStrategy" not in spec


@pytest.mark.parametrize(
    ("where", "mistake"),
    [
        (("spec",), {"entrypiont": "pipeline"}),
        (("spec", "templates", 1, "container"), {"resource": {"limits": {"cpu": "1"}}}),
        (("spec", "templates", 2), {"retryStrategy": {"limit": 2, "retryPolicy": "Sometimes"}}),
        (("spec", "templates", 0, "dag", "tasks", 1), {"dependsOn": ["prepare"]}),
        (("spec", "templates", 1, "container", "env", 0), {"valueFromm": {}}),
    ],
)
def test_a_misspelt_or_invalid_field_fails_strict_validation(
    where: tuple[Any, ...], mistake: dict[str, Any]
) -> None:
    workflow = copy.deepcopy(compile_workflow(fan_out_fan_in(), make_settings(), run_id="r"))
    validate_object(workflow)
    node: Any = workflow
    for key in where:
        node = node[key]
    node.update(mistake)
    with pytest.raises(AssertionError) as info:
        validate_object(workflow)
    assert "is invalid" in str(info.value)

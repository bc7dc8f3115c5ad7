"""`compile_kfp`: a notebook pipeline as Kubeflow Pipelines v2 IR, built by KFP's own compiler and read
back with KFP's own loader. That the IR runs (the launcher's part) is tests/pods/test_kfp_pipeline.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler, components

from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.images import RUNTIME_IMAGE
from cube_jupyter.pipelines.kubernetes.kfp import artifact_type, code_hash, compile_kfp
from cube_jupyter.pipelines.kubernetes.kfp_runtime import BOOTSTRAP, RUNTIME_INPUT
from cube_jupyter.pipelines.model import Edge, Parameter, Pipeline, PipelineError, Step
from tests.pipelines.test_argo import fan_out_fan_in, make_settings, step


def documents(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the PipelineSpec, kfp-kubernetes' platform spec or {})."""
    docs = list(yaml.safe_load_all(text))
    return docs[0], (docs[1] if len(docs) > 1 else {})


def executors(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name.removeprefix("exec-step-"): e["container"]
        for name, e in spec["deploymentSpec"]["executors"].items()
        if "container" in e  # not the runtime's importer
    }


def tasks(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name.removeprefix("step-"): t for name, t in spec["root"]["dag"]["tasks"].items()}


def data_pipeline() -> Pipeline:
    """prepare makes a frame and a model; report reads both; a metric and typed parameters."""
    prepare = Step(
        "prepare",
        (1,),
        ("df = pd.DataFrame({'x': [1, 2]})\nclf = LogisticRegression().fit(df, [0, 1])\nnote = 'hi'",),
        (),
        (),
        ("clf", "df", "note"),
    )
    report = Step(
        "report", (2,), ("score = len(df) + len(note)",), ("prepare",), ("clf", "df", "note"), ("score",)
    )
    return Pipeline(
        name="scored",
        path="work/scored.ipynb",
        steps=(prepare, report),
        edges=(Edge("prepare", "report", ("clf", "df", "note")),),
        imports=("import pandas as pd\nfrom sklearn.linear_model import LogisticRegression",),
        functions=(),
        parameters=(
            Parameter("lr", 0.1, "0.1"),
            Parameter("epochs", 3, "3"),
            Parameter("name", "run", "'run'"),
            Parameter("flag", True, "True"),
            Parameter("layers", [1, 2], "[1, 2]"),
            Parameter("extra", {"a": 1}, "{'a': 1}"),
            Parameter("computed", None, "2 * 5"),
        ),
        parameters_source="lr = 0.1\nepochs = 3\nname = 'run'\nflag = True\nlayers = [1, 2]\n"
        "extra = {'a': 1}\ncomputed = 2 * 5",
        metrics=("score",),
        kernel_name="python3",
    )


def test_the_ir_is_kfps_own_and_round_trips_through_its_loader_and_compiler(tmp_path: Path) -> None:
    text = compile_kfp(data_pipeline(), make_settings())
    spec, platform = documents(text)
    assert spec["schemaVersion"] == "2.1.0" and spec["sdkVersion"] == "kfp-2.17.3"
    assert spec["pipelineInfo"]["name"] == "scored" and platform == {}
    loaded = components.load_component_from_text(text)  # KFP's own loader
    compiler.Compiler().compile(loaded, str(tmp_path / "again.yaml"))
    assert documents((tmp_path / "again.yaml").read_text())[0] == spec


def test_parameters_are_typed_by_their_defaults_and_expressions_stay_in_the_cell() -> None:
    spec, _ = documents(compile_kfp(data_pipeline(), make_settings(), parameters={"lr": 0.5}))
    declared = spec["root"]["inputDefinitions"]["parameters"]
    assert {name: p["parameterType"] for name, p in declared.items()} == {
        "lr": "NUMBER_DOUBLE",
        "epochs": "NUMBER_INTEGER",
        "name": "STRING",
        "flag": "BOOLEAN",
        "layers": "LIST",
        "extra": "STRUCT",
    }
    assert declared["lr"]["defaultValue"] == 0.5  # the override
    args = executors(spec)["prepare"]["args"]
    assert args[args.index("lr") - 1] == "-p" and args[args.index("name") - 1] == "--text-parameter"
    assert args[args.index("lr") + 1] == "{{$.inputs.parameters['lr']}}"
    with pytest.raises(InvalidInput) as unknown:
        compile_kfp(data_pipeline(), make_settings(), parameters={"nope": 1})
    assert unknown.value.field == "parameters.nope"
    spec, _ = documents(compile_kfp(data_pipeline(), make_settings(), parameters={"lr": 2}))
    assert spec["root"]["inputDefinitions"]["parameters"]["lr"]["parameterType"] == "NUMBER_DOUBLE"
    with pytest.raises(InvalidInput) as mistyped:
        compile_kfp(data_pipeline(), make_settings(), parameters={"epochs": "many"})
    assert mistyped.value.field == "parameters.epochs" and "int" in mistyped.value.message


def test_data_flow_is_typed_kfp_artifacts_between_tasks() -> None:
    spec, _ = documents(compile_kfp(data_pipeline(), make_settings()))
    outputs = spec["components"]["comp-step-prepare"]["outputDefinitions"]["artifacts"]
    assert {name: o["artifactType"]["schemaTitle"] for name, o in outputs.items()} == {
        "out_clf": "system.Model",
        "out_df": "system.Dataset",
        "out_note": "system.Artifact",
        "step_notebook": "system.Artifact",
    }
    report = spec["components"]["comp-step-report"]
    assert (
        report["outputDefinitions"]["artifacts"]["step_metrics"]["artifactType"]["schemaTitle"]
        == "system.Metrics"
    )
    assert report["inputDefinitions"]["artifacts"]["in_clf"]["artifactType"]["schemaTitle"] == "system.Model"
    wired = tasks(spec)["report"]["inputs"]["artifacts"]
    assert wired["in_df"] == {
        "taskOutputArtifact": {"outputArtifactKey": "out_df", "producerTask": "step-prepare"}
    }
    assert tasks(spec)["report"]["dependentTasks"] == ["step-prepare"]
    args = executors(spec)["report"]["args"]
    assert args[args.index("--input-file") + 1 : args.index("--input-file") + 3] == [
        "clf",
        "{{$.inputs.artifacts['in_clf'].path}}",
    ]
    at = args.index("step_metrics")
    assert args[at + 1 : at + 3] == [
        "{{$.outputs.artifacts['step_metrics'].path}}",
        "{{$.outputs.artifacts['step_metrics'].uri}}",
    ]
    assert "{{$.pipeline_job_uuid}}" in args and "{{$.outputs.output_file}}" in args


def test_each_task_runs_the_step_runner_on_its_own_part_of_the_pipeline() -> None:
    pipeline = data_pipeline()
    spec, _ = documents(compile_kfp(pipeline, make_settings()))
    report = executors(spec)["report"]
    assert report["image"] == RUNTIME_IMAGE
    assert report["command"] == ["python", "-m", "cube_jupyter.pipelines.runner"]
    document = json.loads(report["args"][report["args"].index("--pipeline-json") + 1])
    assert [s["name"] for s in document["steps"]] == ["report"]
    assert document["edges"] == [
        {"upstream": "prepare", "downstream": "report", "variables": ["clf", "df", "note"]}
    ]
    assert report["args"][report["args"].index("--code-hash") + 1] == code_hash(
        pipeline, pipeline.step("report")
    )


def test_the_code_hash_follows_the_steps_code_only() -> None:
    pipeline = data_pipeline()
    prepare, report = pipeline.steps
    changed = replace(pipeline, steps=(replace(prepare, source=("df = 1",)), report))
    assert code_hash(changed, changed.steps[0]) != code_hash(pipeline, prepare)
    assert code_hash(changed, changed.steps[1]) == code_hash(pipeline, report)
    assert code_hash(replace(pipeline, imports=("import numpy",)), report) != code_hash(pipeline, report)


def test_resources_gpu_placement_retries_timeout_and_caching() -> None:
    settings = make_settings(
        CubePipelines={
            "images_with_runtime": ["registry.example.com/ml/"],
            "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
            "gpu_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "retry_backoff_seconds": 7,
        },
    )
    pipeline = fan_out_fan_in(cache=False)
    spec, platform = documents(compile_kfp(pipeline, settings))
    train_a = executors(spec)["train-a"]
    accelerator = train_a["resources"]["accelerator"]
    assert (accelerator["resourceCount"], accelerator["resourceType"]) == ("2", "nvidia.com/gpu")
    evaluate = executors(spec)["evaluate"]["resources"]
    assert evaluate["cpuRequest"] == evaluate["cpuLimit"] == 0.5 and evaluate["memoryLimit"] == 1.073741824
    assert tasks(spec)["train-a"]["retryPolicy"] == {
        "backoffDuration": "7s",
        "backoffFactor": 2.0,
        "backoffMaxDuration": "3600s",
        "maxRetryCount": 3,
    }
    assert tasks(spec)["prepare"]["cachingOptions"] == {}  # cache: false
    assert tasks(spec)["report"]["cachingOptions"] == {"enableCache": True}
    config = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-step-train-a"]
    assert config["nodeSelector"] == {"labels": {"nvidia.com/gpu.present": "true"}}
    assert config["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    assert config["activeDeadlineSeconds"] == "31"  # 30.5 s, rounded up, per attempt
    assert "exec-step-evaluate" not in platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors(spec)["train-b"]["image"] == "registry.example.com/ml/xgb:1.7"


def test_an_image_without_the_runtime_is_refused_naming_the_step_and_the_wheelhouse_trait() -> None:
    with pytest.raises(PipelineError) as refused:
        compile_kfp(fan_out_fan_in(), make_settings())
    assert refused.value.field == "steps.train-b.image"
    assert "CubePipelines.kfp_runtime_wheels" in refused.value.message


def test_an_image_without_the_runtime_installs_it_from_the_imported_wheelhouse_first() -> None:
    settings = make_settings(CubePipelines={"kfp_runtime_wheels": "s3://ml-artifacts/cube/wheels/"})
    spec, _ = documents(compile_kfp(fan_out_fan_in(), settings))
    importers = [e for e in spec["deploymentSpec"]["executors"].values() if "importer" in e]
    assert importers == [
        {
            "importer": {
                "artifactUri": {"constant": "s3://ml-artifacts/cube/wheels"},
                "typeSchema": {"schemaTitle": "system.Artifact", "schemaVersion": "0.0.1"},
            }
        }
    ]  # one for the pipeline; no `reimport: true`, so KFP reuses the artifact of that URI
    importer = spec["root"]["dag"]["tasks"]["importer"]
    assert importer["taskInfo"] == {"name": "cube-runtime-wheels"}
    train_b = tasks(spec)["train-b"]
    assert train_b["inputs"]["artifacts"][RUNTIME_INPUT] == {
        "taskOutputArtifact": {"outputArtifactKey": "artifact", "producerTask": "importer"}
    }
    assert "importer" in train_b["dependentTasks"]
    command = executors(spec)["train-b"]["command"]
    assert command == [
        "sh",
        "-c",
        BOOTSTRAP,
        "cube-runtime",
        "{{$.inputs.artifacts['cube_runtime'].path}}",
        "python",
        "-m",
        "cube_jupyter.pipelines.runner",
    ]
    # Steps in images with cube-jupyter run the runner as before, with no wheelhouse.
    assert executors(spec)["prepare"]["command"] == ["python", "-m", "cube_jupyter.pipelines.runner"]
    assert RUNTIME_INPUT not in tasks(spec)["prepare"].get("inputs", {}).get("artifacts", {})


def test_the_bootstrap_script_is_a_constant_the_steps_values_reach_only_as_arguments() -> None:
    hostile = "$(touch /tmp/owned)'; `id`"
    pipeline = replace(
        fan_out_fan_in(),
        parameters=(Parameter("title", hostile, repr(hostile)),),
        parameters_source=f"title = {hostile!r}",
    )
    settings = make_settings(
        CubePipelines={
            "kfp_runtime_wheels": "s3://ml-artifacts/cube/wheels",
            "runner_command": ["python", "-m", "cube_jupyter.pipelines.runner", "--x=$(id)"],
        }
    )
    spec, _ = documents(compile_kfp(pipeline, settings))
    container = executors(spec)["train-b"]
    assert container["command"][2] == BOOTSTRAP and container["command"][-1] == "--x=$(id)"
    for value in (hostile, "train-b", "ml-artifacts", "$(id)", "runner"):
        assert value not in BOOTSTRAP
    assert BOOTSTRAP.splitlines()[-1] == 'exec "$@"'
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert parameters["title"]["defaultValue"] == hostile  # a value of the run, not of the script


@pytest.mark.parametrize("value", ["/data/wheels", "https://example.com/wheels", "s3://"])
def test_a_bad_wheelhouse_location_is_a_config_error_naming_the_trait(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make_settings(CubePipelines={"kfp_runtime_wheels": value})
    assert refused.value.field == "CubePipelines.kfp_runtime_wheels"


def test_a_parameter_named_like_the_wheelhouse_input_is_refused() -> None:
    pipeline = replace(fan_out_fan_in(), parameters=(Parameter(RUNTIME_INPUT, 1, "1"),), parameters_source="")
    settings = make_settings(CubePipelines={"kfp_runtime_wheels": "gs://ml-artifacts/cube/wheels"})
    with pytest.raises(PipelineError) as clash:
        compile_kfp(pipeline, settings)
    assert clash.value.field == f"parameters.{RUNTIME_INPUT}"


def test_bad_steps_are_refused_naming_the_field() -> None:
    lonely = replace(fan_out_fan_in(), steps=(step("a", after=("ghost",)),), edges=())
    with pytest.raises(PipelineError) as ghost:
        compile_kfp(lonely, make_settings())
    assert ghost.value.field == "steps.a.after"
    reserved = replace(
        data_pipeline(), parameters=(Parameter("step_notebook", 1, "1"),), parameters_source=""
    )
    with pytest.raises(PipelineError) as clash:
        compile_kfp(reserved, make_settings())
    assert clash.value.field == "parameters.step_notebook"
    # a step changing a parameter or a value in place hands it on under the same name
    handed_on = replace(
        data_pipeline(),
        steps=(
            replace(data_pipeline().steps[0], outputs=("clf", "df", "lr", "note")),
            replace(data_pipeline().steps[1], inputs=("clf", "df", "lr", "note"), outputs=("df", "score")),
        ),
        edges=(Edge("prepare", "report", ("clf", "df", "lr", "note")),),
    )
    spec, _ = documents(compile_kfp(handed_on, make_settings()))
    report = spec["components"]["comp-step-report"]
    assert {"lr", "in_lr"} <= set(report["inputDefinitions"]["parameters"]) | set(
        report["inputDefinitions"]["artifacts"]
    )
    assert {"in_df", "out_df"} <= set(report["inputDefinitions"]["artifacts"]) | set(
        report["outputDefinitions"]["artifacts"]
    )
    with pytest.raises(PipelineError) as empty:
        compile_kfp(replace(data_pipeline(), steps=(), edges=()), make_settings())
    assert empty.value.field == "steps"
    timed = replace(fan_out_fan_in(timeout=-1), steps=fan_out_fan_in(timeout=-1).steps[:1], edges=())
    with pytest.raises(PipelineError) as timeout:
        compile_kfp(timed, make_settings())
    assert timeout.value.field == "steps.prepare.timeout"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("v = pd.read_csv('a.csv').dropna()", "Dataset"),
        ("v = np.zeros(3)", "Dataset"),
        ("a, v = train_test_split(x)", "Dataset"),
        ("v = LogisticRegression(C=1)", "Model"),
        ("v = est.fit(x, y)", "Model"),
        ("v = torch.nn.Linear(2, 2)", "Model"),
        ("v = {'a': 1}", "Artifact"),
        ("v = len(x)", "Artifact"),
        ("v = np.zeros(3)\nv = str(v)", "Artifact"),  # the last assignment decides
    ],
)
def test_artifact_types_follow_what_the_marshaller_will_write(code: str, expected: str) -> None:
    imports = (
        "import numpy as np\nimport pandas as pd\nimport torch\n"
        "from sklearn.model_selection import train_test_split\n"
        "from sklearn.linear_model import LogisticRegression",
    )
    pipeline = replace(data_pipeline(), imports=imports)
    assert artifact_type(pipeline, replace(pipeline.steps[0], source=(code,)), "v") == expected

"""A peer corpus of notebooks written the way Kale's users write them: our pipelines must run a notebook
tagged for Kale (kubeflow/kale) as it is, and give what running it top to bottom gives.

`kale_corpus/` holds notebooks in the image of Kale's own examples — candies sharing, Titanic, iris
with scikit-learn and XGBoost, base_example_numpy, taxi-cab classification, OpenVaccine, Kale's
pipeline-parameters-and-metrics test notebook, a Katib-tuned classifier and dog-breed (GPU) — each
saying in its first markdown cell which of Kale's tags and habits it exercises: `block:`/`step:`
names and empty continuation tags, `prev:` chains, fan-out and fan-in, `imports`, `functions`,
`pipeline-parameters`, `pipeline-metrics` in `print(name)` form, `skip` cells (followed by untagged
cells, or carrying a `prev:`), the `for dataset in [train_df, test_df]` alias pattern, code before the
first tag, resource/image/pod-metadata/cache tags and the `kubeflow_notebook` metadata. Data are tiny
files under `kale_corpus/data/` or scikit-learn's bundled sets: no network.

Each notebook's last step prints `RESULT name json` lines (its `report` helper): run as a pipeline
by the local executor they must equal the lines of a top-to-bottom run in one kernel. The expected
warnings are listed per notebook, so a tag that starts being dropped silently, or a new noisy
warning on ordinary Kale code, fails here.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.local import gpus
from cube_jupyter.pipelines.dag import build_pipeline, load_notebook
from cube_jupyter.pipelines.local.target import _require_gpus
from cube_jupyter.pipelines.model import Pipeline, StepOptions
from tests.pipelines.executing import Env, executor_env, printed, run_in_order

pytestmark = pytest.mark.timeout(600)

CORPUS = Path(__file__).resolve().parent / "kale_corpus"
RESULT = re.compile(r"^RESULT \S+ .*$", re.MULTILINE)
DATA_LIMIT = 60 * 1024  # bytes of data files the corpus may carry
EXPERIMENT_NAME = (  # Kale's editor writes an experiment name into every notebook it saves
    "metadata.kubeflow_notebook.experiment_name is ignored: runs are kept in the notebook's run history"
)


def code_before_first_tag(cell: int) -> str:
    return (
        f"cell {cell} has code before the first tagged cell, so no step runs it: tag it 'step:NAME' to "
        "make it a step, or 'imports', 'functions' or 'parameters'"
    )


@dataclass(frozen=True)
class Expected:
    """What one corpus notebook must give: the step printing its RESULT lines, the graph's warnings
    (in order), the run's metric names, the data files each reading step's cache key saw, and the
    pipeline's name (the file's, unless Kale's `pipeline_name` gives one)."""

    last: str
    name: str
    warnings: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    files: dict[str, tuple[str, ...]] = field(default_factory=dict)


RUNNABLE: dict[str, Expected] = {
    "candies_sharing": Expected(
        "share",
        "candies-sharing",
        # cell 1 holds a comment only (nothing to run), cell 2 a print and an assignment nothing reads
        warnings=(code_before_first_tag(2),),
        metrics=("left", "kid1_count", "SACK_SIZE"),
    ),
    "titanic_ml": Expected(
        "results",
        "titanic-ml",
        warnings=("cell 6 is a skip cell, so its tags 'prev:loaddata' are ignored",),
        files={"loaddata": ("data/titanic_test.csv", "data/titanic_train.csv")},
    ),
    "iris_sklearn_xgboost": Expected(
        "evaluate", "iris-sklearn-xgboost", metrics=("forest_accuracy", "xgboost_accuracy", "N_ESTIMATORS")
    ),
    "base_example_numpy": Expected("combine", "base-example-numpy", warnings=(EXPERIMENT_NAME,)),
    "taxi_cab_classification": Expected(
        "prediction",
        "taxi-cab-classification",
        metrics=("accuracy", "C"),
        files={"data-validation": ("data/taxi_trips.csv",)},
    ),
    "openvaccine": Expected(
        "model-evaluation",
        "openvaccine",
        metrics=("validation_loss", "ALPHA"),
        files={"load-data": ("data/openvaccine_train.json",)},
    ),
    "pipeline_parameters_and_metrics": Expected(
        "final", "pipeline-parameters-and-metrics", metrics=("score", "ratio", "a")
    ),
    "wine_katib": Expected(
        "pick-best",
        "wine-tuning",
        warnings=(
            EXPERIMENT_NAME,
            "metadata.kubeflow_notebook.katib_run is ignored: tune with a tuning job (Jobs panel) instead",
        ),
        metrics=("accuracy",),
    ),
}
GPU_NOTEBOOK = "dog_breed"  # graph only: its training step asks for a GPU this machine may not have


def build(path: Path) -> Pipeline:
    return build_pipeline(load_notebook(path), str(path))


def corpus_pipeline(name: str) -> Pipeline:
    return build(CORPUS / f"{name}.ipynb")


def result_lines(text: str) -> list[str]:
    return RESULT.findall(text)


def reported(lines: list[str]) -> dict[str, object]:
    return {name: json.loads(value) for name, value in (line.split(" ", 2)[1:] for line in lines)}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One pool of kernel workers for the module; the corpus copied next to its store and state, so
    that no run writes into the repository."""
    folder = tmp_path_factory.mktemp("kale-corpus")
    shutil.copytree(CORPUS, folder / "kale_corpus")
    with executor_env(folder) as env:
        yield env


def test_the_corpus_is_a_set_of_small_python_notebooks_that_say_what_they_exercise() -> None:
    names = sorted(path.stem for path in CORPUS.glob("*.ipynb"))
    assert names == sorted([*RUNNABLE, GPU_NOTEBOOK])
    for name in names:
        nb = nbformat.read(str(CORPUS / f"{name}.ipynb"), as_version=4)
        nbformat.validate(nb)
        assert nb.nbformat == 4, name
        assert nb.metadata.kernelspec.name == "python3", name
        assert nb.metadata.kernelspec.language == "python", name
        assert nb.cells[0].cell_type == "markdown" and "Exercises:" in nb.cells[0].source, name
        assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), name
    data = [path for path in (CORPUS / "data").rglob("*") if path.is_file()]
    assert sum(path.stat().st_size for path in data) < DATA_LIMIT


@pytest.mark.parametrize("name", list(RUNNABLE))
def test_a_kale_notebook_runs_as_a_pipeline_as_it_runs_top_to_bottom(env: Env, name: str) -> None:
    expected = RUNNABLE[name]
    path = env.folder / "kale_corpus" / f"{name}.ipynb"
    pipeline = build(path)
    assert [w.message for w in pipeline.warnings] == list(expected.warnings)
    assert pipeline.name == expected.name
    assert pipeline.steps[-1].name == expected.last
    assert list(pipeline.metrics) == list(expected.metrics)

    with ThreadPoolExecutor(1) as side:  # the top-to-bottom run uses what the pipeline leaves idle
        top_to_bottom = side.submit(run_in_order, path)
        run = env.run(pipeline)
        in_order = result_lines(printed(top_to_bottom.result()))
    assert run.status == "succeeded", (run.error, [(s.name, s.status, s.error) for s in run.steps])
    assert all(step.status == "succeeded" for step in run.steps)
    got = result_lines(env.step_text(run.step(expected.last).notebook))
    assert in_order, "the notebook reports nothing"
    assert got == in_order

    assert sorted(run.metrics) == sorted(expected.metrics)
    values = reported(in_order)
    defaults = {parameter.name: parameter.default for parameter in pipeline.parameters}
    for metric, value in run.metrics.items():
        want = defaults[metric] if metric in defaults else values[metric]
        assert value == pytest.approx(want, abs=1e-6), metric
    for step, files in expected.files.items():
        assert tuple(run.step(step).files) == files, step


def test_the_corpus_graphs_keep_kales_chains_fan_outs_and_skip_cells() -> None:
    candies = corpus_pipeline("candies_sharing")
    assert [(s.name, s.after) for s in candies.steps] == [
        ("sack", ()),
        ("kid1", ("sack",)),
        ("kid2", ("kid1",)),
        ("kid3", ("kid2",)),
        ("share", ("kid1", "kid2", "kid3")),  # `prev:kid1:kid2:kid3`, early Kale's form
    ]
    # the helper empties part of the sack in place: each kid hands the lighter sack on
    assert [candies.step(kid).outputs for kid in ("kid1", "kid2", "kid3")] == [
        ("kid1", "rng", "sack"),
        ("kid2", "rng", "sack"),
        ("kid3", "sack"),
    ]
    assert candies.step("sack").cells == (6, 7)  # not the untagged cells 1 and 2 before any tag

    titanic = corpus_pipeline("titanic_ml")
    models = ("decisiontree", "logisticregression", "naivebayes", "randomforest", "svm")
    for model in models:
        assert titanic.step(model).after == ("featureengineering",)
    assert titanic.step("results").after == tuple(sorted([*models, "featureengineering"]))
    # skip cells 6, 7 and 10 are in no step; the untagged NaN-filling cells 11-14 after the skipped
    # plot cell stay in datapreprocessing
    assert titanic.step("datapreprocessing").cells == (9, 11, 12, 13, 14)
    assert {6, 7, 10}.isdisjoint(cell for step in titanic.steps for cell in step.cells)
    # cells 17-19 name the step they continue (`block:featureengineering`): they stay in it, silently
    assert titanic.step("featureengineering").cells == (16, 17, 18, 19, 20)
    # the `for dataset in data` loops change both frames in place: later steps take the changed ones
    assert titanic.step("datapreprocessing").outputs == ("test_df", "train_df")
    assert titanic.step("featureengineering").inputs == ("test_df", "train_df")

    iris = corpus_pipeline("iris_sklearn_xgboost")
    assert [s.name for s in iris.steps] == [
        "load-data",
        "split-data",
        "train-forest",
        "train-xgboost",
        "evaluate",
    ]
    assert iris.step("evaluate").after == ("split-data", "train-forest", "train-xgboost")
    assert iris.step("train-xgboost").inputs == ("dtrain",)  # xgboost's DMatrix, handed on
    assert "dtest" in iris.step("evaluate").inputs

    numpy_example = corpus_pipeline("base_example_numpy")
    # empty `block:`/`step:` tags and untagged cells continue the step above
    assert [(s.name, s.cells) for s in numpy_example.steps] == [
        ("create-matrix", (4, 5)),
        ("sum-matrix", (6, 7, 8)),
        ("normalize", (9, 10)),
        ("combine", (11, 12)),
    ]
    assert numpy_example.step("combine").inputs == ("col_sums", "matrix", "row_sums", "scaled", "total")

    vaccine = corpus_pipeline("openvaccine")
    assert len(vaccine.functions) == 2  # the untagged cell after `functions` is a functions cell too


def test_kale_options_and_notebook_defaults_reach_every_step() -> None:
    numpy_example = corpus_pipeline("base_example_numpy")
    owner, team = {"owner": "kale-corpus"}, {"team": "ml"}  # steps_defaults: on every step
    assert {s.name: s.options for s in numpy_example.steps} == {
        "create-matrix": StepOptions(
            image="python:3.11", memory="2Gi", annotations=owner, labels={**team, "stage": "create"}
        ),
        "sum-matrix": StepOptions(
            image="python:3.11",
            memory="2Gi",
            annotations={**owner, "note": "row-and-column-sums"},  # from an empty `block:` cell
            labels=team,
        ),
        "normalize": StepOptions(image="python:3.11-slim", memory="2Gi", annotations=owner, labels=team),
        "combine": StepOptions(image="python:3.11", memory="2Gi", annotations=owner, labels=team),
    }

    iris = corpus_pipeline("iris_sklearn_xgboost")
    assert iris.step("load-data").options == StepOptions(memory="1Gi")
    assert iris.step("split-data").options == StepOptions(cpu="1")
    assert iris.step("train-xgboost").options == StepOptions(cache=False)
    assert iris.step("train-forest").options == StepOptions()

    taxi = corpus_pipeline("taxi_cab_classification")
    assert taxi.step("train").options == StepOptions(cpu="1", memory="1Gi")
    assert taxi.step("data-validation").options == StepOptions(labels={"stage": "validate"})
    assert taxi.step("data-transformation").options == StepOptions(
        annotations={"description": "tf-transform-in-pandas"}
    )
    assert corpus_pipeline("openvaccine").step("model-training").options == StepOptions(cache=False)

    wine = corpus_pipeline("wine_katib")  # steps_defaults: limit:cpu:1; an empty docker_image: none
    assert {s.name: s.options for s in wine.steps} == {
        "load-wine-data": StepOptions(cpu="1"),
        "scale": StepOptions(cpu="1"),
        "knn": StepOptions(cpu="1", labels={"model": "knn"}),
        "svc": StepOptions(cpu="1", labels={"model": "svc"}),
        "logreg": StepOptions(cpu="1", labels={"model": "logreg"}),
        "pick-best": StepOptions(cpu="1"),
    }


def test_a_kale_gpu_step_is_refused_locally_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dog-breed's `limit:nvidia.com/gpu:1` training step: recorded on the step, and a local run on a
    machine without a GPU is refused naming the step, never run on the CPU."""
    pipeline = corpus_pipeline(GPU_NOTEBOOK)
    assert [w.message for w in pipeline.warnings] == [
        "metadata.kubeflow_notebook.volumes is ignored: steps read and write the run's artifact store",
        EXPERIMENT_NAME,
    ]
    image = "gcr.io/arrikto/jupyter-kale-py38:latest"
    assert pipeline.step("train-resnet").options == StepOptions(image=image, memory="4Gi", gpu=1)
    assert [s.options.gpu for s in pipeline.steps] == [0, 0, 1, 0]

    monkeypatch.setattr(gpus, "visible_gpu_ids", lambda environ=None: [])
    with pytest.raises(InvalidInput) as caught:
        _require_gpus(pipeline)
    assert caught.value.field == "steps.train-resnet.gpu"
    assert "asks for 1 GPU(s)" in caught.value.message and "this machine has 0" in caught.value.message

    monkeypatch.setattr(gpus, "visible_gpu_ids", lambda environ=None: ["0"])
    _require_gpus(pipeline)  # one GPU is enough


def test_kales_parameters_reach_the_steps_and_their_metrics(env: Env) -> None:
    """Kale's pipeline-parameters-and-metrics notebook run with `a` overridden: the steps compute
    from the new value and the metrics (the parameter among them) record it."""
    pipeline = build(env.folder / "kale_corpus" / "pipeline_parameters_and_metrics.ipynb")
    run = env.run(pipeline, {"a": 5})
    assert run.status == "succeeded", run.error
    x = 5 * 4.5
    y, z = x**2, math.sqrt(x) + len("kalekale")
    assert run.metrics == pytest.approx({"a": 5, "score": y + z, "ratio": y / z})

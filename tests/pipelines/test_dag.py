"""Notebook → Pipeline: loading, edges, ordering, parameters, errors, JSON, and the shipped examples.

The strongest check runs each example's steps one at a time in a fresh IPython namespace, given only
the shared cells and the inputs the analysis names (as pickled copies, as the runner will), and
compares the metrics with running the whole notebook top to bottom.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import cloudpickle
import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell

from cube_jupyter.pipelines.dag import build_pipeline, load_notebook, pipeline_name
from cube_jupyter.pipelines.model import GraphWarning, Pipeline, PipelineError, pipeline_from_dict
from cube_jupyter.pipelines.stepnb import validate_parameters
from tests.pipelines.notebooks import (
    FANOUT_ML,
    KALE_TAGGED,
    OPTIONS_AND_MAGICS,
    code,
    markdown,
    notebook,
    write,
)


def build(*cells: Any, path: str = "nb.ipynb") -> Pipeline:
    return build_pipeline(notebook(*cells), path)


def edges(pipeline: Pipeline) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(e.upstream, e.downstream, e.variables) for e in pipeline.edges]


# --- load_notebook -------------------------------------------------------------------------------


def test_load_notebook_reads_a_v4_notebook(tmp_path: Path) -> None:
    path = write(notebook(code("x = 1", "step:a")), tmp_path / "ok.ipynb")
    nb = load_notebook(path)
    assert nb.nbformat == 4
    assert nb.cells[0].metadata.tags == ["step:a"]
    assert load_notebook(str(path)).cells[0].source == "x = 1"


def test_a_notebook_whose_cells_have_no_ids_reads_without_a_warning_and_is_left_as_it_is(
    tmp_path: Path,
) -> None:
    """An older tool's 4.5 notebook: nbformat warns of each missing id (MissingIDFieldWarning) unless
    the cells get ids first; they get them in memory only."""
    content = json.dumps(
        {
            "cells": [{"cell_type": "code", "execution_count": None, "metadata": {"tags": ["step:a"]},
                       "outputs": [], "source": "x = 1"}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
        }
    )  # fmt: skip
    path = tmp_path / "old.ipynb"
    path.write_text(content)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nb = load_notebook(path)
    assert nb.cells[0].id and nb.cells[0].source == "x = 1"
    assert path.read_text() == content


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"cells": [', "not valid JSON"),
        (b"", "not valid JSON"),
        (b'{"a": 1}', "not a Jupyter notebook"),
        (b"[1, 2]", "not a Jupyter notebook"),
        (b'{"cells": [{"cell_type": "code"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "not a"),
        (b"\xff\xfe\x00garbage", "not UTF-8|not valid JSON"),
    ],
)
def test_load_notebook_rejects_files_that_are_not_notebooks(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.ipynb"
    path.write_bytes(content)
    with pytest.raises(PipelineError, match=message) as err:
        load_notebook(path)
    assert err.value.field == "path"
    assert str(path) in err.value.message


def test_load_notebook_names_a_missing_file_or_a_directory(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="does not exist") as err:
        load_notebook(tmp_path / "nope.ipynb")
    assert err.value.field == "path"
    with pytest.raises(PipelineError, match="is a directory"):
        load_notebook(tmp_path)


def test_load_notebook_upgrades_nbformat_3(tmp_path: Path) -> None:
    v3 = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {},
        "worksheets": [
            {
                "cells": [
                    {
                        "cell_type": "code",
                        "input": "x = 1",
                        "language": "python",
                        "outputs": [],
                        "metadata": {"tags": ["step:only"]},
                    }
                ]
            }
        ],
    }
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(v3))
    pipeline = build_pipeline(load_notebook(path), str(path))
    assert [s.name for s in pipeline.steps] == ["only"]


# --- build_pipeline ------------------------------------------------------------------------------


def test_fan_out_and_fan_in_with_variables_on_each_edge() -> None:
    pipeline = build(
        code("import math", "imports"),
        code("rows = list(range(10))", "step:load"),
        code("evens = [r for r in rows if r % 2 == 0]", "step:left"),
        code("odds = [r for r in rows if r % 2]", "step:right"),
        code("total = sum(evens) + sum(odds) + math.pi", "step:join"),
    )
    assert [s.name for s in pipeline.steps] == ["load", "left", "right", "join"]
    assert edges(pipeline) == [
        ("load", "left", ("rows",)),
        ("load", "right", ("rows",)),
        ("left", "join", ("evens",)),
        ("right", "join", ("odds",)),
    ]
    join = pipeline.step("join")
    assert join.after == ("left", "right") and join.inputs == ("evens", "odds") and join.outputs == ()
    assert pipeline.step("load").outputs == ("rows",)
    assert pipeline.upstream_of("left") == ("load",)


def test_after_adds_an_ordering_only_edge() -> None:
    pipeline = build(code("a = 1", "step:one"), code("b = 2", "step:two", "after:one"))
    assert edges(pipeline) == [("one", "two", ())]
    assert pipeline.step("two").after == ("one",) and pipeline.step("two").inputs == ()


def test_after_merges_with_a_data_edge() -> None:
    pipeline = build(code("a = 1", "step:one"), code("b = a", "step:two", "prev:one"))
    assert edges(pipeline) == [("one", "two", ("a",))]


def test_after_may_point_forward_and_reorders_the_steps() -> None:
    pipeline = build(
        code("a = 1", "step:first", "after:last"),
        code("b = 2", "step:middle"),
        code("c = 3", "step:last"),
    )
    assert [s.name for s in pipeline.steps] == ["middle", "last", "first"]
    assert edges(pipeline) == [("last", "first", ())]


def test_independent_steps_keep_notebook_order() -> None:
    pipeline = build(*(code(f"v{i} = {i}", f"step:s{i}") for i in range(6)))
    assert [s.name for s in pipeline.steps] == [f"s{i}" for i in range(6)]
    assert pipeline.edges == ()


def test_unknown_after_target_names_the_step_and_lists_the_steps() -> None:
    with pytest.raises(PipelineError, match="no step is named 'lod'") as err:
        build(code("a = 1", "step:load"), code("b = a", "step:train", "after:lod"))
    assert err.value.field == "steps.train.after"
    assert "steps: load, train" in err.value.message


def test_cycles_are_named() -> None:
    with pytest.raises(PipelineError) as err:
        build(code("x = 1", "step:a", "after:c"), code("y = x", "step:b"), code("z = y", "step:c"))
    assert "a -> b -> c -> a" in err.value.message
    assert err.value.field == "steps.b.after"
    with pytest.raises(PipelineError, match="cycle: a -> a"):
        build(code("x = 1", "step:a", "after:a"))
    with pytest.raises(PipelineError, match="cycle: a -> b -> a"):
        build(code("x = 1", "step:a", "after:b"), code("y = 1", "step:b", "after:a"))


def test_a_syntax_error_names_the_cell() -> None:
    with pytest.raises(PipelineError, match=r"cells\[2\] has a syntax error at line 1") as err:
        build(code("a = 1", "step:a"), markdown("text"), code("b = (", "step:b"))
    assert err.value.field == "cells[2]"


def test_a_syntax_error_in_a_shared_cell_is_reported_too() -> None:
    with pytest.raises(PipelineError, match=r"cells\[0\]"):
        build(code("import (", "imports"), code("a = 1", "step:a"))


def test_warnings_name_the_cell_and_step() -> None:
    pipeline = build(code("a = 1", "step:one"), markdown("m"), code("b = a + missing", "step:two"))
    assert pipeline.warnings == (
        GraphWarning("cell 2 (step 'two') uses 'missing', defined in no upstream step", 2),
    )


def test_parameters_literals_expressions_and_json() -> None:
    pipeline = build(
        code(
            "lr = 0.01\nname: str = 'adam'\nlayers = (64, 32)\nflags = {1, 2}\nsteps = 10 * 3\n"
            "a, b = 1, 'two'\nc, d = pair\nneg = -1\nnothing = None\nopts = {'k': [1, True]}\n"
            "big = 1e999\nlr = 0.02",
            "parameters",
        ),
        code("x = lr", "step:one"),
    )
    by_name = {p.name: p for p in pipeline.parameters}
    assert [p.name for p in pipeline.parameters] == [
        "lr", "name", "layers", "flags", "steps", "a", "b", "c", "d", "neg", "nothing", "opts", "big",
    ]  # fmt: skip
    assert (by_name["lr"].default, by_name["lr"].default_source) == (0.02, "0.02")
    assert by_name["name"].default == "adam" and by_name["name"].default_source == "'adam'"
    assert by_name["layers"].default == [64, 32]
    assert (by_name["flags"].default, by_name["flags"].default_source) == (None, "{1, 2}")
    assert (by_name["steps"].default, by_name["steps"].default_source) == (None, "10 * 3")
    assert (by_name["a"].default, by_name["b"].default) == (1, "two")
    assert (by_name["c"].default, by_name["c"].default_source) == (None, "")
    assert by_name["neg"].default == -1 and by_name["nothing"].default is None
    assert by_name["opts"].default == {"k": [1, True]}
    assert by_name["big"].default is None  # inf is not JSON
    assert pipeline.parameters_source.startswith("lr = 0.01\n")
    assert pipeline.step("one").inputs == ()


def test_a_whole_number_given_to_a_float_parameter_stays_a_float() -> None:
    """The panel sends JSON, which has one kind of number: `C = 1.0` set to 2 must run with 2.0."""
    pipeline = build(code("C = 1.0\nn = 3\nflag = False", "parameters"), code("x = C", "step:one"))
    given = validate_parameters(pipeline, {"C": 2, "n": 4, "flag": True})
    assert given == {"C": 2.0, "n": 4, "flag": True}
    assert isinstance(given["C"], float) and isinstance(given["n"], int)


def test_several_parameters_cells_are_joined_and_an_untagged_cell_continues_them() -> None:
    pipeline = build(
        code("a = 1", "parameters"),
        code("b = 2"),
        code("x = a + b", "step:one"),
        code("c = 3", "pipeline-parameters"),
    )
    assert [p.name for p in pipeline.parameters] == ["a", "b", "c"]
    assert pipeline.parameters_source == "a = 1\n\nb = 2\n\nc = 3"


def test_to_dict_is_json_and_round_trips() -> None:
    pipeline = build_pipeline(
        load_notebook(OPTIONS_AND_MAGICS), "examples/pipelines/options_and_magics.ipynb"
    )
    data = json.loads(json.dumps(pipeline.to_dict(), allow_nan=False))
    assert data["name"] == "options-and-magics"
    assert data["kernel_name"] == "python3"
    generate = data["steps"][0]
    assert generate["name"] == "generate"
    assert generate["options"] == {
        "image": None, "cpu": "500m", "memory": "512Mi", "gpu": 0, "retries": 1, "timeout": 60.0,
        "cache": True, "annotations": {}, "labels": {}, "queue": None, "priority": None,
    }  # fmt: skip
    assert pipeline_from_dict(data) == pipeline
    assert {"upstream": "stats", "downstream": "checkpoint", "variables": []} in data["edges"]
    assert data["metrics"] == ["total"]


def test_kales_pipeline_name_names_the_pipeline() -> None:
    nb = notebook(code("a = 1", "step:a"))
    nb.metadata["kubeflow_notebook"] = {"pipeline_name": "Iris Pipeline", "docker_image": ""}
    assert build_pipeline(nb, "work/iris.ipynb").name == "iris-pipeline"
    nb.metadata["kubeflow_notebook"]["pipeline_name"] = "  "
    assert build_pipeline(nb, "work/iris.ipynb").name == "iris"


def test_the_kernel_name_comes_from_the_notebook() -> None:
    nb = notebook(code("a = 1", "step:a"), kernel="python3.11-ml")
    assert build_pipeline(nb, "x.ipynb").kernel_name == "python3.11-ml"
    del nb.metadata["kernelspec"]
    assert build_pipeline(nb, "x.ipynb").kernel_name == "python3"


def test_notebooks_in_other_languages_are_rejected() -> None:
    nb = notebook(code("x <- 1", "step:a"))
    nb.metadata["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    with pytest.raises(PipelineError, match="only Python notebooks") as err:
        build_pipeline(nb, "x.ipynb")
    assert err.value.field == "metadata.kernelspec"


def test_skipped_cells_are_not_parsed() -> None:
    pipeline = build(code("a = 1", "step:a"), code("this is not python", "skip"), code("b = a", "step:b"))
    assert [s.cells for s in pipeline.steps] == [(0,), (2,)]


def test_code_nested_too_deeply_is_an_error_naming_the_cell() -> None:
    deep = "x = " + "+".join(["a"] * 20000)
    with pytest.raises(PipelineError, match="nested too deeply") as err:
        build(code("a = 1", "step:a"), code(deep, "step:b"))
    assert err.value.field == "cells[1]"


def test_a_plain_dict_notebook_is_accepted_and_validated() -> None:
    raw = json.loads(nbformat.writes(notebook(code("a = 1", "step:a"))))
    assert build_pipeline(raw, "x.ipynb").steps[0].name == "a"
    with pytest.raises(PipelineError, match="no cells list") as err:
        build_pipeline({"cells": "nope"}, "x.ipynb")
    assert err.value.field == "path"


def test_the_notebook_is_not_modified() -> None:
    nb = nbformat.read(str(FANOUT_ML), as_version=4)
    before = copy.deepcopy(nb)
    build_pipeline(nb, str(FANOUT_ML))
    assert nb == before


@pytest.mark.parametrize(
    "path, name",
    [
        ("Train Model v2.ipynb", "train-model-v2"),
        ("work/dir/fanout_ml.ipynb", "fanout-ml"),
        ("___.ipynb", "pipeline"),
        ("x" * 80 + ".ipynb", "x" * 63),
        ("Ünïcode.IPYNB", "n-code"),
    ],
)
def test_pipeline_names_are_dns_labels_from_the_file_name(path: str, name: str) -> None:
    assert pipeline_name(path) == name


def test_step_cells_and_sources_keep_notebook_indices_and_magics() -> None:
    pipeline = build(
        markdown("intro"),
        code("%%time\na = 1", "step:a"),
        code("!echo hi"),
        code("b = a", "step:b"),
    )
    step = pipeline.step("a")
    assert step.cells == (1, 2) and step.source == ("%%time\na = 1", "!echo hi")
    assert pipeline.step("b").inputs == ("a",)


# --- the shipped examples ------------------------------------------------------------------------


def test_fanout_example_graph() -> None:
    pipeline = build_pipeline(load_notebook(FANOUT_ML), str(FANOUT_ML))
    assert [s.name for s in pipeline.steps] == [
        "load",
        "numeric-features",
        "city-features",
        "train",
        "evaluate",
    ]
    assert edges(pipeline) == [
        ("load", "numeric-features", ("raw",)),
        ("load", "city-features", ("raw",)),
        ("load", "train", ("labels",)),
        ("numeric-features", "train", ("numeric_features",)),
        ("city-features", "train", ("city_features",)),
        ("train", "evaluate", ("X_test", "model", "y_test")),
    ]
    assert [p.name for p in pipeline.parameters] == ["n_samples", "test_size", "C", "seed"]
    assert pipeline.metrics == ("accuracy", "f1")
    assert pipeline.step("evaluate").outputs == ("accuracy", "f1")
    assert not pipeline.warnings


def test_kale_example_graph() -> None:
    pipeline = build_pipeline(load_notebook(KALE_TAGGED), str(KALE_TAGGED))
    assert [s.name for s in pipeline.steps] == ["load-data", "prepare-data", "train-model", "evaluate-model"]
    assert edges(pipeline) == [
        ("load-data", "prepare-data", ("X", "y")),
        ("prepare-data", "train-model", ("x_train", "y_train")),
        ("prepare-data", "evaluate-model", ("x_test", "y_test")),
        ("train-model", "evaluate-model", ("model",)),
    ]
    assert pipeline.metrics == ("rmse", "r2")
    assert [p.name for p in pipeline.parameters] == ["ALPHA", "TEST_FRACTION", "SEED"]
    assert all(6 not in s.cells for s in pipeline.steps)  # the skip cell
    assert not pipeline.warnings


def test_options_example_graph() -> None:
    pipeline = build_pipeline(load_notebook(OPTIONS_AND_MAGICS), str(OPTIONS_AND_MAGICS))
    assert [s.name for s in pipeline.steps] == ["generate", "stats", "normalize", "checkpoint", "report"]
    assert pipeline.step("normalize").inputs == ("weights",)
    assert pipeline.step("report").inputs == ("summary", "values", "weights")
    assert pipeline.step("report").after == ("generate", "normalize", "stats")
    assert pipeline.step("stats").options.timeout == 30.0
    assert not pipeline.warnings


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    return InteractiveShell.instance()


def run_cells(shell: InteractiveShell, sources: list[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Run cells in a fresh IPython namespace holding only `namespace`; raise on the first error."""
    shell.reset(new_session=False)
    shell.user_ns.update(namespace)
    for source in sources:
        shell.run_cell(source, store_history=False, silent=True).raise_error()
    return shell.user_ns


def run_top_to_bottom(shell: InteractiveShell, path: Path) -> dict[str, Any]:
    cells = [c.source for c in load_notebook(path).cells if c.cell_type == "code"]
    return dict(run_cells(shell, cells, {}))


def run_step_by_step(shell: InteractiveShell, pipeline: Pipeline) -> dict[tuple[str, str], bytes]:
    """Each step alone: shared cells, then its inputs unpickled from the step the edge names."""
    store: dict[tuple[str, str], bytes] = {}
    shared = [*pipeline.imports, *pipeline.functions, pipeline.parameters_source]
    for step in pipeline.steps:
        inputs = {}
        for edge in pipeline.edges:
            if edge.downstream == step.name:
                for name in edge.variables:
                    inputs[name] = cloudpickle.loads(store[(edge.upstream, name)])
        assert set(inputs) == set(step.inputs)
        namespace = run_cells(shell, [*shared, "pass"], {})  # the shared cells first, as the runner does
        namespace.update(inputs)
        for source in step.source:
            shell.run_cell(source, store_history=False, silent=True).raise_error()
        for name in step.outputs:
            store[(step.name, name)] = cloudpickle.dumps(shell.user_ns[name])
    return store


def metric_values(pipeline: Pipeline, store: dict[tuple[str, str], bytes]) -> dict[str, Any]:
    """Each metric from the last step in notebook order that outputs it."""
    producers = sorted(pipeline.steps, key=lambda s: s.cells[0])
    return {
        name: cloudpickle.loads(store[(step.name, name)])
        for name in pipeline.metrics
        for step in producers
        if name in step.outputs
    }


@pytest.mark.parametrize("path", [FANOUT_ML, KALE_TAGGED, OPTIONS_AND_MAGICS], ids=lambda p: p.stem)
def test_examples_step_by_step_match_a_top_to_bottom_run(shell: InteractiveShell, path: Path) -> None:
    pipeline = build_pipeline(load_notebook(path), str(path))
    whole = run_top_to_bottom(shell, path)
    expected = {name: whole[name] for name in pipeline.metrics}
    assert metric_values(pipeline, run_step_by_step(shell, pipeline)) == expected


def test_tricky_semantics_step_by_step_match_a_top_to_bottom_run(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    """In-place changes, augmented assignment, del, loops, shared functions, parameter overrides."""
    make = "items = [1, 2]\ncounts = {'a': 1}\nclass Box:\n    pass\nbox = Box()\nmodel = LinearRegression()"
    grow = (
        "items.append(n)\ncounts['a'] += 1\nbox.size = len(items)\nn = n * 2\nmodel.fit([[1], [2]], [2, 4])"
    )
    add = "total = 0\nfor i in items:\n    total += scaled(i)\nmaybe = None\nif total > 5:\n    maybe = total"
    report = (
        "label = f'{total}-{maybe}-{counts[\"a\"]}-{box.size}-{sample}-{n}'\n"
        "squares = [x * x for x in sample]\n"
        "coef = round(float(model.coef_[0]), 6)"
    )
    nb = notebook(
        code("import random\nfrom sklearn.linear_model import LinearRegression", "imports"),
        code("def scaled(v):\n    return v * factor", "functions"),
        code("factor = 3\nn = 5", "parameters"),
        code(make, "step:make"),
        code(grow, "step:grow"),
        code(add, "step:sum"),
        code("random.seed(n)\nsample = sorted(random.sample(items, 2))\ndel items", "step:pick"),
        code(report, "step:report"),
        code("label\nsquares\ntotal\ncoef", "metrics"),
    )
    path = write(nb, tmp_path / "tricky.ipynb")
    pipeline = build_pipeline(load_notebook(path), str(path))
    assert pipeline.step("sum").inputs == ("items",)
    assert pipeline.step("report").inputs == ("box", "counts", "maybe", "model", "n", "sample", "total")
    assert not pipeline.warnings
    whole = run_top_to_bottom(shell, path)
    expected = {name: whole[name] for name in pipeline.metrics}
    assert metric_values(pipeline, run_step_by_step(shell, pipeline)) == expected

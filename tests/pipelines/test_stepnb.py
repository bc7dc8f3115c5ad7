"""The notebook a step runs: parameters first, shared code, inputs, the user's cells verbatim,
outputs; generated code only ever embeds plain data."""

from __future__ import annotations

import ast

import nbformat
import pytest

from cube_jupyter.pipelines.model import Edge, PipelineError
from cube_jupyter.pipelines.stepnb import META, StepContext, build_step_notebook, input_keys
from tests.pipelines.steps import LINEAR, TRAIN, pipeline, step


def roles(nb: nbformat.NotebookNode) -> list[str]:
    return [cell.metadata[META]["role"] for cell in nb.cells]


def test_cell_order_and_roles() -> None:
    keys = input_keys(LINEAR, TRAIN, "r1")
    assert keys == {"total": "runs/r1/outputs/prepare/total", "x": "runs/r1/outputs/prepare/x"}
    nb = build_step_notebook(LINEAR, "train", StepContext("file:///tmp/store", "r1", keys))
    nbformat.validate(nb)
    assert roles(nb) == ["parameters", "imports", "functions", "load-inputs", "cell", "save-outputs"]
    assert nb.cells[0].metadata["tags"] == ["parameters"]
    assert nb.cells[0].source == LINEAR.parameters_source
    assert nb.cells[4].source == TRAIN.source[0]
    assert nb.cells[4].metadata[META]["source_index"] == 5
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_first_step_has_no_load_cell() -> None:
    nb = build_step_notebook(LINEAR, "prepare", StepContext("file:///s", "r1"))
    assert roles(nb) == ["parameters", "imports", "functions", "cell", "cell", "save-outputs"]
    assert [c.metadata[META].get("source_index") for c in nb.cells if c.metadata[META]["role"] == "cell"] == [
        2,
        3,
    ]


def test_generated_code_embeds_only_literals() -> None:
    """A hostile store URL or key cannot turn into code: each is one string literal argument."""
    url = "file:///tmp/a'b\"c\n__import__('os').system('x')"
    nb = build_step_notebook(LINEAR, "train", StepContext(url, "r1", {"total": "k'1", "x": "k\n2"}))
    for cell in nb.cells:
        if cell.metadata[META]["role"] not in ("load-inputs", "save-outputs"):
            continue
        tree = ast.parse(cell.source)
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
        assert {ast.unparse(c.func) for c in calls} <= {
            "_cube_runtime.load_inputs",
            "_cube_runtime.save_outputs",
            "globals",
        }
        for call in calls:
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                assert isinstance(arg, ast.Constant | ast.Dict | ast.List | ast.Call), ast.dump(arg)
        assert url in [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]


def test_non_identifier_variables_are_refused() -> None:
    bad = pipeline(step("a", {0: "pass"}, outputs=("x; import os",)))
    with pytest.raises(PipelineError) as caught:
        build_step_notebook(bad, "a", StepContext("file:///s", "r1"))
    assert "x; import os" in caught.value.message


def test_unknown_step_and_missing_input_key() -> None:
    with pytest.raises(PipelineError) as caught:
        build_step_notebook(LINEAR, "nope", StepContext("file:///s", "r1"))
    assert caught.value.field == "step" and "prepare, train" in caught.value.message
    with pytest.raises(PipelineError) as caught:
        build_step_notebook(LINEAR, "train", StepContext("file:///s", "r1", {"x": "k"}))
    assert "total" in caught.value.message


def test_input_without_an_edge_is_an_error() -> None:
    orphan = pipeline(
        step("a", {0: "pass"}), step("b", {1: "print(y)"}, inputs=("y",)), edges=(Edge("a", "b", ()),)
    )
    with pytest.raises(PipelineError) as caught:
        input_keys(orphan, orphan.step("b"), "r1")
    assert "'y'" in caught.value.message

"""Build the notebook one step runs: parameters, imports, functions, load inputs, the step's own
cells as written, save outputs.

Every generated cell carries `metadata.cube_jupyter.role` (and the step's cells their index in the
source notebook) so the runner can map an error back to the user's cell. Generated code holds only
plain data written with repr(), and names that are checked to be Python identifiers.
"""

from __future__ import annotations

import json
import keyword
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cube_jupyter.errors import InvalidInput
from cube_jupyter.pipelines.model import Pipeline, PipelineError, Step

if TYPE_CHECKING:  # nbformat loads when a notebook is built: the step runner's `main` comes first
    from nbformat import NotebookNode

META = "cube_jupyter"
RUNTIME = "cube_jupyter.pipelines.runtime"  # what a step notebook's generated cells import


@dataclass(frozen=True)
class StepContext:
    """Where a step reads and writes: the store's URL, the run, and the key of each input."""

    store_url: str
    run_id: str
    inputs: Mapping[str, str] = field(default_factory=dict)  # variable → store key

    def outputs_prefix(self, step: str) -> str:
        return f"runs/{self.run_id}/outputs/{step}"


def output_key(run_id: str, step: str, name: str) -> str:
    return f"runs/{run_id}/outputs/{step}/{name}"


def notebook_key(run_id: str, step: str) -> str:
    return f"runs/{run_id}/steps/{step}.ipynb"


def check_identifier(name: object, field_name: str) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise PipelineError(f"{field_name}: {name!r} is not a Python variable name", field=field_name)
    return name


def validate_parameters(pipeline: Pipeline, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters a run may set: those the notebook's parameters cell declares, with JSON values. A
    whole number for a float parameter (`C = 1.0`) is a float: JSON, and so the panel, has one kind
    of number."""
    declared = {p.name: p.default for p in pipeline.parameters}
    checked = {}
    for name, value in parameters.items():
        check_identifier(name, f"parameters.{name}")
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none: the notebook has no parameters cell"
            raise InvalidInput(
                f"parameter {name!r} is not declared in the notebook's parameters cell (declared: {known})",
                field=f"parameters.{name}",
            )
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidInput(
                f"parameter {name!r} must be a JSON value (number, string, bool, null, list, object)",
                field=f"parameters.{name}",
            ) from None
        is_int = isinstance(value, int) and not isinstance(value, bool)
        checked[name] = float(value) if is_int and isinstance(declared[name], float) else value
    return checked


def input_keys(pipeline: Pipeline, step: Step, run_id: str) -> dict[str, str]:
    """Where each input of `step` is in this run: the output of the upstream step whose edge carries it."""
    keys = {}
    for name in step.inputs:
        upstream = [e.upstream for e in pipeline.edges if e.downstream == step.name and name in e.variables]
        if not upstream:
            raise PipelineError(
                f"step {step.name!r} needs {name!r}, but no upstream edge carries it",
                field=f"steps.{step.name}.inputs",
            )
        keys[name] = output_key(run_id, upstream[0], name)
    return keys


def _cell(source: str, role: str, **extra: object) -> NotebookNode:
    from nbformat.v4 import new_code_cell

    cell = new_code_cell(source)
    cell.metadata[META] = {"role": role, **extra}
    return cell


def step_metrics(pipeline: Pipeline, step: Step) -> list[str]:
    """The metrics `step` records. A metric is recorded where the linker hands it on from (the step
    that made or last changed it: `linking.metric`), and a parameter as this run set it (Kale records
    those too)."""
    parameter_names = {p.name for p in pipeline.parameters}
    return [m for m in pipeline.metrics if m in step.outputs or m in parameter_names]


def build_step_notebook(pipeline: Pipeline, step_name: str, context: StepContext) -> NotebookNode:
    """The step notebook for `step_name`; `context.inputs` must name every input of the step."""
    from nbformat.v4 import new_notebook

    try:
        step = pipeline.step(step_name)
    except KeyError:
        raise PipelineError(
            f"pipeline {pipeline.name!r} has no step {step_name!r}; steps: "
            + ", ".join(s.name for s in pipeline.steps),
            field="step",
        ) from None
    for name in (*step.inputs, *step.outputs, *pipeline.metrics):
        check_identifier(name, f"steps.{step.name}.variables")
    missing = sorted(set(step.inputs) - set(context.inputs))
    if missing:
        raise PipelineError(f"no store key for input(s) {missing} of step {step.name!r}", field="inputs")

    parameters = _cell(pipeline.parameters_source, "parameters")
    parameters.metadata["tags"] = ["parameters"]
    cells = [parameters]
    cells += [_cell(code, "imports") for code in pipeline.imports]
    cells += [_cell(code, "functions") for code in pipeline.functions]
    if step.inputs:
        inputs = {name: context.inputs[name] for name in step.inputs}
        lines = [
            "# Inputs from upstream steps (generated by cube-jupyter)",
            f"import {RUNTIME} as _cube_runtime",
            f"_cube_inputs = _cube_runtime.load_inputs({context.store_url!r}, {inputs!r})",
            *(f"{name} = _cube_inputs[{name!r}]" for name in step.inputs),
            "del _cube_inputs",
        ]
        cells.append(_cell("\n".join(lines), "load-inputs"))
    for index, code in zip(step.cells, step.source, strict=True):
        cells.append(_cell(code, "cell", source_index=index))
    metrics = step_metrics(pipeline, step)
    save = [
        "# Outputs for downstream steps (generated by cube-jupyter)",
        f"import {RUNTIME} as _cube_runtime",
        f"_cube_runtime.save_outputs({context.store_url!r}, {context.outputs_prefix(step.name)!r}, "
        f"{list(step.outputs)!r}, globals(), step={step.name!r}, metrics={metrics!r})",
    ]
    cells.append(_cell("\n".join(save), "save-outputs"))

    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": pipeline.kernel_name,
        "language": "python",
        "display_name": "Python 3",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata[META] = {
        "pipeline": pipeline.name,
        "path": pipeline.path,
        "step": step.name,
        "run_id": context.run_id,
    }
    return nb

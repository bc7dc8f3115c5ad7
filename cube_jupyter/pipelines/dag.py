"""Notebook → `Pipeline`: read the file, lay out steps by tags, link them by data flow, order them.

`load_notebook` reads and validates the .ipynb; `build_pipeline` never modifies it. Edges are the
data-flow edges (`dataflow.resolve`) plus explicit `after:` edges; an `after:` naming an unknown step
or closing a cycle is a PipelineError (data flow alone only ever points forward in notebook order,
so every cycle goes through an `after:`). Steps come out in a topological order that keeps notebook
order among steps free to run in either order.
"""

from __future__ import annotations

import ast
import heapq
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode
from nbformat.corpus.words import generate_corpus_id
from nbformat.reader import NotJSONError

from cube_jupyter.names import DNS1123_LABEL_MAX
from cube_jupyter.pipelines.datafiles import file_literals
from cube_jupyter.pipelines.dataflow import metric_names, parse_cell
from cube_jupyter.pipelines.linking import StepCode, resolve
from cube_jupyter.pipelines.model import Edge, GraphWarning, Parameter, Pipeline, PipelineError, Step
from cube_jupyter.pipelines.tags import KALE_METADATA, Layout, split_cells

DEFAULT_KERNEL = "python3"


def load_notebook(path: str | Path) -> NotebookNode:
    """Read an .ipynb file as nbformat 4; PipelineError (field "path") if missing or not a notebook."""
    where = str(path)
    try:
        with open(path, encoding="utf-8") as handle:  # validated below, once its cells have ids
            notebook = nbformat.convert(nbformat.reader.reads(handle.read()), 4)
    except FileNotFoundError:
        raise PipelineError(f"notebook {where!r} does not exist", field="path") from None
    except IsADirectoryError:
        raise PipelineError(f"{where!r} is a directory, not a notebook", field="path") from None
    except PermissionError:
        raise PipelineError(f"notebook {where!r} cannot be read: permission denied", field="path") from None
    except UnicodeDecodeError:
        raise PipelineError(f"notebook {where!r} is not UTF-8 text", field="path") from None
    except (NotJSONError, json.JSONDecodeError) as exc:
        raise PipelineError(
            f"notebook {where!r} is not valid JSON: {_first_line(exc)}", field="path"
        ) from None
    except Exception as exc:  # nbformat raises assorted errors for JSON that isn't a notebook
        raise PipelineError(
            f"{where!r} is not a Jupyter notebook: {_first_line(exc)}", field="path"
        ) from None
    return _validated(notebook, where, "path")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _validated(notebook: Any, where: str, field: str) -> NotebookNode:
    if not isinstance(notebook, Mapping) or not isinstance(notebook.get("cells"), list):
        raise PipelineError(f"{where!r} is not a Jupyter notebook (no cells list)", field=field)
    node = nbformat.from_dict(notebook)
    _give_cells_ids(node)
    try:
        nbformat.validate(node)
    except nbformat.ValidationError as exc:
        raise PipelineError(f"{where!r} is not a valid notebook: {_first_line(exc)}", field=field) from None
    return node


def _give_cells_ids(node: NotebookNode) -> None:
    """Give cells without an id one, in memory (the user's file is left as it is): nbformat 4.5
    notebooks have them, but one an older tool wrote may not, and nbformat would warn
    (MissingIDFieldWarning) on every read; its `normalize` warns as well."""
    if (node.get("nbformat", 0), node.get("nbformat_minor", 0)) < (4, 5):
        return
    for cell in node.cells:
        if isinstance(cell, dict) and "id" not in cell:
            cell["id"] = generate_corpus_id()


def pipeline_name(path: str, metadata: Mapping[str, Any] | None = None) -> str:
    """A DNS-1123 label: the name Kale's settings give the pipeline (`kubeflow_notebook.pipeline_name`),
    else the notebook's file name: "Train Model v2.ipynb" → "train-model-v2"."""
    kale = (metadata or {}).get(KALE_METADATA)
    given = kale.get("pipeline_name") if isinstance(kale, Mapping) else None
    if isinstance(given, str) and _label(given):
        return _label(given)
    stem = Path(path).name
    stem = stem[: -len(".ipynb")] if stem.lower().endswith(".ipynb") else stem
    return _label(stem) or "pipeline"


def _label(text: str) -> str:
    label = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return label[:DNS1123_LABEL_MAX].rstrip("-")


def parse_parameters(cells: Sequence[tuple[int, str]]) -> tuple[Parameter, ...]:
    """Top-level assignments of the parameters cells, papermill's way; a later one wins, in place."""
    found: dict[str, Parameter] = {}
    for index, source in cells:
        for statement in parse_cell(source, f"cells[{index}]").body:
            for name, value in _assignments(statement):
                found[name] = _parameter(name, value, source)
    return tuple(found.values())


def _assignments(statement: ast.stmt) -> list[tuple[str, ast.expr | None]]:
    """(name, value expression) for `a = 1`, `a: int = 1`, `a = b = 1`, `a, b = 1, 2`."""
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
        return [(statement.target.id, statement.value)]
    if not isinstance(statement, ast.Assign):
        return []
    pairs: list[tuple[str, ast.expr | None]] = []
    for target in statement.targets:
        if isinstance(target, ast.Name):
            pairs.append((target.id, statement.value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            value = statement.value
            values: list[ast.expr | None] = [None] * len(target.elts)
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                values = list(value.elts)
            for element, element_value in zip(target.elts, values, strict=True):
                if isinstance(element, ast.Name):
                    pairs.append((element.id, element_value))
    return pairs


def _parameter(name: str, value: ast.expr | None, source: str) -> Parameter:
    if value is None:
        return Parameter(name, None, "")
    text = ast.get_source_segment(source, value) or ast.unparse(value)
    try:
        default = _json_value(ast.literal_eval(value))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        default = None
    return Parameter(name, default, text)


def _json_value(value: Any) -> Any:
    """The literal as JSON (tuples become lists); None when JSON cannot hold it (sets, bytes, nan)."""
    if isinstance(value, tuple):
        value = list(value)
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return None


def _find_cycle(nodes: Sequence[str], upstream: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle as [a, b, ..., a] following edges downstream, or None."""
    downstream: dict[str, list[str]] = {name: [] for name in nodes}
    for name in nodes:
        for parent in upstream[name]:
            downstream[parent].append(name)
    state: dict[str, int] = {}  # 1 on the DFS stack, 2 done
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for child in downstream[name]:
            if state.get(child) == 1:
                return [*stack[stack.index(child) :], child]
            if child not in state and (cycle := visit(child)):
                return cycle
        stack.pop()
        state[name] = 2
        return None

    for name in nodes:
        if name not in state and (cycle := visit(name)):
            return cycle
    return None


def _topological(nodes: Sequence[str], upstream: Mapping[str, Sequence[str]]) -> list[str]:
    """Kahn's algorithm, taking the earliest step in notebook order whenever several are ready."""
    position = {name: i for i, name in enumerate(nodes)}
    waiting = {name: len(set(upstream[name])) for name in nodes}
    children: dict[str, list[str]] = {name: [] for name in nodes}
    for name in nodes:
        for parent in set(upstream[name]):
            children[parent].append(name)
    ready = [position[name] for name in nodes if waiting[name] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = nodes[heapq.heappop(ready)]
        order.append(name)
        for child in children[name]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, position[child])
    return order


def _python_kernel(metadata: Mapping[str, Any]) -> str:
    """The kernelspec name (default "python3"); a notebook in another language cannot be analysed."""
    kernelspec = metadata.get("kernelspec")
    kernelspec = kernelspec if isinstance(kernelspec, Mapping) else {}
    language_info = metadata.get("language_info")
    language_info = language_info if isinstance(language_info, Mapping) else {}
    language = kernelspec.get("language") or language_info.get("name") or "python"
    if not isinstance(language, str) or language.lower() != "python":
        raise PipelineError(
            f"only Python notebooks can run as pipelines; this one's kernel language is {language!r}",
            field="metadata.kernelspec",
        )
    name = kernelspec.get("name")
    return name if isinstance(name, str) and name else DEFAULT_KERNEL


def _check_after(layout: Layout) -> None:
    names = [step.name for step in layout.steps]
    for step in layout.steps:
        for target in step.after:
            if target not in names:
                raise PipelineError(
                    f"step {step.name!r} has 'after:{target}', but no step is named {target!r} "
                    f"(steps: {', '.join(names)})",
                    field=f"steps.{step.name}.after",
                )


def build_pipeline(
    nb: NotebookNode | Mapping[str, Any], path: str, *, content_field: str = "path"
) -> Pipeline:
    """The pipeline a notebook describes (see the module docstrings of tags, dataflow and this one).
    `content_field` names what a notebook that is no notebook came from: the file at `path`, or the
    content a request sent (`notebook`)."""
    notebook = nb if isinstance(nb, NotebookNode) else _validated(nb, path, content_field)
    metadata = notebook.get("metadata") or {}
    kernel = _python_kernel(metadata)
    layout = split_cells(list(notebook.get("cells", [])), metadata)
    _check_after(layout)
    metrics: list[tuple[str, int]] = []
    for index, source in layout.metrics:
        metrics += [(name, index) for name in metric_names(source, index)]
    steps_code = [
        StepCode(s.name, tuple(zip(s.cells, s.source, strict=True)), tuple(s.after)) for s in layout.steps
    ]
    shared = [*layout.imports, *layout.functions, *layout.parameters]
    shared.sort()
    flow = resolve(steps_code, shared, metrics)

    names = [step.name for step in layout.steps]
    upstream: dict[str, list[str]] = {name: [] for name in names}
    variables: dict[tuple[str, str], set[str]] = {}
    for (source, target), passed in flow.edges.items():
        upstream[target].append(source)
        variables[(source, target)] = set(passed)
    for step in layout.steps:
        for target in step.after:
            if target not in upstream[step.name]:
                upstream[step.name].append(target)
            variables.setdefault((target, step.name), set())
    cycle = _find_cycle(names, upstream)
    if cycle is not None:
        raise PipelineError(
            f"the steps form a cycle: {' -> '.join(cycle)}; remove one of the 'after:' tags",
            field=f"steps.{cycle[1]}.after",
        )
    order = _topological(names, upstream)
    rank = {name: i for i, name in enumerate(order)}
    by_name = {step.name: step for step in layout.steps}
    steps = tuple(
        Step(
            name=name,
            cells=tuple(by_name[name].cells),
            source=tuple(by_name[name].source),
            after=tuple(sorted(set(upstream[name]))),
            inputs=tuple(sorted(flow.inputs[name])),
            outputs=tuple(sorted(flow.outputs[name])),
            options=by_name[name].step_options(),
            files=file_literals(tuple(zip(by_name[name].cells, by_name[name].source, strict=True))),
        )
        for name in order
    )
    ordered = sorted(variables.items(), key=lambda item: (rank[item[0][1]], rank[item[0][0]]))
    edges = tuple(Edge(source, target, tuple(sorted(passed))) for (source, target), passed in ordered)
    return Pipeline(
        name=pipeline_name(path, metadata),
        path=path,
        steps=steps,
        edges=edges,
        imports=tuple(source for _, source in layout.imports),
        functions=tuple(source for _, source in layout.functions),
        parameters=parse_parameters(layout.parameters),
        parameters_source="\n\n".join(source for _, source in layout.parameters),
        metrics=tuple(dict.fromkeys(name for name, _ in metrics)),
        kernel_name=kernel,
        warnings=_warnings(layout.warnings + flow.warnings),
    )


def _warnings(found: list[GraphWarning]) -> tuple[GraphWarning, ...]:
    """Each warning once, by the cell it is about (notebook-wide ones first), then as found."""
    unique = list(dict.fromkeys(found))
    return tuple(sorted(unique, key=lambda w: -1 if w.cell is None else w.cell))

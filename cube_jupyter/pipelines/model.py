"""The typed pipeline a notebook becomes: steps, the edges between them, and what flows on each edge.

Built once from a notebook by `cube_jupyter.pipelines.dag.build_pipeline` (tags → steps → data flow →
DAG), then used unchanged by the step runner, the local executor, the Argo compiler, the REST API
and the CLI. The user's notebook is never modified.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from cube_jupyter.errors import InvalidInput


class PipelineError(InvalidInput):
    """The notebook is not a valid pipeline (cycle, unknown `after:`, duplicate step, bad JSON, ...).

    `field` names where: e.g. "cells[4].tags" or "steps.train.after"; the CLI exits 2 on it.
    """

    reason = "InvalidPipeline"


@dataclass(frozen=True)
class StepOptions:
    """Per-step resources and behaviour from `image:`, `cpu:`, `memory:`, `gpu:N`, `retries:N`,
    `timeout:SECONDS`, `cache:enabled|disabled` tags, the step pod's `annotation:` and `label:`
    tags (Kale's) and its Kueue `queue:`/`priority:`. None means the pipeline's default."""

    image: str | None = None
    cpu: str | None = None
    memory: str | None = None
    gpu: int = 0
    retries: int = 0
    timeout: float | None = None
    cache: bool = True
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    queue: str | None = None  # the step pod's Kueue LocalQueue, among CubeQueues.user_queues
    priority: str | None = None  # its WorkloadPriorityClass, among CubeQueues.user_priority_classes


@dataclass(frozen=True)
class GraphWarning:
    """Something about the notebook the user should see before a run: a name no step defines, a tag
    that is ignored, a value two branches may both change. `cell` is the notebook cell it is about
    (its index over all cells, as in `Step.cells`), where there is one."""

    message: str
    cell: int | None = None

    @classmethod
    def from_dict(cls, raw: Any) -> GraphWarning:
        """A warning as `to_dict` wrote it, or a bare message (pipeline documents before cells)."""
        if isinstance(raw, str):
            return cls(raw)
        cell = raw.get("cell")
        return cls(str(raw["message"]), int(cell) if cell is not None else None)


@dataclass(frozen=True)
class Step:
    """One pipeline step: the cells it runs, what it needs from upstream and what it hands on."""

    name: str
    cells: tuple[int, ...]  # indices of the source notebook's cells, in order
    source: tuple[str, ...]  # each cell's code, in order
    after: tuple[str, ...]  # upstream steps: explicit `after:` tags plus data-flow edges, sorted
    inputs: tuple[str, ...]  # variables loaded from upstream steps before the cells run, sorted
    outputs: tuple[str, ...]  # variables saved after the cells run, for downstream steps, sorted
    options: StepOptions = field(default_factory=StepOptions)
    files: tuple[str, ...] = ()  # string literals its code passes to calls: data files it may read


@dataclass(frozen=True)
class Edge:
    upstream: str
    downstream: str
    variables: tuple[str, ...]  # names passed along this edge (empty: an ordering-only `after:`)


@dataclass(frozen=True)
class Parameter:
    """A pipeline parameter from the `parameters` cell (papermill's convention)."""

    name: str
    default: Any  # the literal value in the cell (JSON-compatible), or None if not a literal
    default_source: str  # the right-hand side as written, e.g. "0.01" or "'adam'"


@dataclass(frozen=True)
class Pipeline:
    name: str  # DNS-1123 label derived from the notebook's file name
    path: str  # the notebook path as given
    steps: tuple[Step, ...]  # in a topological order (stable: notebook order among equals)
    edges: tuple[Edge, ...]
    imports: tuple[str, ...]  # code of `imports` cells, run at the top of every step
    functions: tuple[str, ...]  # code of `functions` cells, run after imports in every step
    parameters: tuple[Parameter, ...]
    parameters_source: str  # the parameters cell(s) code, for the step notebooks' parameters cell
    metrics: tuple[str, ...]  # names listed in `metrics` cells, recorded after the run
    kernel_name: str  # the notebook's kernelspec name (e.g. "python3")
    warnings: tuple[GraphWarning, ...] = ()

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def upstream_of(self, name: str) -> tuple[str, ...]:
        return self.step(name).after

    def to_dict(self) -> dict[str, Any]:
        """The JSON `cube-jupyter pipeline graph` prints and `/pipelines/graph` returns."""
        return asdict(self)


def pipeline_from_dict(raw: Any) -> Pipeline:
    """The Pipeline `Pipeline.to_dict()` produced (how a step pod gets it, as JSON).

    A malformed document raises PipelineError(field="pipeline") rather than a KeyError deep inside.
    """
    try:
        steps = tuple(
            Step(
                name=s["name"],
                cells=tuple(int(c) for c in s["cells"]),
                source=tuple(s["source"]),
                after=tuple(s["after"]),
                inputs=tuple(s["inputs"]),
                outputs=tuple(s["outputs"]),
                options=StepOptions(**s.get("options", {})),
                files=tuple(s.get("files", ())),
            )
            for s in raw["steps"]
        )
        return Pipeline(
            name=raw["name"],
            path=raw["path"],
            steps=steps,
            edges=tuple(Edge(e["upstream"], e["downstream"], tuple(e["variables"])) for e in raw["edges"]),
            imports=tuple(raw["imports"]),
            functions=tuple(raw["functions"]),
            parameters=tuple(Parameter(**p) for p in raw["parameters"]),
            parameters_source=raw["parameters_source"],
            metrics=tuple(raw["metrics"]),
            kernel_name=raw["kernel_name"],
            warnings=tuple(GraphWarning.from_dict(w) for w in raw.get("warnings", ())),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise PipelineError(
            f"not a pipeline document ({type(exc).__name__}: {exc}); use the JSON of `pipeline graph`",
            field="pipeline",
        ) from None

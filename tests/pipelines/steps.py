"""Pipelines built directly from the model, so runner tests do not depend on the tag parser."""

from __future__ import annotations

from cube_jupyter.pipelines.model import Edge, Parameter, Pipeline, Step, StepOptions


def step(
    name: str,
    cells: dict[int, str],
    after: tuple[str, ...] = (),
    inputs: tuple[str, ...] = (),
    outputs: tuple[str, ...] = (),
    timeout: float | None = None,
) -> Step:
    return Step(
        name,
        tuple(cells),
        tuple(cells.values()),
        after,
        inputs,
        outputs,
        StepOptions(timeout=timeout),
    )


def pipeline(*steps: Step, edges: tuple[Edge, ...] = (), path: str = "demo.ipynb") -> Pipeline:
    return Pipeline(
        name="demo",
        path=path,
        steps=steps,
        edges=edges,
        imports=("import math",),
        functions=("def double(v):\n    return 2 * v",),
        parameters=(Parameter("n", 4, "4"), Parameter("label", "base", "'base'")),
        parameters_source="n = 4\nlabel = 'base'",
        metrics=("score",),
        kernel_name="python3",
    )


# prepare (cells 2-3) → train (cell 5): x and total flow on the edge; train reports `score`.
PREPARE = step(
    "prepare",
    {2: "import numpy as np\nx = np.arange(n)", 3: "total = int(x.sum())\nprint('total', total, label)"},
    outputs=("total", "x"),
)
TRAIN = step(
    "train",
    {5: "score = double(float(total)) + math.sqrt(len(x))\nprint('score', score)"},
    after=("prepare",),
    inputs=("total", "x"),
    outputs=("score",),
)
LINEAR = pipeline(PREPARE, TRAIN, edges=(Edge("prepare", "train", ("total", "x")),))

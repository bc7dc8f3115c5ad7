"""Data flow is never silently wrong: a generated corpus of ways a step changes a value in place —
aliases, loops over containers, `inplace=True`, `setattr`, in-place numpy operations, the notebook's
own helper functions, comprehensions with side effects — each as a chain of steps (make it, change it)
read by one report step at the end. Run as a pipeline by the local executor, the report must print
what running the notebook top to bottom in one kernel prints, pattern by pattern."""

from __future__ import annotations

import re
from collections.abc import Iterator

import nbformat
import pytest

from cube_jupyter.pipelines.dag import build_pipeline, load_notebook
from tests.pipelines.executing import Env, executor_env, printed, run_in_order
from tests.pipelines.notebooks import code, notebook, write

pytestmark = pytest.mark.timeout(300)

IMPORTS = (
    "import heapq\nimport json\nimport operator\nimport random\nimport types\n\n"
    "import numpy as np\nimport pandas as pd"
)
FUNCTIONS = '''def show(name, value):
    """One comparable line per value: frames, arrays and namespaces as plain JSON."""
    if hasattr(value, "to_dict"):
        value = value.to_dict("list")
    elif hasattr(value, "tolist"):
        value = value.tolist()
    elif isinstance(value, list):
        value = [v.tolist() if hasattr(v, "tolist") else v for v in value]
    elif isinstance(value, types.SimpleNamespace):
        value = vars(value)
    print("RESULT", name, json.dumps(value, sort_keys=True, default=str))


def add_column(frame):
    frame["z"] = 1


def remember(value):
    history18.append(value)'''

# (id, what makes the values, what changes them, the names the report shows)
PATTERNS: list[tuple[str, str, str, tuple[str, ...]]] = [
    (
        "loop-over-dicts",
        "tr1 = {'x': [1]}\nte1 = {'x': [2]}",
        "for d in [tr1, te1]:\n    d['y'] = [0]",
        ("tr1", "te1"),
    ),
    (
        "loop-over-frames",
        "train2 = pd.DataFrame({'x': [1, 2]})\ntest2 = pd.DataFrame({'x': [3]})",
        "for d in [train2, test2]:\n    d['y'] = d['x'] * 2",
        ("train2", "test2"),
    ),
    ("enumerate", "frames3 = [[1], [2]]", "for i, f in enumerate(frames3):\n    f.append(i)", ("frames3",)),
    (
        "zip",
        "a4 = [1]\nb4 = [2]",
        "for p, q in zip([a4], [b4]):\n    p.append(10)\n    q.append(20)",
        ("a4", "b4"),
    ),
    ("assigned-alias", "x5 = [1]", "y5 = x5\ny5.append(2)", ("x5",)),
    ("item-alias", "table6 = {'a': [1]}", "col6 = table6['a']\ncol6.append(9)", ("table6",)),
    ("container-alias", "lst7 = [1]", "box7 = {'k': lst7}\nbox7['k'].append(2)", ("lst7",)),
    ("inplace-true", "df8 = pd.DataFrame({'a': [1.0, None]})", "df8.fillna(0, inplace=True)", ("df8",)),
    (
        "inplace-through-a-loop",
        "df9a = pd.DataFrame({'a': [1], 'b': [2]})\ndf9b = pd.DataFrame({'a': [3], 'b': [4]})",
        "for d in (df9a, df9b):\n    d.drop(columns=['b'], inplace=True)",
        ("df9a", "df9b"),
    ),
    ("setattr", "obj10 = types.SimpleNamespace(a=1)", "setattr(obj10, 'b', 2)", ("obj10",)),
    ("numpy-augmented", "arr11 = np.zeros(3)", "arr11 += 1", ("arr11",)),
    ("numpy-slice", "arr12 = np.zeros(3)", "arr12[:] = 5", ("arr12",)),
    ("numpy-out", "arr13 = np.ones(3)", "np.multiply(arr13, 3, out=arr13)", ("arr13",)),
    ("numpy-copyto", "dst14 = np.zeros(2)", "np.copyto(dst14, np.array([7.0, 8.0]))", ("dst14",)),
    ("arrays-in-a-loop", "arrs15 = [np.ones(2), np.zeros(2)]", "for a in arrs15:\n    a += 1", ("arrs15",)),
    ("shared-helper", "df16 = pd.DataFrame({'a': [1]})", "add_column(df16)", ("df16",)),
    ("step-helper", "cfg17 = {'a': 1}", "def tag(d):\n    d['tagged'] = True\n\ntag(cfg17)", ("cfg17",)),
    ("helper-changing-a-global", "history18 = []", "remember(5)", ("history18",)),
    ("comprehension", "rows19 = [[1], [2]]", "_ = [r.append(0) for r in rows19]", ("rows19",)),
    ("sort", "lst20 = [3, 1, 2]", "lst20.sort()", ("lst20",)),
    ("dict-update", "cfg21 = {'a': 1}", "cfg21.update(b=2)", ("cfg21",)),
    ("nested-attribute", "ns22 = types.SimpleNamespace(items=[1])", "ns22.items.append(2)", ("ns22",)),
    ("heapq", "h23 = [3, 1, 2]", "heapq.heapify(h23)", ("h23",)),
    (
        "unknown-call-in-an-ancestor",
        "d24 = {}",
        "n24 = operator.setitem(d24, 'k', 1) or len(d24)",
        ("d24", "n24"),
    ),
    ("seeded-shuffle", "perm25 = list(range(6))", "random.Random(0).shuffle(perm25)", ("perm25",)),
    (
        "loc-through-an-alias",
        "df26 = pd.DataFrame({'a': [1, 2]})",
        "view26 = df26\nview26.loc[0, 'a'] = 99",
        ("df26",),
    ),
    ("del-through-an-alias", "d27 = {'a': 1, 'b': 2}", "alias27 = d27\ndel alias27['a']", ("d27",)),
    ("extend-in-a-loop", "groups28 = [[1], [2]]", "for g in groups28:\n    g += [0]", ("groups28",)),
]
RESULT = re.compile(r"^RESULT (\S+) (.*)$", re.MULTILINE)


def corpus_notebook() -> nbformat.NotebookNode:
    cells = [code(IMPORTS, "imports"), code(FUNCTIONS, "functions")]
    for index, (_, make, change, _shown) in enumerate(PATTERNS):
        cells.append(code(make, f"step:make-{index}"))
        cells.append(code(change, f"step:change-{index}"))
    report = [f"show({name!r}, {name})" for *_, shown in PATTERNS for name in shown]
    cells.append(code("\n".join(report), "step:report"))
    return notebook(*cells)


def results(text: str) -> dict[str, str]:
    return dict(RESULT.findall(text))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with executor_env(tmp_path_factory.mktemp("mutations")) as env:
        yield env


def test_the_pipeline_reports_what_running_the_notebook_in_order_reports(env: Env) -> None:
    path = write(corpus_notebook(), env.folder / "mutations.ipynb")
    pipeline = build_pipeline(load_notebook(path), str(path))
    assert pipeline.warnings == ()
    for index, (pattern, _, _, shown) in enumerate(PATTERNS):  # each change hands its values on
        assert set(shown) <= set(pipeline.step("report").inputs), pattern
        assert f"change-{index}" in pipeline.step("report").after, pattern

    expected = results(printed(run_in_order(path)))
    assert len(expected) == sum(len(shown) for *_, shown in PATTERNS)
    run = env.run(pipeline, parallel=2)
    assert run.status == "succeeded", run.error
    got = results(env.step_text(run.step("report").notebook))
    wrong = {
        pattern: {name: (got.get(name), expected[name]) for name in shown if got.get(name) != expected[name]}
        for pattern, _, _, shown in PATTERNS
    }
    assert {pattern: diff for pattern, diff in wrong.items() if diff} == {}


def test_two_branches_that_may_both_change_a_value_a_join_reads_are_named() -> None:
    """Steps that only read data still run side by side; where both may change it (an unknown call
    on it), the join that reads it gets the later branch's value and a warning naming both."""
    nb = notebook(
        code("import numpy as np", "imports"),
        code("data = np.arange(4.0)", "step:load"),
        code("left = np.sum(data)", "step:left"),
        code("right = float(data.max())", "step:right"),
        code("scaled_a = normalize(data)", "step:scale-a"),
        code("scaled_b = normalize(data)", "step:scale-b"),
        code("print(left, right, scaled_a, scaled_b, data)", "step:join"),
        code("def normalize(values):\n    return values", "skip"),
    )
    pipeline = build_pipeline(nb, "branches.ipynb")
    after = {step.name: step.after for step in pipeline.steps}
    assert after["left"] == after["right"] == after["scale-a"] == after["scale-b"] == ("load",)
    assert pipeline.step("join").inputs == ("data", "left", "right", "scaled_a", "scaled_b")
    assert ("scale-b", "join", ("data", "scaled_b")) in [
        (e.upstream, e.downstream, e.variables) for e in pipeline.edges
    ]
    [warning] = [w for w in pipeline.warnings if "may both change" in w.message]
    assert warning.cell == 6
    assert "'scale-a' and 'scale-b'" in warning.message and "after:scale-a" in warning.message


def test_branches_drawing_from_one_generator_take_turns_as_running_in_order_does() -> None:
    """Each draw moves a generator's state on: the second branch draws after the first."""
    nb = notebook(
        code("import numpy as np", "imports"),
        code("rng = np.random.default_rng(0)", "block:load"),
        code("a = float(rng.normal())", "block:left", "prev:load"),
        code("b = float(rng.normal())", "block:right", "prev:load"),
        code("print(a, b)", "block:join", "prev:left", "prev:right"),
    )
    pipeline = build_pipeline(nb, "draws.ipynb")
    assert pipeline.step("right").after == ("left", "load")
    assert pipeline.step("right").inputs == ("rng",) and "rng" in pipeline.step("left").outputs
    assert pipeline.warnings == ()


def test_a_change_through_a_container_an_earlier_step_filled_is_named() -> None:
    """The frames in `data` and `train_df` are saved and loaded apart: changing them through `data`
    in a later step cannot reach `train_df`, so the graph says so where it happens."""
    nb = notebook(
        code("import pandas as pd", "imports"),
        code(
            "train_df = pd.DataFrame({'a': [1]})\ntest_df = pd.DataFrame({'a': [2]})\n"
            "data = [train_df, test_df]",
            "block:load",
        ),
        code("for dataset in data:\n    dataset['b'] = dataset['a'] * 10", "block:prep", "prev:load"),
        code("print(sorted(train_df.columns))", "block:report", "prev:prep"),
    )
    [warning] = build_pipeline(nb, "detached.ipynb").warnings
    assert warning.cell == 2
    assert warning.message.startswith(
        "cell 2 (step 'prep') changes 'data' in place, which holds 'test_df', 'train_df'"
    )
    assert "fill 'data' in this step" in warning.message
    nb.cells[2].source = "data = [train_df, test_df]\n" + nb.cells[2].source  # filled where it is changed
    pipeline = build_pipeline(nb, "detached.ipynb")
    assert pipeline.warnings == ()
    assert pipeline.step("report").inputs == ("train_df",) and "prep" in pipeline.step("report").after

"""Static data flow: what a piece of code reads, defines and modifies, and how steps are linked."""

from __future__ import annotations

import pytest

from cube_jupyter.pipelines.dataflow import CodeFlow, analyze, metric_names
from cube_jupyter.pipelines.linking import StepCode, resolve
from cube_jupyter.pipelines.model import PipelineError


def flow(source: str) -> CodeFlow:
    return analyze([(0, source)])


def reads(source: str) -> set[str]:
    return set(flow(source).reads)


def defines(source: str) -> set[str]:
    return set(flow(source).defines)


@pytest.mark.parametrize(
    "source, read, defined",
    [
        ("y = x + 1", {"x"}, {"y"}),
        ("a, (b, *c) = f(x)", {"f", "x"}, {"a", "b", "c"}),
        ("x += 1", {"x"}, {"x"}),
        ("x = 0\nx += 1", set(), {"x"}),
        ("print(x)\nx = 1", {"print", "x"}, {"x"}),
        ("x = y = z", {"z"}, {"x", "y"}),
        ("x: int\ny: float = 2.0", {"int", "float"}, {"y"}),
        ("with open(p) as fh, lock:\n    text = fh.read()", {"open", "p", "lock"}, {"fh", "text"}),
        ("import os.path, numpy as np\nfrom a.b import c as d, e", set(), {"os", "np", "d", "e"}),
        ("msg = f'{name}: {value:.{prec}f}'", {"name", "value", "prec"}, {"msg"}),
        ("if (n := len(data)) > 10:\n    big = True", {"len", "data"}, {"n", "big"}),
        ("r = await fetch(u)", {"fetch", "u"}, {"r"}),
        ("x = 1\ndel x", set(), set()),
    ],
)
def test_reads_and_definitions(source: str, read: set[str], defined: set[str]) -> None:
    result = flow(source)
    assert set(result.reads) == read
    assert set(result.defines) == defined


def test_loop_targets_and_loop_bodies_bind_on_some_paths_only() -> None:
    result = flow("for i, row in enumerate(rows):\n    total = row\nprint(total)")
    assert set(result.defines) == {"i", "row", "total"}
    assert "total" in result.weak_reads and "total" not in result.reads
    result = flow("while more():\n    last = step()\nelse:\n    done = True\nprint(last, done)")
    assert set(result.weak_reads) == {"last", "done"}


def test_if_else_binding_on_every_path_is_not_a_read() -> None:
    assert "x" in flow("if flag:\n    x = 1\nprint(x)").weak_reads
    result = flow("if flag:\n    x = 1\nelif other:\n    x = 2\nelse:\n    x = 3\nprint(x)")
    assert "x" not in result.reads and "x" not in result.weak_reads


def test_except_names_exist_only_inside_the_handler() -> None:
    result = flow("try:\n    v = int(s)\nexcept ValueError as err:\n    v = 0\n    print(err)")
    assert set(result.defines) == {"v"}
    assert "err" not in result.reads
    assert "err" in flow("try:\n    pass\nexcept Exception as err:\n    pass\nprint(err)").reads


def test_try_bound_in_body_and_every_handler_is_definitely_bound() -> None:
    result = flow(
        "try:\n    import torch\nexcept ImportError:\n    torch = None\nfinally:\n    ok = 1\nuse(torch)"
    )
    assert "torch" not in result.reads and "torch" not in result.weak_reads
    assert {"torch", "ok"} <= set(result.defines)


def test_functions_defaults_and_decorators_are_read_now_bodies_when_called() -> None:
    assert reads("@dec\ndef f(a=default) -> Ret:\n    pass") == {"dec", "default", "Ret"}
    assert reads("def f(a):\n    return a + scale") == {"scale"}
    # the body's free names are not reads when the step binds them itself, before or after the def
    assert reads("def f():\n    return k\nk = 1") == set()
    assert reads("f = lambda v: v * k") == {"k"}
    assert reads("def outer():\n    y = 1\n    def inner():\n        return y + z\n    return inner") == {"z"}
    assert defines("def f():\n    pass\nasync def g():\n    pass") == {"f", "g"}


def test_classes_read_bases_and_the_free_names_of_their_bodies() -> None:
    source = (
        "class M(Base, metaclass=Meta):\n    lr = rate\n    def fit(self):\n        return data + self.lr"
    )
    assert reads(source) == {"Base", "Meta", "rate", "data"}
    assert defines(source) == {"M"}


def test_global_in_a_function_reads_and_defines_the_module_name() -> None:
    result = flow("def bump():\n    global counter\n    counter += 1\nbump()")
    assert "counter" in result.reads and "counter" in result.defines


def test_comprehensions_have_their_own_scope() -> None:
    result = flow("ys = [x * k for x in xs if x]\nprint(x)")
    assert set(result.reads) == {"k", "xs", "x", "print"}  # `x` after the comprehension is a read
    assert set(result.defines) == {"ys"}
    assert reads("pairs = {a: b for a, b in zip(left, right) for c in a}") == {"zip", "left", "right"}
    assert reads("total = sum(v for v in values)") == {"sum", "values"}
    # := inside a comprehension binds in the enclosing scope
    assert defines("[last := v for v in vs]") == {"last"}


def test_del_unbinds_and_reads() -> None:
    result = flow("del df")
    assert set(result.reads) == {"df"} and result.deleted == {"df"} and not result.defines
    result = flow("x = 1\ndel x\nx = 2")
    assert set(result.defines) == {"x"} and not result.deleted


@pytest.mark.parametrize(
    "source, name",
    [
        ("df['a'] = 1", "df"),
        ("df.loc[0, 'a'] = 1", "df"),
        ("model.coef_ = w", "model"),
        ("stats['n'] += 1", "stats"),
        ("del df['a']", "df"),
        ("model.fit(X, y)", "model"),
        ("items.append(1)", "items"),
        ("config.update(extra)", "config"),
        ("df.dropna(inplace=True)", "df"),
        ("df['a'].fillna(0, inplace=True)", "df"),
        ("weights.add_(1)", "weights"),
        ("random.shuffle(deck)", "deck"),
        ("torch.nn.init.zeros_(layer)", "layer"),
    ],
)
def test_changes_in_place_read_and_modify_the_variable(source: str, name: str) -> None:
    result = flow(source)
    assert name in result.reads
    assert name in result.modified and name in result.defines


def test_reading_calls_do_not_modify() -> None:
    result = flow("summary = df.head()\nn = len(items)\nprint(model.predict(X))")
    assert not result.modified
    assert set(result.defines) == {"summary", "n"}


def test_changing_an_imported_module_in_place_is_not_a_definition() -> None:
    result = flow("import numpy as np\nnp.random.seed(0)\nnp.random.shuffle(arr)")
    assert "arr" in result.modified
    assert "np" not in result.modified


@pytest.mark.parametrize(
    "source, read, defined",
    [
        ("%time x = f(df)", {"f", "df"}, {"x"}),
        ("%timeit -n 3 -r 2 q(z)", {"q", "z"}, set()),
        ("%%time\ny = g(z)", {"g", "z"}, {"y"}),
        ("%%capture out\nprint(a)", {"print", "a"}, {"out"}),
        ("files = !ls", {"get_ipython"}, {"files"}),
        ("!pip install foo\n%matplotlib inline", {"get_ipython"}, set()),
        ("df?", {"get_ipython"}, set()),
        ("for p in paths:\n    %time load(p)", {"paths", "load"}, {"p"}),
    ],
)
def test_magics_and_shell_lines(source: str, read: set[str], defined: set[str]) -> None:
    result = flow(source)
    assert set(result.reads) == read
    assert set(result.defines) == defined


def test_match_statement_captures() -> None:
    source = (
        "match cmd:\n"
        "    case {'x': px, **rest}:\n        pass\n"
        "    case [a, *others] if a > lim:\n        pass\n"
        "    case Point(x=0) as point:\n        pass"
    )
    result = flow(source)
    assert set(result.reads) == {"cmd", "lim", "Point"}
    assert set(result.defines) == {"px", "rest", "a", "others", "point"}


def test_syntax_errors_name_the_cell_and_line() -> None:
    with pytest.raises(PipelineError) as err:
        analyze([(0, "a = 1"), (3, "x = 1\ny = (2 +\n")])
    assert err.value.field == "cells[3]"
    assert "cells[3] has a syntax error at line 2" in err.value.message


def test_cells_are_analysed_in_order_as_one_namespace() -> None:
    result = analyze([(2, "a = 1"), (5, "b = a + c")])
    assert result.reads == {"c": 5}
    assert result.defines == {"a": 2, "b": 5}


def test_star_imports_are_recorded() -> None:
    assert flow("from os.path import *").star_imports == [0]


# --- linking ---------------------------------------------------------------------------------------


def step(name: str, *sources: str, first: int = 0) -> StepCode:
    return StepCode(name, tuple((first + i, s) for i, s in enumerate(sources)))


def test_the_nearest_earlier_definer_wins() -> None:
    graph = resolve(
        [step("a", "x = 1", first=0), step("b", "x = x + 1", first=1), step("c", "print(x)", first=2)],
        shared=[],
    )
    assert graph.edges == {("a", "b"): {"x"}, ("b", "c"): {"x"}}
    assert graph.inputs == {"a": set(), "b": {"x"}, "c": {"x"}}
    assert graph.outputs == {"a": {"x"}, "b": {"x"}, "c": set()}
    assert not graph.warnings


def test_a_model_fitted_in_place_flows_from_the_step_that_fitted_it() -> None:
    graph = resolve(
        [
            step("make", "model = Model()\nX, y = data()", first=0),
            step("train", "model.fit(X, y)", first=1),
            step("score", "print(model.score(X, y))", first=2),
        ],
        shared=[],
    )
    assert graph.edges[("train", "score")] == {"model"}
    assert graph.edges[("make", "score")] == {"X", "y"}
    assert graph.edges[("make", "train")] == {"model", "X", "y"}


def test_shared_cells_and_builtins_are_never_passed_and_steps_may_override_them() -> None:
    graph = resolve(
        [
            step("a", "n = n * 2\ndf = pd.DataFrame(range(n))", first=3),
            step("b", "print(len(df), n, lr)", first=4),
        ],
        shared=[(0, "import pandas as pd"), (1, "n = 10\nlr = 0.1")],
    )
    assert graph.edges == {("a", "b"): {"df", "n"}}
    assert graph.inputs["a"] == set()
    assert not graph.warnings


def test_changing_a_shared_name_in_place_hands_nothing_on() -> None:
    graph = resolve(
        [
            step("a", "np.random.seed(0)\nx = np.zeros(3)", first=1),
            step("b", "y = np.ones(2) + x[:2]", first=2),
        ],
        shared=[(0, "import numpy as np")],
    )
    assert graph.edges == {("a", "b"): {"x"}}


def test_a_name_defined_nowhere_upstream_warns_naming_the_cell() -> None:
    graph = resolve([step("a", "x = 1", first=0), step("b", "y = x", "z = missing", first=4)], shared=[])
    assert [w.message for w in graph.warnings] == [
        "cell 5 (step 'b') uses 'missing', defined in no upstream step"
    ]


def test_a_name_defined_only_downstream_is_not_taken_from_there() -> None:
    graph = resolve([step("a", "print(later)", first=0), step("b", "later = 1", first=1)], shared=[])
    assert not graph.edges
    assert [w.message for w in graph.warnings] == [
        "cell 0 (step 'a') uses 'later', defined in no upstream step"
    ]


def test_weak_reads_take_upstream_values_but_never_warn() -> None:
    loop = "for e in range(epochs):\n    loss = e\nprint(loss)"
    graph = resolve([step("a", "loss = None", first=0), step("b", loop, first=1)], shared=[(9, "epochs = 2")])
    assert graph.edges == {("a", "b"): {"loss"}}
    assert not resolve([step("b", loop)], shared=[(9, "epochs = 2")]).warnings


def test_a_deleted_name_is_not_passed_and_the_reader_is_warned() -> None:
    graph = resolve(
        [step("a", "x = 1", first=0), step("b", "del x", first=1), step("c", "print(x)", first=2)], shared=[]
    )
    assert graph.edges == {("a", "b"): {"x"}}
    assert [w.message for w in graph.warnings] == ["cell 2 (step 'c') uses 'x', deleted by step 'b'"]


def test_shared_functions_bring_their_free_names_into_the_calling_step() -> None:
    functions = (
        "def evaluate(m):\n    return m.score(X_test, y_test) + bonus()\n"
        "def bonus():\n    return weight\n"
        "def unused():\n    return nowhere"
    )
    graph = resolve(
        [
            step("split", "X_test, y_test = 1, 2", first=1),
            step("weights", "weight = 3", first=2),
            step("score", "result = evaluate(model)", first=3),
        ],
        shared=[(0, functions)],
    )
    assert graph.inputs["score"] == {"X_test", "y_test", "weight"}
    assert [w.message for w in graph.warnings] == [
        "cell 3 (step 'score') uses 'model', defined in no upstream step"
    ]


def test_a_step_that_binds_a_shared_functions_free_name_itself_needs_no_input() -> None:
    graph = resolve(
        [step("a", "data = 1", first=1), step("b", "data = 2\nprint(show())", first=2)],
        shared=[(0, "def show():\n    return data")],
    )
    assert graph.inputs["b"] == set()


def test_modules_imported_in_a_step_are_passed_with_a_warning() -> None:
    graph = resolve([step("a", "import json", first=0), step("b", "json.dumps(1)", first=1)], shared=[])
    assert graph.edges == {("a", "b"): {"json"}}
    assert "move the import to a cell tagged 'imports'" in graph.warnings[0].message
    assert graph.warnings[0].cell == 1


def test_star_imports_silence_undefined_name_warnings() -> None:
    graph = resolve([step("a", "print(join('a', 'b'))")], shared=[(0, "from os.path import *")])
    assert not graph.warnings


def test_kernel_names_are_not_warned_about() -> None:
    graph = resolve([step("a", "display(_)\nprint(Out, In, _3, get_ipython())")], shared=[])
    assert not graph.warnings


def test_metrics_come_from_the_last_step_that_defines_them_and_parameters_are_metrics_too() -> None:
    graph = resolve(
        [step("a", "acc = 0.5\nloss = 1", first=0), step("b", "acc = 0.9", first=1)],
        shared=[(4, "lr = 0.1")],
        metrics=[("acc", 5), ("loss", 5), ("f1", 5), ("lr", 5)],
    )
    assert graph.outputs == {"a": {"loss"}, "b": {"acc"}}
    assert [w.message for w in graph.warnings] == ["cell 5 (metrics) lists 'f1', which no step defines"]


def test_metric_names_accept_kales_prints_one_name_per_line_or_a_tuple() -> None:
    assert metric_names("accuracy\nprint(f1)\n# comment\nrecall, precision\nprint(accuracy)", 7) == [
        "accuracy",
        "f1",
        "recall",
        "precision",
    ]
    with pytest.raises(PipelineError, match="line 2 is neither") as err:
        metric_names("accuracy\nprint(f1 * 100)", 7)
    assert err.value.field == "cells[7]"

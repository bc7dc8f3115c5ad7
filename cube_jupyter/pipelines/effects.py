"""What code may change in place, for the data flow of `dataflow`: a step that changes a value it got
from upstream hands the changed value on, so what runs after it never sees a stale one.

Two strengths, because they cost differently:

- **changed** (certain): `x["a"] = 1`, `x.a = 1`, `del x["a"]`, `x[0] += 1`, a known mutating method
  (`append`, `update`, `fit`, `sort`, torch's `x.add_()`, ...) or any call with `inplace=True` on it,
  `setattr(x, ...)`, `np.copyto(x, ...)`, `np.add(a, b, out=x)`, `random.shuffle(x)`, a function of the
  notebook whose body changes its parameter or the global it names — and each of these through an
  alias: `y = x`, `y = x["col"]`, `for d in [train, test]`, `for i, d in enumerate(frames)`, a
  container holding `x`. A changed name counts as defined by the step (the next reader takes it
  from there, and waits for it).
- **touched** (may change): passed to a call the notebook does not define, or a method called on it,
  other than the read-only ones listed here (`print`, `len`, `df.head()`, `model.predict()`, ...). A
  touched name is saved again by the step when a later step that descends from it reads it; it
  adds no edge, so steps that only read the same data still run side by side.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

MUTATING_METHODS = {
    # list, dict, set, deque
    "append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse", "update", "setdefault",
    "popitem", "add", "discard", "difference_update", "intersection_update",
    "symmetric_difference_update", "appendleft", "extendleft", "popleft", "rotate",
    # numpy arrays and random generators
    "fill", "resize", "put", "itemset", "setflags", "shuffle", "seed", "partition", "setfield",
    # scikit-learn, xgboost, keras, torch models and optimizers
    "fit", "partial_fit", "fit_transform", "fit_predict", "fit_resample", "set_params", "compile",
    "train", "eval", "load_state_dict", "zero_grad", "step", "backward", "to", "cuda", "cpu",
    "load_model", "load_weights", "set_weights",
    # random generators (numpy's Generator, random.Random): each draw moves their state on
    "normal", "uniform", "integers", "random", "choice", "permutation", "standard_normal", "binomial",
    "poisson", "beta", "gamma", "exponential", "multivariate_normal", "randint", "randrange", "gauss",
    "randn", "rand", "lognormal", "laplace", "logistic", "geometric", "dirichlet", "multinomial",
    "triangular", "getrandbits", "choices", "normalvariate", "expovariate", "betavariate",
}  # fmt: skip
# Functions that change their first argument in place.
MUTATING_FUNCTIONS = {
    "shuffle", "copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis", "setattr",
    "delattr", "heappush", "heappop", "heapify", "heapreplace", "heappushpop", "insort", "insort_left",
    "insort_right",
}  # fmt: skip
# Calls that only read their arguments: passing a name to them does not touch it.
READ_ONLY_FUNCTIONS = {
    "print", "display", "len", "repr", "str", "int", "float", "bool", "complex", "bytes", "type",
    "isinstance", "issubclass", "id", "hash", "format", "round", "abs", "callable", "hasattr", "ascii",
    "sum", "min", "max", "any", "all", "sorted", "divmod", "pow", "bin", "hex", "oct", "ord", "chr",
    "dir", "vars", "array_equal", "allclose", "isclose", "isnan", "isfinite", "shape", "ndim",
    "dumps", "dump", "save", "savez", "to_pickle", "assert_frame_equal", "assert_array_equal",
}  # fmt: skip
# Methods that only read their receiver (pandas, numpy, scikit-learn, str, dict): no touch.
READ_ONLY_METHODS = {
    "head", "tail", "describe", "info", "copy", "count", "sum", "mean", "median", "std", "var", "min",
    "max", "prod", "cumsum", "value_counts", "unique", "nunique", "isnull", "isna", "notnull", "notna",
    "corr", "cov", "astype", "groupby", "agg", "aggregate", "merge", "join", "concat", "query",
    "predict", "predict_proba", "predict_log_proba", "decision_function", "score", "transform",
    "evaluate", "get_params", "get", "keys", "values", "items", "to_numpy", "to_list", "tolist",
    "to_dict", "to_csv", "to_json", "to_parquet", "reshape", "any", "all", "argmax", "argmin",
    "argsort", "round", "dot", "sample", "select_dtypes", "drop", "dropna", "fillna", "replace",
    "rename", "reset_index", "set_index", "sort_values", "sort_index", "iterrows", "itertuples",
    "apply", "map", "applymap", "pivot_table", "melt", "nlargest", "nsmallest", "clip", "abs",
    "duplicated", "drop_duplicates", "isin", "between", "idxmax", "idxmin", "quantile", "rank",
    "diff", "pct_change", "shift", "rolling", "expanding", "resample", "equals", "format", "split",
    "strip", "lower", "upper", "startswith", "endswith", "encode", "decode", "item", "numel",
    "size", "detach", "numpy", "flatten", "ravel", "squeeze", "unsqueeze", "view", "t",
    "state_dict", "parameters", "named_parameters", "summary", "save", "save_model", "dump_model",
}  # fmt: skip
# Calls whose result holds the very objects of their arguments (what a loop over it yields).
PASSING_FUNCTIONS = {"zip", "enumerate", "reversed", "iter", "list", "tuple", "set", "frozenset", "chain"}


def call_name(call: ast.Call) -> str:
    """`append` for `x.append(...)`, `shuffle` for `np.random.shuffle(...)` or `shuffle(...)`."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def root_name(node: ast.AST) -> str | None:
    """`df` for `df`, `df.a`, `df["a"].b`, `df.loc[0]`: the variable a chain of attributes hangs off."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def alias_roots(node: ast.AST | None, aliases: Mapping[str, set[str]]) -> set[str]:
    """The variables whose objects the value of `node` may be or hold: `x`, `x.a`, `x[0]`, `[x, y]`,
    `{"k": x}`, `zip(x, y)`, and what those names alias in turn. A call's result is no alias (except
    PASSING_FUNCTIONS), nor is arithmetic."""
    if node is None:
        return set()
    if isinstance(node, ast.Name):
        return {node.id, *aliases.get(node.id, ())}
    if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        return alias_roots(node.value, aliases)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return set().union(*(alias_roots(e, aliases) for e in node.elts))
    if isinstance(node, ast.Dict):
        return set().union(*(alias_roots(v, aliases) for v in node.values))
    if isinstance(node, ast.Call) and call_name(node) in PASSING_FUNCTIONS:
        return set().union(*(alias_roots(a, aliases) for a in node.args))
    if isinstance(node, ast.IfExp):
        return alias_roots(node.body, aliases) | alias_roots(node.orelse, aliases)
    if isinstance(node, ast.NamedExpr):
        return alias_roots(node.value, aliases)
    return set()


@dataclass(frozen=True)
class FunctionEffects:
    """What calling a function of the notebook does to what it is given and to globals: the names
    (its parameters, or globals it reads) its body changes, and those it touches."""

    parameters: tuple[str, ...] = ()  # positional parameters, in order
    changed: frozenset[str] = frozenset()
    touched: frozenset[str] = frozenset()

    def arguments(self, call: ast.Call, names: frozenset[str]) -> Iterator[ast.AST]:
        """The argument expressions of `call` bound to parameters among `names` (a `*args` or
        `**kwargs` argument could be any of them)."""
        for index, arg in enumerate(call.args):
            bound = self.parameters[index] if index < len(self.parameters) else None
            if isinstance(arg, ast.Starred) or bound in names:
                yield arg
        for keyword in call.keywords:
            if keyword.arg is None or keyword.arg in names:
                yield keyword.value

    def effect(self, call: ast.Call, aliases: Mapping[str, set[str]]) -> CallEffect:
        changed = list(self.arguments(call, self.changed))
        changed += [ast.Name(name, ast.Load()) for name in sorted(self.changed - set(self.parameters))]
        touched = set(self.touched - set(self.parameters))
        for argument in self.arguments(call, self.touched):
            touched |= alias_roots(argument, aliases)
        return CallEffect(changed, touched)


@dataclass
class CallEffect:
    """What one call changes: expressions it certainly changes, names it may change."""

    changed: list[ast.AST]
    touched: set[str]


def call_effect(
    call: ast.Call, functions: Mapping[str, FunctionEffects], aliases: Mapping[str, set[str]]
) -> CallEffect:
    """Classify one call (see the module docstring)."""
    func = call.func
    name = call_name(call)
    changed: list[ast.AST] = []
    inplace = any(
        k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in call.keywords
    )
    in_place_op = name.endswith("_") and not name.startswith("_")  # torch: x.add_(1), init.zeros_(w)
    changed += [k.value for k in call.keywords if k.arg == "out"]  # numpy: np.add(a, b, out=a)
    known = functions.get(func.id) if isinstance(func, ast.Name) else None
    if known is not None:
        return known.effect(call, aliases)
    if isinstance(func, ast.Attribute) and (inplace or in_place_op or name in MUTATING_METHODS):
        changed.append(func.value)
    if (in_place_op or name in MUTATING_FUNCTIONS) and call.args:
        changed.append(call.args[0])
    touched: set[str] = set()
    if not changed and name not in READ_ONLY_FUNCTIONS | READ_ONLY_METHODS | PASSING_FUNCTIONS:
        if isinstance(func, ast.Attribute):
            touched |= alias_roots(func.value, aliases)
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            touched |= alias_roots(arg, aliases)
    return CallEffect(changed, touched)


class _BodyEffects(ast.NodeVisitor):
    """Flow-insensitive: the names a function, lambda or comprehension body changes or touches,
    aliases followed (`d = df` then `d["a"] = 1` changes `df`). Nested functions are skipped."""

    def __init__(self, functions: Mapping[str, FunctionEffects]) -> None:
        self.functions = functions
        self.aliases: dict[str, set[str]] = {}
        self.changed: set[str] = set()
        self.touched: set[str] = set()

    def run(self, nodes: Iterable[ast.AST]) -> tuple[set[str], set[str]]:
        nodes = list(nodes)
        for _ in range(3):  # aliases of aliases, in any order of statements
            for node in nodes:
                self.visit(node)
        changed = set().union(*(alias_roots(ast.Name(n, ast.Load()), self.aliases) for n in self.changed))
        return changed, self.touched

    def alias(self, target: ast.AST, value: ast.AST | None) -> None:
        roots = alias_roots(value, self.aliases)
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name) and roots - {sub.id}:
                self.aliases.setdefault(sub.id, set()).update(roots - {sub.id})

    def change(self, node: ast.AST) -> None:
        name = root_name(node)
        if name is not None:
            self.changed.add(name)

    def visit_FunctionDef(self, node: ast.AST) -> None:
        """Nested functions change nothing until called; their calls are not followed."""

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.alias(target, node.value)
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                self.change(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.change(node.target)  # `lst += [1]` and `arr *= 2` change the object in place
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                self.change(target)
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.alias(node.target, node.iter)
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.alias(node.target, node.iter)
        self.generic_visit(node)

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self.alias(node.optional_vars, node.context_expr)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.alias(node.target, node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        effect = call_effect(node, self.functions, self.aliases)
        for expression in effect.changed:
            self.change(expression)
        self.touched |= effect.touched
        self.generic_visit(node)


def body_effects(node: ast.AST, functions: Mapping[str, FunctionEffects]) -> tuple[set[str], set[str]]:
    """(names changed, names touched) by the body of a def, lambda or comprehension, its own
    parameters included (a comprehension's targets alias its iterables)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        body: list[ast.AST] = list(node.body)
    elif isinstance(node, ast.Lambda):
        body = [node.body]
    else:
        body = [node]
    return _BodyEffects(functions).run(body)


def function_effects(
    node: ast.FunctionDef | ast.AsyncFunctionDef,
    free: set[str],
    functions: Mapping[str, FunctionEffects],
) -> FunctionEffects:
    """What calling the function `node` does: the parameters and free names its body changes or
    touches (its own locals left out)."""
    changed, touched = body_effects(node, functions)
    arguments = node.args
    positional = tuple(a.arg for a in [*arguments.posonlyargs, *arguments.args])
    parameters = set(positional) | {a.arg for a in arguments.kwonlyargs}
    parameters |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    visible = parameters | free
    return FunctionEffects(positional, frozenset(changed & visible), frozenset((touched - changed) & visible))

"""Static data flow of notebook code: which names a step reads from upstream and which it hands on.

Each step's cells are analysed in order, as one module-level program, with `ast` (IPython magics and
shell lines are first turned into Python by IPython's TransformerManager; code under `%time`,
`%%time`, `%timeit`, `%%capture`, `%prun` is analysed too). The semantics, chosen so that running the
steps separately gives what running the notebook top to bottom gives:

- **read**: a name loaded while it is not yet bound in the step. Bound on some paths only (inside an
  `if`, a loop, a `try`), it is a *weak* read: taken from upstream when an earlier step defines it,
  silently fine otherwise. `x += 1`, `del x`, `df["a"] = 1` and `df.a = 1` read `x`/`df`.
- **defined**: bound by assignment (also tuple unpacking, augmented and annotated assignment, `:=`),
  `for`/`with` targets, `import`, `def`, `class`, match captures — on any path — and not deleted
  by `del` afterwards. `except E as e` binds `e` only inside the handler, as Python does.
- **modified**: changed in place, directly or through an alias, by the step (`effects`: item and
  attribute assignment, mutating methods and functions, `inplace=True`, the notebook's own functions
  that change what they are given). A modified name counts as defined by the step, so downstream
  steps take the modified value. **touched**: may be changed by a call the notebook does not define
  (`effects`); the linker hands such a value on from the step where a reader's ancestors last
  touched it.
- **scopes**: comprehensions have their own scope (their free names are read at once); the free
  names of a `def`, `lambda` or `class` body are read by the step unless the step binds them itself
  somewhere (they are looked up when the function is called). Names declared `global` and assigned
  in a function count as defined by the step.
- Changing in place a name the step did not bind nor take from upstream (a module: `np.random.seed(0)`,
  a shared parameter) hands nothing on: every step runs the shared cells afresh.

How steps are linked by these flows is `linking`'s.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from IPython.core.inputtransformer2 import TransformerManager

from cube_jupyter.pipelines.effects import (
    FunctionEffects,
    alias_roots,
    body_effects,
    call_effect,
    function_effects,
    root_name,
)
from cube_jupyter.pipelines.model import PipelineError

# Names a Jupyter kernel provides without any cell defining them.
KERNEL_NAMES = set(dir(builtins)) | {"get_ipython", "display", "In", "Out", "exit", "quit", "__builtins__"}
KERNEL_NAME = re.compile(r"^(_+|_i+|_i?\d+|_ih|_oh|_dh|_ii+)$")
# Magics whose argument (line) or body (cell) is Python code that runs in the user namespace.
CODE_LINE_MAGICS = {"time", "timeit", "prun"}
CODE_CELL_MAGICS = {"time", "timeit", "prun", "capture"}
_MAGIC_OPTIONS = re.compile(r"^\s*(?:-[nrpsTDl]\s*\S+\s+|-[a-zA-Z]+\s+)*")
_transformer = TransformerManager()


def is_kernel_name(name: str) -> bool:
    return name in KERNEL_NAMES or bool(KERNEL_NAME.match(name))


def to_python(source: str) -> str:
    """IPython syntax (magics, `!cmd`, `x?`) → plain Python, as the kernel itself rewrites it."""
    try:
        return str(_transformer.transform_cell(source))
    except Exception:  # the transformer gives up on some unbalanced input; ast then reports it
        return source


def parse_cell(source: str, where: str) -> ast.Module:
    """Parse one cell; PipelineError naming `where` (e.g. "cells[3]") and the line on a syntax error."""
    try:
        return ast.parse(to_python(source))
    except SyntaxError as exc:
        raise PipelineError(
            f"{where} has a syntax error at line {exc.lineno}: {exc.msg}", field=where
        ) from None
    except ValueError as exc:  # e.g. null bytes
        raise PipelineError(f"{where} cannot be parsed: {exc}", field=where) from None
    except (RecursionError, MemoryError):
        raise PipelineError(f"{where} is nested too deeply to analyse", field=where) from None


@dataclass
class CodeFlow:
    """The flow of one piece of code: name → the cell index where it is first read / last bound."""

    reads: dict[str, int] = field(default_factory=dict)
    weak_reads: dict[str, int] = field(default_factory=dict)
    defines: dict[str, int] = field(default_factory=dict)
    modified: set[str] = field(default_factory=set)
    modified_only: set[str] = field(default_factory=set)  # changed in place but never bound here
    touched: set[str] = field(default_factory=set)  # may be changed in place (effects.py)
    deleted: set[str] = field(default_factory=set)
    imported: set[str] = field(default_factory=set)
    star_imports: list[int] = field(default_factory=list)
    function_free: dict[str, set[str]] = field(default_factory=dict)  # top-level def/class → free names
    function_effects: dict[str, FunctionEffects] = field(default_factory=dict)  # top-level def → effects
    aliases: dict[str, set[str]] = field(default_factory=dict)  # defined name → names it may hold at the end
    # changed in place while holding values an earlier step saved on their own: name → (cell, those names)
    detached: dict[str, tuple[int, set[str]]] = field(default_factory=dict)


# --- scopes of functions, lambdas, classes and comprehensions ----------------------------------------

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, *_COMPREHENSIONS)


@dataclass
class _Scope:
    loads: set[str] = field(default_factory=set)
    stores: set[str] = field(default_factory=set)
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    global_stores: set[str] = field(default_factory=set)  # names this scope or a nested one rebinds
    walrus: set[str] = field(default_factory=set)  # := targets inside a comprehension: enclosing scope


def _arg_names(args: ast.arguments) -> set[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    return {a.arg for a in every}


def _outer_parts(node: ast.AST) -> list[ast.AST]:
    """The parts of a scope-creating node evaluated in the enclosing scope, at definition time."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        parts: list[ast.AST] = [*node.decorator_list, *node.args.defaults]
        parts += [d for d in node.args.kw_defaults if d is not None]
        every = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        every += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
        parts += [a.annotation for a in every if a.annotation is not None]
        return parts + ([node.returns] if node.returns is not None else [])
    if isinstance(node, ast.Lambda):
        return [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]
    if isinstance(node, _COMPREHENSIONS):
        return [node.generators[0].iter]
    return []


def free_names(node: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(free names, names rebound via `global`, `:=` targets leaking out) of a scope-creating node.

    Free names are those the body looks up in the enclosing/global scope; the parts evaluated at
    definition time (decorators, defaults, the first comprehension iterable) are not included.
    """
    scope = _Scope()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        scope.stores |= _arg_names(node.args)
        body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    elif isinstance(node, ast.ClassDef):
        body = list(node.body)
    else:
        assert isinstance(node, _COMPREHENSIONS)
        body = []
        for index, generator in enumerate(node.generators):
            _collect_targets(generator.target, scope.stores)
            body += ([] if index == 0 else [generator.iter]) + list(generator.ifs)
        body += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
    for part in body:
        _collect(part, scope, comprehension=isinstance(node, _COMPREHENSIONS))
    local = scope.stores - scope.globals
    free = (scope.loads - local) | (scope.globals & scope.loads)
    free -= scope.nonlocals
    return free, scope.global_stores | (scope.globals & scope.stores), scope.walrus


def _collect_targets(target: ast.AST, into: set[str]) -> None:
    for sub in ast.walk(target):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            into.add(sub.id)


def _collect(node: ast.AST, scope: _Scope, comprehension: bool = False) -> None:
    """Gather a scope's loads and stores, descending into nested scopes only for their free names."""
    if isinstance(node, _SCOPES):
        for part in _outer_parts(node):
            _collect(part, scope, comprehension)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope.stores.add(node.name)
        inner_free, inner_global_stores, walrus = free_names(node)
        scope.loads |= inner_free
        scope.global_stores |= inner_global_stores
        scope.stores |= walrus
        if comprehension:
            scope.walrus |= walrus
        return
    if isinstance(node, ast.Global):
        scope.globals.update(node.names)
    elif isinstance(node, ast.Nonlocal):
        scope.nonlocals.update(node.names)
    elif isinstance(node, ast.Name):
        (scope.loads if isinstance(node.ctx, ast.Load) else scope.stores).add(node.id)
    elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        scope.loads.add(node.target.id)  # `x += 1` reads x
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        scope.stores.update(_import_names(node))
    elif isinstance(node, ast.ExceptHandler) and node.name:
        scope.stores.add(node.name)
    elif isinstance(node, ast.NamedExpr) and comprehension:
        scope.walrus.add(node.target.id)
        _collect(node.value, scope, comprehension)
        return
    elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        scope.stores.add(node.name)
    elif isinstance(node, ast.MatchMapping) and node.rest:
        scope.stores.add(node.rest)
    for child in ast.iter_child_nodes(node):
        _collect(child, scope, comprehension)


def _import_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    names = []
    for alias in node.names:
        if alias.name == "*":
            continue
        names.append(alias.asname or alias.name.split(".")[0])
    return names


def _magic_code(call: ast.Call) -> tuple[str, str | None] | None:
    """(code, captured name) for `get_ipython().run_line_magic('time', CODE)` and cell-magic forms."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)):
        return None
    owner = func.value.func
    if not (isinstance(owner, ast.Name) and owner.id == "get_ipython"):
        return None
    args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in call.args]
    if func.attr == "run_line_magic" and len(args) == 2 and args[0] in CODE_LINE_MAGICS and args[1]:
        return _strip_magic_options(args[1]), None
    if func.attr == "run_cell_magic" and len(args) == 3 and args[0] in CODE_CELL_MAGICS and args[2]:
        captured = None
        if args[0] == "capture" and args[1]:
            words = [w for w in args[1].split() if not w.startswith("-")]
            captured = words[0] if words and words[0].isidentifier() else None
        return args[2], captured
    return None


def _strip_magic_options(line: str) -> str:
    """`-n 10 -r 3 x = f()` → `x = f()`: timeit/prun options come before the code."""
    return _MAGIC_OPTIONS.sub("", line, count=1)


# --- the module-level analyser ---------------------------------------------------------------------


class _Forget(ast.stmt):
    """Marks the end of an except handler: its `as` name is unbound again (no read, unlike `del`)."""

    _fields = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class _Alias(ast.stmt):
    """Marks where a loop's target takes the objects of its iterable (`for d in [train, test]`)."""

    _fields = ("target", "value")

    def __init__(self, target: ast.AST, value: ast.AST) -> None:
        super().__init__()
        self.target = target
        self.value = value


class _Analyzer:
    """Walks module-level statements in execution order, tracking definitely/possibly bound names."""

    def __init__(
        self, functions: Mapping[str, FunctionEffects], upstream_aliases: Mapping[str, set[str]]
    ) -> None:
        self.flow = CodeFlow()
        self.functions = dict(functions)  # what calling each known function changes
        self.aliases: dict[str, set[str]] = {}  # name → the names whose objects it may be or hold
        # what the values this step may load held where they were made (their identity is lost on the
        # way: each value is saved and loaded on its own)
        self.upstream_aliases = upstream_aliases
        self.bound: set[str] = set()  # bound on every path so far
        self.maybe: set[str] = set()  # bound on some path so far (bound ⊆ maybe)
        self.ever: set[str] = set()  # bound at any point
        self.deferred: dict[str, int] = {}
        self.global_stores: set[str] = set()  # rebound by a function defined here, when it runs
        self.cell = 0

    # names

    def read(self, name: str) -> None:
        if name in self.bound:
            return
        target = self.flow.weak_reads if name in self.maybe else self.flow.reads
        if name not in self.flow.reads:
            target.setdefault(name, self.cell)

    def bind(self, name: str) -> None:
        self.flow.modified_only.discard(name)
        self.bound.add(name)
        self.maybe.add(name)
        self.ever.add(name)
        self.flow.defines[name] = self.cell
        self.flow.imported.discard(name)

    def modify(self, node: ast.AST) -> None:
        """A change in place, of the variable and of all it may alias: each counts as defined here."""
        name = root_name(node)
        if name is None:
            return
        changed = {name, *self.aliases.get(name, ())}
        loaded = {each for each in changed if each not in self.maybe}  # as an earlier step saved it
        for each in sorted(changed):
            self.modify_name(each)
        for container in sorted(loaded):
            held = self.upstream_aliases.get(container, set()) - changed
            if held:
                self.flow.detached.setdefault(container, (self.cell, held))

    def modify_name(self, name: str) -> None:
        """`name` changed in place counts as defined here (not a module: `np.random.seed()`)."""
        if name in self.flow.imported:
            return
        self.read(name)  # changing it in place needs it first (a no-op when the step bound it)
        fresh = name not in self.maybe
        self.flow.modified.add(name)
        self.bind(name)
        if fresh:
            self.flow.modified_only.add(name)

    def alias(self, target: ast.AST, value: ast.AST | None) -> None:
        """After `target = value` (or a loop, `with`, `:=`): which names each bound name may alias."""
        roots = alias_roots(value, self.aliases)
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                if roots - {sub.id}:
                    self.aliases[sub.id] = roots - {sub.id}
                else:
                    self.aliases.pop(sub.id, None)

    def unbind(self, name: str) -> None:
        self.read(name)
        self.bound.discard(name)
        self.maybe.discard(name)
        self.flow.defines.pop(name, None)
        self.flow.deleted.add(name)

    # control flow

    def branches(self, *bodies: Sequence[ast.stmt]) -> None:
        """Run alternative bodies from the same state: bound after = bound on every path."""
        start_bound, start_maybe = set(self.bound), set(self.maybe)
        ends_bound, ends_maybe = [], []
        for body in bodies:
            self.bound, self.maybe = set(start_bound), set(start_maybe)
            self.block(body)
            ends_bound.append(self.bound)
            ends_maybe.append(self.maybe)
        self.bound = set.intersection(*ends_bound)
        self.maybe = set.union(*ends_maybe)

    def block(self, body: Iterable[ast.stmt]) -> None:
        for statement in body:
            self.stmt(statement)

    def stmt(self, node: ast.stmt) -> None:
        """One statement, by its kind (as `ast.NodeVisitor` dispatches); a statement with no
        visitor of its own (Expr, Return, Raise, Assert, ...) only reads the expressions in it."""
        getattr(self, f"visit_{type(node).__name__}", self.visit_other)(node)

    def visit__Forget(self, node: _Forget) -> None:
        self.bound.discard(node.name)
        self.maybe.discard(node.name)
        self.flow.defines.pop(node.name, None)

    def visit__Alias(self, node: _Alias) -> None:
        self.alias(node.target, node.value)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.expr(node.value)
        for target in node.targets:
            self.target(target)
            self.alias(target, node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.expr(node.value)
        if isinstance(node.target, ast.Name):
            self.read(node.target.id)
            for aliased in sorted(self.aliases.get(node.target.id, ())):  # `d += 1` on a loop's array
                self.modify_name(aliased)
        self.target(node.target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.expr(node.value)
        self.expr(node.annotation)
        if node.value is not None:
            self.target(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.expr(node.iter)
        bind = ast.Assign(targets=[node.target], value=ast.Constant(None))
        loop = [bind, _Alias(node.target, node.iter), *node.body]  # the target aliases what it yields
        self.branches(loop, [])
        self.branches(node.orelse, [])

    visit_AsyncFor = visit_For

    def visit_While(self, node: ast.While) -> None:
        self.expr(node.test)
        self.branches(node.body, [])
        self.branches(node.orelse, [])

    def visit_If(self, node: ast.If) -> None:
        self.expr(node.test)
        self.branches(node.body, node.orelse)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.expr(item.context_expr)
            if item.optional_vars is not None:
                self.target(item.optional_vars)
                self.alias(item.optional_vars, item.context_expr)
        self.block(node.body)

    visit_AsyncWith = visit_With

    def visit_Try(self, node: ast.Try | ast.TryStar) -> None:
        self.branches([*node.body, *node.orelse], *(self.handler(h) for h in node.handlers))
        self.block(node.finalbody)

    visit_TryStar = visit_Try

    def visit_Match(self, node: ast.Match) -> None:
        self.expr(node.subject)
        self.branches(*(self.case(c) for c in node.cases), [])

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.target(target, deleted=True)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        if any(alias.name == "*" for alias in node.names):
            self.flow.star_imports.append(self.cell)
        for name in _import_names(node):
            self.bind(name)
            self.flow.imported.add(name)

    visit_ImportFrom = visit_Import

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope(node)
        self.bind(node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Global(self, node: ast.stmt) -> None:
        """Global, Nonlocal, Pass, Break, Continue: nothing read or bound."""

    visit_Nonlocal = visit_Pass = visit_Break = visit_Continue = visit_Global

    def visit_other(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and self.magic(node.value):
            return
        for child in ast.iter_child_nodes(node):
            self.expr(child)

    def handler(self, handler: ast.ExceptHandler) -> list[ast.stmt]:
        """A handler as a body to analyse; `e` in `except E as e` is bound inside and deleted after."""
        if handler.type is not None:
            self.expr(handler.type)
        if not handler.name:
            return list(handler.body)
        name = ast.Name(handler.name, ast.Store())
        return [ast.Assign(targets=[name], value=ast.Constant(None)), *handler.body, _Forget(handler.name)]

    def case(self, case: ast.match_case) -> list[ast.stmt]:
        pattern = _Scope()
        _collect(case.pattern, pattern)
        names = pattern.stores
        for sub in ast.walk(case.pattern):  # value patterns (Color.RED) and class patterns read names
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                self.read(sub.id)
        binds: list[ast.stmt] = [
            ast.Assign(targets=[ast.Name(n, ast.Store())], value=ast.Constant(None)) for n in sorted(names)
        ]
        guard: list[ast.stmt] = [ast.Expr(case.guard)] if case.guard is not None else []
        return [*binds, *guard, *case.body]

    def target(self, node: ast.AST, *, deleted: bool = False) -> None:
        """An assignment target: its names bound (unbound when `deleted`, by `del`); an attribute or
        item set or deleted changes its object in place."""
        if isinstance(node, ast.Name) and deleted:
            self.unbind(node.id)
        elif isinstance(node, ast.Name):
            self.bind(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self.target(element, deleted=deleted)
        elif isinstance(node, ast.Starred):
            self.target(node.value, deleted=deleted)
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            self.expr(node.value)
            if isinstance(node, ast.Subscript):
                self.expr(node.slice)
            self.modify(node)

    def scope(self, node: ast.AST) -> None:
        """A def/lambda/class/comprehension: definition-time parts now, the body's free names."""
        for part in _outer_parts(node):
            self.expr(part)
        free, global_stores, walrus = free_names(node)
        if isinstance(node, _COMPREHENSIONS):
            for name in sorted(free):
                self.read(name)
            for name in sorted(walrus):
                self.bind(name)
            changed, touched = body_effects(node, self.functions)  # it runs now
            own: set[str] = set()
            for generator in node.generators:
                _collect_targets(generator.target, own)
            for name in sorted(changed - own):
                self.modify(ast.Name(name, ast.Load()))
            self.flow.touched |= touched - own
            return
        for name in sorted(free):
            self.deferred.setdefault(name, self.cell)
        for name in sorted(global_stores):  # rebound when the function runs: maybe defined here
            self.flow.modified.add(name)
            self.global_stores.add(name)
            self.flow.defines[name] = self.cell
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.flow.function_free[node.name] = free
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            effects = function_effects(node, free, self.functions)
            self.functions[node.name] = self.flow.function_effects[node.name] = effects

    def magic(self, call: ast.Call) -> bool:
        """Analyse code run by `%time`-like magics in place; True when `call` was one."""
        found = _magic_code(call)
        if found is None:
            return False
        code, captured = found
        try:
            module = ast.parse(to_python(code))
        except SyntaxError:
            return False
        self.block(module.body)
        if captured:
            self.bind(captured)
        return True

    def expr(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                self.read(node.id)
            return
        if isinstance(node, ast.NamedExpr):
            self.expr(node.value)
            self.bind(node.target.id)
            return
        if isinstance(node, _SCOPES):
            self.scope(node)
            return
        if isinstance(node, ast.Call) and self.magic(node):
            return
        for child in ast.iter_child_nodes(node):
            self.expr(child)
        if isinstance(node, ast.Call):
            self.mutation(node)

    def mutation(self, call: ast.Call) -> None:
        """What a call changes in place (and what it may change): `effects.call_effect`."""
        effect = call_effect(call, self.functions, self.aliases)
        for changed in effect.changed:
            self.modify(changed)
        self.flow.touched |= effect.touched

    def finish(self) -> CodeFlow:
        self.flow.aliases = {name: roots for name, roots in self.aliases.items() if name in self.maybe}
        for name, cell in self.deferred.items():
            if name not in self.ever and name not in self.flow.reads:
                self.flow.reads[name] = cell
        self.flow.deleted -= self.maybe
        for name in list(self.flow.defines):
            if name not in self.maybe and name not in self.global_stores:
                del self.flow.defines[name]
        return self.flow


def analyze(
    cells: Sequence[tuple[int, str]],
    functions: Mapping[str, FunctionEffects] | None = None,
    upstream_aliases: Mapping[str, set[str]] | None = None,
) -> CodeFlow:
    """The flow of cells run in order in one namespace: [(cell index, source), ...]; `functions` are
    the notebook's functions defined elsewhere (shared cells, earlier steps) and what they change;
    `upstream_aliases` what each value earlier steps hand on held where it was made."""
    analyzer = _Analyzer(functions or {}, upstream_aliases or {})
    for index, source in cells:
        analyzer.cell = index
        module = parse_cell(source, f"cells[{index}]")
        try:
            analyzer.block(module.body)
        except RecursionError:
            where = f"cells[{index}]"
            raise PipelineError(f"{where} is nested too deeply to analyse", field=where) from None
    return analyzer.finish()


def metric_names(source: str, index: int) -> list[str]:
    """Names listed in a `metrics` cell: Kale's `print(name)` lines, bare names one per line, or a
    tuple of names."""
    module = parse_cell(source, f"cells[{index}]")
    names: list[str] = []
    for statement in module.body:
        value = statement.value if isinstance(statement, ast.Expr) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "print":
            parts: list[ast.expr | None] = [*value.args] if value.args and not value.keywords else [None]
        else:
            parts = [*value.elts] if isinstance(value, ast.Tuple) else [value]
        for part in parts:
            if not isinstance(part, ast.Name):
                raise PipelineError(
                    f"cells[{index}] is tagged metrics, so it must list variable names: one per line, "
                    f"as `print(name)` (Kale) or `name` (line {statement.lineno} is neither)",
                    field=f"cells[{index}]",
                )
            if part.id not in names:
                names.append(part.id)
    return names

"""Linking steps by their data flow (`dataflow`): which step hands which value to which, so that
running the steps separately gives what running the notebook top to bottom gives.

- A name a step reads comes from the latest earlier step in notebook order that defines it (binds
  it, or changes it in place); an edge from there carries it, and orders the two steps.
- Then the newest version along the reader's ancestors wins (Kale's "nearest ancestor" rule): an
  ancestor that came after that definer and *touched* the name (may have changed it: passed it to a
  call, called a method on it) saves it again and hands it on. When two ancestors on parallel
  branches may both have changed it, the reader gets the one later in notebook order, and the graph
  warns, naming both: running top to bottom, the reader would see both changes.
- Names from `imports`, `functions` and `parameters` cells and builtins are never passed (every step
  runs those cells); a function from a `functions` cell brings its own free names in as reads of the
  step that uses it. A name read but defined nowhere before is a warning naming the cell, not an
  error: it may come from outside the notebook's static view (`%run`, `exec`, a star import).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from cube_jupyter.pipelines.dataflow import CodeFlow, analyze, is_kernel_name
from cube_jupyter.pipelines.effects import FunctionEffects
from cube_jupyter.pipelines.model import GraphWarning


@dataclass(frozen=True)
class StepCode:
    """A step as the linker sees it: its name, the (cell index, source) of its cells, and the steps
    its `after:` tags order it after."""

    name: str
    cells: tuple[tuple[int, str], ...]
    after: tuple[str, ...] = ()


@dataclass
class FlowGraph:
    """The result of linking: per-step inputs/outputs and the variables on each (upstream, downstream)."""

    inputs: dict[str, set[str]] = field(default_factory=dict)
    outputs: dict[str, set[str]] = field(default_factory=dict)
    edges: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    warnings: list[GraphWarning] = field(default_factory=list)


def _function_closure(functions: dict[str, set[str]], name: str) -> Iterator[str]:
    """Free names of a shared function, following the shared functions it calls in turn."""
    seen, stack = {name}, [name]
    while stack:
        for free in sorted(functions.get(stack.pop(), set())):
            if free in functions and free not in seen:
                seen.add(free)
                stack.append(free)
            elif free not in functions:
                yield free


class _Linker:
    """Walks steps in notebook order, remembering which step last defined (or deleted) each name, and
    which steps touched it since."""

    def __init__(self, shared: CodeFlow, steps: Sequence[StepCode]) -> None:
        self.shared = shared
        self.graph = FlowGraph()
        self.position = {step.name: i for i, step in enumerate(steps)}
        self.parents: dict[str, set[str]] = {step.name: set(step.after) for step in steps}
        self.functions: dict[str, FunctionEffects] = dict(shared.function_effects)
        self.latest: dict[str, str] = {}  # name → the step that last defined it
        self.touched_by: dict[str, list[str]] = {}  # name → steps that may have changed it since
        self.deleted_by: dict[str, str] = {}
        self.imported_by: dict[str, str] = {}
        self.held: dict[str, set[str]] = {}  # name → what it held in the step that last defined it

    def step(self, step: StepCode) -> None:
        name = step.name
        flow = analyze(step.cells, self.functions, self.held)
        self.graph.inputs[name] = set()
        self.graph.outputs.setdefault(name, set())
        star = bool(self.shared.star_imports or flow.star_imports)
        sources: dict[str, tuple[str, int]] = {}
        for read, cell, strong in self.reads(flow):
            source = self.latest.get(read)
            if source is not None:
                self.parents[name].add(source)
                sources.setdefault(read, (source, cell))
            else:
                self.unlinked(name, read, cell, strong, star)
        ancestors = self.ancestors(name)
        for read, (source, cell) in sources.items():
            self.link(self.newest(name, read, source, ancestors, cell), name, read, cell)
        for changed, (cell, held) in sorted(flow.detached.items()):
            self.detached(name, changed, cell, sorted(held & set(self.latest)))
        self.record(name, flow)

    def detached(self, step: str, name: str, cell: int, held: list[str]) -> None:
        """A change through a container an earlier step filled: the values it held there are handed on
        each on its own, so the change does not reach them."""
        if not held:
            return
        names = ", ".join(repr(h) for h in held)
        self.graph.warnings.append(
            GraphWarning(
                f"cell {cell} (step {step!r}) changes {name!r} in place, which holds {names} from the step "
                f"that filled it; steps hand each value on by itself, so the change does not reach "
                f"{names} in later steps: fill {name!r} in this step (e.g. `{name} = [{', '.join(held)}]`) "
                "or change them by name",
                cell,
            )
        )

    def reads(self, flow: CodeFlow) -> list[tuple[str, int, bool]]:
        """(name, cell, strong) for the step's reads, plus the free names of shared functions it calls."""
        reads = [(name, cell, True) for name, cell in flow.reads.items()]
        reads += [(name, cell, False) for name, cell in flow.weak_reads.items()]
        functions = self.shared.function_free
        for name, cell, strong in list(reads):
            if name in functions and name not in self.latest:
                for free in _function_closure(functions, name):
                    if free not in flow.defines and free not in flow.reads:
                        reads.append((free, cell, strong))
        return reads

    def ancestors(self, name: str) -> set[str]:
        seen: set[str] = set()
        stack = list(self.parents.get(name, ()))
        while stack:
            parent = stack.pop()
            if parent not in seen:
                seen.add(parent)
                stack.extend(self.parents.get(parent, ()))
        return seen

    def newest(self, reader: str, name: str, source: str, ancestors: set[str], cell: int) -> str:
        """Where `reader` takes `name` from: the newest version along its ancestors (module docstring)."""
        versions = {source, *(t for t in self.touched_by.get(name, ()) if t in ancestors)}
        lineage = {version: self.ancestors(version) for version in versions}
        newest = [v for v in versions if not any(v in lineage[w] for w in versions if w != v)]
        chosen = max(newest, key=self.position.__getitem__)
        others = sorted((v for v in newest if v != chosen), key=self.position.__getitem__)
        if others and name in self.graph.inputs.get(chosen, ()):  # a pure rebind makes the others moot
            both = " and ".join(repr(step) for step in [*others, chosen])
            self.graph.warnings.append(
                GraphWarning(
                    f"cell {cell} (step {reader!r}) uses {name!r}, which steps {both} may both change side "
                    f"by side; it gets {chosen!r}'s, without the other's change. Tag the first cell of "
                    f"step {chosen!r} 'after:{others[-1]}' so it sees both, as running in order does",
                    cell,
                )
            )
        return chosen

    def link(self, source: str, step: str, name: str, cell: int) -> None:
        self.parents[step].add(source)
        self.graph.inputs[step].add(name)
        self.graph.outputs[source].add(name)
        self.graph.edges.setdefault((source, step), set()).add(name)
        if name in self.imported_by:
            self.graph.warnings.append(
                GraphWarning(
                    f"cell {cell} (step {step!r}) uses module {name!r} imported in step "
                    f"{self.imported_by[name]!r}; move the import to a cell tagged 'imports' so every "
                    "step has it",
                    cell,
                )
            )

    def unlinked(self, step: str, name: str, cell: int, strong: bool, star: bool) -> None:
        """A read no earlier step defines: fine for a shared or kernel name, else a warning."""
        where = f"cell {cell} (step {step!r})"
        if not strong or name in self.shared.defines or is_kernel_name(name):
            return
        if name in self.deleted_by:
            message = f"{where} uses {name!r}, deleted by step {self.deleted_by[name]!r}"
        elif not star:
            message = f"{where} uses {name!r}, defined in no upstream step"
        else:
            return
        self.graph.warnings.append(GraphWarning(message, cell))

    def record(self, step: str, flow: CodeFlow) -> None:
        """What the step leaves for later steps: what it defines, deletes, and touches."""
        inputs = self.graph.inputs[step]
        for defined in flow.defines:
            if defined in flow.modified_only and defined not in inputs:
                continue  # a shared name (module, parameter) changed in place: every step re-creates it
            self.latest[defined] = step
            if defined not in inputs:  # bound afresh: what touched the old value no longer matters
                self.touched_by.pop(defined, None)
            self.deleted_by.pop(defined, None)
            if defined in flow.imported:
                self.imported_by[defined] = step
            else:
                self.imported_by.pop(defined, None)
        for touched in sorted((flow.touched & inputs) - set(flow.defines)):
            self.touched_by.setdefault(touched, []).append(step)
        for defined in flow.defines:
            if defined in flow.aliases:
                self.held[defined] = flow.aliases[defined]
            elif defined not in inputs:
                self.held.pop(defined, None)
        for deleted in flow.deleted:
            self.latest.pop(deleted, None)
            self.touched_by.pop(deleted, None)
            self.deleted_by[deleted] = step
        self.functions.update(flow.function_effects)

    def metric(self, name: str, cell: int) -> None:
        if name in self.latest:
            self.graph.outputs[self.latest[name]].add(name)
        elif name not in self.shared.defines:  # a parameter is recorded as the run's value
            self.graph.warnings.append(
                GraphWarning(f"cell {cell} (metrics) lists {name!r}, which no step defines", cell)
            )


def resolve(
    steps: Sequence[StepCode],
    shared: Sequence[tuple[int, str]],
    metrics: Sequence[tuple[str, int]] = (),
) -> FlowGraph:
    """Link steps (module docstring); `shared` are the imports, functions and parameters cells every
    step runs; `metrics` are (name, metrics cell index)."""
    linker = _Linker(analyze(shared), steps)
    for step in steps:
        linker.step(step)
    for name, cell in metrics:
        linker.metric(name, cell)
    return linker.graph

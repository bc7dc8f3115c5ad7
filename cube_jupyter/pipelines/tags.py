"""Cell tags → the notebook's layout: which cells form which step, and the shared cells around them.

Tags (Kale's spellings accepted as aliases):

- `step:NAME` (`block:NAME`) opens a step. NAME becomes a DNS-1123 label: `_` is read as `-` (Kale
  names are Python identifiers), anything else invalid is an error. Tagging a cell with the name of
  the most recent step continues that step (Kale tags every cell of a block); naming any earlier step
  again is a duplicate and an error.
- `after:NAME` (`prev:NAME`, several allowed) orders the step after NAME even when no data flows.
- `parameters` (`pipeline-parameters`), `metrics` (`pipeline-metrics`), `imports`, `functions`,
  `skip` give a cell a shared role. A cell has at most one role (a step or one of these).
- `image:REF`, `cpu:Q`, `memory:Q`, `gpu:N`, `retries:N`, `timeout:SECONDS` (plain seconds or with an
  `s`/`m`/`h` suffix) set the step's options; Kale's `limit:nvidia.com/gpu:N`, `limit:cpu:Q` and
  `limit:memory:Q` are read too. They may sit on any cell of the step; two different values for one
  option are an error.

An untagged code cell continues the role of the nearest tagged cell above it (the step above, or an
`imports`/`skip`/... block), as in Kale. Code before the first tag is an error asking for a tag rather
than a guessed step: which step it belongs to is the user's decision. Markdown and raw cells are
ignored, as are tags this module does not know (`hide-input`, `injected-parameters`, ...). Errors name
the cell as `cells[i].tags`, `i` counting from 0 over all cells as stored in the .ipynb file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from cube_jupyter import fields
from cube_jupyter.errors import InvalidInput
from cube_jupyter.names import validate_dns_label
from cube_jupyter.pipelines.model import PipelineError, StepOptions

Role = Literal["step", "parameters", "metrics", "imports", "functions", "skip"]

ROLE_TAGS: dict[str, Role] = {
    "parameters": "parameters",
    "pipeline-parameters": "parameters",
    "metrics": "metrics",
    "pipeline-metrics": "metrics",
    "imports": "imports",
    "functions": "functions",
    "skip": "skip",
}
STEP_KEYS = {"step", "block"}
AFTER_KEYS = {"after", "prev"}
OPTION_KEYS = {"image", "cpu", "memory", "gpu", "retries", "timeout", "limit"}
IGNORED_KALE_KEYS = {"annotation", "label"}
MAX_RETRIES = 100
DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(s|m|h)?$")
_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def vocabulary() -> dict[str, Any]:
    """The tags as an editor needs them: each shared role's tags (the one to write first, Kale's
    aliases after), the keys of `step:NAME` and `after:NAME` (the one to write first), and the option
    keys that belong on a step's cells only. Served in `GET /pipelines/config` for the Lab panel."""

    def written_first(keys: set[str] | list[str], canonical: str) -> list[str]:
        return sorted(keys, key=lambda key: (key != canonical, key))

    roles: dict[str, list[str]] = {}
    for tag, role in ROLE_TAGS.items():
        roles.setdefault(role, []).append(tag)
    return {
        "roles": {role: written_first(tags, role) for role, tags in roles.items()},
        "step": written_first(STEP_KEYS, "step"),
        "after": written_first(AFTER_KEYS, "after"),
        "options": sorted(OPTION_KEYS),
    }


@dataclass(frozen=True)
class CellTags:
    """What one cell's tags say: its role, the step it opens or names, ordering and option tags."""

    index: int
    role: Role | None = None
    step: str | None = None
    after: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass
class StepCells:
    """A step as the tags laid it out, before data flow: its cells, `after:` targets and options."""

    name: str
    cells: list[int] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    option_cells: dict[str, int] = field(default_factory=dict)

    def step_options(self) -> StepOptions:
        return StepOptions(**self.options)


@dataclass
class Layout:
    """The notebook split by tags: steps in notebook order and the shared cells as (index, code)."""

    steps: list[StepCells] = field(default_factory=list)
    imports: list[tuple[int, str]] = field(default_factory=list)
    functions: list[tuple[int, str]] = field(default_factory=list)
    parameters: list[tuple[int, str]] = field(default_factory=list)
    metrics: list[tuple[int, str]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def normalize_step_name(raw: str, where: str) -> str:
    """A step name as a DNS-1123 label; Kale's `load_data` becomes `load-data`."""
    name = raw.strip().replace("_", "-")
    try:
        return validate_dns_label(name, f"step name {raw!r} in {where}")
    except InvalidInput as exc:
        raise PipelineError(exc.message, field=where) from None


def parse_duration(value: str, where: str) -> float:
    match = DURATION.match(value.strip())
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2) or ""] if match else 0.0
    if seconds <= 0:
        raise PipelineError(
            f"{where}: timeout {value!r} is not a positive duration (examples: 'timeout:300', "
            "'timeout:90s', 'timeout:10m', 'timeout:2h')",
            field=where,
        )
    return seconds


def _count(key: str, value: str, where: str, maximum: int | None = None) -> int:
    text = value.strip()
    if not text.isdigit() or (maximum is not None and int(text) > maximum):
        limit = f" up to {maximum}" if maximum is not None else ""
        raise PipelineError(
            f"{where}: {key}:{value} needs a whole number{limit} (example: '{key}:1')", field=where
        )
    return int(text)


def _field(check: Callable[[object, str], str], key: str, value: str, where: str) -> str:
    """`check` (a core field rule) of a tag's value; its refusal as a PipelineError naming the cell."""
    try:
        return check(value.strip(), f"{where}: {key}")
    except InvalidInput as exc:
        raise PipelineError(exc.message, field=where) from None


def _option(key: str, value: str, where: str) -> tuple[str, Any] | None:
    """One option tag as (StepOptions field, validated value); None for a Kale limit we ignore."""
    if key == "image":
        return "image", _field(fields.image_reference, key, value, where)
    if key in ("cpu", "memory"):
        return key, _field(fields.quantity, key, value, where)
    if key == "gpu":
        return "gpu", _count("gpu", value, where)
    if key == "retries":
        return "retries", _count("retries", value, where, MAX_RETRIES)
    if key == "timeout":
        return "timeout", parse_duration(value, where)
    # Kale: limit:RESOURCE:AMOUNT, e.g. limit:nvidia.com/gpu:1, limit:memory:4Gi
    resource, _, amount = value.rpartition(":")
    resource = resource.strip()
    if resource.endswith("/gpu") or resource == "gpu":
        return "gpu", _count("gpu", amount, where)
    if resource in ("cpu", "memory"):
        return resource, _field(fields.quantity, resource, amount, where)
    return None


def parse_cell_tags(tags: object, index: int) -> CellTags:
    """Read one cell's `metadata.tags`; PipelineError naming `cells[index].tags` on a bad tag."""
    where = f"cells[{index}].tags"
    if tags is None:
        return CellTags(index)
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise PipelineError(f"{where} must be a list of strings", field=where)
    reader = _TagReader(index, where)
    for raw in tags:
        reader.read(raw)
    return reader.cell_tags()


@dataclass
class _TagReader:
    """One cell's tags, read one at a time: its role, its step, the steps it runs after, its options."""

    index: int
    where: str
    roles: list[Role] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def read(self, raw: str) -> None:
        key, sep, value = raw.strip().partition(":")
        key = key.strip().lower()
        valued = STEP_KEYS | AFTER_KEYS | OPTION_KEYS
        if not sep:
            if key in ROLE_TAGS:
                self.roles.append(ROLE_TAGS[key])
            elif key in valued:
                raise PipelineError(
                    f"{self.where}: tag {raw!r} needs a value, e.g. '{key}:...'", field=self.where
                )
            return
        if key in valued and not value.strip():
            raise PipelineError(f"{self.where}: tag {raw!r} has an empty value", field=self.where)
        if key in STEP_KEYS:
            _add_once(self.steps, normalize_step_name(value, self.where))
            self.roles.append("step")
        elif key in AFTER_KEYS:
            _add_once(self.after, normalize_step_name(value, self.where))
        elif key in OPTION_KEYS:
            self._option(raw, key, value)
        elif key in IGNORED_KALE_KEYS:
            self.warnings.append(f"cell {self.index}: tag {raw!r} is ignored")

    def _option(self, raw: str, key: str, value: str) -> None:
        parsed = _option(key, value, self.where)
        if parsed is None:
            self.warnings.append(
                f"cell {self.index}: tag {raw!r} is ignored (only gpu, cpu and memory limits are read)"
            )
            return
        name, val = parsed
        if name in self.options and self.options[name] != val:
            raise PipelineError(f"{self.where}: two different {name} values in one cell", field=self.where)
        self.options[name] = val

    def cell_tags(self) -> CellTags:
        if len(self.steps) > 1:
            raise PipelineError(
                f"{self.where}: a cell belongs to one step, but it is tagged {', '.join(self.steps)}",
                field=self.where,
            )
        distinct = sorted(set(self.roles))
        if len(distinct) > 1:
            raise PipelineError(
                f"{self.where}: a cell has one role, but it is tagged {' and '.join(distinct)}",
                field=self.where,
            )
        return CellTags(
            self.index,
            role=distinct[0] if distinct else None,
            step=self.steps[0] if self.steps else None,
            after=tuple(self.after),
            options=self.options,
            warnings=tuple(self.warnings),
        )


def _add_once(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)


def _merge_options(step: StepCells, tags: CellTags) -> None:
    for name, value in tags.options.items():
        if name in step.options and step.options[name] != value:
            first = step.option_cells[name]
            raise PipelineError(
                f"step {step.name!r} sets {name} twice with different values (cells {first} and "
                f"{tags.index}); keep one",
                field=f"cells[{tags.index}].tags",
            )
        step.options[name] = value
        step.option_cells.setdefault(name, tags.index)
    for name in tags.after:
        _add_once(step.after, name)


def cell_source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def split_cells(cells: list[Any]) -> Layout:
    """Group a notebook's cells by their tags (see the module docstring for the rules)."""
    layout = Layout()
    role: Role | None = None
    by_name: dict[str, StepCells] = {}
    current: StepCells | None = None  # the most recent step; a tag naming it continues it
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata") or {}
        tags = parse_cell_tags(metadata.get("tags") if isinstance(metadata, dict) else None, index)
        layout.warnings.extend(tags.warnings)
        source = cell_source(cell)
        where = f"cells[{index}].tags"
        if tags.role is not None:
            role = tags.role
        elif role is None:
            if not source.strip():
                continue
            raise PipelineError(
                f"cell {index} has code before the first tagged cell: tag it 'step:NAME' to make it a "
                "step, or 'imports', 'functions', 'parameters' or 'skip'",
                field=where,
            )
        if role != "step" and (tags.after or tags.options):
            raise PipelineError(
                f"cell {index}: 'after:' and option tags (image, cpu, memory, gpu, retries, timeout) "
                f"belong on a step's cell, but this cell is a {role} cell",
                field=where,
            )
        if role == "step":
            if tags.step is not None and (current is None or tags.step != current.name):
                if tags.step in by_name:
                    raise PipelineError(
                        f"duplicate step name {tags.step!r}: cell {index} opens it again after cell "
                        f"{by_name[tags.step].cells[0]}; give each step one name, or leave the "
                        "continuing cells untagged",
                        field=where,
                    )
                current = StepCells(tags.step)
                by_name[tags.step] = current
                layout.steps.append(current)
            assert current is not None  # role "step" is only ever set together with a step
            current.cells.append(index)
            current.source.append(source)
            _merge_options(current, tags)
        elif role == "skip":
            layout.skipped.append(index)
        else:
            getattr(layout, role).append((index, source))
    if not layout.steps:
        raise PipelineError(
            "the notebook has no steps: tag the first cell of each step 'step:NAME'", field="cells"
        )
    return layout

"""Cell tags → the notebook's layout: which cells form which step, and the shared cells around them.

Kale's tags mean what they mean in Kale (its `nbprocessor`), so a notebook written for Kale runs
unchanged; our own spellings are aliases of them:

- `step:NAME` (`block:NAME`) opens a step. NAME becomes a DNS-1123 label: `_` is read as `-` (Kale
  names are Python identifiers), anything else invalid is an error. Tagging a cell with the name of
  the most recent step continues that step (Kale tags every cell of a block); an empty `block:` or
  `step:` (what Kale's editor writes) continues it too. Naming an earlier step again after another
  one adds the cell to that step, out of notebook order, as Kale does, with a warning.
- `after:NAME` (`prev:NAME`, several allowed; `prev:a:b` is both, as early Kale read it) orders the
  step after NAME even when no data flows.
- `parameters` (`pipeline-parameters`), `metrics` (`pipeline-metrics`), `imports`, `functions`,
  `skip` give a cell a shared role. As in Kale, a role tag decides the cell: other tags beside it
  (`prev:`, `step:`, options) are ignored, with a warning; of two role tags the first wins.
- `skip` drops its own cell only: untagged cells after it continue what came before it (Kale).
- Options: `image:REF`, `cpu:Q`, `memory:Q`, `gpu:N`, `retries:N`, `timeout:SECONDS` (plain seconds
  or with an `s`/`m`/`h` suffix), `cache:enabled|disabled`; Kale's `limit:RESOURCE:AMOUNT` (a GPU
  resource, `cpu`, `memory`), `annotation:KEY:VALUE` and `label:KEY:VALUE` (the step pod's);
  `queue:NAME` and `priority:NAME`, the step pod's Kueue LocalQueue and WorkloadPriorityClass on the
  cluster, among those the admin offers (`CubeQueues.user_queues`). They may
  sit on any cell of the step; two different values for one option are an error. Kale's notebook-wide
  `steps_defaults` (and `docker_image`/`base_image`) apply to every step that does not set its own.

An untagged code cell continues the role of the nearest tagged cell above it. Code before the first
tagged cell belongs to no step: it is left out, with a warning (Kale drops it silently). Markdown and
raw cells are ignored, as are tags neither tool knows (`hide-input`, `injected-parameters`, ...);
Kale's tags this module does not honour (`secret:`, `report:`, `notebook:`) are warnings. Errors name
the cell as `cells[i].tags`, warnings carry the cell `i`, counting from 0 over all cells as stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cube_jupyter import fields
from cube_jupyter.errors import InvalidInput
from cube_jupyter.names import validate_dns_label, validate_label_value, validate_qualified_name
from cube_jupyter.pipelines.model import GraphWarning, PipelineError, StepOptions
from cube_jupyter.queues import queue_name

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
OPTION_KEYS = {
    "image",
    "cpu",
    "memory",
    "gpu",
    "retries",
    "timeout",
    "cache",
    "limit",
    "annotation",
    "label",
    "queue",
    "priority",
}
# Kale's tags we do not honour, and why: each is a warning naming the cell.
UNSUPPORTED_KALE_KEYS = {
    "secret": "Secrets reach steps through the workbench's storage settings only",
    "report": "no HTML report is made of a step",
    "notebook": "the referenced notebook's steps are not added to this pipeline",
}
KALE_METADATA = "kubeflow_notebook"  # where Kale keeps notebook-wide settings
MAX_RETRIES = 100
MAX_ANNOTATION_VALUE = 64 * 1024
DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(s|m|h)?$")
_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_CACHE_VALUES = {"enabled": True, "disabled": False}


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
    warnings: tuple[GraphWarning, ...] = ()


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
    warnings: list[GraphWarning] = field(default_factory=list)


def normalize_step_name(raw: str, where: str) -> str:
    """A step name as a DNS-1123 label; Kale's `load_data` becomes `load-data`, `_prep` `prep`."""
    name = raw.strip().strip("_").replace("_", "-")
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


def _pod_metadata(key: str, value: str, where: str) -> tuple[str, Any]:
    """`annotation:KEY:VALUE` / `label:KEY:VALUE` (the value is the rest, colons and all, as in Kale)."""
    name, sep, text = value.partition(":")
    if not sep:
        raise PipelineError(f"{where}: {key}:{value} needs a value (example: '{key}:team:ml')", field=where)
    name = _field(validate_qualified_name, f"{key} key", name, where)
    if key == "label":
        return "labels", {name: _field(validate_label_value, "label value", text, where)}
    if len(text) > MAX_ANNOTATION_VALUE:
        raise PipelineError(f"{where}: annotation {name!r} is over {MAX_ANNOTATION_VALUE} bytes", field=where)
    return "annotations", {name: text}


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
    if key in ("queue", "priority"):
        return key, _field(queue_name, key, value, where)
    if key == "cache":
        if value.strip().lower() not in _CACHE_VALUES:
            raise PipelineError(
                f"{where}: cache:{value} must be 'cache:enabled' or 'cache:disabled'", field=where
            )
        return "cache", _CACHE_VALUES[value.strip().lower()]
    if key in ("annotation", "label"):
        return _pod_metadata(key, value, where)
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

    index: int | None  # the cell's; None for the notebook's own (Kale's steps_defaults)
    where: str
    roles: list[Role] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    step_tags: list[str] = field(default_factory=list)  # as written: what a role tag makes ignored
    warnings: list[GraphWarning] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"cell {self.index}" if self.index is not None else self.where

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
        if key in STEP_KEYS:
            self.step_tags.append(raw)
            if value.strip():  # empty: Kale's editor's way of saying "continues the step above"
                _add_once(self.steps, normalize_step_name(value, self.where))
            return
        if key in valued and not value.strip():
            raise PipelineError(f"{self.where}: tag {raw!r} has an empty value", field=self.where)
        if key in AFTER_KEYS:  # `prev:a:b` is two (Kale before 0.6)
            self.step_tags.append(raw)
            for name in value.split(":"):
                _add_once(self.after, normalize_step_name(name, self.where))
        elif key in OPTION_KEYS:
            self.step_tags.append(raw)
            self._option(raw, key, value)
        elif key in UNSUPPORTED_KALE_KEYS:
            self.warn(f"{self.label}: Kale's tag {raw!r} is ignored: {UNSUPPORTED_KALE_KEYS[key]}")

    def warn(self, message: str) -> None:
        self.warnings.append(GraphWarning(message, self.index))

    def _option(self, raw: str, key: str, value: str) -> None:
        parsed = _option(key, value, self.where)
        if parsed is None:
            self.warn(f"{self.label}: tag {raw!r} is ignored (only GPU, cpu and memory limits are read)")
            return
        name, val = parsed
        if isinstance(val, dict):  # annotations, labels: one entry each
            self.options[name] = {**self.options.get(name, {}), **val}
            return
        if name in self.options and self.options[name] != val:
            raise PipelineError(f"{self.where}: two different {name} values in one cell", field=self.where)
        self.options[name] = val

    def cell_tags(self) -> CellTags:
        if self.roles:
            return self._role_cell()
        assert self.index is not None
        if len(self.steps) > 1:
            raise PipelineError(
                f"{self.where}: a cell belongs to one step, but it is tagged {', '.join(self.steps)}",
                field=self.where,
            )
        return CellTags(
            self.index,
            role="step" if self.steps else None,
            step=self.steps[0] if self.steps else None,
            after=tuple(self.after),
            options=self.options,
            warnings=tuple(self.warnings),
        )

    def _role_cell(self) -> CellTags:
        """A role tag decides the cell, as in Kale: the first one; the rest of its tags are ignored."""
        role = self.roles[0]
        ignored = [f"'{tag}'" for tag in self.step_tags]
        ignored += [f"'{other}'" for other in dict.fromkeys(self.roles[1:]) if other != role]
        if ignored:
            self.warn(f"{self.label} is a {role} cell, so its tags {', '.join(ignored)} are ignored")
        assert self.index is not None  # notebook defaults are never a cell
        return CellTags(self.index, role=role, warnings=tuple(self.warnings))


def _add_once(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)


def _merge_options(step: StepCells, tags: CellTags) -> None:
    for name, value in tags.options.items():
        if isinstance(value, dict):
            step.options[name] = {**step.options.get(name, {}), **value}
            continue
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


def _has_code(source: str) -> bool:
    """Anything but blank lines and comments (a cell of notes before the first tag runs nothing)."""
    return any(line.strip() and not line.strip().startswith("#") for line in source.splitlines())


def cell_source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def split_cells(cells: list[Any], metadata: Mapping[str, Any] | None = None) -> Layout:
    """Group a notebook's cells by their tags (see the module docstring for the rules); `metadata`
    is the notebook's, whose Kale settings give every step its defaults."""
    layout = Layout()
    role: Role | None = None  # of the block the next untagged cell continues
    by_name: dict[str, StepCells] = {}
    current: StepCells | None = None  # the most recent step; a tag naming it continues it
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        cell_metadata = cell.get("metadata") or {}
        tags = parse_cell_tags(cell_metadata.get("tags") if isinstance(cell_metadata, dict) else None, index)
        layout.warnings.extend(tags.warnings)
        source = cell_source(cell)
        where = f"cells[{index}].tags"
        if tags.role == "skip":
            continue  # the block around it goes on after it
        if tags.role is not None:
            role = tags.role
        elif role is None:
            if _has_code(source):
                layout.warnings.append(
                    GraphWarning(
                        f"cell {index} has code before the first tagged cell, so no step runs it: tag "
                        "it 'step:NAME' to make it a step, or 'imports', 'functions' or 'parameters'",
                        index,
                    )
                )
            continue
        if role != "step" and (tags.after or tags.options):
            raise PipelineError(
                f"cell {index}: 'after:' and option tags (image, cpu, memory, gpu, retries, timeout) "
                f"belong on a step's cell, but this cell continues a {role} cell",
                field=where,
            )
        if role == "step":
            if tags.step is not None and (current is None or tags.step != current.name):
                current = by_name.get(tags.step)
                if current is None:
                    current = by_name[tags.step] = StepCells(tags.step)
                    layout.steps.append(current)
                else:
                    layout.warnings.append(
                        GraphWarning(
                            f"cell {index} names step {tags.step!r} (opened at cell {current.cells[0]}) "
                            "again after other steps: its code joins that step and runs with it, before "
                            "the steps in between (as in Kale); leave it untagged under its step, or "
                            "give it a step of its own",
                            index,
                        )
                    )
            assert current is not None  # role "step" is only ever set together with a step
            current.cells.append(index)
            current.source.append(source)
            _merge_options(current, tags)
        else:
            getattr(layout, role).append((index, source))
    if not layout.steps:
        raise PipelineError(
            "the notebook has no steps: tag the first cell of each step 'step:NAME'", field="cells"
        )
    _apply_notebook_defaults(layout, metadata or {})
    return layout


def _apply_notebook_defaults(layout: Layout, metadata: Mapping[str, Any]) -> None:
    """Kale's notebook-wide step settings (`kubeflow_notebook.steps_defaults`, its base image) on every
    step that does not set its own; the Kale settings we do not honour are warnings."""
    kale = metadata.get(KALE_METADATA)
    if not isinstance(kale, Mapping):
        return
    where = f"metadata.{KALE_METADATA}"
    defaults = _TagReader(None, f"{where}.steps_defaults")
    raw_defaults = kale.get("steps_defaults")
    for raw in raw_defaults if isinstance(raw_defaults, list) else []:
        if isinstance(raw, str):
            defaults.read(raw)
    for key in ("base_image", "docker_image"):
        image = kale.get(key)
        if isinstance(image, str) and image.strip() and "image" not in defaults.options:
            defaults.options["image"] = _field(fields.image_reference, "image", image, f"{where}.{key}")
    for step in layout.steps:
        for name, value in defaults.options.items():
            if isinstance(value, dict):
                step.options[name] = {**value, **step.options.get(name, {})}
            else:
                step.options.setdefault(name, value)
    layout.warnings += defaults.warnings
    if kale.get("volumes"):
        layout.warnings.append(
            GraphWarning(f"{where}.volumes is ignored: steps read and write the run's artifact store")
        )
    if isinstance(kale.get("experiment_name"), str) and kale["experiment_name"].strip():
        layout.warnings.append(
            GraphWarning(f"{where}.experiment_name is ignored: runs are kept in the notebook's run history")
        )
    if kale.get("katib_run"):
        layout.warnings.append(
            GraphWarning(f"{where}.katib_run is ignored: tune with a tuning job (Jobs panel) instead")
        )

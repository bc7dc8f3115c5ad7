"""Where a pipeline run executes, behind one protocol: this machine (`local.target.LocalRunTarget`, the
local executor) or a cluster (`kubernetes.target.ArgoRunTarget`, Argo Workflows). `PipelineService`
parses the request, reads the notebook and checks its parameters; a target only admits, launches,
cancels and reports runs, as a notebook or job backend only creates and reads.

`RunRequest` is a run request as the REST API and the CLI give it, checked once at the edge.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from cube_jupyter import access, fields
from cube_jupyter.errors import InvalidInput
from cube_jupyter.pipelines.history import RunRecord, StepRecord
from cube_jupyter.pipelines.model import Pipeline

TARGETS = ("local", "cluster")
# The parameter a scheduled run's logical time is given in, when the parameters cell names it.
LOGICAL_DATE = "logical_date"
SCHEDULED = ("schedule", "logical_date")
# What a started local run reports as its steps change (the CLI's progress display).
Observer = Callable[[StepRecord], None]


@dataclass(frozen=True)
class RunRequest:
    """A request to run the pipeline of the notebook at `path`.

    With `notebook` (nbformat JSON: the editor's unsaved content) the run executes that content as
    the notebook at `path`, which must still be one of the caller's files (its folder is the steps'
    working directory); the file itself is neither read nor written."""

    path: str
    parameters: dict[str, Any] = field(default_factory=dict)
    target: str = "local"
    store: str | None = None  # an artifact store URL; None: the admin's
    parallel: int | None = None  # steps at once; None: as many as the target allows
    no_cache: bool = False
    notebook: Mapping[str, Any] | None = None
    # Set by a schedule, never by a request body: the schedule and the logical time (the fire time
    # the run stands for, ISO 8601 UTC), recorded with the run and given to a `logical_date` parameter.
    schedule: str | None = None
    logical_date: str | None = None

    @classmethod
    def from_dict(cls, body: object, targets: tuple[str, ...] = TARGETS) -> RunRequest:
        """The request in a REST body; each bad field is InvalidInput naming it."""
        raw = fields.mapping(body, "body")
        allowed = [f.name for f in dataclasses.fields(cls) if f.name not in SCHEDULED]
        unknown = sorted(set(raw) - set(allowed))
        if unknown:
            raise InvalidInput(
                f"unknown field {unknown[0]!r}; a run takes {', '.join(allowed)}", field=unknown[0]
            )
        access.file_path(raw.get("path"), "path")  # resolved among the caller's files by the service
        parameters, notebook, store = raw.get("parameters"), raw.get("notebook"), raw.get("store")
        return cls(
            path=str(raw["path"]),
            parameters={} if parameters is None else fields.mapping(parameters, "parameters"),
            target=fields.choice(raw.get("target", "local"), "target", targets, fold_case=False),
            store=None if store is None else fields.string(store, "store"),
            parallel=fields.optional_integer(raw.get("parallel"), "parallel", minimum=1),
            no_cache=fields.boolean(raw.get("no_cache", False), "no_cache"),
            notebook=None if notebook is None else fields.mapping(notebook, "notebook"),
        )


@dataclass(frozen=True)
class NewRun:
    """A checked request, its pipeline and parameter values, handed to a target to launch. `record`
    adds the run to the history (the target knows its store URL, id and external name)."""

    caller: str
    request: RunRequest
    pipeline: Pipeline
    values: dict[str, Any]
    folder: Path  # the notebook's folder: the steps' working directory
    record: Callable[..., RunRecord]


class RunTarget(Protocol):
    """Runs pipelines somewhere; every read of a run's state comes from the history or a cache."""

    async def start(self) -> None:
        """Begin background work (a cluster target's informer); raise CubeError when it cannot."""

    async def close(self) -> None:
        """Stop what it drives here (local runs are recorded as cancelled) and its background work."""

    def admit(self, caller: str, request: RunRequest) -> None:
        """Refuse early what this target never runs for `caller` (Forbidden, InvalidInput)."""

    async def launch(self, run: NewRun, observer: Observer | None = None) -> RunRecord:
        """Start the run; it goes on in the background (local) or on the cluster. Returns its record."""
        ...

    async def cancel(self, run: RunRecord) -> None:
        """Stop a run this target holds; Conflict when it cannot (another process drives it)."""

    def current(self, run: RunRecord) -> RunRecord:
        """`run` as it stands now: the history's record, merged with the target's live state."""
        ...


def new_run_id(pipeline: Pipeline) -> str:
    """Unique, sortable, and a valid Workflow label / store key segment."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{pipeline.name[:40].rstrip('-')}-{stamp}-{secrets.token_hex(3)}"

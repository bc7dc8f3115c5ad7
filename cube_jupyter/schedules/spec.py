"""A schedule as its owner writes it, checked once at the edge (REST body, CLI flags, PATCH): each bad
field is an InvalidInput naming it. `ScheduleSpec.to_dict` is what is stored and what the API returns.

What runs is either a tagged notebook (`kind: notebook`, its pipeline on the local executor, Argo or
Kubeflow Pipelines) or a training job spec (`kind: training`, a job of the jobs feature), each run
standing for one logical time. Words follow Argo's CronWorkflow where it has them
(`concurrency_policy`: Allow, Forbid, Replace) and Airflow's where it does not (`catchup`,
`logical_date`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cube_jupyter import access, fields
from cube_jupyter.errors import InvalidInput, PayloadTooLarge
from cube_jupyter.names import validate_dns_label
from cube_jupyter.schedules import timing

KINDS = ("notebook", "training")
CATCHUP = ("none", "latest", "all")
CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")
TARGETS = ("local", "cluster", "kfp")
# A CronWorkflow's name is at most 52 characters (Argo adds an 11-character suffix to its Workflows).
MAX_NAME = 52
MAX_CONCURRENCY = 64
MAX_RETRIES = 10
MAX_SECONDS = 30 * 86400
MAX_PATH = 1024
MAX_PARAMETERS_BYTES = 64 * 1024
MAX_JOB_BYTES = 256 * 1024


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    kind: str = "notebook"
    path: str | None = None  # kind notebook: the notebook, relative to the owner's files
    job: dict[str, Any] | None = None  # kind training: a training job spec, as `train run` takes
    parameters: dict[str, Any] = field(default_factory=dict)
    target: str = "local"
    cron: str | None = None
    interval_seconds: int | None = None
    timezone: str = "UTC"
    start: str | None = None  # ISO 8601 as given; `start_at` is the instant
    end: str | None = None
    catchup: str = "latest"
    max_concurrency: int = 1
    concurrency_policy: str = "Allow"
    retries: int = 0
    retry_backoff_seconds: int = 60
    depends_on: str | None = None
    depends_timeout_seconds: int = 3600
    paused: bool = False

    @classmethod
    def from_dict(cls, body: object, *, default_target: str = "local") -> ScheduleSpec:
        raw = fields.mapping(body, "body")
        names = [f.name for f in dataclasses.fields(cls)]
        fields.reject_unknown(raw, names, "")
        if "target" not in raw:
            raw["target"] = default_target
        return cls._checked(raw)

    def patched(self, changes: object) -> ScheduleSpec:
        """This spec with `changes` (any field but `name`) applied and checked as a whole."""
        raw = fields.mapping(changes, "body")
        names = [f.name for f in dataclasses.fields(self)]
        fields.reject_unknown(raw, names, "")
        if "name" in raw and raw["name"] != self.name:
            raise InvalidInput("name cannot change; create a new schedule instead", field="name")
        merged = self.to_dict()
        merged.update(raw)
        # Switching between cron and an interval: the one given replaces the other.
        if raw.get("cron") is not None and "interval_seconds" not in raw:
            merged["interval_seconds"] = None
        if raw.get("interval_seconds") is not None and "cron" not in raw:
            merged["cron"] = None
        return self._checked(merged)

    @classmethod
    def _checked(cls, raw: dict[str, Any]) -> ScheduleSpec:
        name = validate_dns_label(raw.get("name"), "name", MAX_NAME)
        kind = fields.choice(raw.get("kind", "notebook"), "kind", KINDS, fold_case=False)
        path, job = _what_runs(kind, raw)
        cron, interval = raw.get("cron"), raw.get("interval_seconds")
        if (cron is None) == (interval is None):
            raise InvalidInput(
                "give exactly one of cron (e.g. '0 2 * * *') and interval_seconds", field="cron"
            )
        zone = timing.timezone(raw.get("timezone", "UTC"))
        start = None if raw.get("start") is None else timing.instant(raw["start"], "start", zone)
        end = None if raw.get("end") is None else timing.instant(raw["end"], "end", zone, end_of_day=True)
        if start is not None and end is not None and end <= start:
            raise InvalidInput(f"end {raw['end']!r} is not after start {raw['start']!r}", field="end")
        depends_on = raw.get("depends_on")
        if depends_on is not None:
            depends_on = validate_dns_label(depends_on, "depends_on", MAX_NAME)
            if depends_on == name:
                raise InvalidInput("a schedule cannot depend on itself", field="depends_on")
        return cls(
            name=name,
            kind=kind,
            path=path,
            job=job,
            parameters=_bounded(
                {} if raw.get("parameters") is None else fields.mapping(raw["parameters"], "parameters"),
                "parameters",
                MAX_PARAMETERS_BYTES,
            ),
            target=fields.choice(raw.get("target", "local"), "target", TARGETS, fold_case=False),
            cron=None if cron is None else timing.cron_fields(cron),
            interval_seconds=None
            if interval is None
            else fields.integer(
                interval,
                "interval_seconds",
                minimum=timing.MIN_INTERVAL_SECONDS,
                maximum=timing.MAX_INTERVAL_SECONDS,
            ),
            timezone=zone,
            start=None if start is None else timing.iso(start),
            end=None if end is None else timing.iso(end),
            catchup=fields.choice(raw.get("catchup", "latest"), "catchup", CATCHUP, fold_case=False),
            max_concurrency=fields.integer(
                raw.get("max_concurrency", 1), "max_concurrency", minimum=1, maximum=MAX_CONCURRENCY
            ),
            concurrency_policy=fields.choice(
                raw.get("concurrency_policy", "Allow"), "concurrency_policy", CONCURRENCY_POLICIES
            ),
            retries=fields.integer(raw.get("retries", 0), "retries", minimum=0, maximum=MAX_RETRIES),
            retry_backoff_seconds=fields.integer(
                raw.get("retry_backoff_seconds", 60), "retry_backoff_seconds", minimum=0, maximum=MAX_SECONDS
            ),
            depends_on=depends_on,
            depends_timeout_seconds=fields.integer(
                raw.get("depends_timeout_seconds", 3600),
                "depends_timeout_seconds",
                minimum=0,
                maximum=MAX_SECONDS,
            ),
            paused=fields.boolean(raw.get("paused", False), "paused"),
        )

    def timing(self, anchor: datetime) -> timing.Timing:
        """When it fires; an interval counts from `start`, else from `anchor` (when it was made)."""
        return timing.Timing(
            cron=self.cron,
            interval_seconds=self.interval_seconds,
            timezone=self.timezone,
            start=None if self.start is None else timing.parse_iso(self.start),
            end=None if self.end is None else timing.parse_iso(self.end),
            anchor=anchor,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _what_runs(kind: str, raw: Mapping[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """(path, job): a notebook schedule names a notebook, a training schedule carries a job spec."""
    if kind == "notebook":
        if raw.get("job") is not None:
            raise InvalidInput("job is for kind 'training'; a notebook schedule takes path", field="job")
        path = str(access.file_path(raw.get("path"), "path"))
        if len(path) > MAX_PATH:
            raise InvalidInput(f"path is {len(path)} characters long; the limit is {MAX_PATH}", field="path")
        return path, None
    if raw.get("path") is not None:
        raise InvalidInput("path is for kind 'notebook'; a training schedule takes job", field="path")
    if raw.get("job") is None:
        raise InvalidInput("job is required for kind 'training': a training job spec", field="job")
    return None, _bounded(fields.mapping(raw["job"], "job"), "job", MAX_JOB_BYTES)


def _bounded(value: dict[str, Any], field: str, limit: int) -> dict[str, Any]:
    """`value` if its JSON is at most `limit` bytes: a schedule is read on every pass and listing."""
    size = len(json.dumps(value, default=str))
    if size > limit:
        raise PayloadTooLarge(f"{field} is {size} bytes as JSON; the limit is {limit}", field=field)
    return value

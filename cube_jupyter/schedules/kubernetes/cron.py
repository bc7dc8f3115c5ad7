"""A notebook schedule as an Argo `CronWorkflow` (Argo 4): pure functions over the Workflow the
pipelines feature compiles for the notebook (the composition root compiles it and passes it here).

How the schedule maps, and where Argo has no word for it:

- `cron` → `schedules: [cron]` in `timezone`. Argo's CRD takes numbers only (no day or month names)
  and robfig/cron no day-of-week 7; such an expression is refused here, naming `cron`.
- `interval_seconds` → a cron on the same grid, in UTC: whole minutes dividing an hour, whole hours
  dividing a day, a day or a week, counted from `start` (else when the schedule was made) on a whole
  minute. Any other interval is refused (`interval_seconds`): the cluster needs a cron. (Argo's
  `@every` counts from whenever its controller last (re)loaded the CronWorkflow, so its fire times,
  the runs' logical times, would not be the workbench's.)
- `start`/`end`: a CronWorkflow has neither; a start still to come or an end is refused (`start`,
  `end`): pause the schedule instead.
- `catchup` → `startingDeadlineSeconds`, how late Argo still runs the one latest missed fire time:
  `none` only within `on_time_seconds` (what the workbench counts as on time), `latest` and `all` a
  year. With `all` the workbench submits the other missed fire times itself (Argo has no backfill).
- `concurrency_policy` → `concurrencyPolicy`. Argo counts no runs: Allow runs every fire at once
  (however many `max_concurrency` says), Forbid and Replace act on any one run still going.
- `retries` → the entry DAG's `retryStrategy` (the whole run again, as the workbench retries a run).
- `paused` → `suspend: true`.
- the logical time: Argo annotates each Workflow it starts with `workflows.argoproj.io/scheduled-time`
  and offers `{{workflow.scheduledTime}}` (RFC 3339, in `timezone`); the steps get that as
  `logical_date` (when the notebook has that parameter). The annotation is how a run's logical time
  is known (`logical_date_of`), not a label: Argo's `labelsFrom` is evaluated once, racing the
  controller's own updates, and is sometimes lost (argo-workflows#12167; seen on the test plane).
- `depends_on` → a first DAG task, in the steps' own image (runtime included), that waits until the
  other schedule's Workflow for the same logical time has succeeded (`upstream.py`), for at most
  `depends_timeout_seconds` (its `activeDeadlineSeconds`). Not an Argo `resource` template: its `get`
  needs the object's name, and the other schedule's run for a logical time may not exist yet, or
  have a generated name (a workbench catch-up or backfill): only a label selector finds it.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from cube_jupyter.errors import InvalidInput
from cube_jupyter.kube.labels import LOGICAL_DATE_LABEL, SCHEDULE_LABEL, logical_date_from_label
from cube_jupyter.schedules import timing
from cube_jupyter.schedules.config import CubeSchedules
from cube_jupyter.schedules.store import Schedule

API_VERSION = "argoproj.io/v1alpha1"
KIND = "CronWorkflow"
# Argo's CRD pattern for a schedule's 5 fields (macros are expanded by `timing.cron_fields`).
ARGO_CRON = re.compile(r"^([0-9*,/?-]+\s+){4}[0-9*,/?-]+$")
SCHEDULED_TIME = "{{workflow.scheduledTime}}"
LOGICAL_DATE = "logical_date"
LATE_RUN_SECONDS = 366 * 86400
WAIT_TASK = "depends-on"
WAIT_TEMPLATE = "cube-depends-on"
WAIT_MODULE = "cube_jupyter.schedules.kubernetes.upstream"


def render_cron_workflow(
    schedule: Schedule,
    workflow: dict[str, Any],
    namespace: str,
    config: CubeSchedules,
    now: datetime,
) -> dict[str, Any]:
    """The CronWorkflow (named as the schedule) that runs `workflow`'s spec on the schedule's fire
    times. InvalidInput naming the field for what a CronWorkflow cannot say (module docstring)."""
    spec = schedule.spec
    schedules, zone = _cron(schedule)
    _bounds(schedule, now)
    metadata = workflow["metadata"]
    labels = {**metadata.get("labels", {}), SCHEDULE_LABEL: spec.name}
    workflow_spec = copy.deepcopy(workflow["spec"])
    _logical_date(workflow_spec)
    if spec.retries:
        _entry(workflow_spec)["retryStrategy"] = {
            "limit": spec.retries,
            "retryPolicy": "Always",
            "backoff": {"duration": f"{spec.retry_backoff_seconds}s", "factor": 2},
        }
    if spec.depends_on is not None:
        _wait_for(workflow_spec, spec.depends_on, spec.depends_timeout_seconds)
    deadline = round(config.on_time_seconds) if spec.catchup == "none" else LATE_RUN_SECONDS
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": spec.name,
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(metadata.get("annotations", {})),
        },
        "spec": {
            "schedules": schedules,
            "timezone": zone,
            "concurrencyPolicy": spec.concurrency_policy,
            "startingDeadlineSeconds": deadline,
            "successfulJobsHistoryLimit": config.history_limit,
            "failedJobsHistoryLimit": config.history_limit,
            "suspend": spec.paused,
            "workflowMetadata": {
                "labels": labels,
                "annotations": dict(metadata.get("annotations", {})),
            },
            "workflowSpec": workflow_spec,
        },
    }


def _cron(schedule: Schedule) -> tuple[list[str], str]:
    """(schedules, timezone) of the CronWorkflow."""
    spec = schedule.spec
    if spec.cron is not None:
        if not ARGO_CRON.match(spec.cron) or "7" in weekdays(spec.cron):
            raise InvalidInput(
                f"cron {spec.cron!r}: on the cluster, Argo takes numbers only (days of the week 0-6 "
                "with Sunday 0, months 1-12; no names, L, W or #)",
                field="cron",
            )
        return [spec.cron], spec.timezone
    assert spec.interval_seconds is not None
    origin = timing.parse_iso(spec.start or schedule.created)
    return [_interval_cron(spec.interval_seconds, origin, spec.start is not None)], "UTC"


def weekdays(cron: str) -> list[str]:
    """The days of the week a 5-field cron names (robfig/cron, Argo's and KFP's, has no 7)."""
    return [part.split("/")[0] for part in re.split(r"[,-]", cron.split(" ")[4])]


def _interval_cron(seconds: int, origin: datetime, given_start: bool) -> str:
    """The cron firing on origin + k * seconds, when there is one."""
    if origin.second:
        where = "start" if given_start else "the time the schedule was made"
        raise InvalidInput(
            f"on the cluster, an interval counts from a start on a whole minute, and {where} "
            f"({timing.iso(origin)}) is not: give start (e.g. '{timing.iso(origin.replace(second=0))}') "
            "or a cron",
            field="start",
        )
    minutes, hours = seconds // 60, seconds // 3600
    if seconds % 60 == 0 and 60 % minutes == 0:
        return f"{_steps(origin.minute, minutes, 59)} * * * *"
    if seconds % 3600 == 0 and 24 % hours == 0:
        return f"{origin.minute} {_steps(origin.hour, hours, 23)} * * *"
    if seconds == 7 * 86400:
        return f"{origin.minute} {origin.hour} * * {(origin.weekday() + 1) % 7}"
    raise InvalidInput(
        f"interval_seconds {seconds}: on the cluster, Argo fires from a cron, which has no such "
        "interval (whole minutes dividing an hour, whole hours dividing a day, a day or a week do); "
        "give a cron instead",
        field="interval_seconds",
    )


def _steps(at: int, every: int, last: int) -> str:
    """A cron field firing at `at` and every `every` after it, up to `last`."""
    if every == 1:
        return "*"
    first = at % every
    if every > last:
        return str(first)
    return f"*/{every}" if first == 0 else f"{first}-{last}/{every}"


def _bounds(schedule: Schedule, now: datetime) -> None:
    spec = schedule.spec
    if spec.end is not None:
        raise InvalidInput(
            "on the cluster, a schedule has no end (an Argo CronWorkflow cannot stop at a time): "
            "pause or delete it then instead",
            field="end",
        )
    if spec.start is not None and spec.cron is not None and timing.parse_iso(spec.start) > now:
        raise InvalidInput(
            f"on the cluster, a cron schedule starts when saved (an Argo CronWorkflow cannot wait for "
            f"a start), and start {spec.start} is still to come: save it paused, and resume it then",
            field="start",
        )
    if spec.start is not None and timing.parse_iso(spec.start) > now + timedelta(days=366):
        raise InvalidInput(f"start {spec.start} is more than a year away", field="start")


def _entry(workflow_spec: dict[str, Any]) -> dict[str, Any]:
    [entry] = [t for t in workflow_spec["templates"] if t["name"] == workflow_spec["entrypoint"]]
    entry_template: dict[str, Any] = entry
    return entry_template


def _logical_date(workflow_spec: dict[str, Any]) -> None:
    """The steps' `logical_date` is the time Argo scheduled the run for, which Argo resolves when it
    starts the Workflow."""
    reference = "{{workflow.parameters." + LOGICAL_DATE + "}}"
    for template in workflow_spec["templates"]:
        container = template.get("container")
        if container is not None:
            container["args"] = [SCHEDULED_TIME if arg == reference else arg for arg in container["args"]]


def _wait_for(workflow_spec: dict[str, Any], upstream: str, timeout: int) -> None:
    """A first task that waits for `upstream`'s run of the same logical time to succeed: in the first
    step's image, CPU, memory and runtime (none of its GPUs), so it runs wherever the steps can."""
    templates = workflow_spec["templates"]
    entry = _entry(workflow_spec)
    step = next(t for t in templates if t.get("container") is not None)
    wait = {key: copy.deepcopy(step[key]) for key in ("initContainers", "volumes") if key in step}
    container = copy.deepcopy(step["container"])
    container["command"] = [container["command"][0], "-m", WAIT_MODULE]  # the runner's Python
    container["args"] = [
        "--schedule",
        upstream,
        "--namespace",
        "{{workflow.namespace}}",
        "--scheduled-time",
        SCHEDULED_TIME,
    ]
    container["env"] = [var for var in container.get("env", []) if "value" in var]  # no store secrets
    container["resources"] = {
        kind: {name: amount for name, amount in amounts.items() if name in ("cpu", "memory")}
        for kind, amounts in container.get("resources", {}).items()
    }
    annotations = step.get("metadata", {}).get("annotations", {})  # no Istio sidecar among them
    wait.update(
        name=WAIT_TEMPLATE,
        metadata={"annotations": dict(annotations)},
        container=container,
        activeDeadlineSeconds=max(1, timeout),
    )
    tasks = entry["dag"]["tasks"]
    for task in tasks:
        if not task.get("dependencies"):
            task["dependencies"] = [WAIT_TASK]
    entry["dag"]["tasks"] = [{"name": WAIT_TASK, "template": WAIT_TEMPLATE}, *tasks]
    templates.append(wait)


def logical_date_of(workflow: dict[str, Any]) -> str | None:
    """The logical time ('2026-11-28T02:00:00Z') of a scheduled run's Workflow: the time Argo's
    CronWorkflow scheduled it for, or the label the workbench gave one it submitted itself."""
    metadata = workflow.get("metadata") or {}
    stamp = (metadata.get("annotations") or {}).get("workflows.argoproj.io/scheduled-time")
    if not stamp:
        return logical_date_from_label((metadata.get("labels") or {}).get(LOGICAL_DATE_LABEL, ""))
    return scheduled_time_in_utc(stamp)


def scheduled_time_in_utc(stamp: str) -> str | None:
    """Argo's scheduled time (RFC 3339 in the schedule's zone) as a logical time, in UTC."""
    try:
        return timing.iso(datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC))
    except ValueError:
        return None

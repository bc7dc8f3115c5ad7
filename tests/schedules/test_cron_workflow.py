"""A notebook schedule as an Argo CronWorkflow (`schedules.kubernetes.cron`): strict-valid against
the upstream CronWorkflow CRD (Argo 4, pinned in tools/crds/go.mod), the schedule's words mapped to
Argo's, an interval to the cron of the same fire times, and what a CronWorkflow cannot say refused
naming the field. The real API server and Argo's controller take it in tests/cluster."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from cronsim import CronSim
from traitlets.config import Config

from cube_jupyter.errors import InvalidInput
from cube_jupyter.kube.labels import LOGICAL_DATE_LABEL, SCHEDULE_LABEL, logical_date_label
from cube_jupyter.pipelines.kubernetes.argo import compile_workflow
from cube_jupyter.pipelines.model import Parameter
from cube_jupyter.schedules import timing
from cube_jupyter.schedules.config import CubeSchedules
from cube_jupyter.schedules.kubernetes.cron import (
    LATE_RUN_SECONDS,
    SCHEDULED_TIME,
    WAIT_TASK,
    WAIT_TEMPLATE,
    logical_date_of,
    render_cron_workflow,
    scheduled_time_in_utc,
)
from cube_jupyter.schedules.kubernetes.mirror import merge_patch
from cube_jupyter.schedules.kubernetes.upstream import verdict
from cube_jupyter.schedules.spec import ScheduleSpec
from cube_jupyter.schedules.store import Schedule
from tests.k8s_schemas import validate_object
from tests.pipelines.test_argo import fan_out_fan_in, make_settings

NOW = datetime(2026, 11, 20, 9, 30, 17, tzinfo=UTC)
CONFIG = CubeSchedules(config=Config({"CubeSchedules": {"history_limit": 5}}))
OWNER = "alice@example.com"


def scheduled(created: str = "2026-11-20T09:00:00Z", **fields: Any) -> Schedule:
    spec = ScheduleSpec.from_dict(
        {"name": "nightly", "path": "work/churn.ipynb", "target": "cluster", **fields}
    )
    return Schedule(OWNER, spec, created=created, updated=created, watermark=created, next_fire=None)


def workflow(logical_date: bool = False) -> dict[str, Any]:
    pipeline = fan_out_fan_in()
    parameters: dict[str, Any] = {}
    if logical_date:
        extra = Parameter("logical_date", None, "None")
        pipeline = replace(pipeline, parameters=(*pipeline.parameters, extra))
        parameters["logical_date"] = None
    return compile_workflow(
        pipeline, make_settings(), parameters=parameters, user=OWNER, namespace="cube-alice"
    )


def render(schedule: Schedule, logical_date: bool = False) -> dict[str, Any]:
    cron = render_cron_workflow(schedule, workflow(logical_date), "cube-alice", CONFIG, NOW)
    validate_object(cron)  # strict: every field must exist in the upstream CronWorkflow CRD
    return cron


def test_a_cron_schedule_is_a_strict_valid_cron_workflow_of_the_notebooks_workflow() -> None:
    cron = render(scheduled(cron="0 2 * * *", timezone="Europe/Berlin", concurrency_policy="Forbid"))
    spec = cron["spec"]
    assert cron["metadata"]["name"] == "nightly" and cron["metadata"]["namespace"] == "cube-alice"
    assert spec["schedules"] == ["0 2 * * *"] and spec["timezone"] == "Europe/Berlin"
    assert spec["concurrencyPolicy"] == "Forbid" and spec["suspend"] is False
    assert spec["successfulJobsHistoryLimit"] == spec["failedJobsHistoryLimit"] == 5
    assert spec["startingDeadlineSeconds"] == LATE_RUN_SECONDS  # catchup latest: Argo runs the latest
    labels = spec["workflowMetadata"]["labels"]
    assert labels[SCHEDULE_LABEL] == "nightly" and labels["cube-jupyter/user"].startswith("alice-")
    assert spec["workflowMetadata"]["annotations"]["cube-jupyter/user"] == OWNER
    assert cron["metadata"]["labels"] == labels
    compiled = workflow()["spec"]
    assert spec["workflowSpec"]["templates"] == compiled["templates"]  # no retries, no depends_on
    assert "workflowMetadata" not in spec["workflowSpec"]  # no labelsFrom: Argo loses it at times
    assert "retryStrategy" not in spec["workflowSpec"]["templates"][0]


def test_catchup_paused_and_retries_map_to_argos_words() -> None:
    none = render(
        scheduled(cron="*/5 * * * *", catchup="none", paused=True, retries=2, retry_backoff_seconds=30)
    )
    assert none["spec"]["startingDeadlineSeconds"] == round(CONFIG.on_time_seconds)
    assert none["spec"]["suspend"] is True
    entry = none["spec"]["workflowSpec"]["templates"][0]
    assert entry["name"] == none["spec"]["workflowSpec"]["entrypoint"]
    assert entry["retryStrategy"] == {
        "limit": 2,
        "retryPolicy": "Always",
        "backoff": {"duration": "30s", "factor": 2},
    }
    assert (
        render(scheduled(cron="0 * * * *", catchup="all"))["spec"]["startingDeadlineSeconds"]
        == LATE_RUN_SECONDS
    )


def test_the_steps_logical_date_is_the_time_argo_scheduled_the_run_for() -> None:
    cron = render(scheduled(cron="0 2 * * *"), logical_date=True)
    for template in cron["spec"]["workflowSpec"]["templates"]:
        if "container" in template:
            args = template["container"]["args"]
            assert args[args.index("logical_date") + 1] == SCHEDULED_TIME
    created = {
        "metadata": {"annotations": {"workflows.argoproj.io/scheduled-time": "2026-11-28T03:00:00+01:00"}}
    }
    assert logical_date_of(created) == "2026-11-28T02:00:00Z"
    assert logical_date_label("2026-11-28T02:00:00Z") == "20261128T020000Z"
    submitted = {"metadata": {"labels": {LOGICAL_DATE_LABEL: "20261128T020000Z"}}}  # by the workbench
    assert logical_date_of(submitted) == "2026-11-28T02:00:00Z"
    assert logical_date_of({"metadata": {}}) is None
    assert logical_date_of({"metadata": {"labels": {LOGICAL_DATE_LABEL: "2026112xT020000Z"}}}) is None
    assert scheduled_time_in_utc("yesterday") is None


@pytest.mark.parametrize(
    ("interval", "start", "expected"),
    [
        (60, None, "* * * * *"),
        (300, "2026-11-20T09:03:00Z", "3-59/5 * * * *"),
        (900, None, "*/15 * * * *"),
        (3600, "2026-11-20T09:07:00Z", "7 * * * *"),
        (3 * 3600, "2026-11-20T10:30:00Z", "30 1-23/3 * * *"),
        (86400, "2026-11-20T04:45:00Z", "45 4 * * *"),
        (7 * 86400, "2026-11-20T04:45:00Z", "45 4 * * 5"),  # a Friday
    ],
)
def test_an_interval_is_the_cron_of_the_same_fire_times(
    interval: int, start: str | None, expected: str
) -> None:
    schedule = scheduled(interval_seconds=interval, start=start)
    cron = render(schedule)
    assert cron["spec"]["schedules"] == [expected] and cron["spec"]["timezone"] == "UTC"
    after = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)
    ours = schedule.spec.timing(timing.parse_iso(schedule.created)).between(after, after.replace(day=28), 6)
    argos = CronSim(expected, after)
    assert [next(argos) for _ in ours] == ours


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "0 2 * * MON"}, "cron"),  # Argo's CRD takes numbers only
        ({"cron": "0 2 * * 7"}, "cron"),  # robfig/cron: days of the week are 0-6
        ({"interval_seconds": 7 * 60}, "interval_seconds"),  # divides no hour
        ({"interval_seconds": 2 * 86400}, "interval_seconds"),
        ({"interval_seconds": 45}, "interval_seconds"),
        ({"interval_seconds": 300, "start": "2026-11-20T09:03:10Z"}, "start"),  # not a whole minute
        ({"cron": "0 2 * * *", "end": "2026-12-01"}, "end"),
        ({"cron": "0 2 * * *", "start": "2026-12-01"}, "start"),  # still to come
    ],
)
def test_what_a_cron_workflow_cannot_say_is_refused_naming_the_field(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        render(scheduled(**fields))
    assert refused.value.field == field


def test_an_interval_counted_from_an_unaligned_creation_is_refused_naming_start() -> None:
    with pytest.raises(InvalidInput) as refused:
        render(scheduled(created="2026-11-20T09:00:42Z", interval_seconds=3600))
    assert refused.value.field == "start" and "2026-11-20T09:00:00Z" in refused.value.message


def test_depends_on_is_a_first_task_waiting_for_the_other_schedules_run_of_the_same_time() -> None:
    cron = render(scheduled(cron="0 3 * * *", depends_on="extract", depends_timeout_seconds=1800))
    spec = cron["spec"]["workflowSpec"]
    templates = {t["name"]: t for t in spec["templates"]}
    tasks = {t["name"]: t for t in templates[spec["entrypoint"]]["dag"]["tasks"]}
    assert tasks[WAIT_TASK] == {"name": WAIT_TASK, "template": WAIT_TEMPLATE}
    assert tasks["prepare"]["dependencies"] == [WAIT_TASK]  # the one root: every step waits
    assert tasks["report"]["dependencies"] == ["evaluate", "train-a", "train-b"]
    wait = templates[WAIT_TEMPLATE]
    assert wait["activeDeadlineSeconds"] == 1800
    container = wait["container"]
    assert container["command"][1:] == ["-m", "cube_jupyter.schedules.kubernetes.upstream"]
    assert container["args"] == [
        "--schedule", "extract", "--namespace", "{{workflow.namespace}}", "--scheduled-time", SCHEDULED_TIME,
    ]  # fmt: skip
    assert all("valueFrom" not in var for var in container["env"])  # no store credentials
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert wait["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


def test_the_wait_ends_on_the_first_success_or_once_every_run_failed() -> None:
    assert verdict([]) is None
    assert verdict(["Running"]) is None
    assert verdict(["Failed", "Running"]) is None  # a retry may still succeed
    assert verdict(["Failed", "Succeeded"]) is True
    assert verdict(["Failed", "Error"]) is False


def test_an_update_is_a_merge_patch_that_removes_what_the_schedule_no_longer_says() -> None:
    old = {"suspend": True, "schedules": ["0 2 * * *"], "workflowSpec": {"parallelism": 2, "entrypoint": "p"}}
    new = {"suspend": False, "schedules": ["0 3 * * *"], "workflowSpec": {"entrypoint": "p"}}
    assert merge_patch(old, new) == {
        "suspend": False,
        "schedules": ["0 3 * * *"],
        "workflowSpec": {"parallelism": None, "entrypoint": "p"},
    }


def test_argos_runs_are_in_the_history_while_they_run_and_once_they_end(tmp_path: Any) -> None:
    """A Workflow the CronWorkflow started is its logical time's slot, running, then as it ended; a
    logical time the workbench already has a run for keeps it; the scheduler leaves these slots to the
    mirror."""
    import asyncio

    from cube_jupyter.kube.labels import SCHEDULE_LABEL as SCHEDULE
    from cube_jupyter.kube.labels import USER_ANNOTATION
    from cube_jupyter.schedules.kubernetes.fired import FiredRuns
    from cube_jupyter.schedules.kubernetes.mirror import fired_slots
    from cube_jupyter.schedules.scheduler import Scheduler
    from cube_jupyter.schedules.store import ScheduleStore, Slot

    store = ScheduleStore.in_state_dir(tmp_path)
    store.create(scheduled(cron="0 2 * * *"), "{}", limit=10)
    store.add_slots([Slot(OWNER, "nightly", "2026-11-27T02:00:00Z", "succeeded", "backfill", created="x")])
    runs = FiredRuns(store)

    def fired(name: str, day: int, phase: str | None) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "labels": {SCHEDULE: "nightly"},
                "annotations": {
                    USER_ANNOTATION: OWNER,
                    "workflows.argoproj.io/scheduled-time": f"2026-11-{day}T02:00:00Z",
                },
            },
            "status": {}
            if phase is None
            else {"phase": phase, "message": "boom" if phase == "Failed" else ""},
        }

    assert runs.record(fired_slots([fired("nightly-1", 28, None), fired("nightly-0", 27, "Succeeded")])) == 1
    going = store.slot(OWNER, "nightly", "2026-11-28T02:00:00Z")
    assert going is not None and (going.state, going.origin, going.run_id) == (
        "running",
        "cluster",
        "nightly-1",
    )
    kept = store.slot(OWNER, "nightly", "2026-11-27T02:00:00Z")
    assert kept is not None and kept.origin == "backfill"  # one slot per logical time

    class NeverAsked:
        def outcome(self, owner: str, run_id: str) -> None:
            raise AssertionError("the scheduler read a run Argo started")

    scheduler = Scheduler(store, {"notebook": NeverAsked()}, CONFIG)  # type: ignore[dict-item]
    asyncio.run(scheduler.tick())
    assert runs.unsettled("uid-nightly-1")
    assert runs.record(fired_slots([fired("nightly-1", 28, "Failed")])) == 1
    ended = store.slot(OWNER, "nightly", "2026-11-28T02:00:00Z")
    assert ended is not None and (ended.state, ended.reason) == ("failed", "boom")
    assert not runs.unsettled("uid-nightly-1")
    store.close()

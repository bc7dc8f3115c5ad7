"""Notebook schedules with target `kfp` kept as KFP recurring runs (`schedules.kubernetes.recurring`),
through ScheduleService as the composition root wires it, against the stand-in KFP API server
(`tests/pipelines/kfp_server.py`, every answer read back as kfp_server_api's models): saved →
created with its trigger, parameters and uploaded version; edited → replaced, the history kept;
paused and resumed → disabled and enabled; deleted → deleted; the runs KFP starts → slots by logical
time; what KFP cannot say refused naming the field; KFP down → nothing saved. Time is a stepped clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import Settings, load_settings
from cube_jupyter.errors import BackendUnavailable, InvalidInput
from cube_jupyter.pipelines.kubernetes.kfp_api import KfpApi
from cube_jupyter.pipelines.kubernetes.kfp_target import KfpRunTarget
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter.schedules.kubernetes.recurring import POLL_SECONDS, SCHEDULED_TIME, RecurringRunMirror
from cube_jupyter.schedules.service import ScheduleService
from cube_jupyter.schedules.store import ScheduleStore, Slot
from cube_jupyter.services import _ScheduledKfpRun, _ScheduledPipelines
from tests.pipelines.kfp_server import KfpServer, serve
from tests.pipelines.notebooks import code, notebook, write
from tests.pipelines.test_kfp_target import Clock, FakeCluster
from tests.schedules.clocks import SteppedClock

NOTEBOOK = notebook(
    code("rate = 0.5\nlogical_date = None", "parameters"),
    code("values = [rate * i for i in range(4)]", "step:make"),
    code("print(logical_date, sum(values))", "step:show"),
)
NOW = datetime(2026, 11, 20, 9, 30, 17, tzinfo=UTC)
NIGHTLY = {"name": "nightly", "path": "work/calc.ipynb", "target": "kfp", "cron": "0 2 * * *"}


@dataclass
class Bench:
    service: ScheduleService
    mirror: RecurringRunMirror
    kfp: KfpServer
    clock: SteppedClock
    namespace: str

    def create(self, **fields: Any) -> Any:
        return asyncio.run(self.service.create("alice", {**NIGHTLY, **fields}))

    def patch(self, name: str = "nightly", **changes: Any) -> Any:
        return asyncio.run(self.service.patch("alice", name, changes))

    def recurring(self) -> list[dict[str, Any]]:
        return list(self.kfp.recurring.values())

    def posts(self) -> int:
        return self.kfp.calls.count(("POST", "/apis/v2beta1/recurringruns"))


def settings_for(root: Path, url: str, cluster_target: str = "kfp") -> Settings:
    return load_settings(
        Config(
            {
                "CubeWorkbench": {"state_dir": str(root / "state"), "default_user": "alice"},
                "CubeStorage": {"url": "s3://ml/artifacts"},
                "CubePipelines": {"kfp_url": url, "cluster_target": cluster_target},
            }
        )
    )


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    (tmp_path / "work").mkdir()
    write(NOTEBOOK, tmp_path / "work" / "calc.ipynb")
    namespace = settings_for(tmp_path, "http://x").namespace_for("alice")
    kfp = KfpServer(access={"alice": {namespace}})
    server, url = serve(kfp)
    settings = settings_for(tmp_path, url)
    cluster: Any = FakeCluster()
    pipelines = PipelineService(
        settings.pipelines,
        tmp_path,
        pool_size=1,
        kfp=KfpRunTarget(settings.pipelines, cluster, clock=Clock()),
    )
    store = ScheduleStore.in_state_dir(settings.state_dir)
    clock = SteppedClock(NOW)
    api = KfpApi.from_settings(settings.pipelines.pipelines)
    mirror = RecurringRunMirror(
        settings.schedules, cluster, store, api, _ScheduledKfpRun(settings, api), clock=clock
    )
    launchers: Any = {"notebook": _ScheduledPipelines(pipelines)}
    service = ScheduleService(settings.schedules, store, launchers, clock=clock, mirrors=[mirror])
    yield Bench(service, mirror, kfp, clock, namespace)
    store.close()
    api.close()
    asyncio.run(pipelines.close())
    server.shutdown()
    server.server_close()


def test_saving_creates_a_recurring_run_of_the_uploaded_snapshot(bench: Bench) -> None:
    bench.create(parameters={"rate": 0.25}, catchup="latest", max_concurrency=3, end="2027-01-31")
    [made] = bench.recurring()
    assert (made["display_name"], made["namespace"], made["mode"], made["status"]) == (
        "nightly",
        bench.namespace,
        "ENABLE",
        "ENABLED",
    )
    assert made["trigger"] == {
        "cron_schedule": {
            "cron": "0 0 2 * * *",  # KFP's seconds first
            "start_time": "2026-11-21T01:59:59Z",  # KFP's first run: the next fire time
            "end_time": "2027-01-31T23:59:59Z",
        }
    }
    assert (made["max_concurrency"], made["no_catchup"]) == ("3", True)
    assert made["runtime_config"] == {
        "parameters": {"rate": 0.25, "logical_date": SCHEDULED_TIME},
        "pipeline_root": "s3://ml/artifacts",
    }
    version = bench.kfp.versions[made["pipeline_version_reference"]["pipeline_version_id"]]
    assert set(version["pipeline_spec"]["root"]["inputDefinitions"]["parameters"]) == {"rate", "logical_date"}
    assert bench.kfp.experiments[made["experiment_id"]]["namespace"] == bench.namespace
    assert bench.service.scheduler.cluster_fired(bench.service.get("alice", "nightly"), [NOW]) == []


def test_an_interval_is_kfps_periodic_schedule_on_the_same_grid(bench: Bench) -> None:
    bench.create(cron=None, interval_seconds=3600, start="2026-11-20T08:15:00Z", catchup="all")
    [made] = bench.recurring()
    # The next fire time is 10:15; KFP's first run is start_time + the interval.
    assert made["trigger"] == {
        "periodic_schedule": {"interval_second": "3600", "start_time": "2026-11-20T09:15:00Z"}
    }
    assert made["no_catchup"] is False


def test_an_edit_replaces_the_recurring_run_and_keeps_the_history(bench: Bench) -> None:
    bench.create()
    [old] = bench.recurring()
    slot = Slot("alice", "nightly", "2026-11-19T02:00:00Z", "succeeded", "kfp", created="x")
    bench.service.store.add_slots([slot])
    bench.patch(parameters={"rate": 0.75}, cron="30 3 * * *")
    [new] = bench.recurring()
    assert new["recurring_run_id"] != old["recurring_run_id"]
    assert new["runtime_config"]["parameters"]["rate"] == 0.75
    assert new["trigger"]["cron_schedule"]["cron"] == "0 30 3 * * *"
    assert [s.logical for s in bench.service.runs("alice", "nightly")] == [slot.logical]


def test_pause_and_resume_disable_and_enable_it(bench: Bench) -> None:
    bench.create()
    [made] = bench.recurring()
    bench.patch(paused=True)
    assert [r["status"] for r in bench.recurring()] == ["DISABLED"]
    bench.patch(paused=False)
    assert [(r["recurring_run_id"], r["status"]) for r in bench.recurring()] == [
        (made["recurring_run_id"], "ENABLED")
    ]
    assert bench.posts() == 1  # neither made anew


def test_delete_deletes_it_and_another_target_takes_it_off_kfp(bench: Bench) -> None:
    bench.create()
    asyncio.run(bench.service.delete("alice", "nightly"))
    assert bench.recurring() == []
    bench.create()
    bench.patch(target="local")
    assert bench.recurring() == []


def test_the_runs_kfp_starts_are_slots_by_logical_time(bench: Bench) -> None:
    bench.create()
    [made] = bench.recurring()
    first = bench.kfp.fire(made["recurring_run_id"], "2026-11-21T02:00:00Z")
    second = bench.kfp.fire(made["recurring_run_id"], "2026-11-22T02:00:00Z", state="PENDING")
    assert bench.mirror.poll() == 2
    going = bench.service.store.slot("alice", "nightly", "2026-11-21T02:00:00Z")
    assert going is not None and (going.state, going.origin, going.run_id) == ("running", "kfp", first)

    bench.kfp.set_run(first, "SUCCEEDED", finished_at="2026-11-21T02:10:00Z")
    bench.kfp.set_run(second, "FAILED", error={"code": 2, "message": "task step-show failed"})
    listed = len(bench.kfp.calls)
    assert bench.mirror.poll() == 0 and len(bench.kfp.calls) == listed  # at most once per POLL_SECONDS
    bench.clock.advance(POLL_SECONDS)
    assert bench.mirror.poll() == 2
    ended = {s.logical: (s.state, s.reason, s.finished) for s in bench.service.runs("alice", "nightly")}
    assert ended == {
        "2026-11-21T02:00:00Z": ("succeeded", None, "2026-11-21T02:10:00Z"),
        "2026-11-22T02:00:00Z": ("failed", "task step-show failed", None),
    }
    # The scheduler neither fires a KFP schedule nor reads KFP's runs of it.
    bench.clock.advance(3 * 86400)
    asyncio.run(bench.service.scheduler.tick())
    assert len(bench.service.runs("alice", "nightly")) == 2


def test_a_running_slot_of_a_replaced_recurring_run_is_still_followed(bench: Bench) -> None:
    bench.create()
    [old] = bench.recurring()
    run = bench.kfp.fire(old["recurring_run_id"], "2026-11-21T02:00:00Z")
    bench.mirror.poll()
    bench.patch(parameters={"rate": 0.1})
    bench.kfp.set_run(run, "SUCCEEDED")
    bench.clock.advance(POLL_SECONDS)
    assert bench.mirror.poll() == 1
    assert [s.state for s in bench.service.runs("alice", "nightly")] == ["succeeded"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"timezone": "Europe/Berlin"}, "timezone"),
        ({"cron": "0 2 * * 7"}, "cron"),
        ({"catchup": "none"}, "catchup"),
        ({"max_concurrency": 11}, "max_concurrency"),
        ({"concurrency_policy": "Forbid"}, "concurrency_policy"),
        ({"retries": 1}, "retries"),
        ({"depends_on": "extract"}, "depends_on"),
    ],
)
def test_what_kfp_cannot_say_is_refused_naming_the_field(
    bench: Bench, fields: dict[str, Any], field: str
) -> None:
    bench.create(name="extract")
    with pytest.raises(InvalidInput) as refused:
        bench.create(**fields)
    assert refused.value.field == field
    assert [s.name for s in bench.service.store.list()] == ["extract"] and len(bench.recurring()) == 1


def test_kfp_down_saves_nothing_and_reverts_an_edit(bench: Bench, refused_port: int) -> None:
    bench.create()
    [made] = bench.recurring()
    gone = f"http://127.0.0.1:{refused_port}"
    live, bench.mirror.api.url = bench.mirror.api.url, gone  # type: ignore[attr-defined]
    with pytest.raises(BackendUnavailable, match=r"CubePipelines.kfp_url .* cannot be reached"):
        bench.create(name="weekly")
    assert bench.service.store.get("alice", "weekly") is None
    with pytest.raises(BackendUnavailable):
        bench.patch(parameters={"rate": 0.9})
    assert bench.service.get("alice", "nightly").spec.parameters == {}
    bench.mirror.api.url = live  # type: ignore[attr-defined]
    assert bench.recurring() == [made]


def test_run_now_is_a_plain_kfp_run(bench: Bench) -> None:
    bench.create()
    slot = bench.service.run_now("alice", "nightly")
    asyncio.run(bench.service.scheduler.tick())
    started = bench.service.store.slot("alice", "nightly", slot.logical)
    assert started is not None and started.state == "running"
    [run] = bench.kfp.runs.values()
    assert "recurring_run_id" not in run
    assert run["runtime_config"]["parameters"]["logical_date"] == slot.logical


def test_target_kfp_only_where_the_workbench_offers_it(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    write(NOTEBOOK, tmp_path / "work" / "calc.ipynb")
    settings = settings_for(tmp_path, "http://x", cluster_target="argo")
    pipelines = PipelineService(settings.pipelines, tmp_path, pool_size=1)
    store = ScheduleStore.in_state_dir(settings.state_dir)
    service = ScheduleService(settings.schedules, store, {"notebook": _ScheduledPipelines(pipelines)})  # type: ignore[dict-item]
    try:
        with pytest.raises(InvalidInput) as refused:
            asyncio.run(service.create("alice", NIGHTLY))
        assert refused.value.field == "target"
    finally:
        store.close()
        asyncio.run(pipelines.close())

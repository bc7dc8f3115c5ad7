"""The local training queue with real replica processes: with `CubeJobs.cpu_slots` = 2 a 2-replica
job runs, the next waits Queued (place and reason recorded), starts whole when the first ends, even
after the workbench that queued it was killed; a queued job can be deleted; the bounds hold."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.errors import InvalidInput, QuotaExceeded
from cube_jupyter.jobs.local.training import LocalTrainingRunner
from cube_jupyter.local.admission import QueuePolicy
from cube_jupyter.storage.local import LocalStore
from tests.jobs.local.conftest import USER, training
from tests.jobs.local.test_local_training import PY, TIMEOUT, awaiting, gone

SLOTS_FULL = "waiting for 2 CPU slots: 0 of 2 free (CubeJobs.cpu_slots)"


def pair(name: str, go: Path) -> dict[str, Any]:
    """A job of two replicas (two CPU slots) that run until `go` exists, then succeed."""
    return {
        "name": name,
        "framework": "pytorch",
        "replicas": {"master": 1, "worker": 1},
        "command": awaiting(go, 0),
    }


def queued_runner(tmp_path: Path, **policy: Any) -> LocalTrainingRunner:
    return LocalTrainingRunner(
        tmp_path / "state",
        store=LocalStore(tmp_path / "store"),
        mpirun="",
        stop_grace_seconds=3.0,
        policy=QueuePolicy(cpu_slots=2, **policy),
    )


@pytest.fixture
def runner(tmp_path: Path) -> Any:
    runner = queued_runner(tmp_path, max_queued=2)
    yield runner
    for job in runner.list():
        runner.delete(job.user, job.name)


def test_a_second_job_waits_for_the_cpu_slots_then_runs_whole(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    first = runner.start(training(pair("first", go)))
    assert first.phase == "Running" and first.queue is None
    second = runner.start(training(pair("second", go)))
    assert second.phase == "Queued" and second.queue is not None
    assert (second.queue.position, second.queue.reason) == (1, SLOTS_FULL)
    assert [(r.state, r.pid) for r in second.replicas] == [("Pending", None), ("Pending", None)]

    third = runner.start(training(pair("third", go)))  # queued behind second: deleted while waiting
    assert third.queue is not None and third.queue.position == 2
    with pytest.raises(QuotaExceeded, match="max_queued_per_user") as refused:
        runner.start(training(pair("fourth", go)))
    assert refused.value.field == "name" and runner.get(USER, "fourth") is None  # nothing left of it
    runner.delete(USER, "third")
    assert runner.get(USER, "third") is None
    assert not runner.records.directory(USER, "third").exists()

    go.touch()
    assert runner.wait(USER, "first", TIMEOUT).phase == "Succeeded"
    admitted = runner.get(USER, "second")
    assert (
        admitted is not None
        and admitted.queue is None
        and admitted.phase in ("Created", "Running", "Succeeded")
    )
    assert all(r.pid for r in admitted.replicas)  # both replicas started, together
    assert runner.wait(USER, "second", TIMEOUT).phase == "Succeeded"


def test_what_no_wait_could_give_is_refused_at_once(runner: LocalTrainingRunner) -> None:
    spec = {"name": "wide", "framework": "pytorch", "replicas": {"worker": 3}, "command": [PY, "-c", "pass"]}
    with pytest.raises(InvalidInput, match=r"3 CPU slots .* CubeJobs\.cpu_slots is 2") as refused:
        runner.start(training(spec))
    assert refused.value.field == "replicas" and runner.get(USER, "wide") is None


QUEUEING_WORKBENCH = """
import json, sys
from cube_jupyter.local.admission import QueuePolicy
from cube_jupyter.jobs.local.training import LocalTrainingRunner
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.storage.local import LocalStore
state, store, user, *specs = sys.argv[1:]
runner = LocalTrainingRunner(state, store=LocalStore(store), mpirun="", policy=QueuePolicy(cpu_slots=2))
jobs = [runner.start(TrainingSpec.from_dict(json.loads(spec), user=user)) for spec in specs]
print(json.dumps([job.phase for job in jobs]), flush=True)
sys.stdin.read()  # supervise until killed
"""


def test_a_queued_job_survives_a_killed_workbench_and_starts_under_the_next(tmp_path: Path) -> None:
    go = tmp_path / "go"
    specs = [json.dumps(pair("first", go)), json.dumps(pair("second", go))]
    argv = [PY, "-c", QUEUEING_WORKBENCH, str(tmp_path / "state"), str(tmp_path / "store"), USER, *specs]
    workbench = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    assert workbench.stdout is not None
    assert json.loads(workbench.stdout.readline()) == ["Running", "Queued"]
    workbench.send_signal(signal.SIGKILL)
    workbench.wait()

    runner = queued_runner(tmp_path)  # the next workbench: reads the queue from the state dir
    try:
        runner.refresh_all()  # its start-up pass: first is re-attached, second still waits
        second = runner.get(USER, "second")
        assert second is not None and second.queue is not None
        assert (second.phase, second.queue.position, second.queue.reason) == ("Queued", 1, SLOTS_FULL)
        go.touch()
        assert runner.wait(USER, "first", TIMEOUT).phase == "Succeeded"
        job = runner.wait(USER, "second", TIMEOUT)
        assert job.phase == "Succeeded", job.message
        assert all(r.pid is not None and gone(r.pid) for r in job.replicas)
    finally:
        for job in runner.list():
            runner.delete(job.user, job.name)

"""Run history in sqlite: what the executor writes is what a restarted server reads back, and a run
whose driving process died is marked failed instead of staying "running" forever."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cube_jupyter.errors import Conflict, NotFound
from cube_jupyter.pipelines.history import RunHistory, RunRecord, now


def record(run_id: str, user: str = "alice", created: str | None = None) -> RunRecord:
    return RunRecord(
        id=run_id,
        user=user,
        path="work/train.ipynb",
        pipeline="train",
        status="queued",
        target="local",
        parameters={"lr": 0.1},
        store="/tmp/store",
        created=created or now(),
    )


def test_a_run_and_its_steps_survive_reopening(tmp_path: Path) -> None:
    history = RunHistory.in_state_dir(tmp_path)
    history.create(record("r1"), ["load", "train", "report"])
    history.update_run("r1", status="running", started=now())
    history.update_step(
        "r1",
        "load",
        status="succeeded",
        duration=0.5,
        attempts=1,
        notebook="runs/r1/x.ipynb",
        outputs={"df": {"key": "runs/r1/outputs/load/df", "hash": "abc"}},
        cache_key="k1",
    )
    history.update_step(
        "r1",
        "train",
        status="failed",
        attempts=2,
        error={"message": "boom", "cell": 3, "ename": "ValueError", "evalue": "x", "traceback": ["line"]},
    )
    history.finish_steps("r1", "skipped")
    history.update_run("r1", status="failed", finished=now(), error="step 'train' failed")

    reopened = RunHistory(tmp_path / "pipelines.sqlite")
    run = reopened.get("r1")
    assert run.status == "failed" and run.error == "step 'train' failed"
    assert run.parameters == {"lr": 0.1}
    assert [s.name for s in run.steps] == ["load", "train", "report"]
    load, train, report = run.steps
    assert (load.status, load.duration, load.attempts, load.cache_key) == ("succeeded", 0.5, 1, "k1")
    assert load.outputs["df"]["hash"] == "abc"
    assert train.error is not None and train.error["cell"] == 3 and train.attempts == 2
    assert report.status == "skipped" and report.finished is not None
    body = run.to_dict()
    assert set(body["steps"][0]) == {
        "name",
        "status",
        "started",
        "finished",
        "duration",
        "attempts",
        "cache_hit",
        "error",
        "notebook",
        "files",
        "gpus",
        "reason",
    }
    assert body["steps"][0]["notebook"] == "runs/r1/x.ipynb"


def test_list_is_per_user_newest_first(tmp_path: Path) -> None:
    history = RunHistory.in_state_dir(tmp_path)
    history.create(record("a1", created="2025-01-01T00:00:00.000Z"), ["s"])
    history.create(record("a2", created="2025-01-02T00:00:00.000Z"), ["s"])
    history.create(record("b1", user="bob"), ["s", "t"])
    assert [r.id for r in history.list("alice")] == ["a2", "a1"]
    assert [r.id for r in history.list("bob")] == ["b1"]
    assert {r.id for r in history.list(None)} == {"a1", "a2", "b1"}
    assert [s.name for s in history.list("bob")[0].steps] == ["s", "t"]


def test_bad_ids_and_fields_are_refused(tmp_path: Path) -> None:
    history = RunHistory.in_state_dir(tmp_path)
    history.create(record("r1"), ["s"])
    with pytest.raises(Conflict):
        history.create(record("r1"), ["s"])
    with pytest.raises(NotFound, match="no pipeline run with id 'nope'"):
        history.get("nope")
    with pytest.raises(NotFound, match="no step named 'ghost'"):
        history.update_step("r1", "ghost", status="running")
    with pytest.raises(ValueError, match="unknown step fields"):
        history.update_step("r1", "s", colour="red")


def test_finished_run_is_not_reopened_by_a_late_update(tmp_path: Path) -> None:
    history = RunHistory.in_state_dir(tmp_path)
    history.create(record("r1"), ["s"])
    history.update_run("r1", status="cancelled", finished=now())
    assert history.update_run("r1", only_if_active=True, status="succeeded").status == "cancelled"


def test_a_run_whose_driver_died_is_marked_failed(tmp_path: Path) -> None:
    """A real process creates a run and exits without finishing it, as a killed server would."""
    history = RunHistory.in_state_dir(tmp_path)
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from cube_jupyter.pipelines.history import RunHistory, RunRecord, now
        history = RunHistory(Path({str(tmp_path / "pipelines.sqlite")!r}))
        history.create(RunRecord(id="orphan", user="alice", path="nb.ipynb", pipeline="nb", status="running",
                                 target="local", parameters={{}}, store="s", created=now()), ["a", "b"])
        history.update_step("orphan", "a", status="running", started=now())
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=60)
    history.create(record("mine").evolve(status="running"), ["a"])  # driven by this live process

    assert history.recover() == ["orphan"]
    orphan = history.get("orphan")
    assert orphan.status == "failed" and orphan.error is not None and "exited" in orphan.error
    assert [(s.name, s.status) for s in orphan.steps] == [("a", "failed"), ("b", "skipped")]
    assert orphan.steps[0].error is not None and "exited" in orphan.steps[0].error["message"]
    assert history.get("mine").status == "running"
    assert history.recover() == []

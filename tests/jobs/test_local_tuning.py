"""The local tuner runs real trials: notebooks through papermill (and a training job) in parallel
processes, driven by Optuna, with metrics read from `name=value` lines as Katib's StdOut collector
reads them."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import optuna
import psutil
import pytest

from cube_jupyter.errors import Conflict, InvalidInput, NotFound
from cube_jupyter.jobs.local import optuna_search
from cube_jupyter.jobs.local.trial_metrics import TrialMetrics
from cube_jupyter.jobs.local.tuning import LocalTuner
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.storage.local import LocalStore
from tests.waiting import wait_until

USER = "alice"
WAIT = 240.0

# The notebook a trial runs: a papermill parameters cell, then a score that is a known function of them.
PARAMETERS = 'x = 0.0\ny = "a"\nmode = "score"'
SCORE = """
import os, pathlib, time

def accuracy(x, y):
    return 1 - (x - 0.3) ** 2 + (0.1 if y == "b" else 0.0)

barrier = os.environ.get("BARRIER_DIR")
if barrier:  # wait (bounded) until every trial of the experiment runs: proof they run at once
    pathlib.Path(barrier, os.environ["CUBE_TRIAL_NAME"]).touch()
    wanted = int(os.environ["BARRIER_SIZE"])
    for _ in range(600):
        if len(list(pathlib.Path(barrier).iterdir())) >= wanted:
            break
        time.sleep(0.1)
    print(f"together={len(list(pathlib.Path(barrier).iterdir()))}")

if mode == "fail":
    raise ValueError(f"trial refuses y={y}")
if mode == "silent":
    print("no metrics today")
elif mode == "score":
    print(f"accuracy={accuracy(x, y)}")
elif mode == "good":
    for epoch in (1, 2):
        print(f"epoch={epoch} accuracy={0.9 + epoch / 100}")
elif mode == "bad":
    while True:  # only the pruner ends this trial
        print("epoch=1 accuracy=0.1", flush=True)
        time.sleep(0.2)
elif mode == "sleep":
    time.sleep(3600)
"""


LEAK_CHECK = "import os\nprint(f\"accuracy={int('JUPYTER_TOKEN' in os.environ)}\")"


def accuracy(x: float, y: str) -> float:
    return 1 - (x - 0.3) ** 2 + (0.1 if y == "b" else 0.0)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMETERS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(SCORE)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "trial.ipynb")
    return tmp_path


@pytest.fixture
def tuner(tmp_path: Path) -> Iterator[LocalTuner]:
    tuner = LocalTuner(tmp_path / "state", store=LocalStore(tmp_path / "store"))
    yield tuner
    for job in tuner.list(USER):  # leave nothing running
        tuner.delete(USER, job.name)


def spec(name: str, parameters: dict[str, Any], **extra: Any) -> TuningSpec:
    raw: dict[str, Any] = {
        "name": name,
        "objective": {"metric": "accuracy", "type": "maximize"},
        "algorithm": "random",
        "parameters": parameters,
        "max_trials": 2,
        "parallel_trials": 2,
        "trial": {"notebook": "trial.ipynb"},
    }
    raw.update(extra)
    return TuningSpec.from_dict(raw, user=USER)


def run(tuner: LocalTuner, tuning: TuningSpec, workdir: Path) -> Job:
    started = tuner.start(tuning, code_dir=workdir)
    assert started.kind == "tuning" and started.phase in ("Created", "Running")
    job = tuner.wait(USER, tuning.name, WAIT)
    assert job.finished, tuner.logs(USER, tuning.name)
    return job


def best_of(job: Job) -> Any:
    scored = [t for t in job.trials if t.objective is not None and t.state == "Succeeded"]
    return max(scored, key=lambda t: t.objective or 0.0)


def test_random_search_runs_notebook_trials_in_parallel(tuner: LocalTuner, workdir: Path) -> None:
    barrier = workdir / "barrier"
    barrier.mkdir()
    tuning = spec(
        "rand",
        {"x": {"type": "double", "min": 0, "max": 1}, "y": {"values": ["a", "b"]}},
        algorithm={"name": "random", "settings": {"random_state": 7}},
        objective={"metric": "accuracy", "type": "maximize", "additional_metrics": ["together"]},
        trial={"notebook": "trial.ipynb", "env": {"BARRIER_DIR": str(barrier), "BARRIER_SIZE": "2"}},
    )
    job = run(tuner, tuning, workdir)

    assert job.phase == "Succeeded"
    assert job.conditions[-1].reason == "ExperimentMaxTrialsReached"
    assert len(job.trials) == 2 and {t.state for t in job.trials} == {"Succeeded"}
    for trial in job.trials:
        # each trial got its own sample, ran the notebook with it, and reported the function's value
        assert trial.objective == pytest.approx(accuracy(trial.parameters["x"], trial.parameters["y"]))
        assert 0 <= trial.parameters["x"] <= 1
        assert trial.metrics["together"] == 2  # both trials were running at the same time
    assert job.trials[0].parameters != job.trials[1].parameters
    assert job.best_trial == best_of(job).name
    assert "accuracy=" in tuner.logs(USER, "rand", "trial-0")
    assert f"{job.trials[1].name} succeeded" in tuner.logs(USER, "rand")

    history = tuner.optimization_history(USER, "rand")
    assert [p[0] for p in history] == [0, 1]
    assert history[-1][2] == max(t.objective or 0 for t in job.trials)

    # a workbench restart: a new tuner on the same state directory lists the finished experiment
    again = LocalTuner(tuner.records.root.parent, store=LocalStore(workdir / "store"))
    listed = again.list(USER)
    assert [j.name for j in listed] == ["rand"] and listed[0].best_trial == job.best_trial


def test_grid_search_tries_every_point_and_finds_the_best(tuner: LocalTuner, workdir: Path) -> None:
    tuning = spec(
        "grid",
        {"x": {"type": "double", "min": 0.1, "max": 0.4, "step": 0.2}, "y": {"values": ["a", "b"]}},
        algorithm="grid",
        max_trials=4,
        parallel_trials=2,
    )
    job = run(tuner, tuning, workdir)

    assert job.phase == "Succeeded"
    tried = sorted((round(t.parameters["x"], 6), t.parameters["y"]) for t in job.trials)
    assert tried == [(0.1, "a"), (0.1, "b"), (0.3, "a"), (0.3, "b")]  # the grid from min, max and step
    best = best_of(job)
    assert job.best_trial == best.name
    assert (round(best.parameters["x"], 6), best.parameters["y"]) == (0.3, "b")
    assert best.objective == pytest.approx(1.1)


def test_tpe_search_stops_at_the_goal(tuner: LocalTuner, workdir: Path) -> None:
    tuning = spec(
        "tpe",
        {"x": {"values": [0.3, 0.9]}, "y": {"values": ["a", "b"]}},
        algorithm={"name": "tpe", "settings": {"n_startup_trials": 2, "random_state": 3}},
        objective={"metric": "accuracy", "type": "maximize", "goal": 1.05},
        max_trials=12,
        parallel_trials=1,
    )
    job = run(tuner, tuning, workdir)

    assert job.phase == "Succeeded" and job.conditions[-1].reason == "ExperimentGoalReached"
    best = best_of(job)
    assert job.best_trial == best.name
    assert best.parameters == {"x": 0.3, "y": "b"} and best.objective == pytest.approx(1.1)
    assert len(job.trials) < 12  # it stopped at the goal, not at max_trials
    assert job.trials[-1].name == best.name  # nothing started after the goal was reached


def test_failed_trials_are_counted_and_fail_the_experiment(tuner: LocalTuner, workdir: Path) -> None:
    tuning = spec(
        "fails",
        {"mode": {"values": ["fail", "silent", "score"]}},
        algorithm="grid",
        max_trials=3,
        parallel_trials=1,
        max_failed_trials=1,
    )
    job = run(tuner, tuning, workdir)

    assert job.phase == "Failed"
    assert job.conditions[-1].reason == "ExperimentMaxFailedTrialsReached"
    assert "more than max_failed_trials (1)" in (job.message or "")
    failed = {t.parameters["mode"]: t for t in job.trials if t.state == "Failed"}
    assert set(failed) == {"fail", "silent"}
    replicas = {r.name: r for r in job.replicas}
    messages = {t.parameters["mode"]: replicas[f"trial-{n}"].message or "" for n, t in enumerate(job.trials)}
    assert "ValueError" in messages["fail"] and "trial refuses" in messages["fail"]
    assert messages["fail"].startswith("exited with code 1: ValueError") and "\n" not in messages["fail"]
    # The experiment's condition names the latest failed trial and why, in one line.
    last = re.search(r"; the last, (trial-\d+): (.*)$", job.conditions[-1].message)
    assert last is not None and last[2] == replicas[last[1]].message
    assert "without printing its objective metric 'accuracy=<value>'" in messages["silent"]
    # the third trial starts only if the good one came before the second failure
    assert len(job.trials) in (2, 3)
    assert all(t.state == "Succeeded" for t in job.trials if t.parameters["mode"] == "score")


def test_median_stop_prunes_a_trial_that_falls_behind(tuner: LocalTuner, workdir: Path) -> None:
    tuning = spec(
        "prune",
        {"mode": {"values": ["good", "bad"]}},
        algorithm="grid",
        early_stopping={"algorithm": "medianstop", "settings": {"min_trials_required": 1, "start_step": 1}},
    )
    job = run(tuner, tuning, workdir)

    states = {t.parameters["mode"]: t for t in job.trials}
    assert states["good"].state == "Succeeded" and states["good"].objective == pytest.approx(0.92)
    assert states["bad"].state == "Pruned" and states["bad"].objective == pytest.approx(0.1)
    assert job.phase == "Succeeded" and job.best_trial == states["good"].name
    bad = next(r for r in job.replicas if r.index == job.trials.index(states["bad"]))
    assert "early stopped at step 1 by medianstop" in (bad.message or "")


def test_hyperband_gives_every_trial_the_full_resource(tuner: LocalTuner, workdir: Path) -> None:
    tuning = spec(
        "hband",
        {"epochs": {"type": "int", "min": 1, "max": 3}, "x": {"values": [0.1, 0.3]}},
        algorithm={"name": "hyperband", "settings": {"resource_name": "epochs", "r_l": 3, "eta": 3}},
        max_trials=3,
        parallel_trials=3,
    )
    pruner = optuna_search.pruner(tuning)
    assert isinstance(pruner, optuna.pruners.HyperbandPruner)
    assert (pruner._min_resource, pruner._max_resource, pruner._reduction_factor) == (1, 3, 3)
    job = run(tuner, tuning, workdir)

    assert job.phase == "Succeeded" and len(job.trials) == 3
    assert all(t.parameters["epochs"] == 3 for t in job.trials)  # hyperband's budget is not searched
    trials = [(t.name, t.state, t.parameters["x"], t.objective) for t in job.trials]
    assert all(t.objective == pytest.approx(accuracy(t.parameters["x"], "a")) for t in job.trials), (
        trials,
        tuner.logs(USER, "hband"),
    )


def test_a_training_job_trial(tuner: LocalTuner, workdir: Path) -> None:
    (workdir / "train.py").write_text(
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--lr', type=float)\n"
        "args = parser.parse_args()\n"
        "print(f'loss={(args.lr - 0.01) ** 2}')\n"
    )
    tuning = TuningSpec.from_dict(
        {
            "name": "trainjob",
            "objective": {"metric": "loss", "type": "minimize"},
            "algorithm": "grid",
            "parameters": {"lr": {"values": [0.01, 0.1]}},
            "max_trials": 2,
            "parallel_trials": 2,
            "trial": {"training": {"framework": "pytorch", "replicas": {"master": 1}, "script": "train.py"}},
        },
        user=USER,
    )
    job = run(tuner, tuning, workdir)

    assert job.phase == "Succeeded", [r.message for r in job.replicas]
    by_lr = {t.parameters["lr"]: t for t in job.trials}
    assert by_lr[0.01].objective == pytest.approx(0.0) and by_lr[0.1].objective == pytest.approx(0.0081)
    assert job.best_trial == by_lr[0.01].name
    assert "loss=" in tuner.logs(USER, "trainjob", f"trial-{job.trials.index(by_lr[0.1])}")


def test_delete_stops_running_trials(tuner: LocalTuner, workdir: Path) -> None:
    tuning = spec(
        "sleepy", {"mode": {"values": ["sleep"]}}, algorithm="grid", max_trials=1, parallel_trials=1
    )
    tuner.start(tuning, code_dir=workdir)
    job = wait_until(
        lambda: tuner.status(USER, "sleepy"),
        120,
        "the trial's process",
        until=lambda job: bool(job.replicas and job.replicas[0].pid),
        interval=0.1,
    )
    pid = job.replicas[0].pid
    assert pid is not None
    trial = psutil.Process(pid)

    def kernel_started(family: list[psutil.Process]) -> bool:
        return any("ipykernel" in " ".join(p.cmdline()) for p in family)

    family = wait_until(
        lambda: trial.children(recursive=True),
        120,
        "the trial to start its notebook's kernel",
        until=kernel_started,
        ignoring=(psutil.NoSuchProcess,),  # a child that came and went while listed
        interval=0.1,
    )

    tuner.delete(USER, "sleepy")

    _gone, alive = psutil.wait_procs([trial, *family], timeout=10)
    assert not alive
    assert tuner.get(USER, "sleepy") is None and not tuner.experiment_dir(USER, "sleepy").exists()
    with pytest.raises(NotFound):
        tuner.delete(USER, "sleepy")


def test_bad_input_creates_nothing(tuner: LocalTuner, workdir: Path) -> None:
    missing = spec("missing", {"x": {"values": [1, 2]}}, trial={"notebook": "nope.ipynb"})
    with pytest.raises(InvalidInput) as error:
        tuner.start(missing, code_dir=workdir)
    assert error.value.field == "trial.notebook" and "nope.ipynb" in error.value.message
    assert tuner.get(USER, "missing") is None and not tuner.experiment_dir(USER, "missing").exists()

    quick = spec("dup", {"mode": {"values": ["score"]}}, algorithm="grid", max_trials=1, parallel_trials=1)
    tuner.start(quick, code_dir=workdir)
    with pytest.raises(Conflict):
        tuner.start(quick, code_dir=workdir)
    with pytest.raises(NotFound):
        tuner.logs(USER, "dup", "trial-9")


def test_a_dead_driver_fails_the_experiment(tuner: LocalTuner, workdir: Path) -> None:
    tuning = spec(
        "orphan", {"mode": {"values": ["sleep"]}}, algorithm="grid", max_trials=1, parallel_trials=1
    )
    tuner.start(tuning, code_dir=workdir)
    driver = json.loads((tuner.experiment_dir(USER, "orphan") / "driver.json").read_text())
    proc = psutil.Process(driver["pid"])
    proc.kill()
    proc.wait(10)

    job = tuner.status(USER, "orphan")
    assert job.phase == "Failed"
    assert "the tuning driver exited before the experiment finished" in (job.message or "")
    assert "\n" not in job.conditions[-1].message  # one line; the message adds the driver's log


@pytest.mark.parametrize("algorithm", ["random", "tpe", "bayesianoptimization", "cmaes", "grid"])
def test_each_algorithm_maps_to_an_optuna_sampler_that_optimizes(algorithm: str) -> None:
    """In-process: the sampler Katib's name maps to, on the same function the notebook computes."""
    settings = {"grid": {}, "bayesianoptimization": {"n_initial_points": 3}}.get(
        algorithm, {"random_state": 1}
    )
    tuning = TuningSpec.from_dict(
        {
            "name": "fn",
            "objective": {"metric": "accuracy"},
            "algorithm": {"name": algorithm, "settings": settings},
            "parameters": {
                "x": {"type": "double", "min": 0.1, "max": 0.5, "step": 0.1},
                "n": {"type": "int", "min": 0, "max": 2},
            },
            "max_trials": 6,
            "parallel_trials": 1,
            "trial": {"notebook": "trial.ipynb"},
        },
        user=USER,
    )
    study = optuna_search.create_study(tuning)
    expected = {
        "random": "RandomSampler",
        "tpe": "TPESampler",
        "bayesianoptimization": "GPSampler",
        "cmaes": "CmaEsSampler",
        "grid": "GridSampler",
    }[algorithm]
    assert type(study.sampler).__name__ == expected
    space = optuna_search.search_space(tuning)
    for _ in range(6):
        trial = study.ask(space)
        x, n = trial.params["x"], trial.params["n"]
        assert 0.1 - 1e-9 <= x <= 0.5 + 1e-9 and n in (0, 1, 2)
        assert math.isclose(round(x / 0.1), x / 0.1, abs_tol=1e-6)  # on the step
        study.tell(trial, accuracy(x, "a") - n)
    assert study.best_value == max(t.value for t in study.trials if t.value is not None)


def test_metrics_are_read_as_katibs_stdout_collector_reads_them() -> None:
    metrics = TrialMetrics("accuracy", maximize=True, additional=("loss",))
    points = metrics.feed("epoch=1 accuracy=0.5 loss=2.0\nnoise lr=0.1\naccuracy=")
    points += metrics.feed("0.7 loss=1.5e-1\nepoch=3 accuracy=0.6\nloss=0.1")
    assert points == [(1, 0.5), (2, 0.7), (3, 0.6)]  # the step: printed epoch, else the report count
    assert metrics.close() == []
    assert metrics.values() == {"accuracy": 0.7, "loss": 0.1}  # best objective, latest other metric
    minimize = TrialMetrics("loss", maximize=False)
    minimize.feed("loss=3\nloss=1\nloss=2\n")
    assert minimize.objective_value == 1.0


def test_trials_do_not_see_the_workbench_token(tuner: LocalTuner, workdir: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("JUPYTER_TOKEN", "secret-token-value")
    (workdir / "leak.ipynb").write_text(
        nbformat.writes(
            nbformat.v4.new_notebook(
                cells=[
                    nbformat.v4.new_code_cell(
                        "import os\nprint(f\"accuracy={int('JUPYTER_TOKEN' in os.environ)}\")"
                    )
                ]
            )
        )
    )
    tuning = spec(
        "leak",
        {"x": {"values": [1]}},
        algorithm="grid",
        max_trials=1,
        parallel_trials=1,
        trial={"notebook": "leak.ipynb"},
    )
    job = run(tuner, tuning, workdir)
    assert job.trials[0].objective == 0.0
    assert os.environ["JUPYTER_TOKEN"] == "secret-token-value"

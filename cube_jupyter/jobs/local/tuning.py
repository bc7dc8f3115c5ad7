"""Tuning experiments on this machine: Optuna drives the trials, run in parallel as processes.

`LocalTuner.start(spec)` ships the trial notebook (as training ships its code; not needed for a
training-job trial), records the experiment in `{state_dir}/tuning/{user_slug}/{name}/` and starts
its driver (`tuning_driver`) in its own session, so an experiment goes on while the workbench
restarts and a finished one is still listed after. Reads come from the record the driver keeps: the
trial table (parameters, state, metrics, objective), the best trial and Katib's conditions; a driver
that died before finishing fails the experiment with its log's last lines. `delete` stops the driver,
which stops its running trials, then removes everything.

Logs: `logs(user, name)` is the driver's (which trial started, ended, was pruned); `logs(user, name,
"trial-3")` is that trial's output (its notebook's cell output, or its training job's first replica).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import psutil

from cube_jupyter import tracebacks
from cube_jupyter.errors import BackendUnavailable, Conflict, NotFound
from cube_jupyter.jobs import package as packaging
from cube_jupyter.jobs.local.tuning_state import (
    DRIVER,
    DRIVER_LOG,
    ExperimentState,
    TrialRecord,
    read_state,
    trial_log,
    write_state,
)
from cube_jupyter.jobs.model import Condition, Job, Replica, Trial, wait_until_finished
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.local import processes
from cube_jupyter.local.records import RecordStore
from cube_jupyter.storage import ArtifactStore, open_store

DRIVER_MODULE = "cube_jupyter.jobs.local.tuning_driver"
STOP_GRACE = 15.0  # the driver stops its trials (each with its own grace) before it exits
DRIVER_GONE = "the tuning driver exited before the experiment finished"
History = list[tuple[int, float, float]]  # (trial number, objective, best so far)


class LocalTuner:
    """Start, read, log and delete local tuning experiments."""

    def __init__(self, state_dir: str | Path, *, store: ArtifactStore | None = None) -> None:
        self.records = RecordStore(Path(state_dir) / "tuning", "tuning job")
        self._store = store

    @property
    def store(self) -> ArtifactStore:
        if self._store is None:
            self._store = open_store(None)
        return self._store

    def experiment_dir(self, user: str, name: str) -> Path:
        return self.records.directory(user, name)

    # -- start ---------------------------------------------------------------------------------------

    def start(self, spec: TuningSpec, *, code_dir: str | Path | None = None) -> Job:
        """Ship the trial notebook (from `code_dir`, default the working directory, unless the spec
        names a package) and start the experiment. Conflict for a duplicate name; nothing is left
        when it cannot start."""
        if self.records.read(spec.user, spec.name) is not None:
            raise Conflict(f"user {spec.user!r} already has a tuning job named {spec.name!r}", field="name")
        base = Path(code_dir or os.getcwd()).resolve()
        package_uri, target = self._ship(spec, base)
        state = ExperimentState(
            user=spec.user,
            name=spec.name,
            created=time.time(),
            spec=spec.to_dict(),
            code_dir=str(base),
            package_uri=package_uri,
            package_target=target,
        )
        state.add_condition("Created", "ExperimentCreated", "Experiment is created", state.created)
        directory = self.records.create(spec.user, spec.name, state.to_json())
        try:
            child = self._spawn_driver(spec, directory)
            _write_driver(directory, child.pid)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return self._job(self.status_state(spec.user, spec.name) or state)

    def _ship(self, spec: TuningSpec, base: Path) -> tuple[str | None, str | None]:
        if spec.trial_notebook is None:
            return None, None
        if spec.trial_package_uri:
            return spec.trial_package_uri, spec.trial_notebook
        shipped = packaging.ship_spec_file(spec.trial_notebook, base, self.store, "trial.notebook")
        return shipped.uri, shipped.target

    def _spawn_driver(self, spec: TuningSpec, directory: Path) -> subprocess.Popen[bytes]:
        # trials fetch the shipped notebook with the store's settings
        env = processes.python_child_environ(self.store.kernel_env(), supervised=True)
        argv = [sys.executable, "-m", DRIVER_MODULE, "--dir", str(directory)]
        try:
            return processes.spawn(argv, env, directory, directory / DRIVER_LOG, f"experiment {spec.name}")
        except OSError as exc:
            raise BackendUnavailable(f"the tuning driver could not be started: {exc}", field="name") from None

    # -- reads ---------------------------------------------------------------------------------------

    def status_state(self, user: str, name: str) -> ExperimentState | None:
        """The recorded state, with an experiment whose driver died marked Failed."""
        directory = self.experiment_dir(user, name)
        state = read_state(directory)
        if state is None or state.finished or _driver(directory) is not None:
            return state
        time.sleep(0.05)  # the driver may have just written its final state and exited
        state = read_state(directory)
        if state is None or state.finished or _driver(directory) is not None:
            return state
        tail = processes.log_tail(directory / DRIVER_LOG, *tracebacks.LOG_TAIL)
        failure = tracebacks.last_failure(tail)
        why = f"{DRIVER_GONE}: {failure.cause}" if failure is not None else DRIVER_GONE
        now = time.time()
        for trial in state.trials:
            if trial.state in ("Pending", "Running"):
                trial.state, trial.message, trial.finished = "Failed", DRIVER_GONE, now
        state.add_condition("Failed", "ExperimentFailed", why, now)  # one line; the message adds the log
        state.message = tracebacks.with_log_tail(why, tail)
        state.completed = now
        with contextlib.suppress(OSError):
            write_state(directory, state)
        return state

    def status(self, user: str, name: str) -> Job:
        state = self.status_state(user, name)
        if state is None:
            raise NotFound(f"user {user!r} has no tuning job named {name!r}", field="name")
        return self._job(state)

    def get(self, user: str, name: str) -> Job | None:
        state = self.status_state(user, name)
        return None if state is None else self._job(state)

    def list(self, user: str | None = None) -> list[Job]:
        """Jobs of `user` (every user's when None)."""
        return [job for owner, name in self.records.keys(user) if (job := self.get(owner, name))]

    def wait(self, user: str, name: str, timeout: float, poll: float = 0.2) -> Job:
        """Poll until the experiment has finished or `timeout` seconds passed; the last status."""
        return wait_until_finished(lambda: self.status(user, name), timeout, poll)

    def optimization_history(self, user: str, name: str) -> History:
        """(trial number, objective, best objective so far) for each trial with an objective, in
        trial order: what the optimization-history plot draws."""
        state = self.status_state(user, name)
        if state is None:
            raise NotFound(f"user {user!r} has no tuning job named {name!r}", field="name")
        maximize = state.spec.get("objective", {}).get("type", "maximize") == "maximize"
        points: History = []
        best: float | None = None
        for trial in state.trials:
            if trial.state != "Succeeded" or trial.objective is None:
                continue
            if best is None or (trial.objective > best if maximize else trial.objective < best):
                best = trial.objective
            points.append((trial.number, trial.objective, best))
        return points

    def log_path(self, user: str, name: str, replica: str | None = None) -> Path:
        """The driver's log, or a trial's (`trial-3`); NotFound for another name."""
        directory = self.experiment_dir(user, name)
        state = read_state(directory)
        if state is None:
            raise NotFound(f"user {user!r} has no tuning job named {name!r}", field="name")
        if replica is None:
            return directory / DRIVER_LOG
        trial = next((t for t in state.trials if t.replica == replica), None)
        if trial is None:
            known = ", ".join(t.replica for t in state.trials) or "no trials yet"
            raise NotFound(f"tuning job {name!r} has no trial {replica!r} ({known})", field="replica")
        return trial_log(directory, trial)

    def logs(self, user: str, name: str, replica: str | None = None, tail: int | None = None) -> str:
        path = self.log_path(user, name, replica)
        return processes.select_lines(processes.read_log(path), (), tail).decode("utf-8", "replace")

    # -- delete --------------------------------------------------------------------------------------

    def delete(self, user: str, name: str) -> None:
        """Stop the driver and its running trials, then remove the experiment."""
        directory = self.experiment_dir(user, name)
        state = read_state(directory)
        if state is None:
            raise NotFound(f"user {user!r} has no tuning job named {name!r}", field="name")
        driver = _driver(directory)
        if driver is not None:
            processes.stop_tree_sync(driver, STOP_GRACE)
        # Whatever the driver could not stop (it was killed, or had died): the recorded trial pids.
        latest = read_state(directory) or state
        for trial in latest.trials:
            if trial.pid and trial.state in ("Pending", "Running"):
                _kill_trial(trial, directory)
        self.records.remove(user, name)

    # -- the record as the API shows it --------------------------------------------------------------

    def _job(self, state: ExperimentState) -> Job:
        replicas = tuple(
            Replica(
                role="Trial",
                index=t.number,
                state=cast(Any, "Succeeded" if t.state == "Pruned" else t.state),
                pid=t.pid if t.state == "Running" else None,
                exit_code=t.exit_code,
                message=t.message,
            )
            for t in state.trials
        )
        trials = tuple(
            Trial(
                name=t.name,
                parameters=dict(t.parameters),
                state=cast(Any, t.state),
                metrics=dict(t.metrics),
                objective=t.objective,
            )
            for t in state.trials
        )
        spec = state.spec
        gpus_per_trial = int((spec.get("trial", {}).get("resources") or {}).get("gpu", 0))
        running = sum(1 for t in state.trials if t.state == "Running")
        return Job(
            name=state.name,
            kind="tuning",
            user=state.user,
            phase=cast(Any, state.phase),
            created=state.created,
            framework=str(spec.get("algorithm", {}).get("name", "random")),
            backend="local",
            conditions=tuple(Condition(**c) for c in state.conditions),
            replicas=replicas,
            gpus=0 if state.finished else running * gpus_per_trial,
            message=state.message,
            spec=spec,
            trials=trials,
            best_trial=state.best_trial,
            completed=state.completed,
        )


def _write_driver(directory: Path, pid: int) -> None:
    try:
        started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        started = 0.0  # already gone: status() fails the experiment with its log
    partial = directory / f"{DRIVER}.partial"
    partial.write_text(json.dumps({"pid": pid, "started": started}))
    os.replace(partial, directory / DRIVER)


def _driver(directory: Path) -> psutil.Process | None:
    """The experiment's live driver process, if any."""
    try:
        raw = json.loads((directory / DRIVER).read_text())
        return processes.live_process(int(raw["pid"]), float(raw["started"]))
    except (OSError, ValueError, KeyError):
        return None


def _kill_trial(trial: TrialRecord, directory: Path) -> None:
    """Kill a trial process the driver left behind, if the pid is still that trial (its log file is
    its stdout)."""
    assert trial.pid is not None
    log = str(trial_log(directory, trial))
    try:
        proc = psutil.Process(trial.pid)
        if not any(f.path == log for f in proc.open_files()):
            return
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return
    processes.stop_tree_sync(proc, 2.0)

"""Tuning experiments on this machine: Optuna drives the trials, run in parallel as processes.

`LocalTuner.start(spec)` ships the trial notebook (as training ships its code; not needed for a
training-job trial), records the experiment in `{state_dir}/tuning/{user_slug}/{name}/` and puts it
in the machine's one queue (`local.admission`) as a job asking for what its parallel trials take at
once; once admitted, whole, it starts its driver (`tuning_driver`) in its own session with the GPUs
it was handed, so an experiment goes on while the workbench restarts and a finished one is still
listed after. A queued experiment is only its record: the next workbench's supervision pass
(`refresh_all`) admits it, and deleting it cancels it. Reads come from the record the driver keeps: the
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
import threading
import time
from pathlib import Path
from typing import Any, cast

import psutil

from cube_jupyter import tracebacks
from cube_jupyter.errors import BackendUnavailable, Conflict, InvalidInput, NotFound
from cube_jupyter.fields import parse_quantity
from cube_jupyter.jobs import package as packaging
from cube_jupyter.jobs.local import training
from cube_jupyter.jobs.local import training_plan as plan
from cube_jupyter.jobs.local.tuning_state import (
    DRIVER,
    DRIVER_LOG,
    ExperimentState,
    TrialRecord,
    read_state,
    trial_log,
    write_state,
)
from cube_jupyter.jobs.model import Condition, Job, QueuePlace, Replica, Trial, wait_until_finished
from cube_jupyter.jobs.specs import spec_gpus
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.local import admission, gpus, processes
from cube_jupyter.local.records import RecordStore
from cube_jupyter.storage import ArtifactStore, open_store

DRIVER_MODULE = "cube_jupyter.jobs.local.tuning_driver"
STOP_GRACE = 15.0  # the driver stops its trials (each with its own grace) before it exits
DRIVER_GONE = "the tuning driver exited before the experiment finished"
History = list[tuple[int, float, float]]  # (trial number, objective, best so far)


class LocalTuner:
    """Start, read, log and delete local tuning experiments."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        store: ArtifactStore | None = None,
        policy: admission.QueuePolicy | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.records = RecordStore(self.state_dir / "tuning", "tuning job")
        self._store = store
        self.policy = policy or admission.QueuePolicy()
        self._wake = admission.Wake()  # whether a supervision pass (`refresh_all`) admits
        self._lock = threading.RLock()

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
        names a package), record the experiment in the machine's queue as one job asking for what its
        parallel trials take at once, and admit what fits (`admit_waiting`): its driver starts now,
        or it waits its turn. Conflict for a duplicate name; bad input (more GPUs or CPU slots than
        this machine could ever give), a driver that cannot start, or a user already at `max_queued`
        waiting jobs leaves nothing of it."""
        if self.records.read(spec.user, spec.name) is not None:
            raise Conflict(f"user {spec.user!r} already has a tuning job named {spec.name!r}", field="name")
        gpu_count, slots = self._check_possible(spec)
        base = Path(code_dir or os.getcwd()).resolve()
        package_uri, target = self._ship(spec, base)
        now = time.time()
        state = ExperimentState(
            user=spec.user,
            name=spec.name,
            created=now,
            spec=spec.to_dict(),
            code_dir=str(base),
            package_uri=package_uri,
            package_target=target,
            gpus=gpu_count,
            slots=slots,
            waiting=True,
            enqueued=now,
        )
        state.add_condition("Created", "ExperimentCreated", "Experiment is created", state.created)
        directory = self.records.create(spec.user, spec.name, state.to_json())
        try:
            self.admit_waiting(fresh=(spec.user, spec.name))
            current = read_state(directory) or state
            if current.waiting:
                training.check_queued(self.queue_side(), self.policy, spec.user)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return self._job(self.status_state(spec.user, spec.name) or current)

    def _check_possible(self, spec: TuningSpec) -> tuple[int, int]:
        """The GPUs and CPU slots the experiment's parallel trials take at once; InvalidInput when
        this machine could never give them (no wait would)."""
        trial_slots = _trial_slots(spec)
        demand = spec_gpus(spec), spec.parallel_trials * trial_slots
        visible = len(gpus.visible_gpu_ids()) if demand[0] else 0
        if demand[0] > visible:
            raise _never(spec, "GPUs", spec.gpus_per_trial, visible, "this machine has")
        cpu_slots = self.policy.cpu_slots
        if cpu_slots and demand[1] > cpu_slots:
            raise _never(spec, "CPU slots", trial_slots, cpu_slots, "CubeJobs.cpu_slots is")
        return demand

    # -- the queue -----------------------------------------------------------------------------------

    def admit_waiting(self, fresh: tuple[str, str] | None = None) -> None:
        """The queue's admission pass (`training.admission_pass`, the one rule): start the driver of
        every waiting experiment that fits now, with its GPUs, and record the others' places and
        reasons. Run when an experiment is submitted or deleted, and by the supervision pass."""
        with self._lock:
            if any(state.waiting for state in self._states()):
                training.admission_pass(
                    self.records.root,
                    self.state_dir,
                    self.queue_side(),
                    self.policy,
                    self._admit,
                    self._place,
                    fresh,
                )

    def refresh_all(self) -> None:
        """The supervision pass: admit when what the queue waits on changed (`admission.Wake`)."""
        waiting = any(state.waiting for state in self._states())
        if self._wake.due(self.queue_side(), self.policy, waiting=waiting):
            self.admit_waiting()

    def queue_side(self) -> admission.QueueSide:
        """The tuning experiments' part of the machine's queue: waiting experiments (kind job), and
        what admitted, unfinished ones hold."""
        return admission.QueueSide(waiting=self._waiting_items, held=self._held_items)

    def _states(self) -> list[ExperimentState]:
        return [
            s for user, name in self.records.keys(None) if (s := self.status_state(user, name)) is not None
        ]

    def _waiting_items(self) -> list[admission.Waiting]:
        return [
            admission.Waiting(s.user, s.name, s.enqueued or s.created, s.gpus, s.slots, kind=admission.JOB)
            for s in self._states()
            if s.waiting
        ]

    def _held_items(self) -> list[admission.Held]:
        return [
            admission.Held(s.user, admission.JOB, tuple(s.gpu_ids), s.slots)
            for s in self._states()
            if s.active
        ]

    def _admit(self, user: str, name: str, free: list[str], fresh: bool) -> None:
        """Start an admitted experiment's driver with its GPUs (taken from `free`); a driver that
        cannot start fails the experiment (or, `fresh`, raises)."""
        directory = self.experiment_dir(user, name)
        state = read_state(directory)
        if state is None or not state.waiting:
            return
        state.gpu_ids = [free.pop(0) for _ in range(state.gpus)]
        state.waiting, state.queue_position, state.queue_reason = False, None, None
        if not write_state(directory, state):
            return  # deleted meanwhile
        try:
            child = self._spawn_driver(state, directory)
            _write_driver(directory, child.pid)
        except BackendUnavailable as exc:
            if fresh:
                raise
            state.add_condition("Failed", "ExperimentFailed", exc.message, time.time())
            state.completed = time.time()
            write_state(directory, state)

    def _place(self, user: str, name: str, position: int, reason: str) -> None:
        directory = self.experiment_dir(user, name)
        state = read_state(directory)
        if (
            state is not None
            and state.waiting
            and (state.queue_position, state.queue_reason) != (position, reason)
        ):
            state.queue_position, state.queue_reason = position, reason
            write_state(directory, state)

    def _ship(self, spec: TuningSpec, base: Path) -> tuple[str | None, str | None]:
        if spec.trial_notebook is None:
            return None, None
        if spec.trial_package_uri:
            return spec.trial_package_uri, spec.trial_notebook
        shipped = packaging.ship_spec_file(spec.trial_notebook, base, self.store, "trial.notebook")
        return shipped.uri, shipped.target

    def _spawn_driver(self, state: ExperimentState, directory: Path) -> subprocess.Popen[bytes]:
        """The driver sees only the experiment's GPUs (it hands each trial its own of them); trials
        fetch the shipped notebook with the store's settings."""
        env = processes.python_child_environ(
            {**self.store.kernel_env(), "CUDA_VISIBLE_DEVICES": ",".join(state.gpu_ids)}, supervised=True
        )
        argv = [sys.executable, "-m", DRIVER_MODULE, "--dir", str(directory)]
        try:
            return processes.spawn(argv, env, directory, directory / DRIVER_LOG, f"experiment {state.name}")
        except OSError as exc:
            raise BackendUnavailable(f"the tuning driver could not be started: {exc}", field="name") from None

    # -- reads ---------------------------------------------------------------------------------------

    def status_state(self, user: str, name: str) -> ExperimentState | None:
        """The recorded state, with an experiment whose driver died marked Failed."""
        directory = self.experiment_dir(user, name)
        state = read_state(directory)
        if state is None or state.finished or state.waiting or _driver(directory) is not None:
            return state
        time.sleep(0.05)  # the driver may have just written its final state and exited (or started)
        state = read_state(directory)
        if state is None or state.finished or state.waiting or _driver(directory) is not None:
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
        """Stop the driver and its running trials (none while it waits in the queue), then remove the
        experiment."""
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
        self.admit_waiting()  # what it held (or its place in the queue) is free

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
        return Job(
            name=state.name,
            kind="tuning",
            user=state.user,
            phase=cast(Any, "Queued" if state.waiting else state.phase),
            created=state.created,
            framework=str(spec.get("algorithm", {}).get("name", "random")),
            backend="local",
            conditions=tuple(Condition(**c) for c in state.conditions),
            replicas=replicas,
            gpus=0 if state.finished else state.gpus,  # held once admitted, asked for while queued
            message=state.message,
            spec=spec,
            trials=trials,
            best_trial=state.best_trial,
            completed=state.completed,
            queue=QueuePlace(state.queue_position or 0, state.queue_reason or "") if state.waiting else None,
        )


def _trial_slots(spec: TuningSpec) -> int:
    """The CPU slots one trial takes, as a training job's replicas take them."""
    if spec.trial_training is not None:
        return sum(plan.replica_slots(role) * role.replicas for role in spec.trial_training.roles)
    cpu = spec.trial_resources.cpu
    return admission.replica_slots(parse_quantity(cpu, "cpu") if cpu else None)


def _never(spec: TuningSpec, what: str, each: int, has: int, says: str) -> InvalidInput:
    """What no wait could give: naming parallel_trials, or the trial itself when one is too big."""
    field = (
        "parallel_trials" if each <= has else ("trial.training" if spec.trial_training else "trial.resources")
    )
    return InvalidInput(
        f"{field}: the experiment's {spec.parallel_trials} parallel trials take "
        f"{spec.parallel_trials * each} {what} at once ({each} each) and {says} {has}",
        field=field,
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

"""The process that runs one local tuning experiment (Katib's experiment controller and suggestion
service, with Optuna as the suggestion service):

    python -m cube_jupyter.jobs.local.tuning_driver --dir STATE_DIR/tuning/USER/NAME

It asks Optuna for parameters, runs up to `parallel_trials` trials at once — each a notebook run
(`cube_jupyter.jobs.entry --kind notebook`, papermill with one `-p` per parameter, the same entrypoint
a training replica or a cluster trial pod runs) or a training job through `LocalTrainingRunner` —
reads the metrics each trial prints (`name=value`, `trial_metrics`), reports every objective value to
Optuna's pruner and stops a trial the pruner gives up on. It stops at `max_trials`, when a trial
reaches the goal, or once more than `max_failed_trials` trials failed (then the experiment fails),
and keeps everything in its record (`record.json`) as it goes. SIGTERM (delete) stops the running
trials first.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import optuna

from cube_jupyter import tracebacks
from cube_jupyter.jobs.local import optuna_search
from cube_jupyter.jobs.local.training_plan import ENTRY_MODULE
from cube_jupyter.jobs.local.trial_metrics import TrialMetrics
from cube_jupyter.jobs.local.tuning_state import (
    TRIALS_DIR,
    ExperimentState,
    TrialRecord,
    read_state,
    trial_log,
    write_state,
)
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.local import files, processes
from cube_jupyter.local.processes import user_code_environ

LOG = logging.getLogger("cube_jupyter.tuning")
POLL_SECONDS = 0.2
STOP_GRACE = 5.0


class TrialRun(Protocol):
    """A started trial: new output, whether it ended (and how), and a way to stop it."""

    def read(self) -> str: ...

    def exit_code(self) -> int | None:
        """None while it runs; 0 when it succeeded."""
        ...

    def failure(self) -> str: ...

    def stop(self) -> None: ...


def tell(
    study: optuna.Study,
    trial: optuna.trial.Trial,
    value: float | None = None,
    state: optuna.trial.TrialState | None = None,
) -> None:
    """`study.tell`, where GridSampler's "the grid is done" (a `study.stop()`, which Optuna allows only
    inside `optimize`) is not an error: the trial is stored either way, and the driver ends the
    experiment itself at max_trials (never more than the grid's size)."""
    try:
        study.tell(trial, value, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


class NotebookRun:
    """A notebook trial: the jobs entrypoint runs the shipped notebook with papermill parameters."""

    def __init__(
        self,
        state: ExperimentState,
        trial: TrialRecord,
        spec: TuningSpec,
        directory: Path,
        gpu_ids: list[str],
    ) -> None:
        assert state.package_target is not None
        work = files.private_dir(directory / TRIALS_DIR / trial.replica)
        argv = [sys.executable, "-m", ENTRY_MODULE]
        if state.package_uri:
            argv += ["--package", state.package_uri]
        argv += ["--kind", "notebook", "--target", state.package_target, "--"]
        for name, value in trial.parameters.items():
            argv += ["-p", name, str(value)]
        env = user_code_environ()
        env.update(spec.trial_env)
        env.update({"CUBE_JOB_NAME": spec.name, "CUBE_REPLICA": trial.replica, "CUBE_TRIAL_NAME": trial.name})
        env["PYTHONUNBUFFERED"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)  # its own of the experiment's GPUs
        self.log_path = trial_log(directory, trial)
        self.proc = processes.spawn(argv, env, work, self.log_path, f"{trial.name} {trial.parameters}")
        self.offset = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.offset)
                data = log.read()
        except FileNotFoundError:
            return ""
        self.offset += len(data)
        return data.decode("utf-8", "replace")

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def failure(self) -> str:
        """How the trial ended: with the cause its traceback gives (one line), else its log's tail."""
        ended = f"exited with code {self.proc.returncode}"
        tail = processes.log_tail(self.log_path, *tracebacks.LOG_TAIL)
        failure = tracebacks.last_failure(tail)
        if failure is not None:
            return f"{ended}: {failure.cause}"
        return tracebacks.with_log_tail(ended, tail)

    def stop(self) -> None:
        if self.proc.poll() is None:
            processes.stop_tree_sync(self.proc.pid, STOP_GRACE)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=2)


class TrainingRun:
    """A training-job trial: `LocalTrainingRunner` runs it (this driver supervises it); the first
    replica's log (Katib's primary container) is mirrored into the trial's log and read for metrics."""

    def __init__(
        self, runner: Any, state: ExperimentState, trial: TrialRecord, spec: TuningSpec, directory: Path
    ) -> None:
        self.runner = runner
        self.user = state.user
        self.job_name = trial.name
        training = replace(spec.trial_training_with(trial.parameters), name=trial.name)
        self.log_path = trial_log(directory, trial)
        files.private_dir(self.log_path.parent)
        self.seen = 0
        self.code: int | None = None
        self.message = ""
        job = runner.start(training, code_dir=state.code_dir)
        self.pid = next((r.pid for r in job.replicas if r.pid), None)

    def read(self) -> str:
        try:
            text = self.runner.logs(self.user, self.job_name)
        except Exception:  # not started yet, or gone
            return ""
        new, self.seen = text[self.seen :], len(text)
        if new:
            with files.open_private_append(self.log_path) as log:
                log.write(new.encode())
        return new

    def exit_code(self) -> int | None:
        if self.code is None:
            job = self.runner.status(self.user, self.job_name)
            if job.phase == "Succeeded":
                self.code = 0
            elif job.phase == "Failed":
                self.code = 1
                # One line with the cause when its replica's traceback gave one (`training_plan`).
                one_line = job.conditions[-1].message if job.error is not None else None
                self.message = one_line or job.message or "the training job failed"
        return self.code

    def failure(self) -> str:
        return self.message

    def stop(self) -> None:
        self.read()
        with contextlib.suppress(Exception):
            self.runner.delete(self.user, self.job_name)


class Driver:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        state = read_state(directory)
        if state is None:
            raise RuntimeError(f"no experiment state in {directory}")
        self.state = state
        self.spec = TuningSpec.from_dict(state.spec, state.user)
        self.study = optuna_search.create_study(self.spec)
        self.space = optuna_search.search_space(self.spec)
        self.fixed = optuna_search.fixed_parameters(self.spec)
        self.running: dict[int, tuple[optuna.trial.Trial, TrialRun, TrialMetrics, set[int]]] = {}
        self.stop_requested = False
        self.goal_reached = False
        # The experiment's GPUs (admitted whole: every parallel trial's), each notebook trial its own
        # while it runs; a training trial's runner sees the same (this process's CUDA_VISIBLE_DEVICES).
        self.free_gpus = list(state.gpu_ids)
        self.trial_gpus: dict[int, list[str]] = {}
        self._runner: Any = None

    @property
    def runner(self) -> Any:
        if self._runner is None:
            from cube_jupyter.jobs.local.training import LocalTrainingRunner

            self._runner = LocalTrainingRunner(self.directory)
        return self._runner

    def save(self) -> None:
        write_state(self.directory, self.state)

    # -- the loop -------------------------------------------------------------------------------------

    def run(self) -> None:
        now = time.time()
        self.state.add_condition("Running", "ExperimentRunning", "Experiment is running", now)
        self.save()
        while True:
            if self.stop_requested:
                self.stop_all("the experiment was deleted")
                return
            self.launch()
            changed = self.poll()
            if self.finish_if_done():
                self.save()
                return
            if changed:
                self.save()
            time.sleep(POLL_SECONDS)

    def launch(self) -> None:
        spec = self.spec
        while (
            not self.goal_reached
            and len(self.running) < spec.parallel_trials
            and len(self.state.trials) < spec.max_trials
            and self.failed_count() <= spec.max_failed_trials
        ):
            trial = self.study.ask(self.space)
            parameters = {p.name: {**trial.params, **self.fixed}[p.name] for p in spec.parameters}
            record = TrialRecord(
                number=trial.number, name=f"{spec.name}-{trial.number}", parameters=parameters
            )
            self.state.trials.append(record)
            metrics = TrialMetrics(
                spec.objective.metric, spec.objective.type == "maximize", spec.objective.additional_metrics
            )
            record.started = time.time()
            if spec.trial_kind == "notebook":
                taken = self.free_gpus[: spec.gpus_per_trial]
                del self.free_gpus[: spec.gpus_per_trial]
                self.trial_gpus[record.number] = taken
            try:
                run: TrialRun = (
                    NotebookRun(self.state, record, spec, self.directory, self.trial_gpus[record.number])
                    if spec.trial_kind == "notebook"
                    else TrainingRun(self.runner, self.state, record, spec, self.directory)
                )
            except Exception as exc:
                message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                tell(self.study, trial, state=optuna.trial.TrialState.FAIL)
                self.end(record, "Failed", f"the trial did not start: {message}")
                continue
            record.state = "Running"
            record.pid = getattr(run, "pid", None)
            self.running[record.number] = (trial, run, metrics, set())
            LOG.info("started %s with %s", record.name, parameters)
            self.save()

    def poll(self) -> bool:
        changed = False
        for number in list(self.running):
            trial, run, metrics, reported = self.running[number]
            record = self.state.trials[number]
            code = run.exit_code()  # before reading, so no output is missed after the end
            points = metrics.feed(run.read())
            if code is not None:
                points += metrics.close()
            if points:
                changed = True
                record.metrics = metrics.values()
                record.objective = metrics.objective_value
                record.intermediate = list(metrics.intermediate)
            if code is None and self.pruned(trial, points, reported):
                run.stop()
                step = points[-1][0]
                tell(self.study, trial, state=optuna.trial.TrialState.PRUNED)
                self.end(record, "Pruned", f"early stopped at step {step} by {self.pruner_name}")
                changed = True
            elif code is not None:
                self.complete(trial, run, record, metrics, code)
                changed = True
        return changed

    @property
    def pruner_name(self) -> str:
        return "hyperband" if self.spec.algorithm.name == "hyperband" else "medianstop"

    def pruned(self, trial: optuna.trial.Trial, points: list[tuple[int, float]], reported: set[int]) -> bool:
        """Report new intermediate values; whether the pruner stops the trial now."""
        if not points or isinstance(self.study.pruner, optuna.pruners.NopPruner):
            return False
        for step, value in points:
            if step not in reported:
                trial.report(value, step)
                reported.add(step)
        return bool(trial.should_prune())

    def complete(
        self, trial: optuna.trial.Trial, run: TrialRun, record: TrialRecord, metrics: TrialMetrics, code: int
    ) -> None:
        record.exit_code = code
        value = metrics.objective_value
        if code == 0 and value is not None:
            tell(self.study, trial, value)
            self.end(record, "Succeeded", None)
            self.update_best()
            return
        tell(self.study, trial, state=optuna.trial.TrialState.FAIL)
        if code == 0:
            why = (
                f"the trial finished without printing its objective metric "
                f"'{self.spec.objective.metric}=<value>' (Katib's name=value format)"
            )
        else:
            why = run.failure()
        self.end(record, "Failed", why)

    def end(self, record: TrialRecord, state: str, message: str | None) -> None:
        record.state = state
        record.message = message
        record.finished = time.time()
        self.running.pop(record.number, None)
        self.free_gpus += self.trial_gpus.pop(record.number, [])
        LOG.info("%s %s%s", record.name, state.lower(), f": {message}" if message else "")

    def update_best(self) -> None:
        done = [t for t in self.state.trials if t.state == "Succeeded" and t.objective is not None]
        if not done:
            return
        maximize = self.spec.objective.type == "maximize"
        best = (max if maximize else min)(done, key=lambda t: t.objective or 0.0)
        self.state.best_trial = best.name
        goal = self.spec.objective.goal
        if goal is not None and best.objective is not None:
            self.goal_reached = best.objective >= goal if maximize else best.objective <= goal

    def failed_count(self) -> int:
        return sum(1 for t in self.state.trials if t.state == "Failed")

    def last_failure(self) -> str | None:
        """`trial-3: exited with code 1: ModuleNotFoundError: ...`: the latest failed trial and why, in
        one line, for the experiment's condition (the trials often fail alike)."""
        failed = [t for t in self.state.trials if t.state == "Failed" and t.message]
        if not failed:
            return None
        last = max(failed, key=lambda t: t.finished or 0.0)
        return f"{last.replica}: {(last.message or '').splitlines()[0]}"

    def finish_if_done(self) -> bool:
        now = time.time()
        spec = self.spec
        failed = self.failed_count()
        if failed > spec.max_failed_trials:
            last = self.last_failure()
            self.stop_all("stopped: the experiment failed")
            self.state.add_condition(
                "Failed",
                "ExperimentMaxFailedTrialsReached",
                f"Experiment has failed because {failed} trials failed, more than max_failed_trials "
                f"({spec.max_failed_trials})" + (f"; the last, {last}" if last else ""),
                now,
            )
        elif self.running:
            return False
        elif self.goal_reached:
            self.state.add_condition(
                "Succeeded",
                "ExperimentGoalReached",
                "Experiment has succeeded because Objective goal has reached",
                now,
            )
        elif len(self.state.trials) >= spec.max_trials:
            self.state.add_condition(
                "Succeeded",
                "ExperimentMaxTrialsReached",
                "Experiment has succeeded because max trial count has reached",
                now,
            )
        else:
            return False
        self.state.completed = now
        return True

    def stop_all(self, why: str) -> None:
        for number in list(self.running):
            trial, run, _metrics, _reported = self.running[number]
            run.stop()
            with contextlib.suppress(Exception):
                tell(self.study, trial, state=optuna.trial.TrialState.FAIL)
            record = self.state.trials[number]
            record.state, record.message, record.finished = "Failed", why, time.time()
            self.running.pop(number)
        self.save()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cube_jupyter.jobs.local.tuning_driver")
    parser.add_argument("--dir", required=True, type=Path, help="the experiment's state directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    driver = Driver(args.dir)

    def on_term(_signum: int, _frame: Any) -> None:
        driver.stop_requested = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        driver.run()
    except Exception as exc:
        traceback.print_exc()
        with contextlib.suppress(Exception):
            driver.stop_all("stopped: the experiment failed")
        driver.state.add_condition(
            "Failed", "ExperimentFailed", f"the tuning driver failed: {exc}", time.time()
        )
        driver.state.completed = time.time()
        driver.save()
        return 1
    LOG.info("experiment %s %s", driver.spec.name, driver.state.phase.lower())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Training Operator's rules, as pure functions over replica states: which conditions a job has,
when it has succeeded, and whether a failed replica is restarted.

- Conditions are appended as they become true (Created, Running, Restarting, Succeeded, Failed);
  a newer Running/Restarting/Succeeded/Failed turns the older ones of the other types False, and the
  job's phase is its latest true condition, as `kubectl get pytorchjob` shows it.
- Success: the Master (PyTorch, XGBoost), Chief or Master (TensorFlow) or Launcher (MPI) exited 0;
  with none of those, every Worker exited 0 (the default success policy). PS and Evaluator never
  decide.
- Restarts: `OnFailure` and `Always` restart a failed replica, `ExitCode` only after a retryable
  exit (128 and above: killed by a signal), `Never` never; the job fails once `backoff_limit`
  restarts have been spent (None: no limit), with reason BackoffLimitExceeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

KIND_NAMES = {"pytorch": "PyTorchJob", "tensorflow": "TFJob", "xgboost": "XGBoostJob", "mpi": "MPIJob"}
PRIMARY_ROLES = {
    "pytorch": ("Master",),
    "tensorflow": ("Chief", "Master"),
    "xgboost": ("Master",),
    "mpi": ("Launcher",),
}
EXCLUSIVE = {"Running", "Restarting", "Succeeded", "Failed"}
RETRYABLE_EXIT_MIN = 128


def kind_name(framework: str) -> str:
    return KIND_NAMES[framework]


def add_condition(
    conditions: list[dict[str, Any]], type_: str, reason: str, message: str, now: float
) -> list[dict[str, Any]]:
    """`conditions` with `type_` true as the latest one (unchanged when it already is)."""
    latest_true = [c for c in conditions if c["status"] == "True"]
    if latest_true and latest_true[-1]["type"] == type_ and latest_true[-1]["message"] == message:
        return conditions
    kept = []
    for condition in conditions:
        if condition["type"] == type_:
            continue  # re-added below as the latest
        if type_ in EXCLUSIVE and condition["type"] in EXCLUSIVE and condition["status"] == "True":
            condition = dict(condition, status="False", last_transition_time=now)
        kept.append(condition)
    kept.append(
        {"type": type_, "status": "True", "reason": reason, "message": message, "last_transition_time": now}
    )
    return kept


def phase(conditions: Sequence[dict[str, Any]]) -> str:
    """The latest true condition's type; Created before anything else is known."""
    true = [c for c in conditions if c["status"] == "True"]
    return str(true[-1]["type"]) if true else "Created"


def succeeded(framework: str, states: Sequence[tuple[str, str]]) -> bool:
    """True when the job is done by the operator's success policy; `states` are (role, state)."""
    primary = [state for role, state in states if role in PRIMARY_ROLES[framework]]
    if primary:
        return all(state == "Succeeded" for state in primary)
    workers = [state for role, state in states if role == "Worker"]
    return bool(workers) and all(state == "Succeeded" for state in workers)


def should_restart(restart_policy: str, exit_code: int) -> bool:
    """Whether a replica that exited with `exit_code` (non-zero) is restarted by its policy."""
    if restart_policy in ("OnFailure", "Always"):
        return True
    if restart_policy == "ExitCode":
        return exit_code >= RETRYABLE_EXIT_MIN
    return False


def within_backoff(restarts: int, backoff_limit: int | None) -> bool:
    return backoff_limit is None or restarts < backoff_limit


def exit_status(returncode: int) -> int:
    """Popen's -N for 'killed by signal N' as a container's exit status: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode

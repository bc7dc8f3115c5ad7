"""The Training Operator's condition, success and restart rules."""

from __future__ import annotations

from cube_jupyter.jobs.local import conditions as ops


def test_conditions_move_through_the_operator_phases() -> None:
    conds = ops.add_condition([], "Created", "PyTorchJobCreated", "created", 1.0)
    conds = ops.add_condition(conds, "Running", "PyTorchJobRunning", "running", 2.0)
    assert ops.phase(conds) == "Running"
    conds = ops.add_condition(conds, "Restarting", "PyTorchJobRestarting", "restarting", 3.0)
    assert ops.phase(conds) == "Restarting"
    conds = ops.add_condition(conds, "Running", "PyTorchJobRunning", "running", 4.0)
    conds = ops.add_condition(conds, "Succeeded", "PyTorchJobSucceeded", "done", 5.0)
    assert ops.phase(conds) == "Succeeded"
    by_type = {c["type"]: c for c in conds}
    assert by_type["Created"]["status"] == "True"
    assert by_type["Running"]["status"] == by_type["Restarting"]["status"] == "False"
    assert [c["type"] for c in conds] == ["Created", "Restarting", "Running", "Succeeded"]


def test_success_follows_the_primary_replica_or_all_workers() -> None:
    assert ops.succeeded("pytorch", [("Master", "Succeeded"), ("Worker", "Running")])
    assert not ops.succeeded("pytorch", [("Master", "Running"), ("Worker", "Succeeded")])
    assert ops.succeeded("tensorflow", [("Chief", "Succeeded"), ("PS", "Running")])
    assert not ops.succeeded(
        "tensorflow", [("PS", "Running"), ("Worker", "Succeeded"), ("Worker", "Running")]
    )
    assert ops.succeeded("tensorflow", [("PS", "Running"), ("Worker", "Succeeded"), ("Worker", "Succeeded")])
    assert ops.succeeded("mpi", [("Launcher", "Succeeded")])


def test_restart_policies() -> None:
    assert ops.should_restart("OnFailure", 1)
    assert not ops.should_restart("Never", 1)
    assert not ops.should_restart("ExitCode", 1)  # permanent
    assert ops.should_restart("ExitCode", 137)  # killed by SIGKILL: retryable
    assert ops.within_backoff(1, 2) and not ops.within_backoff(2, 2) and ops.within_backoff(50, None)
    assert ops.exit_status(-9) == 137 and ops.exit_status(3) == 3

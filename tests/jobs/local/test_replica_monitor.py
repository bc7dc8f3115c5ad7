"""The replica monitor: it records its command's exit code in a file and exits the same way, so the
supervisor that started it sees what it saw of the command before, and a later one can read it."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from cube_jupyter.local import monitor, processes
from tests.waiting import wait_until

PY = sys.executable
SELF_TERM = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"


def run_monitored(tmp_path: Path, argv: list[str]) -> tuple[int, int | None, str]:
    """Run `argv` under a monitor as the supervisor does: its returncode, the recorded one, its log."""
    exit_file, log = tmp_path / "replica.exit", tmp_path / "replica.log"
    exit_file.unlink(missing_ok=True)
    proc = processes.spawn(monitor.command(exit_file, argv), os.environ, tmp_path, log, "test")
    return proc.wait(), monitor.read_exit_code(exit_file), log.read_text()


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        ([PY, "-c", "pass"], 0),
        ([PY, "-c", "raise SystemExit(3)"], 3),
        ([PY, "-c", SELF_TERM], -signal.SIGTERM),
    ],
)
def test_the_exit_code_or_signal_is_recorded_and_passed_on(
    tmp_path: Path, argv: list[str], code: int
) -> None:
    assert run_monitored(tmp_path, argv)[:2] == (code, code)


def test_a_sigterm_to_the_group_ends_the_command_and_the_monitor_reports_it(tmp_path: Path) -> None:
    exit_file, log = tmp_path / "replica.exit", tmp_path / "replica.log"
    argv = [PY, "-c", "import time; print('ready', flush=True); time.sleep(120)"]
    proc = processes.spawn(monitor.command(exit_file, argv), os.environ, tmp_path, log, "test")
    wait_until(lambda: "ready" in log.read_text(), 60, "the command to start")
    os.killpg(proc.pid, signal.SIGTERM)  # what stop_groups sends: the monitor outlives it to write
    assert proc.wait() == -signal.SIGTERM
    assert monitor.read_exit_code(exit_file) == -signal.SIGTERM


@pytest.mark.parametrize(("program", "code"), [("no-such-program", 127), (__file__, 126)])
def test_a_command_that_cannot_run_is_reported_as_a_shell_does(
    tmp_path: Path, program: str, code: int
) -> None:
    returncode, recorded, log = run_monitored(tmp_path, [program, "arg"])
    assert (returncode, recorded) == (code, code)
    assert f"cube-jupyter: cannot run {program!r}:" in log

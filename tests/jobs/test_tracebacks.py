"""`cube_jupyter.tracebacks`: a failure read back from a log, cause first.

The tracebacks are real: a user's script run by the replica entrypoint (`python -m
cube_jupyter.jobs.entry`, as a local replica or a pod runs it), and exceptions raised here, chained,
with long or multi-line messages, as Python printed them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from cube_jupyter import tracebacks
from cube_jupyter.tracebacks import CAUSE_LIMIT, PACKAGE_DIR, is_workbench_file, last_failure

SCRIPT = """\
print("starting", flush=True)

def load():
    import not_a_module_xyz  # the user's mistake

def main():
    return load()

main()
"""


def printed(run: Callable[[], object]) -> str:
    """What Python prints for the exception `run()` raises."""
    try:
        run()
    except Exception:
        return traceback.format_exc()
    raise AssertionError("it did not raise")


@pytest.fixture(scope="module")
def replica_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The script, and the log of a replica that ran it (stdout and stderr, as the log has them)."""
    work = tmp_path_factory.mktemp("work")
    (work / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "cube_jupyter.jobs.entry", "--kind", "script", "--target", "train.py"],
        cwd=work,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout
    return work / "train.py", done.stdout


def test_a_script_failure_reads_cause_first_with_the_users_frames_apart(
    replica_log: tuple[Path, str],
) -> None:
    script, log = replica_log
    failure = last_failure(log)
    assert failure is not None
    assert failure.type == "ModuleNotFoundError"
    assert failure.message == "No module named 'not_a_module_xyz'"
    assert failure.cause == "ModuleNotFoundError: No module named 'not_a_module_xyz'"
    assert [frame.splitlines()[0] for frame in failure.user_frames] == [
        f'  File "{script}", line 9, in <module>',
        f'  File "{script}", line 7, in main',
        f'  File "{script}", line 4, in load',
    ]
    assert failure.user_frames[-1].splitlines()[1].strip() == "import not_a_module_xyz  # the user's mistake"
    # The workbench's frames: the entrypoint's own and runpy's, none of the user's.
    assert any("entry.py" in frame for frame in failure.workbench_frames)
    assert all("entry.py" in frame or "runpy" in frame for frame in failure.workbench_frames)
    # Nothing lost: the whole traceback as printed, from its header, the `^^^^` underlines too.
    assert failure.traceback == log[log.index("Traceback (most recent call last):") :].rstrip()
    assert "^^^" in failure.traceback
    assert not any(
        set(line.strip()) <= {"^", "~"} for frame in failure.user_frames for line in frame.splitlines()
    )


def test_a_truncated_log_tail_still_gives_the_cause_and_the_frames_it_has(
    replica_log: tuple[Path, str],
) -> None:
    tail = "\n".join(replica_log[1].splitlines()[-5:])  # the header and the first frames cut off
    failure = last_failure(tail)
    assert failure is not None
    assert failure.cause == "ModuleNotFoundError: No module named 'not_a_module_xyz'"
    assert failure.user_frames and "line 4, in load" in failure.user_frames[-1]


def raise_chained() -> None:
    try:
        {}["lr"]
    except KeyError as missing:
        raise ValueError("the config has no learning rate\nadd lr: 0.01 to config.yaml") from missing


def test_the_last_exception_of_a_chain_is_the_cause_and_keeps_every_line_of_its_message() -> None:
    failure = last_failure(printed(raise_chained))
    assert failure is not None
    assert failure.type == "ValueError"
    assert failure.message == "the config has no learning rate\nadd lr: 0.01 to config.yaml"
    assert failure.cause == "ValueError: the config has no learning rate"
    assert len(failure.user_frames) == 2  # printed -> raise_chained, of the outer traceback only
    assert 'raise ValueError("the config has no learning rate' in failure.user_frames[-1]


def test_a_long_message_makes_one_short_line_and_colours_are_dropped() -> None:
    def shout() -> None:
        raise RuntimeError("tensor " + "1.0, " * 500)

    text = printed(shout)
    failure = last_failure("\x1b[31m" + text.replace("RuntimeError", "\x1b[1;31mRuntimeError\x1b[0m"))
    assert failure is not None
    assert failure.type == "RuntimeError"
    assert "\x1b" not in failure.traceback
    assert len(failure.cause) == CAUSE_LIMIT and failure.cause.endswith("…")
    assert "\n" not in failure.cause


def test_an_exception_without_a_message_is_its_type() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    try:
        interrupted()
    except KeyboardInterrupt:
        text = traceback.format_exc()
    failure = last_failure(text)
    assert failure is not None and failure.cause == "KeyboardInterrupt" and failure.message == ""


@pytest.mark.parametrize(
    "log",
    ["", "exiting with 3\n", "Traceback (most recent call last):\n", '  File "x.py", line 1, in f\n'],
)
def test_a_log_without_a_whole_traceback_has_no_failure(log: str) -> None:
    assert last_failure(log) is None


@pytest.mark.parametrize(
    ("file", "workbench"),
    [
        ("<frozen runpy>", True),
        ("<frozen importlib._bootstrap>", True),
        ("/usr/lib/python3.11/runpy.py", True),
        (str(PACKAGE_DIR / "jobs" / "entry.py"), True),
        ("/venv/lib/python3.11/site-packages/cube_jupyter/jobs/entry.py", True),
        ("/venv/lib/python3.11/site-packages/papermill/execute.py", True),
        ("/usr/lib/python3/dist-packages/nbclient/client.py", True),
        ("/home/ana/project/train.py", False),
        ("/tmp/cube-package-x1/runpy_helpers.py", False),
        ("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", False),
        ("<string>", False),
    ],
)
def test_which_frames_are_the_workbenchs(file: str, workbench: bool) -> None:
    assert is_workbench_file(file) is workbench


def test_the_module_names_its_workbench_packages_as_installed() -> None:
    # Each is an importable top-level package here: a renamed one would silently become "the user's".
    assert all(importlib.util.find_spec(name) is not None for name in tracebacks.WORKBENCH_PACKAGES)

"""The local executor with real worker processes, real kernels and a real store: parallel branches,
caching and resume, retries, timeouts, cancel and a worker that dies under a step.

One pool of two kernel-warm workers serves the whole module (as one serves a whole server), and every
notebook lives in one folder, so each step finds a kernel already started in the right place.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
import pytest

from cube_jupyter.pipelines import datafiles
from cube_jupyter.pipelines.history import RunRecord
from tests.pipelines.executing import Env, executor_env
from tests.pipelines.notebooks import code
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(240)
WORKBENCH_TOKEN = "the-workbench-token"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with pytest.MonkeyPatch.context() as patch:  # the pool starts in a workbench holding its token
        patch.setenv("JUPYTER_TOKEN", WORKBENCH_TOKEN)
        with executor_env(tmp_path_factory.mktemp("executor")) as env:
            patch.delenv("JUPYTER_TOKEN")
            yield env


DIAMOND = (
    code("import time", "imports"),
    code("n = 4", "parameters"),
    # The kernel's own connection file: its traffic goes over Unix sockets, not TCP ports.
    code(
        "import json, ipykernel.connect\n"
        "print('transport', json.load(open(ipykernel.connect.get_connection_file()))['transport'])\n"
        "xs = list(range(n))",
        "step:load",
    ),
    code("time.sleep(1)\nleft = sum(xs)", "step:left"),
    code("time.sleep(1)\nright = max(xs)", "step:right"),
    code("print('total', left + right)", "step:join"),
)


def test_branches_run_in_parallel_and_an_unchanged_run_is_all_cached(env: Env) -> None:
    pipeline = env.pipeline("diamond", *DIAMOND)
    run = env.run(pipeline, {"n": 5})
    assert run.status == "succeeded", run.error
    steps = {s.name: s for s in run.steps}
    assert all(s.status == "succeeded" and s.attempts == 1 and not s.cache_hit for s in run.steps)
    assert "total 14" in env.step_text(steps["join"].notebook)  # 0+1+2+3+4 and 4
    assert "transport ipc" in env.step_text(steps["load"].notebook)
    left, right = steps["left"], steps["right"]
    assert left.started and right.started and left.finished and right.finished
    assert max(left.started, right.started) < min(left.finished, right.finished), "branches overlapped"

    again = env.run(pipeline, {"n": 5})
    assert again.status == "succeeded"
    assert [(s.status, s.cache_hit) for s in again.steps] == [("cached", True)] * 4
    assert [s.notebook for s in again.steps] == [s.notebook for s in run.steps]  # reused, not re-run

    forced = env.run(pipeline, {"n": 5}, no_cache=True)
    assert [s.status for s in forced.steps] == ["succeeded"] * 4, [s.error for s in forced.steps]

    other = env.run(pipeline, {"n": 3})  # a new parameter value changes every step's key
    assert [s.status for s in other.steps] == ["succeeded"] * 4
    assert "total 5" in env.step_text(other.step("join").notebook)


def test_a_changed_step_reruns_with_what_depends_on_it(env: Env) -> None:
    first = env.run(env.pipeline("edit", *DIAMOND))
    assert first.status == "succeeded", first.error
    cells = list(DIAMOND)
    cells[4] = code("time.sleep(1)\nright = min(xs)", "step:right")
    edited = env.run(env.pipeline("edit", *cells))
    assert {s.name: s.status for s in edited.steps} == {
        "load": "cached",
        "left": "cached",
        "right": "succeeded",
        "join": "succeeded",
    }
    assert "total 6" in env.step_text(edited.step("join").notebook)


def test_editing_a_data_file_reruns_the_steps_that_read_it(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file a step names by a string literal is in its cache key: by content, or by size and
    modification time past the hash limit. A name outside the notebook's folder is not looked at."""
    data = env.folder / "data"
    data.mkdir()
    (data / "train.csv").write_text("x\n1\n2\n")
    (data / "big.bin").write_bytes(b"0" * 64)
    (env.folder.parent / "outside.txt").write_text("not ours")
    cells = (
        code(
            "rows = open('data/train.csv').read().split()[1:]\nsize = len(open('data/big.bin', 'rb').read())"
            "\nimport os\nprint(os.path.exists('../outside.txt'))",
            "step:read",
        ),
        code("print('rows', rows, 'size', size)", "step:show"),
        code("print('unrelated')", "step:other"),
    )
    pipeline = env.pipeline("data-files", *cells)
    assert pipeline.step("read").files == ("../outside.txt", "data/big.bin", "data/train.csv", "rb")
    monkeypatch.setattr(datafiles, "HASH_LIMIT", 32)  # big.bin goes by size and modification time
    first = env.run(pipeline)
    assert first.status == "succeeded", first.error
    assert first.step("read").files == ["data/big.bin", "data/train.csv"]
    assert [s.status for s in env.run(pipeline).steps] == ["cached"] * 3

    (data / "train.csv").write_text("x\n1\n2\n3\n")
    edited = env.run(pipeline)
    assert {s.name: s.status for s in edited.steps} == {
        "read": "succeeded",
        "show": "succeeded",
        "other": "cached",
    }
    assert "rows ['1', '2', '3']" in env.step_text(edited.step("show").notebook)

    os.utime(data / "big.bin", ns=(1, 1))  # same bytes, another modification time
    assert env.run(pipeline).step("read").status == "succeeded"
    (env.folder.parent / "outside.txt").write_text("changed")
    assert env.run(pipeline).step("read").status == "cached"


def test_a_failed_step_is_named_its_branch_skipped_the_rest_finishes_and_a_rerun_resumes(env: Env) -> None:
    cells = [
        code("data = [1, 2, 3]", "step:load"),
        code("ratio = sum(data) / 0", "step:bad"),
        code("print('report', ratio)", "step:report"),
        code("good = len(data)\nprint('good', good)", "step:good"),
    ]
    failed = env.run(env.pipeline("resume", *cells))
    status = {s.name: s.status for s in failed.steps}
    errors = {s.name: s.error for s in failed.steps if s.error}
    assert status == {"load": "succeeded", "bad": "failed", "report": "skipped", "good": "succeeded"}, errors
    assert failed.status == "failed"
    assert failed.error is not None and "'bad'" in failed.error and "ZeroDivisionError" in failed.error
    error = failed.step("bad").error
    assert error is not None and error["cell"] == 1 and error["ename"] == "ZeroDivisionError"
    assert "ratio = sum(data) / 0" in error["traceback"]
    assert failed.step("bad").notebook  # what the failed step did is kept
    assert failed.step("report").error == {"message": "skipped: upstream step 'bad' failed"}

    cells[1] = code("ratio = sum(data) / 2", "step:bad")
    resumed = env.run(env.pipeline("resume", *cells))
    status = {s.name: s.status for s in resumed.steps}
    assert status == {"load": "cached", "bad": "succeeded", "report": "succeeded", "good": "cached"}
    assert "report 3.0" in env.step_text(resumed.step("report").notebook)


def test_a_flaky_step_is_retried(env: Env) -> None:
    marker = env.folder / "flaky-attempts.txt"
    cells = [
        code(
            "import pathlib\np = pathlib.Path('flaky-attempts.txt')\n"
            "n = int(p.read_text()) if p.exists() else 0\np.write_text(str(n + 1))\n"
            "assert n >= 1, 'first attempt fails'",
            "step:flaky",
            "retries:2",
        )
    ]
    run = env.run(env.pipeline("flaky", *cells))
    assert run.status == "succeeded", run.error
    assert run.step("flaky").attempts == 2 and marker.read_text() == "2"


def test_a_step_past_its_timeout_is_stopped_while_others_finish(env: Env) -> None:
    cells = [
        code("import time", "imports"),
        code("time.sleep(3600)", "step:slow", "timeout:1"),  # past the test's own timeout
        code("fast = 1", "step:fast"),
    ]
    run = env.run(env.pipeline("timeout", *cells))
    assert run.status == "failed" and run.step("fast").status == "succeeded"
    error = run.step("slow").error
    assert error is not None and error["ename"] == "TimeoutError" and "timeout of 1 s" in error["evalue"]


def test_cancel_kills_the_running_kernels_and_records_the_run_cancelled(env: Env) -> None:
    inside = env.folder / "cancel-sleepy-started"
    cells = [
        code("import time", "imports"),
        # Sleeps past the test's timeout: only a cancel that kills the kernel lets the test end.
        code(f"open({str(inside)!r}, 'w').close()\ntime.sleep(3600)", "step:sleepy"),
        code("x = 1", "step:after-it", "after:sleepy"),
    ]
    pipeline = env.pipeline("cancel", *cells)

    async def go() -> tuple[RunRecord, int]:
        handle = env.start(pipeline)
        task = await wait_until_async(
            lambda: handle._tasks.get("sleepy"),
            60,
            "the step's kernel to run its cell",
            until=lambda task: task is not None and task.kernel_pid is not None and inside.exists(),
        )
        pid = task.kernel_pid
        assert pid is not None and psutil.pid_exists(pid)
        handle.cancel()
        run = await handle.wait()
        return run, pid

    run, pid = env.loop.run_until_complete(go())
    assert run.status == "cancelled" and run.error == "cancelled by the user"
    assert [s.status for s in run.steps] == ["cancelled", "cancelled"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert env.history.get(run.id).status == "cancelled"


def test_a_worker_that_dies_fails_its_step_and_is_replaced(env: Env) -> None:
    # The kernel's parent is the worker's fork server; the worker is the fork server's parent.
    cells = [
        code(
            "import os, signal, psutil\nos.kill(psutil.Process().parent().ppid(), signal.SIGKILL)",
            "step:crash",
        ),
        code("ok = 1", "step:ok"),
    ]
    assert env.pool._worker is not None
    first = env.pool._worker.process.pid
    run = env.run(env.pipeline("crash", *cells), parallel=1)
    assert run.step("crash").status == "failed" and run.step("ok").status == "succeeded"
    error = run.step("crash").error
    assert error is not None and "worker process exited" in error["message"]
    again = env.run(env.pipeline("after-crash", code("fine = 1", "step:fine")))
    assert again.status == "succeeded"
    assert env.pool.worker_count == 1 and env.pool._worker is not None
    assert env.pool._worker.process.pid != first


def test_each_step_runs_in_a_fresh_forked_kernel_in_the_notebook_folder(env: Env) -> None:
    """What a step leaves in its kernel (globals, a patched module) never reaches the next step, each
    kernel is a fork of the worker's fork server working in the notebook's folder (its input history
    in memory, not in the user's history.sqlite), and a step whose kernel dies fails alone: the step
    after it gets a kernel of its own."""
    cells = [
        code("import json, os, psutil", "imports"),
        code(
            "first_pid = os.getpid()\nsecret = 1\njson.patched_by_first = True\n"
            "print('cwd', os.getcwd())\nprint('parent', psutil.Process().parent().cmdline()[1:3])\n"
            "print('history', get_ipython().history_manager.hist_file)\n"
            "print('token', os.environ.get('JUPYTER_TOKEN'))",
            "step:first",
        ),
        code("os._exit(3)", "step:crash"),
        code(
            "assert os.getpid() != first_pid\nassert 'secret' not in globals()\n"
            "assert not hasattr(json, 'patched_by_first')\nprint('fresh', first_pid)",
            "step:second",
        ),
    ]
    run = env.run(env.pipeline("fresh", *cells), parallel=1)
    assert run.step("first").status == "succeeded" and run.step("second").status == "succeeded", run.error
    assert run.step("crash").status == "failed"
    first = env.step_text(run.step("first").notebook)
    assert f"cwd {env.folder}" in first
    assert "parent ['-m', 'cube_jupyter.local.fork_server']" in first  # python -m …
    assert "history :memory:" in first
    assert WORKBENCH_TOKEN not in first, "the workbench's token reached a step kernel"
    assert "fresh" in env.step_text(run.step("second").notebook)

"""Real distributed runs on this machine's CPU: one process per replica with the operator's env.

DDP over gloo, XGBoost through its tracker and collective, a TF_CONFIG cluster spec, a function
shipped with its local modules, and the faults: a dying replica, restarts with a backoff limit, a
deadline, delete, and a workbench that died while its job ran (the job is re-attached).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import psutil
import pytest
import xgboost

from cube_jupyter.errors import Conflict, InvalidInput, NotFound
from cube_jupyter.jobs.local.training import ADOPT_LOCK, LocalTrainingRunner
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.package import package_function
from cube_jupyter.local.locks import try_file_lock
from cube_jupyter.storage.local import LocalStore
from tests.jobs.local.conftest import REPLICAS_DIR, USER, training
from tests.waiting import wait_until, wait_until_async

TIMEOUT = 180.0
RANKS_SCRIPT = (
    "import os\nprint('rank', os.environ['OMPI_COMM_WORLD_RANK'], 'of', os.environ['OMPI_COMM_WORLD_SIZE'])\n"
)
PY = sys.executable


def gone(pid: int | None) -> bool:
    """True when `pid` no longer runs (a zombie is gone too: it is only waiting to be reaped)."""
    try:
        return pid is None or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def reports(out: Path) -> dict[str, dict[str, object]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}


def test_pytorch_ddp_two_workers_end_with_identical_parameters(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    spec = training(
        {
            "name": "ddp",
            "framework": "pytorch",
            "replicas": {"master": 1, "worker": 1},
            "script": "ddp_train.py",
            "args": ["--out", str(out), "--steps", "15"],
        }
    )
    started = runner.start(spec, code_dir=REPLICAS_DIR)
    assert started.phase in ("Created", "Running")
    assert [r.name for r in started.replicas] == ["master-0", "worker-0"]
    job = runner.wait(USER, "ddp", TIMEOUT)
    assert job.phase == "Succeeded", job.message
    assert [c.type for c in job.conditions] == ["Created", "Running", "Succeeded"]
    assert job.conditions[-1].reason == "PyTorchJobSucceeded"
    ranks = reports(out)
    assert sorted(ranks) == ["rank-0", "rank-1"]
    zero, one = ranks["rank-0"], ranks["rank-1"]
    assert (zero["env_rank"], one["env_rank"], zero["world_size"]) == (0, 1, 2)
    assert zero["initial"] != one["initial"]  # each rank started from its own weights...
    assert zero["final"] == one["final"]  # ...and DDP left them identical
    assert zero["final"] != zero["initial"]
    assert float(zero["last_loss"]) < float(zero["first_loss"])  # type: ignore[arg-type]
    assert "MASTER_ADDR" not in runner.logs(USER, "ddp", "worker-0")  # the header never dumps env


def test_xgboost_two_workers_train_one_model_through_the_tracker(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    spec = training(
        {
            "name": "xgb",
            "framework": "xgboost",
            "replicas": {"master": 1, "worker": 1},
            "script": "xgb_train.py",
            "args": ["--out", str(out)],
        }
    )
    runner.start(spec, code_dir=REPLICAS_DIR)
    job = runner.wait(USER, "xgb", TIMEOUT)
    assert job.phase == "Succeeded", job.message
    models = {name: (out / f"{name}.json").read_bytes() for name in ("rank-0", "rank-1")}
    assert models["rank-0"] == models["rank-1"]
    # Trained on both shards: not the model rank 0's shard gives alone.
    shard = np.load(out / "shard-0.npz")
    alone = xgboost.train(
        {"tree_method": "hist", "max_depth": 3, "nthread": 1, "seed": 0},
        xgboost.DMatrix(shard["x"], shard["y"]),
        num_boost_round=5,
    )
    assert bytes(alone.save_raw("json")) != models["rank-0"]


def test_tensorflow_replicas_see_their_tf_config(runner: LocalTrainingRunner, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    spec = training(
        {
            "name": "tfcfg",
            "framework": "tensorflow",
            "replicas": {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1},
            "script": "tf_config_check.py",
            "args": ["--out", str(out), "--expect", "5"],
        }
    )
    runner.start(spec, code_dir=REPLICAS_DIR)
    job = runner.wait(USER, "tfcfg", TIMEOUT)
    assert job.phase == "Succeeded", job.message
    seen = reports(out)
    assert sorted(seen) == ["chief-0", "evaluator-0", "ps-0", "worker-0", "worker-1"]
    cluster = seen["chief-0"]["tf_config"]["cluster"]  # type: ignore[index]
    assert sorted(cluster) == ["chief", "ps", "worker"]
    assert [len(cluster[k]) for k in ("chief", "ps", "worker")] == [1, 1, 2]
    hosts = [h for k in ("chief", "ps", "worker") for h in cluster[k]]
    assert all(h.startswith("127.0.0.1:") for h in hosts) and len(set(hosts)) == 4
    for name, report in seen.items():
        config = report["tf_config"]
        role, index = name.split("-")
        assert config["cluster"] == cluster  # type: ignore[index]
        assert config["task"] == {"type": role, "index": int(index)}  # type: ignore[index]
        assert config["environment"] == "cloud"  # type: ignore[index]
        assert report["replica"] == name


def shipped_train(out: str) -> None:
    """Defined in this test module, shipped by value; imports a helper from the user's work dir."""
    import cube_train_helper

    replica = os.environ["CUBE_REPLICA"]
    Path(out, f"{replica}.txt").write_text(cube_train_helper.describe(replica, int(os.environ["PET_NNODES"])))


def test_a_function_shipped_with_its_local_module_runs_in_two_replicas(
    runner: LocalTrainingRunner, store: LocalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "cube_train_helper.py").write_text(
        "def describe(rank, world):\n    return f'{rank} of {world}'\n"
    )
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    out = tmp_path / "out"
    out.mkdir()
    shipped = package_function(shipped_train, store)
    assert "cube_train_helper.py" in shipped.files
    spec = training(
        {
            "name": "fn",
            "framework": "pytorch",
            "replicas": {"worker": 2},  # no master: the job succeeds when both workers have
            "function": shipped.target,
            "package": shipped.uri,
            "args": [str(out)],
        }
    )
    runner.start(spec, code_dir=tmp_path / "elsewhere")  # the package has everything
    job = runner.wait(USER, "fn", TIMEOUT)
    assert job.phase == "Succeeded", job.message
    assert (out / "worker-0.txt").read_text() == "worker-0 of 2"
    assert (out / "worker-1.txt").read_text() == "worker-1 of 2"


def sleeper_and_failer(name: str, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "framework": "pytorch",
        "replicas": {
            "master": {"command": [PY, "-c", "import time; print('master up', flush=True); time.sleep(120)"]},
            "worker": {"command": [PY, "-c", "print('boom: the data is bad'); raise SystemExit(3)"]},
        },
        "command": [PY, "-c", "pass"],
        **extra,
    }


def test_a_dying_replica_fails_the_job_with_its_log_tail_and_stops_the_others(
    runner: LocalTrainingRunner,
) -> None:
    started = runner.start(training(sleeper_and_failer("dies")))
    master_pid = next(r.pid for r in started.replicas if r.name == "master-0")
    job = runner.wait(USER, "dies", TIMEOUT)
    assert job.phase == "Failed"
    assert job.conditions[-1].reason == "PyTorchJobFailed"
    assert job.message is not None
    assert "worker-0" in job.message and "code 3" in job.message and "boom: the data is bad" in job.message
    master = next(r for r in job.replicas if r.name == "master-0")
    assert master.state == "Failed" and master.message and "stopped" in master.message
    assert gone(master_pid)
    assert "master up" in runner.logs(USER, "dies", "master-0")


MISSING = "ModuleNotFoundError: No module named 'not_a_module_xyz'"
HELPER = "def load():\n    import not_a_module_xyz\n"
CELL = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
NOTEBOOK = {
    "cells": [
        {**CELL, "id": "load", "source": "print('loading')"},
        {**CELL, "id": "fail", "source": "import helper\nhelper.load()"},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def raising_job(runner: LocalTrainingRunner, tmp_path: Path, code: dict[str, str]) -> Job:
    """A one-worker job whose code imports `helper`, whose `load()` imports a module that is not there."""
    work = tmp_path / "code"
    work.mkdir()
    (work / "helper.py").write_text(HELPER)
    for name, text in code.items():
        (work / name).write_text(text)
    kind, target = ("notebook", "train.ipynb") if "train.ipynb" in code else ("script", "train.py")
    spec = {"name": "raises", "framework": "pytorch", "replicas": {"worker": 1}, kind: target}
    runner.start(training(spec), code_dir=work)
    job = runner.wait(USER, "raises", TIMEOUT)
    assert job.phase == "Failed", job.message
    return job


def test_a_replica_that_raises_fails_the_job_with_its_cause_first(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    job = raising_job(runner, tmp_path, {"train.py": "import helper\nprint('loading')\nhelper.load()\n"})
    # One line in the condition: what ended and why, no traceback.
    context = "PyTorchJob raises has failed: replica worker-0 exited with code 1"
    assert job.conditions[-1].message == f"{context}: {MISSING}"
    assert job.error is not None
    assert (job.error.cause, job.error.context, job.error.replica) == (MISSING, context, "worker-0")
    assert [frame.splitlines()[0].rpartition("/")[2] for frame in job.error.frames] == [
        'train.py", line 3, in <module>',
        'helper.py", line 2, in load',
    ]
    # The message leads with the cause and the user's frames; the workbench's are in the traceback.
    assert job.message == "\n".join([MISSING, *job.error.frames, context])
    assert "entry.py" in job.error.traceback and "entry.py" not in job.message
    assert job.error.traceback in runner.logs(USER, "raises", "worker-0")


def test_a_notebook_replica_fails_with_the_failed_cells_exception_not_papermills(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    job = raising_job(runner, tmp_path, {"train.ipynb": json.dumps(NOTEBOOK)})
    assert job.conditions[-1].message.endswith(f": {MISSING}")
    assert job.error is not None and job.error.cause == MISSING
    cell, helper = job.error.frames
    assert cell.startswith("Cell In[2], line 2") and "helper.load()" in cell
    assert helper.startswith("File ") and "helper.py:2, in load()" in helper.splitlines()[0]
    assert "PapermillExecutionError" in job.error.traceback and "papermill" not in job.message


def test_clean_pod_policy_none_leaves_the_others_running_until_delete(runner: LocalTrainingRunner) -> None:
    started = runner.start(training(sleeper_and_failer("keep", clean_pod_policy="None")))
    master_pid = next(r.pid for r in started.replicas if r.name == "master-0")
    job = runner.wait(USER, "keep", TIMEOUT)
    assert job.phase == "Failed"
    assert not gone(master_pid)
    assert next(r for r in job.replicas if r.name == "master-0").state == "Running"
    runner.delete(USER, "keep")
    assert gone(master_pid)


def flaky(name: str, marker: Path, fail_times: int, policy: str, backoff: int) -> dict[str, object]:
    """A worker that fails its first `fail_times` attempts (counted in `marker`), then succeeds."""
    script = textwrap.dedent(
        f"""
        import pathlib, sys
        marker = pathlib.Path({str(marker)!r})
        attempts = int(marker.read_text()) if marker.exists() else 0
        marker.write_text(str(attempts + 1))
        print('attempt', attempts + 1, flush=True)
        sys.exit(1 if attempts < {fail_times} else 0)
        """
    )
    return {
        "name": name,
        "framework": "pytorch",
        "replicas": {"worker": 1},
        "command": [PY, "-c", script],
        "restart_policy": policy,
        "backoff_limit": backoff,
    }


def test_on_failure_restarts_a_replica_until_it_succeeds(runner: LocalTrainingRunner, tmp_path: Path) -> None:
    runner.start(training(flaky("flaky", tmp_path / "n", 2, "OnFailure", 3)))
    job = runner.wait(USER, "flaky", TIMEOUT)
    assert job.phase == "Succeeded", job.message
    assert "Restarting" in [c.type for c in job.conditions]
    assert (tmp_path / "n").read_text() == "3"
    log = runner.logs(USER, "flaky", "worker-0")
    assert log.count("==== cube-jupyter: starting") == 3 and "attempt 3" in log


def test_restarts_stop_at_the_backoff_limit(runner: LocalTrainingRunner, tmp_path: Path) -> None:
    runner.start(training(flaky("backoff", tmp_path / "n", 99, "OnFailure", 2)))
    job = runner.wait(USER, "backoff", TIMEOUT)
    assert job.phase == "Failed"
    assert job.conditions[-1].reason == "BackoffLimitExceeded"
    assert (tmp_path / "n").read_text() == "3"  # the first run and two restarts
    assert job.message and "worker-0" in job.message and "attempt 3" in job.message


def test_exit_code_policy_does_not_retry_a_permanent_error(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    runner.start(training(flaky("permanent", tmp_path / "n", 99, "ExitCode", 5)))
    job = runner.wait(USER, "permanent", TIMEOUT)
    assert job.phase == "Failed" and job.conditions[-1].reason == "PyTorchJobFailed"
    assert (tmp_path / "n").read_text() == "1"


def test_active_deadline_fails_the_job_and_stops_its_replicas(runner: LocalTrainingRunner) -> None:
    spec = {
        "name": "slow",
        "framework": "pytorch",
        "replicas": {"master": 1, "worker": 1},
        "command": [PY, "-c", "import time; time.sleep(120)"],
        "active_deadline_seconds": 1,
    }
    started = runner.start(training(spec))
    job = runner.wait(USER, "slow", TIMEOUT)
    assert job.phase == "Failed" and job.conditions[-1].reason == "DeadlineExceeded"
    assert all(gone(r.pid) for r in started.replicas)


def test_an_idle_job_is_stopped_at_once_or_by_the_live_process_that_supervises_it(
    runner: LocalTrainingRunner, tmp_path: Path, store: LocalStore
) -> None:
    """What GPU culling asks (`stop`): a job this process supervises fails with reason IdleGPU, its
    replicas stopped and none restarted; one another live process supervises (a `train run`: here a
    second runner named after a live process) is only asked, and stopped by that supervisor's next
    pass, so the two never act on its replicas at once."""
    sleeper = subprocess.Popen([PY, "-c", "import time; time.sleep(120)"])
    sleeping = "import time; time.sleep(120)"
    spec = {
        "framework": "pytorch",
        "replicas": {"worker": 2},
        "command": [PY, "-c", sleeping],
        "restart_policy": "OnFailure",
    }
    try:
        cli = LocalTrainingRunner(tmp_path / "state", store=store, mpirun="", stop_grace_seconds=3.0)
        cli.owner = f"{sleeper.pid}:{psutil.Process(sleeper.pid).create_time():.3f}"
        theirs = cli.start(training({**spec, "name": "theirs"}))
        asked = runner.stop(USER, "theirs", "its GPUs sat idle")
        assert asked.phase == "Running" and not any(gone(r.pid) for r in theirs.replicas)  # asked only
        cli.refresh_all()  # the supervisor's next pass
        job = runner.status(USER, "theirs")
        assert job.phase == "Failed" and job.message == "PyTorchJob theirs failed: its GPUs sat idle"
        assert (job.conditions[-1].type, job.conditions[-1].reason) == ("Failed", "IdleGPU")
        assert (
            all(gone(r.pid) for r in theirs.replicas) and job.replicas == cli.status(USER, "theirs").replicas
        )
        assert [r.state for r in job.replicas] == ["Failed", "Failed"]  # stopped, not restarted

        ours = runner.start(training({**spec, "name": "ours"}))
        stopped = runner.stop(USER, "ours", "its GPUs sat idle")
        assert stopped.phase == "Failed" and stopped.conditions[-1].reason == "IdleGPU"
        assert all(gone(r.pid) for r in ours.replicas)
        assert all(r.message == "its GPUs sat idle" for r in stopped.replicas)
        assert runner.stop(USER, "ours", "again") == stopped  # finished: left as it was
    finally:
        sleeper.kill()
        sleeper.wait()


def test_delete_kills_the_process_groups_and_removes_files(runner: LocalTrainingRunner) -> None:
    # Each replica starts a grandchild: delete must take the whole process group.
    sleeper = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    started = runner.start(
        training(
            {
                "name": "gone",
                "framework": "pytorch",
                "replicas": {"master": 1, "worker": 1},
                "command": [PY, "-c", sleeper],
            }
        )
    )
    for replica in ("master-0", "worker-0"):
        wait_until(lambda r=replica: "ready" in runner.logs(USER, "gone", r), 60, f"{replica} to start")
    family = [psutil.Process(r.pid) for r in started.replicas if r.pid]
    family += [child for proc in family for child in proc.children(recursive=True)]
    assert len(family) == 6  # per replica: its monitor, its command, and the command's child
    runner.delete(USER, "gone")
    assert all(gone(p.pid) for p in family)
    assert not runner.work_dir(USER, "gone").exists() and not runner.log_dir(USER, "gone").exists()
    with pytest.raises(NotFound):
        runner.status(USER, "gone")


def test_duplicate_and_impossible_jobs_leave_nothing_behind(runner: LocalTrainingRunner) -> None:
    spec = {"name": "dup", "framework": "pytorch", "replicas": {"worker": 1}, "command": [PY, "-c", "pass"]}
    runner.start(training(spec))
    with pytest.raises(Conflict):
        runner.start(training(spec))
    with pytest.raises(InvalidInput) as err:
        runner.start(
            training(
                {**spec, "name": "gpus", "replicas": {"worker": {"replicas": 1, "resources": {"gpu": 64}}}}
            )
        )
    assert err.value.field == "replicas.worker.resources.gpu"
    assert runner.get(USER, "gpus") is None
    assert [job.name for job in runner.list(USER)] == ["dup"]


@pytest.mark.parametrize("kind", ["missing path", "not executable", "not on the PATH"])
def test_a_command_that_cannot_run_is_bad_input_naming_command_and_leaves_nothing(
    runner: LocalTrainingRunner, tmp_path: Path, kind: str
) -> None:
    program = {
        "missing path": str(tmp_path / "no-such-program"),
        "not executable": str(Path(__file__)),
        "not on the PATH": "no-such-program-on-path",
    }[kind]
    spec = {
        "name": "nocmd",
        "framework": "pytorch",
        "replicas": {"master": {"command": [PY, "-c", "pass"]}, "worker": 2},
        "command": [program],
    }
    with pytest.raises(InvalidInput) as err:
        runner.start(training(spec))
    assert err.value.field == "command"
    assert repr(program) in err.value.message and "worker-0" in err.value.message
    assert runner.get(USER, "nocmd") is None
    assert not runner.work_dir(USER, "nocmd").exists()


def test_mpi_launcher_starts_the_ranks_with_their_env(runner: LocalTrainingRunner, tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "ranks.py").write_text(RANKS_SCRIPT)
    spec = {"name": "mpi", "framework": "mpi", "replicas": {"launcher": 1, "worker": 2}, "script": "ranks.py"}
    runner.start(training(spec), code_dir=tmp_path / "code")
    job = runner.wait(USER, "mpi", TIMEOUT)
    assert job.phase == "Succeeded", job.message
    assert [(r.name, r.state) for r in job.replicas] == [
        ("launcher-0", "Succeeded"),
        ("worker-0", "Succeeded"),
        ("worker-1", "Succeeded"),
    ]
    assert (runner.work_dir(USER, "mpi") / "hostfile").read_text() == "localhost slots=2\n"
    assert runner.logs(USER, "mpi", "worker-1").strip() == "[1,1]<stdout>:rank 1 of 2"


@pytest.mark.skipif(not __import__("shutil").which("mpirun"), reason="Open MPI's mpirun is not installed")
def test_mpi_launcher_uses_mpirun_when_installed(tmp_path: Path, store: LocalStore) -> None:
    runner = LocalTrainingRunner(tmp_path / "state", store=store, stop_grace_seconds=3.0)
    assert runner.mpirun
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "ranks.py").write_text(RANKS_SCRIPT)
    spec = {
        "name": "mpirun",
        "framework": "mpi",
        "replicas": {"launcher": 1, "worker": 2},
        "script": "ranks.py",
        "slots_per_worker": 2,
    }
    try:
        runner.start(training(spec), code_dir=tmp_path / "code")
        job = runner.wait(USER, "mpirun", TIMEOUT)
        assert job.phase == "Succeeded", job.message
        lines = sorted(
            line for line in runner.logs(USER, "mpirun", "launcher-0").splitlines() if "rank" in line
        )
        assert lines == [f"[1,{r}]<stdout>:rank {r} of 4" for r in range(4)]
        assert runner.logs(USER, "mpirun", "worker-1").count("<stdout>:rank") == 2  # ranks 2 and 3
    finally:
        for job in runner.list():
            runner.delete(job.user, job.name)


def test_follow_streams_a_replica_log_until_it_finishes(runner: LocalTrainingRunner) -> None:
    code = "import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.3)\n"
    runner.start(
        training(
            {"name": "stream", "framework": "pytorch", "replicas": {"master": 1}, "command": [PY, "-c", code]}
        )
    )
    chunks = list(runner.follow(USER, "stream", "master-0", poll=0.05))
    text = "".join(chunks)
    assert [line for line in text.splitlines() if line.startswith("line")] == ["line 0", "line 1", "line 2"]
    assert len(chunks) >= 2  # it streamed, not one read at the end
    assert runner.status(USER, "stream").phase == "Succeeded"


SUPERVISOR = """
import json, sys
from cube_jupyter.jobs.local.training import LocalTrainingRunner
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.storage.local import LocalStore
state, store, spec, user = sys.argv[1:]
runner = LocalTrainingRunner(state, store=LocalStore(store), mpirun="")
job = runner.start(TrainingSpec.from_dict(json.loads(spec), user=user))
print(" ".join(str(r.pid) for r in job.replicas), flush=True)
sys.stdin.read()  # supervise until killed
"""
# A replica that waits for a file, then exits with the code it names.
AWAIT_FILE = (
    "import os, sys, time\n"
    "print('up', flush=True)\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.02)\n"
    "print('exiting with', sys.argv[2], flush=True)\n"
    "raise SystemExit(int(sys.argv[2]))\n"
)


def awaiting(go: Path, code: int) -> list[str]:
    return [PY, "-c", AWAIT_FILE, str(go), str(code)]


def start_and_kill_supervisor(tmp_path: Path, spec: dict[str, object]) -> list[int]:
    """Start `spec` from another process (a workbench) and kill that one with -9 while its replicas
    run: the replicas' pids, every one alive."""
    argv = [PY, "-c", SUPERVISOR, str(tmp_path / "state"), str(tmp_path / "store"), json.dumps(spec), USER]
    workbench = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    assert workbench.stdout is not None
    pids = [int(p) for p in workbench.stdout.readline().split()]
    workbench.send_signal(signal.SIGKILL)
    workbench.wait()
    assert pids and not any(gone(p) for p in pids)
    return pids


def test_a_job_whose_workbench_died_is_reattached_and_succeeds_from_its_exit_files(
    runner: LocalTrainingRunner, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    go = tmp_path / "go"
    spec = {"name": "orphan", "framework": "pytorch", "replicas": {"worker": 2}, "command": awaiting(go, 0)}
    pids = start_and_kill_supervisor(tmp_path, spec)

    with caplog.at_level("INFO", logger="cube_jupyter.jobs.local.training"):
        with try_file_lock(runner.records.directory(USER, "orphan") / ADOPT_LOCK) as held:
            assert held  # as if another process were adopting it now: this one leaves it
            runner.refresh_all()
        assert "re-attached" not in caplog.text
        runner.refresh_all()
    assert "re-attached training job alice@example.com/orphan" in caplog.text
    job = runner.status(USER, "orphan")
    assert job.phase == "Running" and [r.pid for r in job.replicas] == pids
    assert [r.state for r in job.replicas] == ["Running", "Running"]
    runner.abandon()  # what an interrupted `train run` stops: only the jobs it started itself
    assert not any(gone(p) for p in pids)

    go.touch()  # the replicas exit 0; not our children: their monitors' exit files tell
    job = runner.wait(USER, "orphan", TIMEOUT)
    assert job.phase == "Succeeded", job.message
    assert [(r.state, r.exit_code) for r in job.replicas] == [("Succeeded", 0), ("Succeeded", 0)]
    assert "exiting with 0" in runner.logs(USER, "orphan", "worker-1")


def test_a_replica_that_failed_while_nobody_supervised_fails_the_reattached_job(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    spec = {
        "name": "broke",
        "framework": "pytorch",
        "replicas": {
            "master": {"command": awaiting(tmp_path / "never", 0)},
            "worker": {"command": awaiting(go, 3)},
        },
        "command": [PY, "-c", "pass"],
        "restart_policy": "Never",
        "backoff_limit": 0,
    }
    master_pid, worker_pid = start_and_kill_supervisor(tmp_path, spec)
    go.touch()
    wait_until(lambda: gone(worker_pid), TIMEOUT, "the worker to exit while no supervisor runs")

    runner.refresh_all()
    job = runner.status(USER, "broke")
    assert job.phase == "Failed" and job.conditions[-1].reason == "PyTorchJobFailed"
    assert job.message and "replica worker-0 exited with code 3" in job.message
    assert "exiting with 3" in job.message  # its log tail
    master = next(r for r in job.replicas if r.name == "master-0")
    assert master.state == "Failed" and master.message and "stopped" in master.message
    assert gone(master_pid)  # cleanPodPolicy Running stopped what was left


def test_a_replica_whose_monitor_was_killed_meanwhile_fails_with_an_unknown_exit_status(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    from cube_jupyter.jobs.local.training_plan import UNKNOWN_EXIT_MESSAGE

    spec = {
        "name": "killed",
        "framework": "pytorch",
        "replicas": {"worker": 1},
        "command": awaiting(tmp_path / "never", 0),
    }
    (pid,) = start_and_kill_supervisor(tmp_path, spec)
    os.killpg(pid, signal.SIGKILL)  # the replica and its monitor, with nobody to see how
    wait_until(lambda: gone(pid), TIMEOUT, "the replica's group to die")

    runner.refresh_all()
    job = runner.status(USER, "killed")
    assert job.phase == "Failed"
    assert job.message and "worker-0 ended and " + UNKNOWN_EXIT_MESSAGE in job.message
    assert job.replicas[0].exit_code is None


def test_ttl_after_finished_deletes_the_job(runner: LocalTrainingRunner) -> None:
    spec = {
        "name": "ttl",
        "framework": "pytorch",
        "replicas": {"worker": 1},
        "command": [PY, "-c", "pass"],
        "ttl_seconds_after_finished": 0,
    }
    runner.start(training(spec))
    assert runner.wait(USER, "ttl", TIMEOUT).phase == "Succeeded"
    runner.refresh_all()
    assert runner.get(USER, "ttl") is None and not runner.log_dir(USER, "ttl").exists()


def test_async_facade_supervises_in_the_background_and_streams_logs(runner: LocalTrainingRunner) -> None:
    from cube_jupyter.jobs.local.training import AsyncLocalTraining

    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)\n"
    spec = training(
        {"name": "bg", "framework": "pytorch", "replicas": {"master": 1}, "command": [PY, "-c", code]}
    )

    async def scenario() -> tuple[list[str], str]:
        facade = AsyncLocalTraining(runner, poll=0.05)
        await facade.start()
        try:
            await facade.submit(spec)
            chunks = [chunk async for chunk in facade.logs(USER, "bg", "master-0", follow=True)]
            job = await wait_until_async(  # the supervisor, not this coroutine, finishes the job
                lambda: facade.get(USER, "bg"),
                10,
                "the supervisor to finish job bg",
                until=lambda j: j and j.finished,
            )
            return chunks, job.phase if job else "missing"
        finally:
            await facade.close()

    chunks, phase = asyncio.run(scenario())
    assert phase == "Succeeded"
    assert [line for line in "".join(chunks).splitlines() if line.startswith("tick")] == [
        "tick 0",
        "tick 1",
        "tick 2",
    ]


def test_closing_the_supervisor_leaves_its_jobs_running_and_abandon_stops_them(
    runner: LocalTrainingRunner,
) -> None:
    """The workbench's close leaves jobs running for the next start to re-attach, as notebook
    servers; `abandon` (an interrupted `train run`) fails the jobs it started and stops them."""
    from cube_jupyter.jobs.local.training import AsyncLocalTraining
    from cube_jupyter.jobs.local.training_plan import STOPPED_MESSAGE

    spec = training(
        {
            "name": "left",
            "framework": "pytorch",
            "replicas": {"master": 1, "worker": 1},
            "command": [PY, "-c", "import time; time.sleep(120)"],
        }
    )

    async def scenario() -> list[int | None]:
        facade = AsyncLocalTraining(runner, poll=0.05)
        await facade.start()
        job = await facade.submit(spec)
        await facade.close()
        return [r.pid for r in job.replicas]

    pids = asyncio.run(scenario())
    assert len(pids) == 2 and not any(gone(p) for p in pids)
    assert runner.status(USER, "left").phase == "Running"

    runner.abandon()
    assert all(gone(p) for p in pids)
    job = runner.status(USER, "left")
    assert job.phase == "Failed" and job.conditions[-1].reason == "SupervisorStopped"
    assert job.message and STOPPED_MESSAGE in job.message


def test_what_a_finished_replica_left_running_in_its_group_is_killed(
    runner: LocalTrainingRunner, tmp_path: Path
) -> None:
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(tmp_path / 'child')!r}, 'w').write(str(child.pid))\n"
    )
    runner.start(
        training(
            {"name": "leak", "framework": "pytorch", "replicas": {"worker": 1}, "command": [PY, "-c", code]}
        )
    )
    assert runner.wait(USER, "leak", TIMEOUT).phase == "Succeeded"
    child = int((tmp_path / "child").read_text())
    wait_until(lambda: gone(child), 30, "the SIGKILL of its group to take effect")  # it sleeps 120 s

"""`cube-jupyter train|tune|serve render|run|list|logs|delete`, run as a user runs it: a subprocess in
a folder holding the spec files and the training script, on the local backend."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from tests.k8s_schemas import validate_object
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)
CONFIG = """
c.CubeWorkbench.state_dir = {state!r}
c.CubeWorkbench.default_user = "alice"
c.CubeStorage.url = {store!r}
"""
TRAIN_SCRIPT = """
import os
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}", flush=True)
"""
DDP = {
    "name": "ddp",
    "framework": "pytorch",
    "image": "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "replicas": {"master": 1, "worker": {"replicas": 1, "resources": {"cpu": "2", "memory": "4Gi"}}},
    "script": "train.py",
}
TUNE = {
    "name": "lr-search",
    "objective": {"metric": "accuracy", "type": "maximize"},
    "algorithm": "tpe",
    "parameters": {"lr": {"type": "double", "min": 0.001, "max": 0.1}},
    "max_trials": 4,
    "trial": {"training": {"framework": "pytorch", "replicas": {"worker": 1}, "script": "train.py"}},
}
SERVE = {"name": "iris", "model_format": "sklearn", "storage_uri": "s3://models/iris", "max_replicas": 3}
CONFIG_FILE = "jupyter_server_config.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
# Nodes alike: without a cluster to ask, `render` shows the TrainJob a cluster with Trainer v2 gets.
NODES = {"name": "nodes", "framework": "pytorch", "replicas": {"worker": 2}, "script": "train.py"}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / CONFIG_FILE).write_text(
        CONFIG.format(state=str(tmp_path / "state"), store=str(tmp_path / "artifacts"))
    )
    (tmp_path / "train.py").write_text(TRAIN_SCRIPT)
    for name, spec in (("ddp", DDP), ("tune", TUNE), ("serve", SERVE), ("nodes", NODES)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    return tmp_path


def cube_argv(folder: Path, command: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "cube_jupyter.cli", command, *args, "--config", str(folder / CONFIG_FILE)]


def cube(folder: Path, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cube_argv(folder, command, *args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=ENV, cwd=folder, check=False)


@pytest.mark.parametrize(
    ("command", "file", "kind"),
    [
        ("train", "ddp.yaml", "PyTorchJob"),
        ("train", "nodes.yaml", "TrainJob"),
        ("tune", "tune.yaml", "Experiment"),
        ("serve", "serve.yaml", "InferenceService"),
    ],
)
def test_render_prints_the_objects_as_valid_yaml(folder: Path, command: str, file: str, kind: str) -> None:
    result = cube(folder, command, "render", file)
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [o["kind"] for o in objects] == [kind]
    for obj in objects:
        validate_object(obj, strict=True)
        assert obj["metadata"]["namespace"] == "cube-alice"
        # Read like a manifest written by hand: apiVersion, kind, metadata, spec (a Katib trial's too).
        assert list(obj) == ["apiVersion", "kind", "metadata", "spec"]
        trial = obj["spec"].get("trialTemplate", {}).get("trialSpec")
        if trial is not None and "metadata" in trial:
            assert list(trial) == ["apiVersion", "kind", "metadata", "spec"]
        assert (
            result.stdout.index("\nkind:")
            < result.stdout.index("\nmetadata:")
            < result.stdout.index("\nspec:")
        )


@pytest.mark.parametrize(
    ("command", "content", "field"),
    [
        ("train", {**DDP, "framework": "caffe"}, "framework"),
        ("train", {**DDP, "replicas": {"worker": 0}}, "replicas.worker"),
        ("serve", {**SERVE, "min_replicas": 5}, "min_replicas"),
        ("tune", {**TUNE, "algorithm": "guessing"}, "algorithm"),
    ],
)
def test_a_bad_spec_exits_2_naming_the_field(
    folder: Path, command: str, content: dict[str, object], field: str
) -> None:
    (folder / "bad.yaml").write_text(yaml.safe_dump(content))
    for action in ("render", "run"):
        result = cube(folder, command, action, "bad.yaml")
        assert result.returncode == 2, (action, result.stderr)
        assert field in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("command", "content", "field"),
    [
        ("train", {**DDP, "script": "missing.py"}, "script"),
        ("train", {**{k: v for k, v in DDP.items() if k != "script"}, "notebook": "gone.ipynb"}, "notebook"),
        ("tune", {**TUNE, "trial": {"notebook": "gone.ipynb"}}, "trial.notebook"),
        ("serve", {**SERVE, "storage_uri": "models/gone"}, "storage_uri"),
    ],
)
def test_a_spec_naming_a_missing_file_exits_2_naming_the_field(
    folder: Path, command: str, content: dict[str, object], field: str
) -> None:
    (folder / "missing.yaml").write_text(yaml.safe_dump(content))
    result = cube(folder, command, "run", "missing.yaml")
    assert result.returncode == 2, result.stderr
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr, result.stderr


def on_the_lock(path: Path, pid: int) -> bool:
    """Whether process `pid` waits for the flock on `path` (/proc/locks marks a waiter with '->')."""
    inode = path.stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        waiting = len(fields) > 6 and fields[1] == "->" and int(fields[5]) == pid
        if waiting and int(fields[6].rsplit(":", 1)[1]) == inode:
            return True
    return False


# `cube-jupyter ARGV` in a process of its own that sees this machine's one GPU, as the test does.
ONE_GPU_CLI = (
    "import sys; from cube_jupyter.local import gpus; gpus.nvml_device_count = lambda: 1; "
    "from cube_jupyter.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_cli_submit_takes_the_workbenchs_quota_lock_so_both_cannot_pass_a_quota_of_1(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI and the workbench server share one per-user GPU lock (a file in the state directory,
    `services.Workbench.ledger`): a `train run` started while the server holds it for a create
    checks the quota only once that create is through, and its job waits in the queue. Without the
    shared lock the CLI checked at once, and both got under the quota."""
    from cube_jupyter.config import load_config_file, load_settings
    from cube_jupyter.jobs.specs import parse_spec
    from cube_jupyter.local import gpus
    from cube_jupyter.local.locks import file_lock_path
    from cube_jupyter.services import Workbench

    monkeypatch.setattr(gpus, "nvml_device_count", lambda: 1)
    with (folder / CONFIG_FILE).open("a") as config:
        config.write("c.CubeWorkbench.gpu_quota_per_user = 1\n")
    hold = [sys.executable, "-c", "import time; time.sleep(300)"]
    one_gpu = {"name": "cli-gpu", "framework": "pytorch", "replicas": {"master": {"resources": {"gpu": 1}}}}
    (folder / "gpu.yaml").write_text(yaml.safe_dump({**one_gpu, "command": hold}))
    workbench = Workbench(load_settings(load_config_file(folder / CONFIG_FILE)), root_dir=str(folder))
    assert workbench.ledger.lock_dir is not None
    lock = file_lock_path(workbench.ledger.lock_dir, "alice")
    argv = [
        sys.executable,
        "-c",
        ONE_GPU_CLI,
        "train",
        "run",
        "gpu.yaml",
        "--config",
        str(folder / CONFIG_FILE),
    ]
    cli: subprocess.Popen[str] | None = None
    try:
        with lock_held(lock):  # the server's create, under the user's lock
            cli = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=folder
            )
            wait_until(lambda: on_the_lock(lock, cli.pid), 120, "the CLI to wait for the user's lock")
            spec = parse_spec("training", {**one_gpu, "name": "server-gpu", "command": hold}, "alice")
            asyncio.run(workbench.job_backend.submit("training", spec))
        # checked after the server's create: its job waits in the queue, holding nothing, and `train
        # list` (as another command) shows where it is and why
        # (its record is written first, then the admission pass gives it its place and reason)
        queued = wait_until(
            lambda: workbench.job_backend.get("alice", "cli-gpu"),
            120,
            "the CLI's job to be queued with its place",
            until=lambda job: job is not None and job.queue is not None and job.queue.reason,
        )
        assert queued.phase == "Queued" and queued.queue is not None, queued
        assert "'alice' holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)" in queued.queue.reason
        assert workbench.ledger.held("alice") == 1
        listing = cube(folder, "train", "list")
        row = next(line for line in listing.stdout.splitlines() if line.startswith("cli-gpu"))
        assert "Queued" in row and "#1: waiting for 1 GPU of quota" in row, listing.stdout
        cli.send_signal(signal.SIGINT)  # an interrupted `train run` gives up its queued job too
        cli.communicate(timeout=120)
        assert workbench.job_backend.get("alice", "cli-gpu").phase == "Failed"  # type: ignore[union-attr]
    finally:
        if cli is not None and cli.poll() is None:
            cli.kill()
        for job in workbench.job_backend.list(None):
            asyncio.run(workbench.job_backend.delete(job.user, job.name))


@contextlib.contextmanager
def lock_held(path: Path) -> Iterator[None]:
    """The flock the ledger takes for a user, taken here as the workbench server takes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_unreadable_yaml_and_a_missing_file_exit_2(folder: Path) -> None:
    (folder / "broken.yaml").write_text("name: [unclosed\n")
    for file in ("broken.yaml", "missing.yaml"):
        result = cube(folder, "train", "render", file)
        assert result.returncode == 2 and file in result.stderr and "Traceback" not in result.stderr


def test_run_wait_list_logs_and_delete_a_local_job(folder: Path) -> None:
    result = cube(folder, "train", "run", "ddp.yaml", "--wait")
    assert result.returncode == 0, result.stderr
    assert "ddp: Succeeded" in result.stdout
    assert "master-0" in result.stderr and "Succeeded" in result.stderr  # the progress display

    listed = cube(folder, "train", "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:6] == ["NAME", "KIND", "FRAMEWORK", "PHASE", "REPLICAS", "GPUS"]
    assert row.split()[:5] == ["ddp", "training", "pytorch", "Succeeded", "2/2"]
    as_json = json.loads(cube(folder, "train", "list", "--json").stdout)
    assert [(j["name"], j["phase"]) for j in as_json] == [("ddp", "Succeeded")]
    assert json.loads(cube(folder, "serve", "list", "--json").stdout) == []

    logs = cube(folder, "train", "logs", "ddp", "--replica", "worker-0")
    assert logs.returncode == 0 and "rank 1 of 2\n" in logs.stdout, logs.stderr
    followed = cube(folder, "train", "logs", "ddp", "-f", "--tail", "1")
    assert followed.returncode == 0 and followed.stdout == "rank 0 of 2\n", followed

    missing = cube(folder, "train", "logs", "ddp", "--replica", "chief-0")
    assert missing.returncode == 1 and "chief-0" in missing.stderr

    wrong_kind = cube(folder, "serve", "delete", "ddp")  # the command names the kind it acts on
    assert wrong_kind.returncode == 1 and "cube-jupyter train" in wrong_kind.stderr, wrong_kind
    deleted = cube(folder, "train", "delete", "ddp")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(cube(folder, "train", "list", "--json").stdout) == []
    again = cube(folder, "train", "delete", "ddp")
    assert again.returncode == 1 and "ddp" in again.stderr


def test_a_failed_job_exits_1_with_its_reason(folder: Path) -> None:
    (folder / "train.py").write_text("import sys\nprint('no data found', flush=True)\nsys.exit(4)\n")
    result = cube(folder, "train", "run", "ddp.yaml", "--wait")
    assert result.returncode == 1, result.stderr
    assert "ddp: Failed" in result.stdout and "no data found" in result.stderr


def test_a_job_that_raises_prints_its_cause_first_and_where_the_whole_traceback_is(folder: Path) -> None:
    (folder / "train.py").write_text("def load():\n    import not_a_module_xyz\n\nload()\n")
    result = cube(folder, "train", "run", "ddp.yaml", "--wait")
    assert result.returncode == 1, result.stderr
    report = result.stderr[result.stderr.index("ModuleNotFoundError") :].splitlines()
    assert report[0] == "ModuleNotFoundError: No module named 'not_a_module_xyz'"
    assert report[1].endswith('train.py", line 4, in <module>') and report[3].endswith("line 2, in load")
    assert re.fullmatch(r"PyTorchJob ddp has failed: replica (master|worker)-0 exited with code 1", report[5])
    assert re.fullmatch(
        r"the whole traceback: cube-jupyter train logs ddp --replica (master|worker)-0", report[6]
    )
    assert "entry.py" not in result.stderr and "^^^" not in result.stderr
    replica = report[6].rpartition(" ")[2]
    logs = cube(folder, "train", "logs", "ddp", "--replica", replica)
    assert "entry.py" in logs.stdout and logs.stdout.rstrip().endswith(report[0])


def test_ctrl_c_stops_the_local_job_train_run_follows(folder: Path) -> None:
    """A local job runs under the `train run` that started it (README): Ctrl-C fails it and stops its
    replicas, where a workbench's close leaves its jobs running."""
    from cube_jupyter.errors import NotFound
    from cube_jupyter.jobs.local.training import LocalTrainingRunner

    (folder / "train.py").write_text("import time\nprint('training', flush=True)\ntime.sleep(120)\n")
    run = subprocess.Popen(
        cube_argv(folder, "train", "run", "ddp.yaml"), stderr=subprocess.PIPE, text=True, env=ENV, cwd=folder
    )
    records = LocalTrainingRunner(folder / "state")
    try:
        job = wait_until(
            lambda: records.get("alice", "ddp"),
            120,
            "the job to run",
            until=lambda j: j and j.phase == "Running",
        )
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=120)
        assert run.returncode == 130, stderr
        stopped = records.get("alice", "ddp")
        assert stopped is not None and stopped.phase == "Failed", stderr
        assert stopped.conditions[-1].reason == "SupervisorStopped"
        assert all(gone(replica.pid) for replica in job.replicas)
    finally:
        run.kill()
        run.wait()
        with contextlib.suppress(NotFound):
            records.delete("alice", "ddp")  # whatever is left of it


def gone(pid: int | None) -> bool:
    try:
        return pid is None or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True

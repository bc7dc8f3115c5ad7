"""`cube-jupyter pipeline graph|run|compile`, run as a user runs it: a subprocess in a folder of notebooks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from io import StringIO
from pathlib import Path

import nbformat
import psutil
import pytest
import yaml

from cube_jupyter.cli import main
from cube_jupyter.cli.pipeline_commands import StepDisplay
from cube_jupyter.pipelines.dag import build_pipeline
from cube_jupyter.pipelines.history import RunHistory, StepRecord
from tests.pipelines.notebooks import EXAMPLES, code, notebook, write
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)
CONFIG = """
c.CubeWorkbench.state_dir = {state!r}
c.CubeWorkbench.default_user = "alice"
c.CubeStorage.url = {store!r}
"""
GOOD = notebook(
    code("import math", "imports"),
    code("rate = 0.5", "parameters"),
    code("values = [rate * i for i in range(4)]", "step:make"),
    code("print('total', math.fsum(values))", "step:show"),
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "jupyter_server_config.py").write_text(
        CONFIG.format(state=str(tmp_path / "state"), store=str(tmp_path / "artifacts"))
    )
    write(GOOD, tmp_path / "good.ipynb")
    return tmp_path


def cube(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cube_jupyter.cli", "pipeline", *args]
    argv += ["--config", str(folder / "jupyter_server_config.py")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, cwd=folder, check=False)


def test_graph_prints_steps_edges_and_variables(folder: Path) -> None:
    result = cube(folder, "graph", "good.ipynb")
    assert result.returncode == 0, result.stderr
    graph = json.loads(result.stdout)
    assert [s["name"] for s in graph["steps"]] == ["make", "show"]
    assert graph["edges"] == [{"upstream": "make", "downstream": "show", "variables": ["values"]}]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "is not valid JSON"),
        (
            nbformat.writes(notebook(code("a = 1", "step:one", "after:two"), code("b = a", "step:two"))),
            "cycle",
        ),
    ],
)
def test_an_invalid_pipeline_exits_2_with_the_reason(folder: Path, content: str, needle: str) -> None:
    (folder / "bad.ipynb").write_text(content)
    for action in ("graph", "run"):
        result = cube(folder, action, "bad.ipynb")
        assert result.returncode == 2, result.stderr
        assert needle in result.stderr and "Traceback" not in result.stderr
    assert cube(folder, "run", "good.ipynb", "-p", "nope", "1").returncode == 2


def test_run_writes_step_notebooks_then_reuses_them_from_the_cache(folder: Path) -> None:
    # Its cells have no ids, as an older tool wrote it: read without nbformat's warning.
    saved = json.loads((folder / "good.ipynb").read_text())
    for cell in saved["cells"]:
        cell.pop("id", None)
    (folder / "good.ipynb").write_text(json.dumps(saved))
    result = cube(folder, "run", "good.ipynb", "-p", "rate", "2", "--parallel", "2", "--output-dir", "out")
    assert result.returncode == 0, result.stderr
    table = result.stdout.splitlines()
    assert table[0].split() == ["STEP", "STATUS", "ATTEMPTS", "DURATION", "CACHED", "NOTEBOOK"]
    assert [line.split()[:2] for line in table[1:3]] == [["make", "succeeded"], ["show", "succeeded"]]
    assert "succeeded in" in table[3]
    show = nbformat.read(folder / "out" / "show.ipynb", as_version=4)
    assert "total 12.0" in "".join(o.get("text", "") for c in show.cells for o in c.get("outputs", []))
    assert (folder / "out" / "make.ipynb").is_file()
    assert "show  succeeded" in result.stderr  # progress, one line per change off a terminal

    again = cube(folder, "run", "good.ipynb", "-p", "rate", "2")
    assert again.returncode == 0, again.stderr
    assert [line.split()[1] for line in again.stdout.splitlines()[1:3]] == ["cached", "cached"]
    runs = RunHistory.in_state_dir(folder / "state").list("alice")
    assert [r.status for r in runs] == ["succeeded", "succeeded"]
    # NOTEBOOK: the executed notebook as a path to open; a cached step's is the run's that made it.
    first = runs[1].id
    made = folder / "artifacts" / "runs" / first / "steps" / "show.ipynb"
    assert str(made) in table[2] and made.is_file()
    assert f"{made} (cached from {first})" in again.stdout.splitlines()[2]
    assert "MissingIDFieldWarning" not in result.stderr + again.stderr


def test_a_failed_step_exits_1_showing_the_step_and_its_traceback(folder: Path) -> None:
    write(
        notebook(
            code("data = [1, 2]", "step:load"),
            code("ratio = sum(data) / 0", "step:divide"),
            code("size = len(data)", "step:count"),
        ),
        folder / "fails.ipynb",
    )
    result = cube(folder, "run", "fails.ipynb")
    assert result.returncode == 1
    assert "step 'divide' failed in cell 1" in result.stderr and "ZeroDivisionError" in result.stderr
    assert "ratio = sum(data) / 0" in result.stderr  # the cell's traceback
    status = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()[1:4]}
    assert status == {"load": "succeeded", "divide": "failed", "count": "succeeded"}


def test_ctrl_c_cancels_the_run_and_records_it(folder: Path) -> None:
    inside = folder / "sleepy-started"
    write(
        notebook(
            code("import time", "imports"),
            # Sleeps past the wait below: only a cancel that stops the step lets the CLI exit.
            code(f"open({str(inside)!r}, 'w').close()\ntime.sleep(3600)", "step:sleepy"),
        ),
        folder / "slow.ipynb",
    )
    argv = [sys.executable, "-m", "cube_jupyter.cli", "pipeline", "run", "slow.ipynb"]
    argv += ["--config", str(folder / "jupyter_server_config.py")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    history = RunHistory.in_state_dir(folder / "state")

    def step_running() -> bool:
        runs = history.list("alice")
        return bool(runs) and runs[0].steps[0].status == "running" and inside.exists()

    wait_until(step_running, 60, "the step to run its cell", interval=0.1)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "cancelling" in err and "Traceback" not in err
    run = history.list("alice")[0]
    assert run.status == "cancelled" and run.steps[0].status == "cancelled"


def test_compile_writes_an_argo_workflow(folder: Path) -> None:
    result = cube(
        folder, "compile", "good.ipynb", "--target", "argo", "--store", "s3://ml/runs", "-o", "wf.yaml"
    )
    assert result.returncode == 0, result.stderr
    workflow = yaml.safe_load((folder / "wf.yaml").read_text())
    assert workflow["kind"] == "Workflow"
    dag = next(t for t in workflow["spec"]["templates"] if "dag" in t)
    assert sorted(task["name"] for task in dag["dag"]["tasks"]) == ["make", "show"]


def test_a_reader_that_stops_early_gets_no_traceback(folder: Path) -> None:
    """`cube-jupyter ... | head`: stdout's reader is gone; the command ends quietly, as Unix tools do."""
    script = (
        "import os, sys\n"
        "read, write = os.pipe()\n"
        "os.close(read)\n"
        "os.dup2(write, 1)\n"
        "from cube_jupyter.cli import main\n"
        f"config = {str(folder / 'jupyter_server_config.py')!r}\n"
        "sys.exit(main(['pipeline', 'graph', 'good.ipynb', '--config', config]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=folder,
        check=False,
    )
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


def test_compile_writes_kfp_ir_and_refuses_argos_flags(folder: Path) -> None:
    result = cube(
        folder, "compile", "good.ipynb", "--target", "kfp", "-p", "rate", "2", "-o", "pipeline.yaml"
    )
    assert result.returncode == 0, result.stderr
    spec = yaml.safe_load((folder / "pipeline.yaml").read_text())
    assert sorted(spec["root"]["dag"]["tasks"]) == ["step-make", "step-show"]
    assert spec["root"]["inputDefinitions"]["parameters"]["rate"]["defaultValue"] == 2
    refused = cube(folder, "compile", "good.ipynb", "--target", "kfp", "--store", "s3://ml/runs")
    assert refused.returncode == 2 and "--store" in refused.stderr and "Traceback" not in refused.stderr


def test_metrics_are_printed_in_katibs_stdout_format(folder: Path) -> None:
    write(
        notebook(
            code("scale = 3", "parameters"),
            code("values = [1, 2, 3]", "step:make"),
            code("score = sum(values) * scale\nnoise = 0.5", "step:score"),
            code("score\nnoise", "metrics"),
        ),
        folder / "scored.ipynb",
    )
    result = cube(folder, "run", "scored.ipynb", "-p", "scale", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "score=12" in lines and "noise=0.5" in lines
    run = RunHistory.in_state_dir(folder / "state").list("alice")[0]
    assert run.to_dict()["metrics"] == {"score": 12, "noise": 0.5}


def test_a_run_killed_with_its_driver_resumes_keeping_its_finished_steps(folder: Path) -> None:
    """kill -9 of the process driving a run (a CLI here, a workbench alike): its worker and kernel stop
    with it, the run reads as interrupted and resumable, and `resume` reruns only what did not finish,
    with the first step's output read back from the store."""
    ran_first, kernel_pid, go_on = folder / "ran-first", folder / "second-kernel", folder / "go-on"
    write(
        notebook(
            code("import os, time", "imports"),
            code(f"open({str(ran_first)!r}, 'a').write('x')\nbase = 20", "step:first"),
            code(
                f"if not os.path.exists({str(go_on)!r}):\n"
                f"    open({str(kernel_pid)!r}, 'w').write(str(os.getpid()))\n"
                "    time.sleep(3600)\n"
                "total = base + 1",
                "step:second",
            ),
            code("print('answer', total * 2)", "step:third"),
        ),
        folder / "long.ipynb",
    )
    argv = [sys.executable, "-m", "cube_jupyter.cli", "pipeline", "run", "long.ipynb", "--no-cache"]
    argv += ["--config", str(folder / "jupyter_server_config.py")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    driver = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(kernel_pid.exists, 90, "the second step to run its cell", interval=0.1)
    kernel = psutil.Process(int(kernel_pid.read_text()))
    driver.kill()
    driver.wait(30)
    wait_until(lambda: not kernel.is_running(), 30, "the orphaned step's kernel to stop")

    history = RunHistory.in_state_dir(folder / "state")
    assert history.recover()  # what a workbench or CLI starting next does
    (interrupted,) = history.list("alice")
    assert interrupted.status == "failed" and interrupted.resumable
    assert interrupted.error is not None and interrupted.error.startswith("interrupted:")
    steps = {s.name: s for s in interrupted.steps}
    assert [steps[n].status for n in ("first", "second", "third")] == ["succeeded", "failed", "skipped"]

    go_on.touch()
    result = cube(folder, "resume")
    assert result.returncode == 0, result.stderr
    assert f"resuming run {interrupted.id}: kept first" in result.stderr
    assert ran_first.read_text() == "x"  # the first step did not run again
    resumed = history.get(interrupted.id)
    assert resumed.status == "succeeded" and not resumed.resumable
    assert resumed.step("first") == steps["first"]  # the same record: outputs, notebook, timings
    assert resumed.step("second").attempts == 1 and resumed.step("third").status == "succeeded"
    assert "answer 42" in (folder / "artifacts" / resumed.step("third").notebook).read_text()  # type: ignore[operator]


def test_a_store_that_refuses_fails_the_run_saying_why(
    folder: Path, monkeypatch: pytest.MonkeyPatch, refused_port: int
) -> None:
    port = refused_port
    monkeypatch.setenv("MINIO_ENDPOINT", f"http://127.0.0.1:{port}")
    result = cube(folder, "run", "good.ipynb", "--store", "s3://artifacts/runs")
    assert result.returncode == 1, result.stderr
    assert f"error: artifact store s3://artifacts/runs at http://127.0.0.1:{port} refused the connection" in (
        result.stderr
    )
    assert "CubeStorage.endpoint" in result.stderr and "Traceback" not in result.stderr


def test_the_cluster_target_needs_the_kubernetes_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(EXAMPLES / "fanout_ml.ipynb", tmp_path / "fanout_ml.ipynb")
    (tmp_path / "cube_config.py").write_text(f"c.CubeWorkbench.state_dir = {str(tmp_path / 'state')!r}\n")
    monkeypatch.chdir(tmp_path)
    code = main(["pipeline", "run", "fanout_ml.ipynb", "--target", "cluster", "--config", "cube_config.py"])
    assert code in (1, 2) and "kubernetes backend" in capsys.readouterr().err


def test_the_progress_display_shows_a_queued_step_with_its_reason_then_the_gpus_it_holds() -> None:
    stream = StringIO()  # no terminal: a line per change
    display = StepDisplay(build_pipeline(GOOD, "good.ipynb"), stream)
    reason = "waiting for 1 GPU: 0 of 2 free"
    display.update(StepRecord("make", status="queued", reason=reason))
    display.update(StepRecord("make", status="running", attempts=1, gpus=["1"]))
    display.update(StepRecord("show", status="running", attempts=1, gpus=["0", "1"]))
    display.update(StepRecord("show", status="running", attempts=1))
    display.close()
    assert stream.getvalue().splitlines() == [
        f"make  queued: {reason}",
        "make  running on GPU 1",
        "show  running on GPUs 0, 1",
        "show  running",
    ]

"""The step runner, end to end: real kernels, papermill, a real store (local and S3 on loopback)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
import numpy as np
import pytest
from jupyter_client.manager import KernelManager

from cube_jupyter.errors import InvalidInput
from cube_jupyter.pipelines import marshal, runner
from cube_jupyter.pipelines.dag import build_pipeline, load_notebook
from cube_jupyter.pipelines.model import Edge, PipelineError
from cube_jupyter.pipelines.runner import _ReadyClient, run_step
from cube_jupyter.storage import ArtifactStore, CubeStorage, open_store
from tests.pipelines.notebooks import code, markdown, notebook, write
from tests.pipelines.steps import LINEAR, pipeline, step
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, S3Server, s3_server
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return open_store(str(tmp_path / "store"))


def executed(store: ArtifactStore, key: str) -> nbformat.NotebookNode:
    return nbformat.reads(store.get(key).decode(), as_version=4)


def text_of(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_steps_pass_data_and_store_notebooks_and_hashed_outputs(store: ArtifactStore, tmp_path: Path) -> None:
    lines: list[str] = []
    first = run_step(
        LINEAR,
        "prepare",
        "r1",
        store,
        {"n": 5, "label": "tuned"},
        cwd=tmp_path,
        log=lines.append,
        on_cells=lambda: lines.append("under way"),
    )
    assert first.status == "succeeded", first.error
    # told once, as the first of the step's own cells starts, after the generated ones
    assert lines.count("under way") == 1
    assert lines.index("[prepare] running imports") < lines.index("under way")
    assert lines.index("[prepare] running cell 2") + 1 == lines.index("under way")
    assert set(first.outputs) == {"total", "x"}
    for name, ref in first.outputs.items():
        data = store.get(ref.key)
        assert ref.key == f"runs/r1/outputs/prepare/{name}"
        assert ref.sha256 == hashlib.sha256(data).hexdigest() and ref.size == len(data)
    assert first.outputs["x"].kind == "npy"
    assert np.array_equal(marshal.unpack(store.get("runs/r1/outputs/prepare/x")), np.arange(5))
    assert "[prepare] total 10 tuned" in lines

    second = run_step(LINEAR, "train", "r1", store, {}, cwd=tmp_path)
    assert second.status == "succeeded", second.error
    assert second.metrics == {"score": pytest.approx(20 + 5**0.5)}
    assert marshal.unpack(store.get(second.outputs["score"].key)) == pytest.approx(20 + 5**0.5)

    nb = executed(store, first.notebook or "")
    assert first.notebook == "runs/r1/steps/prepare.ipynb"
    user = [c for c in nb.cells if c.metadata.get("cube_jupyter", {}).get("role") == "cell"]
    assert [c.source for c in user] == list(LINEAR.step("prepare").source)
    assert "total 10 tuned" in text_of(user[1])
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert "n = 5" in injected[0].source and 'label = "tuned"' in injected[0].source
    assert nb.metadata["papermill"]["input_path"] == "demo.ipynb"


def test_failing_cell_maps_to_the_source_notebook(store: ArtifactStore, tmp_path: Path) -> None:
    broken = pipeline(step("fit", {7: "a = 1", 9: "print('before')\nb = a / 0"}))
    result = run_step(broken, "fit", "r2", store, {}, cwd=tmp_path)
    assert result.status == "failed" and result.error is not None
    error = result.error
    assert (error.cell, error.phase, error.ename, error.evalue) == (
        9,
        "cell",
        "ZeroDivisionError",
        "division by zero",
    )
    assert "\x1b[" not in error.traceback and "b = a / 0" in error.traceback
    assert "cell 9 of demo.ipynb" in error.message
    assert result.outputs == {}
    nb = executed(store, result.notebook or "")  # stored even though it failed, as far as it got
    failed = next(c for c in nb.cells if c.metadata.get("cube_jupyter", {}).get("source_index") == 9)
    assert "before" in text_of(failed)
    assert any(o.output_type == "error" for o in failed.outputs)


def test_missing_input_fails_in_the_load_cell(store: ArtifactStore, tmp_path: Path) -> None:
    told: list[str] = []
    result = run_step(
        LINEAR, "train", "never-ran", store, {}, cwd=tmp_path, on_cells=lambda: told.append("!")
    )
    assert told == []  # it never got to its own cells
    assert result.status == "failed" and result.error is not None
    assert (result.error.phase, result.error.cell, result.error.ename) == ("load-inputs", None, "NotFound")
    assert "runs/never-ran/outputs/prepare" in result.error.evalue


def test_unserializable_output_names_variable_and_type(store: ArtifactStore, tmp_path: Path) -> None:
    locked = pipeline(
        step("a", {0: "import threading\nlock = threading.Lock()"}, outputs=("lock",)),
        step("b", {1: "print(lock)"}, inputs=("lock",)),
        edges=(Edge("a", "b", ("lock",)),),
    )
    result = run_step(locked, "a", "r3", store, {}, cwd=tmp_path)
    assert result.error is not None
    assert (result.error.phase, result.error.ename) == ("save-outputs", "PipelineError")
    assert "'lock'" in result.error.evalue and "_thread.lock" in result.error.evalue
    assert not store.exists("runs/r3/outputs/a/lock")


def test_output_never_defined_is_named(store: ArtifactStore, tmp_path: Path) -> None:
    partial = pipeline(step("a", {0: "if n > 100:\n    big = n"}, outputs=("big",)))
    result = run_step(partial, "a", "r4", store, {}, cwd=tmp_path)
    assert result.error is not None and result.error.phase == "save-outputs"
    assert "'big'" in result.error.evalue


@pytest.fixture
def ready_kernel(store: ArtifactStore, tmp_path: Path) -> Iterator[KernelManager]:
    """A kernel that has answered already: a step's timeout counts from the step's start, kernel
    start included, and a short one must not run out while a loaded machine boots the kernel."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env={**os.environ, **runner.kernel_env(store)})
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
    finally:
        client.stop_channels()
    try:
        yield km
    finally:
        km.shutdown_kernel(now=True)


def test_timeout_interrupts_the_running_cell(store: ArtifactStore, ready_kernel: KernelManager) -> None:
    slow = pipeline(  # the cell sleeps past the test's timeout: only the interrupt ends it
        step("slow", {3: "print('started', flush=True)", 4: "import time\ntime.sleep(3600)"}, timeout=2.5)
    )
    result = run_step(slow, "slow", "r5", store, {}, kernel_manager=ready_kernel)
    assert result.error is not None
    assert (result.error.ename, result.error.cell) == ("TimeoutError", 4)
    assert "2.5 s" in result.error.evalue
    assert "started" in text_of(executed(store, result.notebook or "").cells[4])


def test_timeout_kills_a_step_that_ignores_interrupts(
    store: ArtifactStore, ready_kernel: KernelManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "INTERRUPT_GRACE", 1.0)
    stubborn = pipeline(
        step(
            "stubborn",
            # Ignores the interrupt and sleeps past the test's timeout: only killing it ends it.
            {2: "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(3600)"},
        )
    )
    result = run_step(stubborn, "stubborn", "r6", store, {}, kernel_manager=ready_kernel, timeout=2.0)
    assert result.error is not None and result.error.ename == "TimeoutError"
    assert result.error.cell == 2


def test_started_kernel_is_used_and_left_to_the_caller(store: ArtifactStore, tmp_path: Path) -> None:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env={**os.environ, **runner.kernel_env(store)})
    try:
        pid = km.provisioner.pid  # type: ignore[union-attr]
        check = pipeline(
            step(
                "who",
                {0: "print('first output')\nimport os\npid = os.getpid()\ncwd = os.getcwd()"},
                outputs=("cwd", "pid"),
            )
        )
        result = run_step(check, "who", "r7", store, {}, kernel_manager=km)
        assert result.status == "succeeded", result.error
        assert marshal.unpack(store.get(result.outputs["pid"].key)) == pid
        assert marshal.unpack(store.get(result.outputs["cwd"].key)) == str(tmp_path)
        assert km.is_alive()
        nb = executed(store, result.notebook or "")
        first = next(c for c in nb.cells if c.metadata.get("cube_jupyter", {}).get("role") == "cell")
        assert text_of(first) == "first output\n"  # the client was ready before the first cell ran
    finally:
        km.shutdown_kernel(now=True)


def test_own_kernel_runs_in_cwd_and_is_shut_down(store: ArtifactStore, tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("42")
    check = pipeline(
        step(
            "read",
            {0: "import os\nvalue = int(open('data.txt').read())\npid = os.getpid()"},
            outputs=("pid", "value"),
        )
    )
    result = run_step(check, "read", "r8", store, {}, cwd=tmp_path)
    assert result.status == "succeeded", result.error
    assert marshal.unpack(store.get(result.outputs["value"].key)) == 42
    pid = marshal.unpack(store.get(result.outputs["pid"].key))
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, f"the step's kernel (pid {pid}) to be gone")


def test_kernel_that_cannot_start_is_a_failed_step(store: ArtifactStore, tmp_path: Path) -> None:
    missing = replace(pipeline(step("a", {0: "pass"})), kernel_name="no-such-kernel")
    result = run_step(missing, "a", "r10", store, {}, cwd=tmp_path)
    assert result.status == "failed" and result.error is not None
    assert (result.error.phase, result.error.ename) == ("kernel", "NoSuchKernel")
    assert "no-such-kernel" in result.error.message
    assert result.notebook is not None and store.exists(result.notebook)


def test_inputs_can_come_from_an_earlier_run(store: ArtifactStore, tmp_path: Path) -> None:
    """How the executor reuses cached upstream outputs: explicit input keys."""
    first = run_step(LINEAR, "prepare", "old", store, {"n": 3}, cwd=tmp_path)
    assert first.status == "succeeded"
    keys = {name: ref.key for name, ref in first.outputs.items()}
    result = run_step(LINEAR, "train", "new", store, {}, cwd=tmp_path, inputs=keys)
    assert result.status == "succeeded", result.error
    assert result.metrics["score"] == pytest.approx(6 + 3**0.5)
    assert store.exists("runs/new/outputs/train/score") and not store.exists("runs/new/outputs/prepare/x")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"step": "nope"}, "step"),
        ({"parameters": {"undeclared": 1}}, "parameters.undeclared"),
        ({"parameters": {"n; import os": 1}}, "parameters.n; import os"),
        ({"parameters": {"n": object()}}, "parameters.n"),
        ({"run_id": "../up"}, "run_id"),
        ({"run_id": "a/b"}, "run_id"),
        ({"store": "ftp://host/x"}, "store"),
    ],
)
def test_bad_arguments_raise_before_anything_runs(
    kwargs: dict[str, object], field: str, store: ArtifactStore, tmp_path: Path
) -> None:
    args: dict[str, object] = {"step": "prepare", "run_id": "r9", "store": store, "parameters": {}}
    args.update(kwargs)
    with pytest.raises(InvalidInput) as caught:
        run_step(LINEAR, args["step"], args["run_id"], args["store"], args["parameters"], cwd=tmp_path)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert store.list() == []


def test_a_tagged_notebook_runs_and_is_never_modified(store: ArtifactStore, tmp_path: Path) -> None:
    path = write(
        notebook(
            markdown("# Demo"),
            code("import statistics", "imports"),
            code("values = 3", "parameters"),
            code("data = list(range(values))", "step:load"),
            code("mean = statistics.mean(data)", "step:stats"),
            code("print('mean is', mean)"),
            code("report = f'{mean:.1f}'", "step:report"),
        ),
        tmp_path / "demo.ipynb",
    )
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    built = build_pipeline(load_notebook(path), str(path))
    for name in [s.name for s in built.steps]:
        result = run_step(built, name, "tagged", store, {"values": 5}, cwd=tmp_path)
        assert result.status == "succeeded", result.error
    assert marshal.unpack(store.get("runs/tagged/outputs/stats/mean")) == 2
    stats = executed(store, "runs/tagged/steps/stats.ipynb")
    printed = next(c for c in stats.cells if c.metadata.get("cube_jupyter", {}).get("source_index") == 5)
    assert "mean is 2" in text_of(printed)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


def test_steps_share_data_through_s3(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials from CubeStorage traits only: the kernel gets them from the runner's kernel env."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MINIO_ENDPOINT", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    storage = CubeStorage(endpoint=s3.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    url = f"s3://{s3.new_bucket()}/pipelines"
    for name in ("prepare", "train"):
        result = run_step(LINEAR, name, "s3run", url, {}, cwd=tmp_path, storage=storage)
        assert result.status == "succeeded", result.error
    store = open_store(url, storage)
    assert store.list("runs/s3run/") == [
        "runs/s3run/outputs/prepare/total",
        "runs/s3run/outputs/prepare/x",
        "runs/s3run/outputs/train/score",
        "runs/s3run/steps/prepare.ipynb",
        "runs/s3run/steps/train.ipynb",
    ]


def _runner_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "cube_jupyter.pipelines.runner", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def test_cli_entry_point_for_pods(tmp_path: Path) -> None:
    spec = tmp_path / "pipeline.json"
    spec.write_text(json.dumps(LINEAR.to_dict()))
    url = (tmp_path / "store").as_uri()
    common = ["--pipeline", str(spec), "--run-id", "pod", "--store", url]
    ok = _runner_cli(*common, "--step", "prepare", "-p", "n", "6", "-p", "label", "pod", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["outputs"]["x"]["key"] == "runs/pod/outputs/prepare/x"
    assert "[prepare] total 15 pod" in ok.stderr
    assert "without encryption" not in ok.stderr  # the runner's kernel talks over Unix sockets
    train = _runner_cli(
        "--pipeline-json",
        spec.read_text(),
        "--step",
        "train",
        "--run-id",
        "pod",
        "--store",
        url,
        cwd=tmp_path,
    )
    assert train.returncode == 0, train.stderr
    assert json.loads(train.stdout)["metrics"]["score"] == pytest.approx(30 + 6**0.5)

    broken = replace(
        LINEAR, steps=(replace(LINEAR.steps[0], source=("x = 1", "raise ValueError('bad data')")),)
    )
    spec.write_text(json.dumps(broken.to_dict()))
    failed = _runner_cli(*common, "--step", "prepare", cwd=tmp_path)
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["error"]["cell"] == 3
    assert "ValueError: bad data" in failed.stderr

    bad = _runner_cli(*common, "--step", "prepare", "-p", "nope", "1", cwd=tmp_path)
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr
    spec.write_text("{not json")
    garbled = _runner_cli(*common, "--step", "prepare", cwd=tmp_path)
    assert garbled.returncode == 2 and "Traceback" not in garbled.stderr


def test_cli_with_kfps_files_reads_and_writes_artifact_paths(tmp_path: Path) -> None:
    """Kubeflow Pipelines' form (`kfp_io`): inputs and outputs as files, the executor output file."""
    document = json.dumps(LINEAR.to_dict())
    out = tmp_path / "out"
    common = ["--pipeline-json", document, "--run-id", "kfp-run"]
    prepare = _runner_cli(
        *common,
        "--step",
        "prepare",
        "-p",
        "n",
        "4",
        "--text-parameter",
        "label",
        "7",  # text, though it reads as JSON
        "--output-file",
        "x",
        str(out / "x"),
        "s3://b/x",
        "--output-file",
        "total",
        str(out / "total"),
        "s3://b/total",
        "--output-file",
        "step_notebook",
        str(out / "nb"),
        "s3://b/nb",
        "--executor-output",
        str(out / "executor.json"),
        cwd=tmp_path,
    )
    assert prepare.returncode == 0, prepare.stderr
    assert "[prepare] total 6 7" in prepare.stderr  # label stayed the text '7'
    recorded = json.loads((out / "executor.json").read_text())["artifacts"]
    assert recorded["out_x"]["artifacts"][0]["uri"] == "s3://b/x"
    assert (
        recorded["out_x"]["artifacts"][0]["metadata"]["sha256"]
        == hashlib.sha256((out / "x").read_bytes()).hexdigest()
    )
    assert nbformat.reads((out / "nb").read_text(), as_version=4).cells
    train = _runner_cli(
        *common,
        "--step",
        "train",
        "--input-file",
        "x",
        str(out / "x"),
        "--input-file",
        "total",
        str(out / "total"),
        "--output-file",
        "step_metrics",
        str(out / "metrics"),
        "s3://b/m",
        "--executor-output",
        str(out / "train.json"),
        cwd=tmp_path,
    )
    assert train.returncode == 0, train.stderr
    metrics = json.loads((out / "train.json").read_text())["artifacts"]["step_metrics"]["artifacts"][0]
    assert (
        metrics["metadata"]["score"]
        == pytest.approx(2 * 6 + 4**0.5)
        == json.loads((out / "metrics").read_text())["score"]
    )

    for args, needle in [
        (["--input-file", "nope", str(out / "x")], "loads no such variable"),
        (["--input-file", "x", str(out / "x")], "needs --input-file total"),
        (
            ["--input-file", "x", str(out / "gone"), "--input-file", "total", str(out / "total")],
            "cannot read",
        ),
    ]:
        bad = _runner_cli(*common, "--step", "train", *args, cwd=tmp_path)
        assert bad.returncode == 2 and needle in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_pipeline_json_round_trip_and_malformed_documents() -> None:
    from cube_jupyter.pipelines.model import pipeline_from_dict

    assert pipeline_from_dict(json.loads(json.dumps(LINEAR.to_dict()))) == LINEAR
    with pytest.raises(PipelineError) as caught:
        pipeline_from_dict({"name": "x"})
    assert caught.value.field == "pipeline"


class LaggingKernel(_ReadyClient):
    """A kernel on a busy host: each kernel_info reply comes only after the next request went out."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []
        self.answered = 0

    def kernel_info(self) -> str:  # type: ignore[override]
        self.requests.append(f"request-{len(self.requests)}")
        return self.requests[-1]

    @property
    def shell_channel(self) -> Any:
        client = self

        class Shell:
            async def get_msg(self, timeout: float) -> dict[str, Any]:
                if len(client.requests) < 2:  # the first reply is still on its way
                    raise Empty
                client.answered += 1
                return {"parent_header": {"msg_id": client.requests[-2]}, "content": {}}

        return Shell()

    @property
    def iopub_channel(self) -> Any:
        class IOPub:
            async def get_msg(self, timeout: float) -> dict[str, Any]:
                return {}

        return IOPub()

    async def _async_is_alive(self) -> bool:
        return True

    def _handle_kernel_info_reply(self, msg: dict[str, Any]) -> None:
        pass


async def test_a_kernel_answering_after_the_next_request_is_ready() -> None:
    kernel = LaggingKernel()
    await asyncio.wait_for(kernel.wait_for_ready(timeout=5), 10)
    assert kernel.answered == 1  # its first reply, though a newer request was out by then

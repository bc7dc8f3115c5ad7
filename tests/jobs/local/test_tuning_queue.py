"""Local tuning experiments in this machine's one queue (`local.admission`), as jobs beside training
jobs, with real drivers and notebook trials on a machine NVML says has two GPUs: past the free GPUs
or the quota an experiment waits Queued with its place and reason, holding nothing; it is admitted
whole (every parallel trial's GPUs) once what it waits for is freed, even by the next workbench; it
can be deleted while queued; `max_queued` counts training and tuning jobs together; what no wait
could give is refused at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import InvalidInput, QuotaExceeded
from cube_jupyter.jobs.local.backend import LocalJobBackend
from cube_jupyter.jobs.local.training import LocalTrainingRunner
from cube_jupyter.jobs.local.tuning import LocalTuner
from cube_jupyter.jobs.local.tuning_state import read_state
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.service import JobService
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.local import gpus
from cube_jupyter.local.admission import QueuePolicy, Rules, deferred
from cube_jupyter.storage.local import LocalStore
from tests.jobs.local.conftest import USER, training
from tests.jobs.local.test_local_training import PY, awaiting
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(300)
WAIT = 240.0
TWO_FREE = "waiting for 1 GPU: 0 of 2 free"

# A trial that runs until the file GO names exists, then reports its x and the GPU it was handed.
TRIAL = """
import os, pathlib, time
for _ in range(2400):
    if pathlib.Path(os.environ["GO"]).exists():
        break
    time.sleep(0.1)
print(f"accuracy={x} gpu={os.environ.get('CUDA_VISIBLE_DEVICES') or -1}")
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(gpus, "nvml_device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("x = 0")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(TRIAL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "trial.ipynb")
    return tmp_path


def machine(tmp_path: Path, **policy: Any) -> tuple[LocalTrainingRunner, LocalTuner]:
    """A training runner and a tuner on one state directory, each seeing the other's side of the
    queue, as `LocalJobBackend` wires them."""
    state, store = tmp_path / "state", LocalStore(tmp_path / "store")
    tuner_side = deferred(lambda: tuner.queue_side())
    runner = LocalTrainingRunner(
        state,
        store=store,
        mpirun="",
        stop_grace_seconds=3.0,
        policy=QueuePolicy(others=[tuner_side], **policy),
    )
    tuner = LocalTuner(state, store=store, policy=QueuePolicy(others=[runner.queue_side()], **policy))
    return runner, tuner


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[tuple[LocalTrainingRunner, LocalTuner]]:
    runner, tuner = machine(tmp_path, max_queued=2)
    yield runner, tuner
    for job in tuner.list(USER):  # leave nothing running
        tuner.delete(USER, job.name)
    for job in runner.list(USER):
        runner.delete(USER, job.name)


def tuning(name: str, parallel: int, gpu: int, go: Path) -> TuningSpec:
    raw = {
        "name": name,
        "objective": {"metric": "accuracy", "type": "maximize", "additional_metrics": ["gpu"]},
        "algorithm": "grid",
        "parameters": {"x": {"values": list(range(1, parallel + 1))}},
        "max_trials": parallel,
        "parallel_trials": parallel,
        "trial": {"notebook": "trial.ipynb", "resources": {"gpu": gpu}, "env": {"GO": str(go)}},
    }
    return TuningSpec.from_dict(raw, user=USER)


def place(job: Job | None) -> tuple[str, int | None, str | None]:
    assert job is not None and job.queue is not None
    return job.phase, job.queue.position, job.queue.reason


def trial_gpus(job: Job) -> list[float]:
    assert job.phase == "Succeeded", job.message
    return sorted(t.metrics["gpu"] for t in job.trials)


def test_a_tuning_job_waits_for_free_gpus_then_runs_whole_under_the_next_workbench(
    jobs: tuple[LocalTrainingRunner, LocalTuner], workdir: Path, tmp_path: Path
) -> None:
    runner, tuner = jobs
    go = workdir / "go"
    first = tuner.start(tuning("first", 2, 1, go), code_dir=workdir)  # both GPUs, one per trial
    assert first.phase in ("Created", "Running") and first.queue is None and first.gpus == 2
    second = tuner.start(tuning("second", 1, 1, go), code_dir=workdir)
    assert place(second) == ("Queued", 1, TWO_FREE) and second.gpus == 1
    assert not (tuner.experiment_dir(USER, "second") / "driver.json").exists()  # nothing runs yet

    # a training job waits behind it (one user's work in order), and the bound counts both kinds
    gpu_job = {
        "name": "third",
        "framework": "pytorch",
        "replicas": {"worker": 1},
        "command": [PY, "-c", "pass"],
    }
    gpu_job["resources"] = {"gpu": 1}
    third = runner.start(training(gpu_job))
    assert place(third) == ("Queued", 2, "behind second, submitted before it")
    with pytest.raises(QuotaExceeded, match="max_queued_per_user") as refused:
        tuner.start(tuning("fourth", 1, 1, go), code_dir=workdir)
    assert refused.value.field == "name" and tuner.get(USER, "fourth") is None
    runner.delete(USER, "third")

    cancelled = tuner.start(tuning("cancelled", 1, 1, go), code_dir=workdir)  # deleted while queued
    assert place(cancelled) == ("Queued", 2, "behind second, submitted before it")
    tuner.delete(USER, "cancelled")
    assert tuner.get(USER, "cancelled") is None
    assert not tuner.experiment_dir(USER, "cancelled").exists()

    _runner, again = machine(tmp_path)  # the next workbench reads the queue from the state dir
    assert place(again.get(USER, "second")) == ("Queued", 1, TWO_FREE)
    go.touch()
    assert trial_gpus(again.wait(USER, "first", WAIT)) == [0.0, 1.0]  # each trial its own GPU
    again.refresh_all()  # its supervision pass: first's GPUs are free
    admitted = read_state(again.experiment_dir(USER, "second"))
    assert admitted is not None and not admitted.waiting and admitted.gpu_ids == ["0"]
    assert trial_gpus(again.wait(USER, "second", WAIT)) == [0.0]


def test_a_tuning_job_past_the_quota_waits_holding_nothing(workdir: Path, tmp_path: Path) -> None:
    _runner, tuner = machine(tmp_path, rules=Rules(1, 0, {}))
    go = workdir / "go"
    try:
        tuner.start(tuning("first", 1, 1, go), code_dir=workdir)
        second = tuner.start(tuning("second", 1, 1, go), code_dir=workdir)
        quota = f"waiting for 1 GPU of quota: {USER!r} holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)"
        assert place(second) == ("Queued", 1, quota)
        assert [h.gpu_ids for h in tuner.queue_side().held()] == [("0",)]  # the queued one holds nothing
        go.touch()
        assert tuner.wait(USER, "first", WAIT).phase == "Succeeded"
        tuner.refresh_all()
        assert trial_gpus(tuner.wait(USER, "second", WAIT)) == [0.0]
    finally:
        for job in tuner.list(USER):
            tuner.delete(USER, job.name)


def test_what_no_wait_could_give_is_refused_at_once(
    jobs: tuple[LocalTrainingRunner, LocalTuner], workdir: Path
) -> None:
    _runner, tuner = jobs
    go = workdir / "go"
    with pytest.raises(InvalidInput, match=r"3 parallel trials take 3 GPUs at once \(1 each\)") as wide:
        tuner.start(tuning("wide", 3, 1, go), code_dir=workdir)
    assert wide.value.field == "parallel_trials"
    with pytest.raises(InvalidInput, match="this machine has 2") as big:
        tuner.start(tuning("big", 1, 3, go), code_dir=workdir)
    assert big.value.field == "trial.resources"
    assert tuner.list(USER) == [] and not tuner.experiment_dir(USER, "wide").exists()


async def test_the_workbench_queues_a_tuning_job_past_the_quota_and_its_supervisor_admits_it(
    workdir: Path, tmp_path: Path
) -> None:
    config = Config()
    config.CubeWorkbench.state_dir = str(tmp_path / "state")
    config.CubeWorkbench.gpu_quota_per_user = 1
    settings = load_settings(config).jobs
    backend = LocalJobBackend(settings, root_dir=workdir, poll=0.1)
    service = JobService(settings, backend, root_dir=str(workdir))
    await service.start()
    go = workdir / "go"
    holder = {
        "name": "holder",
        "framework": "pytorch",
        "replicas": {"worker": {"replicas": 1, "resources": {"gpu": 1}}},
        "command": awaiting(go, 0),
    }
    try:
        await service.submit(USER, {"kind": "training", "spec": holder})
        body = {"kind": "tuning", "spec": tuning("sweep", 1, 1, go).to_dict()}
        queued = await service.submit(USER, body)
        quota = f"waiting for 1 GPU of quota: {USER!r} holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)"
        assert place(queued) == ("Queued", 1, quota)
        assert [j["name"] for j in service.queue(USER)["queued"]] == ["sweep"]  # as the queue API shows it
        go.touch()  # the holder ends; the supervisor's pass starts the experiment
        job = await wait_until_async(
            lambda: service.get(USER, "sweep"),
            WAIT,
            "the experiment admitted and done",
            until=lambda j: j.finished,
        )
        assert trial_gpus(job) == [0.0]
    finally:
        for job in backend.list(None):
            await backend.delete(job.user, job.name)
        await service.close()

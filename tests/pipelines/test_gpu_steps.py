"""A local pipeline step's `gpu:N` is assigned and counted, on a machine faked to have 2 GPUs (NVML's
count, as tests/server fake it): each GPU step's kernel gets `CUDA_VISIBLE_DEVICES` of GPUs no job or
other step holds, the step is a `pipeline-step` holder in the GPU ledger while it runs, and a step
past the free GPUs or its owner's quota waits `queued` with the reason, then runs; what no wait could
give fails at once naming `steps.<name>.gpu`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from cube_jupyter.errors import InvalidInput, QuotaExceeded
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.local import gpus
from cube_jupyter.local.admission import Held, QueuePolicy, QueueSide, Rules, Waiting, machine_verdict
from cube_jupyter.pipelines.history import QueuedGpuStep, RunHistory, RunRecord, StepRecord
from cube_jupyter.pipelines.local.gpus import StepGpus, gpu_holders, queue_side
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter.pipelines.targets import RunRequest
from tests.pipelines.notebooks import code, notebook, write
from tests.pipelines.test_service import settings_for

pytestmark = pytest.mark.timeout(180)


def gpu_step(name: str, gpu: int = 1, seconds: float = 2.0) -> object:
    return code(
        "import os, time\n"
        f"seen_{name} = os.environ.get('CUDA_VISIBLE_DEVICES')\n"
        f"print('CUDA_VISIBLE_DEVICES', seen_{name})\n"
        f"open('{name}.gpu', 'w').write(str(seen_{name}))\n"
        f"time.sleep({seconds})",
        f"step:{name}",
        f"gpu:{gpu}",
    )


class Env:
    def __init__(self, root: Path, quota: int | None) -> None:
        self.root = root
        (root / "work").mkdir(exist_ok=True)
        settings = settings_for(root)
        self.history = RunHistory.in_state_dir(settings.state_dir)
        self.jobs_hold: list[str] = []  # GPU ids the (fake) training jobs hold
        self.ledger = GpuLedger(quota, [gpu_holders(self.history)])
        # the machine's queue with a (fake) jobs' side: what they hold, nothing waiting
        jobs = QueueSide(waiting=tuple, held=lambda: [Held("bob", "job", tuple(self.jobs_hold))])
        queue = QueuePolicy(Rules(quota, 0, {}), gpus_held=self.ledger.held, others=[jobs])
        self.gpus = StepGpus(
            self.history,
            settings.state_dir,
            ledger=lambda: self.ledger,
            queue=lambda: queue,
            poll_seconds=0.2,
        )
        self.service = PipelineService(settings, root, pool_size=3, history=self.history, gpus=self.gpus)
        self.loop = asyncio.new_event_loop()

    def run_watching(self, path: str, parallel: int = 3) -> tuple[object, list[StepRecord], list[list[str]]]:
        """Run `path`; every step change seen, and the ledger's pipeline-step holders polled meanwhile."""
        seen: list[StepRecord] = []
        holders: list[list[str]] = []

        async def go():  # type: ignore[no-untyped-def]
            run = await self.service.start_run(
                "alice", RunRequest(path, parallel=parallel), observer=seen.append
            )
            waiting = asyncio.create_task(self.service.wait("alice", run.id))
            while not waiting.done():
                holders.append([h.name for h in self.ledger.holders("alice") if h.kind == "pipeline-step"])
                await asyncio.sleep(0.1)
            return await waiting

        return self.loop.run_until_complete(go()), seen, holders

    def close(self) -> None:
        self.loop.run_until_complete(self.service.close())
        self.loop.close()


def running_train_step(history: RunHistory) -> None:
    """alice's local run r1, driven by this process, its step `train` still to start."""
    record = RunRecord(
        id="r1", user="alice", path="a.ipynb", pipeline="a", status="running", target="local",
        parameters={}, store="s", created="2026-01-01T00:00:00.000Z",
    )  # fmt: skip
    history.create(record, ["train"])


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpus, "nvml_device_count", lambda: 2)


@pytest.fixture
def env(tmp_path: Path, two_gpus: None) -> Iterator[Env]:
    made = Env(tmp_path, quota=None)
    yield made
    made.close()


def test_two_gpu_steps_get_different_gpus_a_third_waits_then_runs_and_the_ledger_counts_them(
    env: Env,
) -> None:
    write(notebook(gpu_step("a"), gpu_step("b"), gpu_step("c")), env.root / "work" / "three.ipynb")
    run, seen, holders = env.run_watching("work/three.ipynb")
    assert run.status == "succeeded", run.error  # type: ignore[attr-defined]
    given = {name: (env.root / "work" / f"{name}.gpu").read_text() for name in "abc"}
    assert sorted(given.values()) in (["0", "0", "1"], ["0", "1", "1"]), given
    queued = [s for s in seen if s.status == "queued"]
    assert len({s.name for s in queued}) == 1, queued  # two ran at once, one waited for them
    assert queued[0].reason == "waiting for 1 GPU: 0 of 2 free"
    first_two = [name for name in "abc" if name != queued[0].name]
    assert given[first_two[0]] != given[first_two[1]]
    running = [s for s in seen if s.status == "running" and s.gpus]
    assert {s.name for s in running} == {"a", "b", "c"}
    assert {tuple(s.gpus) for s in running} <= {("0",), ("1",)}
    assert max(len(h) for h in holders) == 2  # the ledger held both while they ran
    assert any(run.id in name for h in holders for name in h)  # type: ignore[attr-defined]
    assert env.ledger.holders("alice") == []  # ended: nothing held
    step = env.history.get(run.id).step(queued[0].name)  # type: ignore[attr-defined]
    assert step.gpus == [given[queued[0].name]] and step.reason is None


def test_a_job_holding_a_gpu_leaves_the_other_to_the_step(env: Env) -> None:
    env.jobs_hold[:] = ["0"]
    write(notebook(gpu_step("a", seconds=0)), env.root / "work" / "one.ipynb")
    run, _seen, _holders = env.run_watching("work/one.ipynb")
    assert run.status == "succeeded", run.error  # type: ignore[attr-defined]
    assert (env.root / "work" / "a.gpu").read_text() == "1"


def test_a_step_past_the_quota_waits_for_it(tmp_path: Path, two_gpus: None) -> None:
    env = Env(tmp_path, quota=1)
    try:
        write(notebook(gpu_step("a", seconds=1), gpu_step("b", seconds=1)), env.root / "work" / "two.ipynb")
        run, seen, holders = env.run_watching("work/two.ipynb")
        assert run.status == "succeeded", run.error  # type: ignore[attr-defined]
        queued = [s for s in seen if s.status == "queued"]
        assert queued and queued[0].reason == (
            "waiting for 1 GPU of quota: 'alice' holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)"
        )
        assert max(len(h) for h in holders) == 1  # never two at once under a quota of one
    finally:
        env.close()


def test_what_no_wait_could_give_fails_at_once_naming_the_step(tmp_path: Path, two_gpus: None) -> None:
    env = Env(tmp_path, quota=1)
    try:
        for tag, error in (("gpu:3", InvalidInput), ("gpu:2", QuotaExceeded)):
            write(
                notebook(code("x = 1", "step:prep"), code("y = x", "step:train", tag)),
                env.root / "work" / "big.ipynb",
            )
            with pytest.raises(error) as caught:
                env.loop.run_until_complete(env.service.start_run("alice", RunRequest("work/big.ipynb")))
            assert caught.value.field == "steps.train.gpu"
        assert env.service.list_runs("alice") == []
    finally:
        env.close()


def test_the_composition_root_shares_one_free_gpu_rule_and_one_ledger(tmp_path: Path, two_gpus: None) -> None:
    """The workbench's ledger counts running GPU steps; the training queue's free GPUs leave out the
    steps' GPUs, and the steps' free GPUs the jobs' and the servers' (all through
    `local.gpus.free_gpu_ids`)."""
    from traitlets.config import Config

    from cube_jupyter.config import load_settings
    from cube_jupyter.jobs.local.backend import LocalJobBackend
    from cube_jupyter.local.admission import machine_verdict
    from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
    from cube_jupyter.notebooks.local.state import ServerRecord
    from cube_jupyter.notebooks.spec import Resources, ServerStatus
    from cube_jupyter.services import Workbench

    settings = load_settings(
        Config({"CubeWorkbench": {"state_dir": str(tmp_path / "state"), "default_user": "alice"}})
    )
    workbench = Workbench(settings, root_dir=str(tmp_path))
    history = workbench.pipeline_history
    running_train_step(history)
    history.update_step("r1", "train", status="running", gpus=["1"])
    holders = workbench.ledger.holders("alice")
    assert [(h.kind, h.name, h.gpus) for h in holders] == [("pipeline-step", "r1/train", 1)]
    backend = workbench.job_backend
    assert isinstance(backend, LocalJobBackend)
    runner = backend.training.runner

    def jobs_free() -> list[str]:
        """The free GPUs the training queue's pass hands out (the machine's one queue)."""
        return machine_verdict(runner.queue_side(), runner.policy)[1]

    assert jobs_free() == ["0"]  # the step holds GPU 1
    history.update_step("r1", "train", status="succeeded")
    assert jobs_free() == ["0", "1"] and workbench.ledger.holders("alice") == []
    gate = workbench.pipelines.local.gpus
    assert gate.ledger is workbench.ledger and gate.free() == ["0", "1"]
    # a notebook server's GPU is no step's, nor any job's
    servers = workbench.notebook_backend
    assert isinstance(servers, LocalNotebookBackend)
    servers.state.insert(
        ServerRecord(
            user="bob", name="nb", slug="bob", profile="gpu", image="",
            resources=Resources(cpu="1", memory="1Gi", gpu=1, gpu_resource="nvidia.com/gpu"),
            base_url="/", status=ServerStatus.RUNNING, created="2026-01-01T00:00:00Z", gpu_ids=("0",),
        )
    )  # fmt: skip
    assert gate.free() == ["1"] and jobs_free() == ["1"]


def test_a_step_never_overtakes_a_job_that_waited_before_it(tmp_path: Path, two_gpus: None) -> None:
    """The machine's one queue: a 2-GPU job waiting since before the step asked takes both free GPUs
    first, so the 1-GPU step waits, saying why, though a GPU is free now."""
    history = RunHistory.in_state_dir(tmp_path / "state")
    running_train_step(history)
    big = Waiting("bob", "big", 0.0, 2, 1, "job")
    jobs = QueueSide(waiting=lambda: [big], held=tuple)
    gate = StepGpus(history, tmp_path / "state", queue=lambda: QueuePolicy(others=[jobs]), poll_seconds=0.01)
    said: list[str] = []
    given = asyncio.run(
        gate.acquire("alice", "r1", "train", 1, waiting=said.append, cancelled=lambda: bool(said))
    )
    assert given is None and said == ["waiting for 1 GPU: 0 of 2 free"]
    assert gate.free() == ["0", "1"]  # nothing was taken: the job's pass will take them
    assert history.queued_gpu_steps() == []  # cancelled while it waited: out of the queue


def test_a_waiting_step_is_seen_by_the_jobs_pass_and_a_later_job_waits_behind_it(
    tmp_path: Path, two_gpus: None
) -> None:
    """The history records a waiting step's demand, so the jobs' pass (another process: its own
    `RunHistory` of the same file) orders it with the jobs: a 1-GPU job submitted after a 2-GPU step
    that waits for a job's GPU does not take the free one, and when that job ends the same pass
    admits the step first, which then gets both GPUs."""
    history = RunHistory.in_state_dir(tmp_path / "state")
    running_train_step(history)
    first_holds = ["0"]  # bob's first job runs on GPU 0
    submitted: list[Waiting] = []
    jobs = QueueSide(waiting=lambda: list(submitted), held=lambda: [Held("bob", "job", tuple(first_holds))])
    gate = StepGpus(
        history,
        tmp_path / "state",
        queue=lambda: QueuePolicy(others=[jobs]),
        poll_seconds=60,
        clock=lambda: 100.0,
    )
    jobs_view = QueuePolicy(others=[queue_side(RunHistory.in_state_dir(tmp_path / "state"))])
    step, second = ("pipeline-step", "alice", "r1/train"), ("job", "bob", "second")

    async def run() -> None:
        said: list[str] = []
        waited = asyncio.Event()

        def waiting(reason: str) -> None:
            said.append(reason)
            waited.set()

        asked = asyncio.create_task(
            gate.acquire("alice", "r1", "train", 2, waiting=waiting, cancelled=lambda: False)
        )
        await waited.wait()
        assert said == ["waiting for 2 GPUs: 1 of 2 free"]
        assert history.queued_gpu_steps() == [QueuedGpuStep("alice", "r1", "train", 2, 100.0)]
        submitted.append(Waiting("bob", "second", 200.0, 1, 1, "job"))
        verdict, free = machine_verdict(jobs, jobs_view)
        assert free == ["1"] and verdict.admit == ()  # GPU 1 is free, but the step asked first
        assert verdict.waiting == {
            step: (1, "waiting for 2 GPUs: 1 of 2 free"),
            second: (2, "waiting for 1 GPU: 0 of 2 free"),
        }
        first_holds.clear()  # the first job ends
        verdict, _ = machine_verdict(jobs, jobs_view)
        assert [item.key for item in verdict.admit] == [step]  # the jobs' pass leaves it to the step
        assert verdict.waiting == {second: (1, "waiting for 1 GPU: 0 of 2 free")}
        gate.released()
        assert await asked == ["0", "1"]
        assert history.queued_gpu_steps() == []
        verdict, free = machine_verdict(jobs, jobs_view)
        assert free == [] and verdict.admit == ()
        assert verdict.waiting == {second: (1, "waiting for 1 GPU: 0 of 2 free")}

    asyncio.run(run())

"""The admin's bounds on the local worker pool: a run over `max_parallel_per_run` is refused naming
the setting, one user's runs together never run more steps than `max_parallel_per_user`, and a
worker idle for `worker_idle_seconds` exits with its kernel."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.pipelines.history import RunRecord
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter.pipelines.targets import RunRequest
from tests.pipelines.notebooks import code, notebook, write
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)

TWO_BRANCHES = notebook(
    code("import time", "imports"),
    code("time.sleep(1)\nleft = 1", "step:left"),
    code("time.sleep(1)\nright = 2", "step:right"),
)


def service_for(root: Path, **limits: object) -> PipelineService:
    settings = load_settings(
        Config(
            {
                "CubeWorkbench": {"state_dir": str(root / "state"), "default_user": "alice"},
                "CubeStorage": {"url": str(root / "artifacts")},
                "CubePipelines": limits,
            }
        )
    )
    return PipelineService(settings.pipelines, root)


def most_at_once(runs: list[RunRecord]) -> int:
    """The most steps of `runs` that were running at one moment (a step ending as another starts
    counts once)."""
    edges = []
    for run in runs:
        for step in run.steps:
            assert step.started and step.finished, step
            edges += [(step.started, 1), (step.finished, -1)]
    running = most = 0
    for _, change in sorted(edges):  # at equal times the end (-1) sorts first
        running += change
        most = max(most, running)
    return most


def test_limits_are_checked_config() -> None:
    for name, value in (("max_parallel_per_run", 0), ("worker_idle_seconds", -1.0)):
        with pytest.raises(ConfigError) as caught:
            load_settings(Config({"CubePipelines": {name: value}}))
        assert caught.value.field == f"CubePipelines.{name}"


def test_a_run_over_the_per_run_limit_is_refused_naming_the_setting(tmp_path: Path) -> None:
    write(TWO_BRANCHES, tmp_path / "nb.ipynb")
    service = service_for(tmp_path, max_parallel_per_run=2)
    with pytest.raises(InvalidInput) as caught:
        asyncio.run(service.start_run("alice", RunRequest("nb.ipynb", parallel=64)))
    assert caught.value.field == "parallel"
    assert "parallel 64 is over CubePipelines.max_parallel_per_run (2)" in caught.value.message
    assert service.list_runs("alice") == []
    assert service.local._pool is None  # nothing was started for it


def test_one_users_runs_together_stay_within_the_per_user_limit(tmp_path: Path) -> None:
    write(TWO_BRANCHES, tmp_path / "nb.ipynb")
    # The pool and each run would allow four steps at once; the user's limit is two.
    service = service_for(tmp_path, max_parallel_per_run=2, max_parallel_per_user=2, max_workers=4)

    async def go() -> list[RunRecord]:
        try:
            started = [
                await service.start_run("alice", RunRequest("nb.ipynb", parallel=2, no_cache=True))
                for _ in range(2)
            ]
            return [await service.wait("alice", run.id) for run in started]
        finally:
            await service.close()

    runs = asyncio.run(go())
    assert [run.status for run in runs] == ["succeeded", "succeeded"], [run.error for run in runs]
    assert most_at_once(runs) <= 2


def test_an_idle_worker_exits_with_its_kernel_and_the_pool_starts_one_again(tmp_path: Path) -> None:
    write(notebook(code("x = 1", "step:one")), tmp_path / "nb.ipynb")
    service = service_for(tmp_path, max_workers=1, worker_idle_seconds=1.0)

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    async def go() -> None:
        try:
            first = await service.start_run("alice", RunRequest("nb.ipynb"))
            assert (await service.wait("alice", first.id)).status == "succeeded"
            assert service.local._pool is not None
            worker = service.local._pool._worker
            assert worker is not None
            worker_process = psutil.Process(worker.process.pid)

            # its fork server and the spare kernels it forked for the next steps
            def fork_server_and_kernels() -> list[psutil.Process]:
                family = worker_process.children(recursive=True)
                return family if len(family) > 1 else []

            family = await wait_until_async(
                fork_server_and_kernels, what="the worker's fork server and spare kernels"
            )
            pids = [worker_process.pid, *(k.pid for k in family)]
            await wait_until_async(
                lambda: all(gone(pid) for pid in pids), 30, "the idle worker and kernel gone"
            )
            assert service.local._pool.worker_count == 0
            again = await service.start_run("alice", RunRequest("nb.ipynb", no_cache=True))
            assert (await service.wait("alice", again.id)).status == "succeeded"
        finally:
            await service.close()

    asyncio.run(go())

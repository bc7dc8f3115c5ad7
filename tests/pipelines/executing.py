"""Running notebooks two ways, for tests that compare them: as pipelines, by the local executor with
real worker processes, kernels and a store; and top to bottom in one kernel, as a person runs them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from cube_jupyter.pipelines.dag import build_pipeline, load_notebook
from cube_jupyter.pipelines.history import RunHistory, RunRecord, now
from cube_jupyter.pipelines.local.executor import LocalExecutor, RunHandle, RunOptions
from cube_jupyter.pipelines.local.workers import KernelSpec, WorkerPool
from cube_jupyter.pipelines.model import Pipeline
from cube_jupyter.storage import ArtifactStore, open_store
from tests.pipelines.notebooks import notebook, write


@dataclass
class Env:
    """One pool of kernel-warm workers (as one serves a whole server), its history and store, and
    the folder every notebook of the test module lives in."""

    loop: asyncio.AbstractEventLoop
    pool: WorkerPool
    folder: Path
    history: RunHistory
    store: ArtifactStore
    runs: int = 0

    def pipeline(self, name: str, *cells: nbformat.NotebookNode) -> Pipeline:
        path = write(notebook(*cells), self.folder / f"{name}.ipynb")
        return build_pipeline(load_notebook(path), str(path))

    def start(
        self, pipeline: Pipeline, parameters: dict[str, object] | None = None, **options: object
    ) -> RunHandle:
        self.runs += 1
        run = self.history.create(
            RunRecord(
                id=f"{pipeline.name}-{self.runs}",
                user="alice",
                path=pipeline.path,
                pipeline=pipeline.name,
                status="queued",
                target="local",
                parameters=parameters or {},
                store=self.store.url(),
                created=now(),
            ),
            [s.name for s in pipeline.steps],
        )
        opts = RunOptions(**{"parallel": 2, "cwd": str(Path(pipeline.path).parent), **options})  # type: ignore[arg-type]
        return LocalExecutor(self.pool, self.history).start(run, pipeline, self.store, opts)

    def run(
        self, pipeline: Pipeline, parameters: dict[str, object] | None = None, **options: object
    ) -> RunRecord:
        async def go() -> RunRecord:
            return await self.start(pipeline, parameters, **options).wait()

        return self.loop.run_until_complete(go())

    def step_text(self, key: str | None) -> str:
        """The printed output of a step's executed notebook, as the run stored it."""
        assert key is not None
        return printed(nbformat.reads(self.store.get(key).decode(), as_version=4))


@contextmanager
def executor_env(folder: Path, workers: int = 2) -> Iterator[Env]:
    loop = asyncio.new_event_loop()
    pool = WorkerPool(workers, warm=KernelSpec("python3", str(folder)))
    loop.run_until_complete(pool.start())
    try:
        yield Env(
            loop, pool, folder, RunHistory.in_state_dir(folder / "state"), open_store(str(folder / "store"))
        )
    finally:
        loop.run_until_complete(pool.close())
        loop.close()


def printed(nb: nbformat.NotebookNode) -> str:
    """Everything the notebook's cells printed (stream outputs), in order."""
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if "text" in o)


def run_in_order(path: Path, timeout: int = 120) -> nbformat.NotebookNode:
    """Every code cell of the notebook at `path`, top to bottom in one kernel, in its folder: the
    result a pipeline of it must reproduce."""
    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    return nb

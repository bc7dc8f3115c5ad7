"""Jobs on this machine: the local training runner, tuner and model server behind one `JobBackend`.

Each kind keeps its records under `CubeWorkbench.state_dir`, the one way every local job does
(`cube_jupyter.local.records`); this class routes a job to the one that holds it (names are unique
per user across kinds, so the first that knows the name has it) and turns their logs into one async
interface. Scripts and notebooks named by a spec are found under `root_dir` (the Jupyter server's
root, or the CLI's working directory).
"""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from cube_jupyter.errors import NotFound
from cube_jupyter.jobs.availability import local_availability
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.local.serving import LocalModelServing
from cube_jupyter.jobs.local.training import AsyncLocalTraining, LocalTrainingRunner
from cube_jupyter.jobs.local.tuning import LocalTuner
from cube_jupyter.jobs.model import Job, JobKind
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.local import processes
from cube_jupyter.local.admission import QueuePolicy, QueueSide, Rules, deferred
from cube_jupyter.storage import open_store

FOLLOW_POLL_SECONDS = 0.2


def queue_rules(settings: JobSettings) -> Rules:
    """The machine queue's rules (`CubeJobs`, the GPU quota), which every feature's pass shares."""
    jobs = settings.jobs
    return Rules(settings.gpu_quota, jobs.max_running_jobs_per_user, dict(jobs.user_priorities))


class LocalJobBackend:
    """Training replicas, tuning trials and model servers as processes on this machine."""

    def __init__(
        self,
        settings: JobSettings,
        *,
        root_dir: str | Path | None = None,
        poll: float = 0.5,
        gpus_held: Callable[[str], int] | None = None,
        others: Sequence[QueueSide] = (),
    ) -> None:
        """`gpus_held` is the GPU ledger's count of a user's GPUs (servers too), which the machine's
        queue admits against; None: what the queue's sides hold. `others` are the other features'
        sides of the machine's queue (notebook servers, pipeline steps)."""
        self.settings = settings
        self.root_dir = Path(root_dir or os.getcwd())
        storage = settings.storage
        store = open_store(None, storage, check=False)
        jobs = settings.jobs

        def policy(*kinds: QueueSide) -> QueuePolicy:
            """Training's and tuning's view: each the other's side (both queue as jobs) and others'."""
            return QueuePolicy(
                queue_rules(settings),
                cpu_slots=jobs.cpu_slots,
                max_queued=jobs.max_queued_per_user,
                gpus_held=gpus_held,
                others=(*kinds, *others),
            )

        tuning_side = deferred(lambda: self.tuning.queue_side())
        runner = LocalTrainingRunner(settings.state_dir, store=store, policy=policy(tuning_side))
        self.serving = LocalModelServing(settings.state_dir, storage=storage)
        self.tuning = LocalTuner(settings.state_dir, store=store, policy=policy(runner.queue_side()))
        # one supervisor: training's reconcile, then queued experiments start as what they wait for frees
        self.training = AsyncLocalTraining(runner, poll=poll, also=(self.tuning.refresh_all,))

    def queue_side(self) -> QueueSide:
        """The training jobs' and tuning experiments' side of the machine's queue (for the other
        features' passes)."""
        sides = (self.training.runner.queue_side(), self.tuning.queue_side())
        return QueueSide(
            waiting=lambda: [item for side in sides for item in side.waiting()],
            held=lambda: [item for side in sides for item in side.held()],
        )

    async def start(self, *, supervise: bool = True) -> None:
        if supervise:  # reads need nothing started: every local job's records are on disk
            await self.training.start()

    async def close(self) -> None:
        await self.training.close()

    async def submit(self, kind: JobKind, spec: Any) -> Job:
        if kind == "training" and isinstance(spec, TrainingSpec):
            return await self.training.submit(spec, code_dir=self.root_dir)
        if kind == "tuning" and isinstance(spec, TuningSpec):
            return await asyncio.to_thread(self.tuning.start, spec, code_dir=self.root_dir)
        if kind == "serving" and isinstance(spec, ServingSpec):
            return await self.serving.deploy(spec)
        raise TypeError(f"a {kind} job needs its own spec type, got {type(spec).__name__}")

    def queues(self, kind: JobKind) -> bool:
        # A model server is refused past the quota: it never ends, so a queued one would wait on
        # others' deletes alone, and its revisions and canaries hold GPUs beside it.
        return kind in ("training", "tuning")

    async def roll_out(self, spec: Any) -> Job:
        return await self.serving.deploy(spec)  # a second deploy of a name is a new revision

    def availability(self) -> dict[str, Any]:
        return local_availability(self.settings)

    def list(self, user: str | None) -> list[Job]:
        return [*self.training.list(user), *self.tuning.list(user), *self.serving.list(user)]

    def get(self, user: str, name: str) -> Job | None:
        return self.training.get(user, name) or self.tuning.get(user, name) or self.serving.status(user, name)

    async def delete(self, user: str, name: str) -> None:
        job = self.get(user, name)
        if job is None:
            raise NotFound(f"user {user!r} has no job named {name!r}", field="name")
        if job.kind == "training":
            await self.training.delete(user, name)
        elif job.kind == "tuning":
            await asyncio.to_thread(self.tuning.delete, user, name)
        else:
            await self.serving.delete(user, name)

    async def stop(self, user: str, name: str, why: str) -> Job:
        return await self.training.stop(user, name, why)

    def logs(
        self, job: Job, replica: str | None, *, follow: bool = False, tail: int | None = None
    ) -> AsyncIterator[str]:
        user, name = job.user, job.name
        if job.kind == "training":
            return self.training.logs(user, name, replica, follow=follow, tail=tail)
        if job.kind == "tuning":
            # The driver's log (which trial started, ended, was pruned), or one trial's (`trial-3`).
            path = self.tuning.log_path(user, name, replica)
            text = self.tuning.logs(user, name, replica, tail)
        else:
            path = self.serving.log_path(user, name)
            text = self.serving.logs(user, name, tail)
        return self._follow_file(user, name, path, text, follow=follow)

    async def _follow_file(
        self, user: str, name: str, path: Path, first: str, *, follow: bool
    ) -> AsyncIterator[str]:
        """`first` (the log so far), then with `follow` new text as it is written until the job has
        finished or is deleted (a served model does not finish on its own: until it is deleted)."""
        if first:
            yield first
        if not follow:
            return
        offset = path.stat().st_size if path.exists() else 0
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            job = self.get(user, name)
            data = await asyncio.to_thread(processes.read_log, path, offset)
            offset += len(data)
            text = decoder.decode(data)
            if text:
                yield text
            if job is None or job.finished:
                return
            await asyncio.sleep(FOLLOW_POLL_SECONDS)

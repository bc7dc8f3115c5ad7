"""GPUs for local pipeline steps: a step tagged `gpu:N` is given N of this machine's GPUs that no
running job, server or other step holds (`CUDA_VISIBLE_DEVICES` of its kernel), counted in the GPU
ledger as a `pipeline-step` holder while it runs, within its owner's GPU quota.

Whether a step may start now is the machine's one queue rule (`local.admission`), over the steps'
side of the queue (`queue_side`: the run history, shared by every process of this machine, records
each GPU step from when it asks, with its GPUs and when it asked, until it runs holding its GPU ids)
and what the composition root hands in for the rest (the training jobs' and notebook servers' sides,
waiting and running). A step waiting for GPUs is ordered against waiting jobs and servers by the same
rule, each way: it never overtakes what waited before it, and what asks after it waits behind it.
A step picks its GPUs and records them in the history under the machine's assignment lock
(`local.gpus.assign_lock_path`, which every feature's admission takes) and its owner's ledger lock,
so two steps, or a step and a job or server, never get the same GPU and never squeeze past the quota
together.

A step that finds too few free GPUs, or whose owner's quota has no room, waits (`queued`, with the
reason the queue gives it) until the queue admits it; the pass that admits it may be any
feature's, which leaves the step's GPUs to it (each feature starts only its own items).

What no wait could give (more GPUs than the machine has, or than the quota) is refused when
the run starts, naming `steps.<name>.gpu` (`LocalRunTarget`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable
from pathlib import Path

from cube_jupyter.ledger import GpuHolder, GpuLedger, HolderKind, HolderSource
from cube_jupyter.local import gpus, locks
from cube_jupyter.local.admission import Held, QueuePolicy, QueueSide, Rules, Waiting, machine_verdict
from cube_jupyter.pipelines.history import RunHistory
from cube_jupyter.process_owners import OwnerSource, ProcessOwner, Workload

POLL_SECONDS = 1.0  # how often a waiting step looks again (GPUs freed by another process)
HOLDER_KIND: HolderKind = "pipeline-step"


def queue_side(history: RunHistory) -> QueueSide:
    """The local pipeline steps' side of the machine's queue, read from the run history (every
    process's runs): GPU steps waiting, in the order they asked, and running steps with their GPUs."""

    def waiting() -> list[Waiting]:
        return [
            Waiting(q.user, f"{q.run_id}/{q.step}", q.enqueued, q.gpus, 0, HOLDER_KIND)
            for q in history.queued_gpu_steps()
        ]

    def held() -> list[Held]:
        return [Held(step.user, HOLDER_KIND, step.gpu_ids) for step in history.gpu_steps()]

    return QueueSide(waiting=waiting, held=held)


def gpu_holders(history: RunHistory) -> HolderSource:
    """The GPU ledger's view of local pipeline runs: a user's running steps that hold GPUs."""

    def held(user: str) -> list[GpuHolder]:
        return [
            GpuHolder(HOLDER_KIND, f"{step.run_id}/{step.step}", len(step.gpu_ids))
            for step in history.gpu_steps(user)
        ]

    return held


def process_owners(history: RunHistory) -> OwnerSource:
    """Whose the GPU processes of local pipeline runs are: each running GPU step's, on its own GPUs,
    below its run's driving process (which forks every step's kernel)."""

    def owners() -> list[ProcessOwner]:
        return [
            ProcessOwner(step.driver_pid, Workload(step.user, "step", step.run_id, step.step), step.gpu_ids)
            for step in history.gpu_steps()
        ]

    return owners


class StepGpus:
    """Assigns GPUs to local pipeline steps. `ledger` gives the workbench's one GPU ledger (its
    limit is the quota), asked for when a step first needs it, since it reads every backend; None:
    no quota, the steps' own holders only. `queue` gives the machine's one queue as the composition
    root wires it (the shared rules, the ledger's count, the training jobs' and servers' sides), also
    asked for when first needed; None: the quota over the steps alone. `state_dir` is where the
    machine's assignment lock lives; `clock` stamps when a step asks (its place in the queue)."""

    def __init__(
        self,
        history: RunHistory,
        state_dir: Path,
        *,
        ledger: Callable[[], GpuLedger] | None = None,
        queue: Callable[[], QueuePolicy] | None = None,
        poll_seconds: float = POLL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.history = history
        self._ledger = ledger
        self._queue = queue
        self.lock = gpus.assign_lock_path(state_dir)
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.side = queue_side(history)
        self._freed = asyncio.Event()

    @functools.cached_property
    def ledger(self) -> GpuLedger:
        return self._ledger() if self._ledger is not None else GpuLedger(None, [gpu_holders(self.history)])

    @functools.cached_property
    def policy(self) -> QueuePolicy:
        if self._queue is not None:
            return self._queue()
        return QueuePolicy(Rules(self.limit, 0, {}), gpus_held=self.ledger.held)

    @property
    def limit(self) -> int | None:
        return self.ledger.limit

    def free(self) -> list[str]:
        """This machine's GPUs no job, server or step holds now (the one rule)."""
        held = [item for side in (self.side, *self.policy.others) for item in side.held()]
        return gpus.free_gpu_ids(gpu for item in held for gpu in item.gpu_ids)

    async def acquire(
        self,
        user: str,
        run_id: str,
        step: str,
        wanted: int,
        *,
        waiting: Callable[[str], None],
        cancelled: Callable[[], bool],
    ) -> list[str] | None:
        """The GPU ids given to `step`, recorded in the history as it turns `running` (they are held
        until it leaves that status); `waiting(reason)` each time why it waits changes. None when
        the run was cancelled while the step waited. From the moment it asks until it has its GPUs
        (or gives up) the history records its demand, which every feature's pass reads."""
        asked = Waiting(user, f"{run_id}/{step}", self.clock(), wanted, 0, HOLDER_KIND)
        self.history.update_step(run_id, step, wanted_gpus=wanted, enqueued=asked.enqueued)
        granted: list[str] | None = None
        try:
            said = None
            while not cancelled():
                async with self.ledger.locked(user):
                    granted, reason = await asyncio.to_thread(self._try, asked, run_id, step)
                if granted is not None:
                    return granted
                if reason != said:
                    waiting(reason)
                    said = reason
                self._freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._freed.wait(), self.poll_seconds)
            return None
        finally:
            if granted is None:  # cancelled: no longer in the queue
                self.history.update_step(run_id, step, enqueued=None)

    def released(self) -> None:
        """A step of this process left `running`: waiting steps look again at once."""
        self._freed.set()

    def _try(self, asked: Waiting, run_id: str, step: str) -> tuple[list[str] | None, str]:
        """Take the GPUs `asked` for if the machine's queue admits it now, or say why it waits
        (under the assignment lock)."""
        with locks.blocking_file_lock(self.lock):
            verdict, free = machine_verdict(self.side, self.policy)
            if asked.key not in {item.key for item in verdict.admit}:
                return None, verdict.waiting[asked.key][1]
            given = free[: asked.gpus]  # others admitted by this pass take theirs in their own
            self.history.update_step(run_id, step, status="running", gpus=given, reason=None, enqueued=None)
            return given, ""

"""GPUs for local pipeline steps: a step tagged `gpu:N` is given N of this machine's GPUs that no
running job, server or other step holds (`CUDA_VISIBLE_DEVICES` of its kernel), counted in the GPU
ledger as a `pipeline-step` holder while it runs, within its owner's GPU quota.

Whether a step may start now is the machine's one queue rule (`local.admission`), over the GPU ids
every holder records: the running steps' here (the run history, shared by every process of this
machine) and what the composition root hands in for the rest (the training jobs' and notebook
servers' sides of the queue, with the jobs' and servers' still waiting): a step waiting for GPUs is
ordered against waiting jobs and servers by the same rule and never overtakes what waited before it.
A step picks its GPUs and records them in the history under the machine's assignment lock
(`local.gpus.assign_lock_path`, which every feature's admission takes) and its owner's ledger lock,
so two steps, or a step and a job or server, never get the same GPU and never squeeze past the quota
together.

A step that finds too few free GPUs, or whose owner's quota has no room, waits (`queued`, with the
reason) until GPUs free; each user's GPU steps in this process take their turn in the order they
asked. Other features see a step once it runs, not while it waits (the history records no demand of
a queued step), so a waiting step reserves nothing against them.

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

POLL_SECONDS = 1.0  # how often a waiting step looks again (GPUs freed by another process)
HOLDER_KIND: HolderKind = "pipeline-step"


def gpu_holders(history: RunHistory) -> HolderSource:
    """The GPU ledger's view of local pipeline runs: a user's running steps that hold GPUs."""

    def held(user: str) -> list[GpuHolder]:
        return [
            GpuHolder(HOLDER_KIND, f"{run_id}/{step}", len(ids))
            for _user, run_id, step, ids in history.gpu_steps(user)
        ]

    return held


class StepGpus:
    """Assigns GPUs to local pipeline steps. `ledger` gives the workbench's one GPU ledger (its
    limit is the quota), asked for when a step first needs it, since it reads every backend; None:
    no quota, the steps' own holders only. `queue` gives the machine's one queue as the composition
    root wires it (the shared rules, the ledger's count, the training jobs' and servers' sides), also
    asked for when first needed; None: the quota over the steps alone. `state_dir` is where the
    machine's assignment lock lives."""

    def __init__(
        self,
        history: RunHistory,
        state_dir: Path,
        *,
        ledger: Callable[[], GpuLedger] | None = None,
        queue: Callable[[], QueuePolicy] | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.history = history
        self._ledger = ledger
        self._queue = queue
        self.lock = gpus.assign_lock_path(state_dir)
        self.poll_seconds = poll_seconds
        self._turns: dict[str, asyncio.Lock] = {}  # each user's GPU steps in order
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
        held = [*self._held(), *(item for side in self.policy.others for item in side.held())]
        return gpus.free_gpu_ids(gpu for item in held for gpu in item.gpu_ids)

    def _held(self) -> list[Held]:
        """The running steps' GPUs, as the machine's queue counts them."""
        return [Held(user, HOLDER_KIND, tuple(ids)) for user, *_, ids in self.history.gpu_steps()]

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
        the run was cancelled while the step waited."""
        turn = self._turns.setdefault(user, asyncio.Lock())
        async with turn:
            said = None
            asked = Waiting(user, f"{run_id}/{step}", time.time(), wanted, 0, HOLDER_KIND)
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

    def released(self) -> None:
        """A step of this process left `running`: waiting steps look again at once."""
        self._freed.set()

    def _try(self, asked: Waiting, run_id: str, step: str) -> tuple[list[str] | None, str]:
        """Take the GPUs `asked` for if the machine's queue admits it now, or say why it waits
        (under the assignment lock)."""
        with locks.blocking_file_lock(self.lock):
            own = QueueSide(waiting=lambda: [asked], held=self._held)
            verdict, free = machine_verdict(own, self.policy)
            if asked not in verdict.admit:
                return None, verdict.waiting[asked.key][1]
            given = free[: asked.gpus]
            self.history.update_step(run_id, step, status="running", gpus=given, reason=None)
            return given, ""

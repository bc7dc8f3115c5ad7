"""GPUs for local pipeline steps: a step tagged `gpu:N` is given N of this machine's GPUs that no
running job or other step holds (`CUDA_VISIBLE_DEVICES` of its kernel), counted in the GPU ledger
as a `pipeline-step` holder while it runs, within its owner's GPU quota.

Which GPUs are free is the one rule of `local.gpus.free_gpu_ids`, over the GPU ids every holder
records: the running steps' here (the run history, shared by every process of this machine) and what
the composition root hands in for the rest (the training jobs' replicas). A step picks its GPUs and
records them in the history under the machine's assignment lock (`local.gpus.assign_lock_path`,
which the training queue's admission takes too) and its owner's ledger lock, so two steps, or a step
and a job, never get the same GPU and never squeeze past the quota together.

A step that finds too few free GPUs, or whose owner's quota has no room, waits (`queued`, with the
reason) until GPUs free; each user's GPU steps in this process take their turn in the order they
asked. What no wait could give (more GPUs than the machine has, or than the quota) is refused when
the run starts, naming `steps.<name>.gpu` (`LocalRunTarget`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterable
from pathlib import Path

from cube_jupyter.ledger import GpuHolder, GpuLedger, HolderKind, HolderSource, over_quota
from cube_jupyter.local import gpus, locks
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


def held_gpu_ids(history: RunHistory) -> Callable[[], list[str]]:
    """The GPU ids running local pipeline steps hold (for the training queue's free GPUs)."""
    return lambda: [gpu for *_rest, ids in history.gpu_steps() for gpu in ids]


class StepGpus:
    """Assigns GPUs to local pipeline steps. `ledger` gives the workbench's one GPU ledger (its
    limit is the quota), asked for when a step first needs it, since it reads every backend; None:
    no quota, the steps' own holders only. `others` gives the GPU ids other local work holds (the
    training jobs'); `state_dir` is where the machine's assignment lock lives."""

    def __init__(
        self,
        history: RunHistory,
        state_dir: Path,
        *,
        ledger: Callable[[], GpuLedger] | None = None,
        others: Callable[[], Iterable[str]] | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.history = history
        self._ledger = ledger
        self.others = others or (lambda: ())
        self.lock = gpus.assign_lock_path(state_dir)
        self.poll_seconds = poll_seconds
        self._turns: dict[str, asyncio.Lock] = {}  # each user's GPU steps in order
        self._freed = asyncio.Event()

    @functools.cached_property
    def ledger(self) -> GpuLedger:
        return self._ledger() if self._ledger is not None else GpuLedger(None, [gpu_holders(self.history)])

    @property
    def limit(self) -> int | None:
        return self.ledger.limit

    def machine(self) -> int:
        """GPUs this machine has (what the admin left visible)."""
        return len(gpus.visible_gpu_ids())

    def free(self) -> list[str]:
        """This machine's GPUs no job or step holds now (the one rule)."""
        return gpus.free_gpu_ids([*self.others(), *held_gpu_ids(self.history)()])

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
            while not cancelled():
                async with self.ledger.locked(user):
                    granted, reason = await asyncio.to_thread(self._try, user, run_id, step, wanted)
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

    def _try(self, user: str, run_id: str, step: str, wanted: int) -> tuple[list[str] | None, str]:
        """Take `wanted` free GPUs for the step, or say why it waits (under the assignment lock)."""
        with locks.blocking_file_lock(self.lock):
            held = self.ledger.held(user)
            if over_quota(self.limit, held, wanted):
                return None, (
                    f"waiting for {wanted} GPU(s) of quota: {user!r} holds {held} of {self.limit} "
                    "(CubeWorkbench.gpu_quota_per_user)"
                )
            free = self.free()
            if len(free) < wanted:
                return None, f"waiting for {wanted} GPUs: {len(free)} of {self.machine()} free"
            given = free[:wanted]
            self.history.update_step(run_id, step, status="running", gpus=given, reason=None)
            return given, ""

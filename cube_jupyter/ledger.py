"""The one GPU ledger: which GPUs a user holds, and the one quota check.

A user holds the GPUs of their servers that are not stopped, of their jobs that have not
finished and of their local pipeline steps that are running, on either backend
(`CubeWorkbench.gpu_quota_per_user` counts them all). Creating a GPU server,
starting a stopped one and submitting a job all check here, under the same per-user lock held until
the create has gone through, so two concurrent requests cannot both squeeze under the limit. On the
local backend that lock is a file lock in the state directory, so the workbench, its notebook
servers and every CLI command share it. The GPU report shows the same holders.

The ledger knows no feature: each backend that holds GPUs gives it a `HolderSource` (the composition
root wires them), read from that backend's own state, so nothing is booked twice and a server or job
that ends frees its GPUs without the ledger being told.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from cube_jupyter.errors import QuotaExceeded
from cube_jupyter.local.admission import over_quota  # the quota rule itself, which the queue admits by
from cube_jupyter.local.locks import KeyedLocks, file_lock, file_lock_path

HolderKind = Literal["notebook", "job", "pipeline-step"]


@dataclass(frozen=True)
class GpuHolder:
    """A server, job or pipeline step (named `run-id/step`) of the user's that holds GPUs now."""

    kind: HolderKind
    name: str
    gpus: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# What one backend's user holds now; raises what the backend raises when it cannot say
# (BackendUnavailable): a quota check must not pass on a blind read.
HolderSource = Callable[[str], Iterable[GpuHolder]]


class GpuLedger:
    """Sums the holders its sources report, and checks a request against the limit."""

    def __init__(
        self, limit: int | None, sources: Sequence[HolderSource] = (), *, lock_dir: Path | None = None
    ) -> None:
        self.limit = limit or None
        self.sources = tuple(sources)
        # Where per-user file locks live when several processes share this ledger's state (the
        # local backend: the workbench, its notebook servers and the CLI); None: this process only.
        self.lock_dir = lock_dir
        self._locks = KeyedLocks()

    def holders(self, user: str) -> list[GpuHolder]:
        """The user's servers and unfinished jobs that hold GPUs."""
        return [holder for source in self.sources for holder in source(user) if holder.gpus]

    def held(self, user: str) -> int:
        """GPUs the user's holders hold now."""
        return sum(holder.gpus for holder in self.holders(user))

    @contextlib.asynccontextmanager
    async def locked(self, user: str) -> AsyncIterator[None]:
        """Hold the user's lock across a check and the create it guards."""
        async with self._locks.hold(user):
            if self.lock_dir is None:
                yield
                return
            async with file_lock(file_lock_path(self.lock_dir, user)):
                yield

    def check_possible(self, wanted: int, *, field: str, asker: str = "the job") -> None:
        """Refuse (403 naming `field`) what no wait could give: more GPUs than the limit itself. Queued
        work (a job, a server) checks only this at submit; the queue admits it once its owner has room."""
        if over_quota(self.limit, 0, wanted):
            raise QuotaExceeded(
                f"{field}: {asker} asks for {wanted} GPUs and the limit per user is {self.limit} "
                "(CubeWorkbench.gpu_quota_per_user)",
                field=field,
            )

    def check(
        self,
        user: str,
        wanted: int,
        *,
        field: str,
        replacing: tuple[HolderKind, str] | None = None,
    ) -> None:
        """Refuse (403 naming `field`) when `wanted` more GPUs would take the user past the limit.
        `replacing` is a holder whose GPUs the request gives back (a served model's old revision,
        a server being started again), so they are not counted twice. Call under `locked(user)`."""
        limit = self.limit
        if not limit or not wanted:
            return
        holders = [h for h in self.holders(user) if (h.kind, h.name) != replacing]
        in_servers = sum(h.gpus for h in holders if h.kind == "notebook")
        in_jobs = sum(h.gpus for h in holders if h.kind == "job")
        in_steps = sum(h.gpus for h in holders if h.kind == "pipeline-step")
        held = in_servers + in_jobs + in_steps
        if over_quota(limit, held, wanted):
            steps = f", {in_steps} in running pipeline steps" if in_steps else ""
            raise QuotaExceeded(
                f"user {user!r} holds {held} GPU(s) ({in_servers} in running servers, {in_jobs} in "
                f"unfinished jobs{steps}) and asks for {wanted} more; the limit is {limit} "
                "(CubeWorkbench.gpu_quota_per_user). Stop a GPU server or job first.",
                field=field,
            )

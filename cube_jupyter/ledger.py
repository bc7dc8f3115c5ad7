"""The one GPU ledger: which GPUs a user holds, and the one quota check.

A user holds the GPUs of their servers that are not stopped and of their jobs that have not
finished, on either backend (`CubeSpawner.gpu_quota_per_user` counts both). Creating a GPU server,
starting a stopped one and submitting a job all check here, under the same per-user lock held until
the create has gone through, so two concurrent requests cannot both squeeze under the limit. The GPU
report shows the same holders.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cube_jupyter.config import Settings
from cube_jupyter.errors import QuotaExceeded
from cube_jupyter.local.locks import KeyedLocks, file_lock
from cube_jupyter.names import user_slug

if TYPE_CHECKING:
    from cube_jupyter.jobs.backend import JobBackend
    from cube_jupyter.notebooks.backend import NotebookBackend

HolderKind = Literal["notebook", "job"]


@dataclass(frozen=True)
class GpuHolder:
    """A server or job of the user's that holds GPUs now."""

    kind: HolderKind
    name: str
    gpus: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class GpuLedger:
    """Reads the holders from the backends' own state (local state, informer caches): nothing is
    booked twice, and a server or job that ends frees its GPUs without the ledger being told."""

    def __init__(
        self,
        settings: Settings,
        notebooks: NotebookBackend | None = None,
        jobs: JobBackend | None = None,
        *,
        lock_dir: Path | None = None,
    ) -> None:
        self.settings = settings
        # Where per-user file locks live when several processes share this ledger's state (the
        # local backend: the workbench, its notebook servers and the CLI); None: this process only.
        self.lock_dir = lock_dir
        self.notebooks = notebooks  # without a notebook backend (jobs on their own) servers hold none
        self.jobs = jobs  # set when the job backend exists; without it jobs hold nothing
        self._locks = KeyedLocks()

    @property
    def limit(self) -> int | None:
        return self.settings.spawner.gpu_quota_per_user or None

    def holders(self, user: str) -> list[GpuHolder]:
        """The user's servers and unfinished jobs that hold GPUs. Raises what the backends raise
        when they cannot say (BackendUnavailable): a quota check must not pass on a blind read."""
        held: list[GpuHolder] = []
        if self.notebooks is not None:
            held += [
                GpuHolder("notebook", server.name, server.gpus_held)
                for server in self.notebooks.list_servers(user)
                if server.gpus_held
            ]
        if self.jobs is not None:
            held += [
                GpuHolder("job", job.name, job.gpus)
                for job in self.jobs.list(user)
                if job.gpus and not job.finished
            ]
        return held

    @contextlib.asynccontextmanager
    async def locked(self, user: str) -> AsyncIterator[None]:
        """Hold the user's lock across a check and the create it guards."""
        async with self._locks.hold(user):
            if self.lock_dir is None:
                yield
                return
            async with file_lock(self.lock_dir / f"{user_slug(user)}.lock"):
                yield

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
        held = in_servers + in_jobs
        if held + wanted > limit:
            raise QuotaExceeded(
                f"user {user!r} holds {held} GPU(s) ({in_servers} in running servers, {in_jobs} in "
                f"unfinished jobs) and asks for {wanted} more; the limit is {limit} "
                "(CubeSpawner.gpu_quota_per_user). Stop a GPU server or job first.",
                field=field,
            )

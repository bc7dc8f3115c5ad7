"""The one interface both backends implement for training, tuning and serving jobs.

`JobService` parses, authorizes and checks quotas, then calls exactly one of these methods; a backend
only starts processes (local) or creates objects (kubernetes). User names are raw (not escaped), and a
job's name is unique per user across the three kinds, so `(user, name)` finds any job.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from cube_jupyter.jobs.model import Job, JobKind
from cube_jupyter.ledger import GpuHolder, HolderSource
from cube_jupyter.process_owners import OwnerSource, ProcessOwner, Workload, WorkloadKind


class JobBackend(Protocol):
    """Submits, lists, reads, deletes and streams the logs of jobs."""

    async def start(self, *, supervise: bool = True) -> None:
        """Begin background work: informers (kubernetes); supervising replicas (local), where jobs whose
        supervisor is gone are re-attached. `supervise=False` (a command that only reads jobs, for
        the GPU quota) starts only what reads need."""

    async def close(self) -> None:
        """Stop background work; jobs keep running."""

    async def submit(self, kind: JobKind, spec: Any) -> Job:
        """Start the job; Conflict if the user has a job of that name. On failure nothing is left."""
        ...

    def queues(self, kind: JobKind) -> bool:
        """Whether a job of `kind` past its owner's GPU quota or the free capacity waits in this
        backend's queue (`submit` returns it Queued) instead of being refused."""
        ...

    async def roll_out(self, spec: Any) -> Job:
        """A new revision of an existing served model (`canary_traffic_percent` of the traffic when
        set, else all of it); the previous revision serves until the new one is ready."""
        ...

    def availability(self) -> dict[str, Any]:
        """What can run here, for the launch forms: each framework, tuning and serving, as what, or
        why not (`jobs.availability`)."""
        ...

    def list(self, user: str | None) -> list[Job]:
        """The jobs of `user`, or of every user when None: from local state or the informer caches,
        never a cluster list per call."""
        ...

    def get(self, user: str, name: str) -> Job | None: ...

    async def delete(self, user: str, name: str) -> None:
        """Stop every replica and remove the job; NotFound if there is none."""
        ...

    async def stop(self, user: str, name: str, why: str) -> Job:
        """Stop a running training job the workbench found idle (its GPUs,
        `CubeGPU.cull_idle_gpu_jobs`): its replicas stop, it ends Failed with reason IdleGPU saying
        `why`, and it stays (with its logs) until deleted. NotFound if there is none."""
        ...

    def logs(
        self, job: Job, replica: str | None, *, follow: bool = False, tail: int | None = None
    ) -> AsyncIterator[str]:
        """Text chunks of the log of one replica of `job` (as `get` returned it): `worker-0`, or None
        for the first. With `follow`, the stream goes on as lines arrive and ends when the replica
        has finished."""
        ...


WORKLOAD_KINDS: dict[str, WorkloadKind] = {"training": "job", "tuning": "tuning job", "serving": "model"}


def process_owners(backend: JobBackend) -> OwnerSource:
    """Whose the local processes of `backend` are: each running replica's (a training replica, a
    trial, a model server), named after its job and itself."""

    def owners() -> list[ProcessOwner]:
        return [
            ProcessOwner(replica.pid, Workload(job.user, WORKLOAD_KINDS[job.kind], job.name, replica.name))
            for job in backend.list(None)
            if not job.finished
            for replica in job.replicas
            if replica.pid is not None
        ]

    return owners


def gpu_holders(backend: JobBackend) -> HolderSource:
    """The GPU ledger's view of `backend`: a user's unfinished jobs that hold GPUs (a queued job holds
    nothing until it is admitted)."""

    def held(user: str) -> list[GpuHolder]:
        return [
            GpuHolder("job", job.name, job.gpus)
            for job in backend.list(user)
            if not job.finished and job.queue is None
        ]

    return held

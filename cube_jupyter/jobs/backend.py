"""The one interface both backends implement for training, tuning and serving jobs.

`JobService` parses, authorizes and checks quotas, then calls exactly one of these methods; a backend
only starts processes (local) or creates objects (kubernetes). User names are raw (not escaped), and a
job's name is unique per user across the three kinds, so `(user, name)` finds any job.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from cube_jupyter.config import Settings
from cube_jupyter.jobs.model import Job, JobKind

if TYPE_CHECKING:
    from cube_jupyter.kube.cluster import Cluster


class JobBackend(Protocol):
    """Submits, lists, reads, deletes and streams the logs of jobs."""

    async def start(self) -> None:
        """Begin background work: informers (kubernetes); supervising replicas (local), where jobs whose
        supervisor is gone are re-attached."""

    async def close(self) -> None:
        """Stop background work; jobs keep running."""

    async def submit(self, kind: JobKind, spec: Any) -> Job:
        """Start the job; Conflict if the user has a job of that name. On failure nothing is left."""
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

    def logs(
        self, job: Job, replica: str | None, *, follow: bool = False, tail: int | None = None
    ) -> AsyncIterator[str]:
        """Text chunks of the log of one replica of `job` (as `get` returned it): `worker-0`, or None
        for the first. With `follow`, the stream goes on as lines arrive and ends when the replica
        has finished."""
        ...


def make_job_backend(
    settings: Settings, root_dir: str | None = None, cluster: Cluster | None = None
) -> JobBackend:
    """The job backend `c.CubeWorkbench.backend` names, imported only when chosen. Local jobs find
    the scripts and notebooks their specs name under `root_dir` (default: the working directory); so
    do cluster jobs, which ship them to the artifact store. Cluster jobs use `cluster`, the one the
    other features share (`kube.cluster.cluster_for`), or connect on their own without it."""
    if settings.workbench.backend == "kubernetes":
        from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend

        return KubernetesJobBackend(settings, cluster, root_dir=root_dir)
    from cube_jupyter.jobs.local.backend import LocalJobBackend

    return LocalJobBackend(settings, root_dir=root_dir)

"""The one interface both backends implement for notebook servers.

The service layer (`cube_jupyter.notebooks.service`) validates, authorizes and enforces quotas, then
calls exactly one of these methods; a backend only starts a process or creates objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cube_jupyter.ledger import GpuHolder, HolderSource
from cube_jupyter.local.admission import QueueSide
from cube_jupyter.notebooks.enforcement import Enforcement
from cube_jupyter.notebooks.spec import NotebookServer, NotebookSpec, Profile

if TYPE_CHECKING:
    pass

# Local servers live under `{main base_url}cube/notebook/{user_slug}/{name}/`: the backend gives each
# child that base_url and the server extension's path router serves the same path.
ROUTE_PREFIX = "cube/notebook"


@dataclass(frozen=True)
class Upstream:
    """Where the local path router forwards a server's traffic, and the token it presents."""

    host: str
    port: int
    token: str
    base_url: str


class NotebookBackend(Protocol):
    """Creates, lists, stops, starts and deletes servers. User names are raw (not escaped)."""

    async def start(self, *, supervise: bool = True) -> None:
        """Begin background work: informers, child supervision, culling. `supervise=False` (the CLI)
        starts only what reads need (informers), no supervision or culling."""

    async def close(self) -> None:
        """Stop background work. Local children keep running, to be re-attached on restart."""

    def list_servers(self, user: str | None) -> list[NotebookServer]:
        """The servers of `user`, or of every user when `user` is None. Served from local state or
        the informer cache: never a cluster list per call."""
        ...

    def get_server(self, user: str, name: str) -> NotebookServer | None: ...

    async def create_server(self, spec: NotebookSpec) -> NotebookServer:
        """Create and start a server; raise Conflict if it exists. On failure nothing is left behind."""
        ...

    async def set_stopped(
        self, user: str, name: str, stopped: bool, reason: str | None = None
    ) -> NotebookServer:
        """Stop (or start) the server; a stop by the workbench itself says why (`reason`)."""
        ...

    async def delete_server(self, user: str, name: str) -> None:
        """Remove the server. Its workspace (directory or PVC) is kept, like Kubeflow's volumes."""
        ...

    def queues(self, profile: str) -> bool:
        """Whether a server of `profile` waits in a queue (this machine's, or Kueue's on the cluster)
        when the GPU quota or the free GPUs have no room, rather than being refused."""
        ...

    def enforcement(self, profile: Profile) -> Enforcement:
        """What a server of `profile` is really given here: its image, CPU, memory and GPUs, or not."""
        ...


@runtime_checkable
class RoutableBackend(Protocol):
    """A backend whose servers are reached through the workbench's own path router (the local one);
    the Kubernetes backend's servers are reached through Istio instead and do not implement it."""

    def upstream(self, user: str, name: str) -> Upstream | None:
        """Where a running server listens and the token it expects; None unless it is running."""
        ...


@runtime_checkable
class QueueingBackend(Protocol):
    """A backend whose GPU servers wait in this machine's queue (the local one): past the GPU quota
    or the free GPUs they are queued, not refused; its admission pass applies the quota."""

    def queue_side(self) -> QueueSide:
        """Its servers' part of the machine's queue (for the other features' passes)."""
        ...


def gpu_holders(backend: NotebookBackend) -> HolderSource:
    """The GPU ledger's view of `backend`: a user's servers that hold GPUs (every one not stopped)."""

    def held(user: str) -> list[GpuHolder]:
        return [GpuHolder("notebook", server.name, server.gpus_held) for server in backend.list_servers(user)]

    return held

"""The one interface both backends implement for notebook servers.

The service layer (`cube_jupyter.notebooks.service`) validates, authorizes and enforces quotas, then
calls exactly one of these methods; a backend only starts a process or creates objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cube_jupyter.notebooks.spec import NotebookServer, NotebookSpec


@dataclass(frozen=True)
class Upstream:
    """Where the local path router forwards a server's traffic, and the token it presents."""

    host: str
    port: int
    token: str
    base_url: str


class NotebookBackend(Protocol):
    """Creates, lists, stops, starts and deletes servers. User names are raw (not escaped)."""

    async def start(self) -> None:
        """Begin background work: informers, child supervision, culling."""

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

    async def set_stopped(self, user: str, name: str, stopped: bool) -> NotebookServer: ...

    async def delete_server(self, user: str, name: str) -> None:
        """Remove the server. Its workspace (directory or PVC) is kept, like Kubeflow's volumes."""
        ...

"""Notebook servers as users see them: who may act, what they may ask for, and the quotas.

Handlers and the CLI call this; it validates the request, checks the caller and the quotas, and calls
one backend method. The same rules hold on both backends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cube_jupyter import access
from cube_jupyter.errors import BackendUnavailable, InvalidInput, NotFound, QuotaExceeded, quote
from cube_jupyter.ledger import GpuLedger, HolderKind
from cube_jupyter.notebooks.backend import NotebookBackend, RoutableBackend, gpu_holders
from cube_jupyter.notebooks.config import NotebookSettings
from cube_jupyter.notebooks.spec import (
    NotebookServer,
    NotebookSpec,
    ServerStatus,
    server_exists,
    validate_server_name,
)

CREATE_FIELDS = {"name", "profile"}


class NotebookService:
    def __init__(
        self, settings: NotebookSettings, backend: NotebookBackend, ledger: GpuLedger | None = None
    ) -> None:
        self.settings = settings
        self.backend = backend
        # Quota checks and the create/start they guard run under the user's ledger lock, so two
        # concurrent requests (for servers or jobs) cannot both squeeze under a limit.
        self.ledger = ledger if ledger is not None else GpuLedger(settings.gpu_quota, [gpu_holders(backend)])
        self._starting = asyncio.Lock()  # the count of starting servers and the start it admits, at once

    def profiles(self) -> list[dict[str, Any]]:
        """The admin's profiles, each with what this backend really gives a server of it."""
        return [
            {**profile.to_dict(), **self.backend.enforcement(profile).to_dict()}
            for profile in self.settings.profiles
        ]

    def owner(self, caller: str, user: str | None) -> str:
        """Whose servers a request means: the caller's own, or (admins only) another user's."""
        return access.owner(self.settings, caller, user, "servers")

    def list_servers(
        self, caller: str, user: str | None = None, all_users: bool = False
    ) -> list[NotebookServer]:
        servers = self.backend.list_servers(
            access.listed_user(self.settings, caller, user, all_users, "servers")
        )
        return sorted(servers, key=lambda s: (s.user, s.created, s.name))

    def queued(self, caller: str, user: str | None = None, all_users: bool = False) -> list[dict[str, Any]]:
        """The servers waiting in this machine's queue, as `caller` sees them (their own; admins
        anyone's, or all), in queue order: for the queue's view beside the jobs."""
        servers = [s for s in self.list_servers(caller, user, all_users) if s.status == ServerStatus.QUEUED]
        servers.sort(key=lambda s: (s.queue_position or 0, s.created))
        return [self.view(caller, s) for s in servers]

    def view(self, caller: str, server: NotebookServer) -> dict[str, Any]:
        """A server as `caller` sees it: through the local path router only the owner connects (its
        pages run on the workbench's origin), so others are not offered Connect there."""
        body = server.to_dict()
        if caller != server.user and isinstance(self.backend, RoutableBackend):
            body["actions"] = [a for a in body["actions"] if a != "connect"]
        return body

    def get(self, caller: str, name: str, user: str | None = None) -> NotebookServer:
        owner = self.owner(caller, user)
        server = self.backend.get_server(owner, validate_server_name(name))
        if server is None:
            raise NotFound(f"user {quote(owner)} has no server named {quote(name)}", field="name")
        return server

    async def create(self, caller: str, body: object, user: str | None = None) -> NotebookServer:
        owner = self.owner(caller, user)
        spec = parse_create_request(self.settings, owner, body)
        async with self.ledger.locked(owner):
            # Checked before the quotas so a duplicate is a 409 even at the limit; the backend's own
            # atomic check (sqlite primary key, API 409) is what holds across processes.
            if self.backend.get_server(owner, spec.name) is not None:
                raise server_exists(owner, spec.name)
            existing = self.backend.list_servers(owner)
            limit = self.settings.spawner.max_servers_per_user
            if limit and len(existing) >= limit:
                raise QuotaExceeded(
                    f"user {quote(owner)} has {len(existing)} servers; the limit is {limit} "
                    "(CubeSpawner.max_servers_per_user). Delete one first.",
                    field="name",
                )
            self._check_gpus(owner, spec.profile.name, spec.profile.gpu, field="profile", server=None)
            async with self._starting:
                self._require_room_to_start("name")
                return await self.backend.create_server(spec)

    async def set_stopped(
        self, caller: str, name: str, stopped: object, user: str | None = None
    ) -> NotebookServer:
        if not isinstance(stopped, bool):
            raise InvalidInput(f"stopped must be true or false, got {quote(stopped)}", field="stopped")
        server = self.get(caller, name, user)
        async with self.ledger.locked(server.user):
            if not stopped and server.gpus_held == 0:
                self._check_gpus(
                    server.user, server.profile, server.resources.gpu, field="stopped", server=server.name
                )
            if stopped:
                return await self.backend.set_stopped(server.user, server.name, stopped)
            async with self._starting:
                self._require_room_to_start("stopped")
                return await self.backend.set_stopped(server.user, server.name, stopped)

    async def stop_idle(self, user: str, name: str, reason: str) -> None:
        """Stop a server the workbench finds idle (its GPUs, `CubeGPU.cull_idle_gpu_seconds`), saying
        why, as the idle culler does; one already stopped or gone is left alone."""
        server = self.backend.get_server(user, name)
        if server is not None and server.status in (ServerStatus.RUNNING, ServerStatus.PENDING):
            await self.backend.set_stopped(user, name, True, reason=reason)

    def _check_gpus(self, user: str, profile: str, wanted: int, *, field: str, server: str | None) -> None:
        """The GPU quota, under the user's ledger lock: a server that would wait in a queue (this
        machine's, or Kueue's) is refused only what no wait could give, more GPUs than the quota
        itself; any other, past what the user's holders leave (`server`: the one being started)."""
        if self.backend.queues(profile):
            self.ledger.check_possible(wanted, field=field, asker=f"profile {quote(profile)}")
        else:
            replacing: tuple[HolderKind, str] | None = None if server is None else ("notebook", server)
            self.ledger.check(user, wanted, field=field, replacing=replacing)

    def _require_room_to_start(self, field: str) -> None:
        """Refuse (503) a start while `max_starting_servers` are starting already, whoever's."""
        limit = self.settings.spawner.max_starting_servers
        starting = [s for s in self.backend.list_servers(None) if s.status == ServerStatus.PENDING]
        if limit and len(starting) >= limit:
            raise BackendUnavailable(
                f"{len(starting)} servers are starting at once, the most CubeSpawner.max_starting_servers "
                "allows; try again when one is up",
                field=field,
            )

    async def delete(self, caller: str, name: str, user: str | None = None) -> None:
        server = self.get(caller, name, user)
        await self.backend.delete_server(server.user, server.name)


def parse_create_request(settings: NotebookSettings, owner: str, body: object) -> NotebookSpec:
    """Validate a create request at the edge: only a name and an offered profile are accepted."""
    if not isinstance(body, dict):
        raise InvalidInput("request body must be a JSON object with 'name' and 'profile'", field="body")
    unknown = sorted(set(body) - CREATE_FIELDS)
    if unknown:
        raise InvalidInput(
            f"unknown field(s) {unknown}; a server is created from a name and a profile",
            field=unknown[0],
        )
    name = validate_server_name(body.get("name"))
    profile_name = body.get("profile")
    if profile_name is not None and not isinstance(profile_name, str):
        raise InvalidInput(f"profile must be a string, got {quote(profile_name)}", field="profile")
    return NotebookSpec(user=owner, name=name, profile=settings.profile(profile_name))

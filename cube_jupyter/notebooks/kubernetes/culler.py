"""Idle culling on a cluster, after Kubeflow's notebook-controller culler but counting what it misses.

Every pass takes the running servers from the informer cache (no API list), asks each for its kernels
and terminals in-cluster (`CubeSpawner.server_url_template` + the route prefix; each server's
AuthorizationPolicy admits the workbench's principal for exactly those two GETs), records the newest
activity in Kubeflow's `notebooks.kubeflow.org/last-activity` annotation, and stops a server idle past
`cull_idle_seconds` with the same patch a user's stop sends, plus the reason. A busy kernel or a
terminal counts as activity; a server that does not answer is skipped, never culled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cube_jupyter.errors import Conflict, CubeError
from cube_jupyter.fields import format_timestamp, parse_timestamp
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.objects import Obj
from cube_jupyter.notebooks import activity
from cube_jupyter.notebooks.config import NotebookSettings
from cube_jupyter.notebooks.render import LAST_ACTIVITY_ANNOTATION, route_prefix, stop_annotation_patch
from cube_jupyter.periodic import repeat

log = logging.getLogger(__name__)

# The last-activity annotation is rewritten only when activity moved this far: a busy server's
# activity is "now" on every pass, and a write per server per pass would flood the API and watches.
ACTIVITY_RESOLUTION_SECONDS = 60.0
# Servers asked at once per pass: bounds open connections in big clusters.
CONCURRENCY = 16
FETCH_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class RunningServer:
    """A running server as the culler needs it: its cached workload and when its pod became ready."""

    workload: Obj
    started: datetime

    @property
    def namespace(self) -> str:
        return str(self.workload["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.workload["metadata"]["name"])

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.workload["metadata"].get("annotations") or {})


class IdleCuller:
    """One pass at a time over the cache's running servers; `run()` repeats it every poll period."""

    def __init__(
        self,
        settings: NotebookSettings,
        client: KubeClient,
        api_version: str,
        kind: str,
        running: Callable[[], list[RunningServer]],
    ) -> None:
        self.settings = settings
        self.client = client
        self.api_version = api_version
        self.kind = kind
        self.running = running
        self.limit = settings.spawner.cull_idle_seconds

    def server_url(self, namespace: str, name: str) -> str:
        """The server's base URL in the cluster: the Service's address plus the route prefix, which
        is Jupyter's base_url."""
        host = self.settings.spawner.server_url_template.format(name=name, namespace=namespace).rstrip("/")
        return host + route_prefix(self.settings, namespace, name)

    async def run(self) -> None:
        await repeat(self.check_once, self.settings.workbench.poll_seconds, "idle culling")

    async def check_once(self) -> None:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def check(server: RunningServer) -> None:
            async with gate:
                await self._check(server)

        await asyncio.gather(*(check(server) for server in self.running()))

    async def _check(self, server: RunningServer) -> None:
        url = self.server_url(server.namespace, server.name)
        try:
            seen = await activity.fetch_activity(url, server.started, timeout=FETCH_TIMEOUT_SECONDS)
        except activity.ActivityUnavailable as exc:
            log.debug("activity of %s/%s unavailable, not culling: %s", server.namespace, server.name, exc)
            return
        now = datetime.now(UTC)
        stamp = format_timestamp(seen.stamp(now))
        if activity.should_cull(seen, now, self.limit):
            log.info("culling %s/%s: idle for %.0f s", server.namespace, server.name, seen.idle_seconds(now))
            patch = stop_annotation_patch(True, now, self.kind, reason=activity.cull_reason(self.limit))
            patch["metadata"]["annotations"][LAST_ACTIVITY_ANNOTATION] = stamp
            # Only the version this decision was made on: if a user started, stopped or changed the
            # server meanwhile, the API refuses (409) and the next pass decides again.
            version = server.workload["metadata"].get("resourceVersion")
            if version:
                patch["metadata"]["resourceVersion"] = version
            await self._patch(server, patch, "stop")
        elif _moved(server.annotations.get(LAST_ACTIVITY_ANNOTATION), seen.stamp(now)):
            patch = {"metadata": {"annotations": {LAST_ACTIVITY_ANNOTATION: stamp}}}
            await self._patch(server, patch, "record the activity of")

    async def _patch(self, server: RunningServer, patch: dict[str, Any], what: str) -> None:
        try:
            await asyncio.to_thread(
                self.client.patch, self.api_version, self.kind, server.namespace, server.name, patch
            )
        except Conflict:
            log.info("%s/%s changed while checked; the next pass decides", server.namespace, server.name)
        except CubeError as exc:
            log.warning("could not %s %s/%s: %s", what, server.namespace, server.name, exc.message)


def _moved(recorded: str | None, stamp: datetime) -> bool:
    before = parse_timestamp(recorded)
    return before is None or abs((stamp - before).total_seconds()) >= ACTIVITY_RESOLUTION_SECONDS

"""The workbench's one connection to a cluster: one API client and one registry of informers that
notebooks, pipelines and jobs share, as KubeSpawner's reflectors share one client.

Each feature asks the registry for the caches it reads (`informer`, `pods`, `events`); asking twice
for the same kind, scope and selectors gives the same informer, with the second caller's indexes
added, so the user pods every feature reads are listed and watched once, not once per feature.
Informers start when the first feature that needs them starts (`start`: already running and synced
ones cost nothing) and all stop together when the cluster is closed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from kubernetes.client import ApiClient

from cube_jupyter.kube.client import KubeClient, make_api_client
from cube_jupyter.kube.discovery import ServedApis, discover
from cube_jupyter.kube.informer import Indexer, Informer, start_synced, stop_all
from cube_jupyter.kube.labels import USER_LABEL
from cube_jupyter.kube.objects import Obj
from cube_jupyter.workbench import WorkbenchSettings

# Every pod the workbench makes carries its user's label (notebook servers, training replicas and
# nodes, tuning trials, served models' predictors, pipeline steps): one selector for all of them.
POD_SELECTOR = USER_LABEL
# Only warnings are ever shown (why a pod or a workload is stuck), so only warnings are cached.
EVENT_SELECTOR = "type=Warning"

Keep = Callable[[Obj], bool]
InformerKey = tuple[str, str, str | None, str | None]  # apiVersion, kind, label and field selector
Shared = TypeVar("Shared")


class Cluster:
    """One API client and the informers of every feature, for one workbench process."""

    def __init__(
        self,
        settings: WorkbenchSettings,
        api_client: ApiClient | None = None,
        *,
        watch_timeout_seconds: int = 300,
        one_command: bool = False,
    ) -> None:
        self.settings = settings
        self.one_command = one_command
        self.client = KubeClient(api_client if api_client is not None else make_api_client(settings))
        self.watch_timeout_seconds = watch_timeout_seconds
        self._informers: dict[InformerKey, Informer] = {}
        self._keeps: dict[InformerKey, list[Keep] | None] = {}
        self._served: dict[str, frozenset[tuple[str, str]]] = {}  # group version → its kinds
        self._shared: dict[type[Any], Any] = {}

    # -- the registry ------------------------------------------------------------------------------

    def informer(
        self,
        api_version: str,
        kind: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: dict[str, Indexer] | None = None,
        keep: Keep | None = None,
    ) -> Informer:
        """The shared cache of `kind` objects matching the selectors in the watched namespace(s).

        `indexers` are added to it; `keep` (a client-side filter) widens what it keeps: an object is
        cached when any caller's filter keeps it (a caller without one keeps everything). Filters must
        be given before the informer starts, since objects already dropped would not come back."""
        key = (api_version, kind, label_selector, field_selector)
        informer = self._informers.get(key)
        if informer is None:
            self._keeps[key] = None if keep is None else [keep]
            informer = Informer(
                self.client,
                api_version,
                kind,
                namespace=self.settings.watch_namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                indexers=indexers,
                keep=None if keep is None else self._keep_any(key),
                watch_timeout_seconds=self.watch_timeout_seconds,
            )
            self._informers[key] = informer
            return informer
        keeps = self._keeps[key]
        if keeps is not None:
            if informer.started:
                raise RuntimeError(f"the {kind} informer already started: give its filter before that")
            if keep is None:
                self._keeps[key] = None
            else:
                keeps.append(keep)
        informer.add_indexers(indexers or {})
        return informer

    def in_background(self, work: Callable[[], None]) -> None:
        """Run `work`, a read besides the informers (Kueue's queue places), on its own thread; inline
        for one command (the CLI), which would otherwise exit before it came back."""
        if self.one_command:
            work()
        else:
            threading.Thread(target=work, name="cube-cluster-read", daemon=True).start()

    def shared(self, kind: type[Shared], make: Callable[[], Shared]) -> Shared:
        """The cluster's one `kind` (made by `make` when first asked): a reader besides the informers
        that features share, such as Kueue's queue positions."""
        if kind not in self._shared:
            self._shared[kind] = make()
        found: Shared = self._shared[kind]
        return found

    def _keep_any(self, key: InformerKey) -> Keep:
        def keep(obj: Obj) -> bool:
            keeps = self._keeps[key]
            return keeps is None or any(check(obj) for check in keeps)

        return keep

    def pods(self, indexers: dict[str, Indexer]) -> Informer:
        """The one cache of the workbench's pods, for every feature."""
        return self.informer("v1", "Pod", label_selector=POD_SELECTOR, indexers=indexers)

    def events(self, indexers: dict[str, Indexer], keep: Keep | None = None) -> Informer:
        """The one cache of Warning events, for every feature."""
        return self.informer("v1", "Event", field_selector=EVENT_SELECTOR, indexers=indexers, keep=keep)

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self, informers: Sequence[Informer], timeout: float, hint: str = "") -> None:
        """Start those of `informers` not yet running and wait until each has its first list;
        BackendUnavailable names the one that did not load (`start_synced`)."""
        await start_synced(informers, timeout, hint)

    async def close(self) -> None:
        """Stop every informer, then the client: once, for all features."""
        await asyncio.to_thread(stop_all, self.informers)
        self.client.close()

    # -- discovery ---------------------------------------------------------------------------------

    async def discover(self, group_versions: Iterable[str]) -> ServedApis:
        """The kinds the cluster serves in `group_versions`, asked once per group version."""
        wanted = set(group_versions)
        unknown = wanted - set(self._served)
        if unknown:
            found = await asyncio.to_thread(discover, self.client, unknown)
            for group_version in unknown:
                self._served[group_version] = frozenset(k for k in found.kinds if k[0] == group_version)
        return ServedApis(frozenset(k for gv in wanted for k in self._served[gv]))

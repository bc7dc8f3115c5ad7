"""A local, always-current copy of one resource kind: list once, then watch; re-list on 410 Gone.

Request handlers read this cache (by key or by index) instead of listing the API, so the cost of a
`GET /notebooks` does not grow with the cluster and the API server sees one list per informer per
(re)sync, however many users poll. The loop runs in a daemon thread because the official client is
blocking; reads take a short lock and return the stored dicts, which are replaced, never mutated.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cube_jupyter.errors import BackendUnavailable, CubeError
from cube_jupyter.kube.client import ApiForbidden, KubeClient, ResourceGone
from cube_jupyter.kube.objects import Obj, metadata_of, name_of, namespace_of

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace or "", name)
# An indexer maps an object to the index values it is found under (e.g. its owner's user name).
Indexer = Callable[[Obj], Iterable[str]]


def object_key(obj: Obj) -> Key:
    return (namespace_of(obj), name_of(obj))


class Informer:
    """Cache of `kind` objects matching the selectors, kept current by a list+watch thread."""

    def __init__(
        self,
        client: KubeClient,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: dict[str, Indexer] | None = None,
        keep: Callable[[Obj], bool] | None = None,
        watch_timeout_seconds: int = 300,
        backoff_initial: float = 0.2,
        backoff_max: float = 30.0,
    ) -> None:
        self.client = client
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._indexers = dict(indexers or {})
        # A client-side filter for what selectors cannot say: objects it rejects are never cached.
        self._keep = keep
        self._items: dict[Key, Obj] = {}
        self._indices: dict[str, dict[str, set[Key]]] = {name: {} for name in self._indexers}
        self._cond = threading.Condition(threading.RLock())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream_lock = threading.Lock()
        self._stream: Any = None  # the open WatchStream, closed by stop()
        self._synced = False
        self.resource_version = ""
        self.list_calls = 0  # API list calls made: tests prove reads never add to this
        self.full_scans = 0  # reads that walked the whole cache (list()): indexed reads do not
        self.watch_calls = 0
        self.changes = 0  # bumped on every cache change; waiters compare it
        self.last_error: str | None = None
        self.refused = False  # the last failure was the authorizer's 403

    def __repr__(self) -> str:
        return f"Informer({self.api_version} {self.kind}, items={len(self._items)}, synced={self._synced})"

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread: interrupt the open watch and wait for the loop to notice."""
        self._stop.set()
        with self._stream_lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("%r did not stop within %.0fs", self, timeout)
            self._thread = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        """True once stop() was called: waiting on this cache is pointless."""
        return self._stop.is_set()

    @property
    def has_synced(self) -> bool:
        return self._synced

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until the first list has landed in the cache; False on timeout or stop."""
        return self.wait_for(lambda: self._synced, timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Block until `predicate()` (evaluated under the cache lock after each change) holds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not predicate():
                if self._stop.is_set():
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining if remaining is not None else 1.0)
            return True

    # -- reads -------------------------------------------------------------------------------------

    def get(self, namespace: str | None, name: str) -> Obj | None:
        with self._cond:
            return self._items.get((namespace or "", name))

    def list(self, namespace: str | None = None, predicate: Callable[[Obj], bool] | None = None) -> list[Obj]:
        with self._cond:
            self.full_scans += 1
            items = list(self._items.values())
        if namespace is not None:
            items = [o for o in items if namespace_of(o) == namespace]
        if predicate is not None:
            items = [o for o in items if predicate(o)]
        return items

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """Objects whose indexer `index` yields `value`: O(matches), not O(cache)."""
        with self._cond:
            keys = self._indices[index].get(value, ())
            return [self._items[k] for k in keys]

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def add_indexers(self, indexers: dict[str, Indexer]) -> None:
        """Index the cache by more keys (another feature sharing it), the objects already in it too.
        A name already taken by a different function is a programming error, not a silent override."""
        with self._cond:
            for name, indexer in indexers.items():
                known = self._indexers.get(name)
                if known is indexer:
                    continue
                if known is not None:
                    raise ValueError(f"the {self.kind} informer already has a different index {name!r}")
                self._indexers[name] = indexer
                index: dict[str, set[Key]] = {}
                for key, obj in self._items.items():
                    for value in indexer(obj):
                        index.setdefault(value, set()).add(key)
                self._indices[name] = index

    # -- writes (the loop thread; also used for read-your-writes after a create) --------------------

    def upsert(self, obj: Obj) -> None:
        with self._cond:
            self._put(obj)
            self._changed()

    def _put(self, obj: Obj) -> None:
        key = object_key(obj)
        if self._keep is not None and not self._keep(obj):
            self._remove(key)
            return
        if key in self._items:
            self._unindex(key, self._items[key])
        self._items[key] = obj
        for name, indexer in self._indexers.items():
            for value in indexer(obj):
                self._indices[name].setdefault(value, set()).add(key)

    def _remove(self, key: Key) -> None:
        obj = self._items.pop(key, None)
        if obj is not None:
            self._unindex(key, obj)

    def _unindex(self, key: Key, obj: Obj) -> None:
        for name, indexer in self._indexers.items():
            index = self._indices[name]
            for value in indexer(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _changed(self) -> None:
        self.changes += 1
        self._cond.notify_all()

    # -- the loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        need_list = True
        backoff = self.backoff_initial
        while not self._stop.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                self._watch()
                backoff = self.backoff_initial  # a watch that ends normally (server timeout) is healthy
            except ResourceGone as exc:
                log.info("%s watch: %s; listing again", self.kind, exc.message)
                need_list = True
            except CubeError as exc:
                self._fail(exc.message)
                self.refused = isinstance(exc, ApiForbidden)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)
            except Exception as exc:  # a bug or an odd payload must not kill the cache for good
                log.exception("%s informer failed", self.kind)
                self._fail(f"{type(exc).__name__}: {exc}")
                need_list = True
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)

    def _fail(self, message: str) -> None:
        if message != self.last_error:
            log.warning("%s informer: %s", self.kind, message)
        self.last_error = message

    def _relist(self) -> None:
        self.list_calls += 1
        result = self.client.list(
            self.api_version,
            self.kind,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        with self._cond:
            fresh = {object_key(o): o for o in result.items}
            for key in [k for k in self._items if k not in fresh]:
                self._remove(key)
            for obj in result.items:
                self._put(obj)
            self.resource_version = result.resource_version
            self._synced = True
            self.last_error = None
            self.refused = False
            self._changed()

    def _watch(self) -> None:
        self.watch_calls += 1
        stream = self.client.watch(
            self.api_version,
            self.kind,
            self.namespace,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout_seconds,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        with self._stream_lock:
            if self._stop.is_set():
                stream.close()
            self._stream = stream
        try:
            for event in stream:
                if self._stop.is_set():
                    return
                self._apply(event)
        finally:
            with self._stream_lock:
                self._stream = None

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        version = metadata_of(obj).get("resourceVersion") or ""
        with self._cond:
            if kind in ("ADDED", "MODIFIED"):
                self._put(obj)
            elif kind == "DELETED":
                self._remove(object_key(obj))
            elif kind != "BOOKMARK":
                log.debug("%s watch: ignoring event type %r", self.kind, kind)
                return
            if version:
                self.resource_version = version
            if kind != "BOOKMARK":
                self._changed()


async def start_synced(informers: Sequence[Informer], timeout: float, hint: str = "") -> None:
    """Start every informer, then wait for each one's first list, so the first read sees the cluster.

    BackendUnavailable names the kind that did not load and why (`hint` says what to install); the
    caller stops them all (`stop_all`)."""
    for informer in informers:
        informer.start()
    for informer in informers:
        if not await asyncio.to_thread(informer.wait_synced, timeout):
            why = informer.last_error or "no answer"
            if informer.refused and informer.namespace is None:
                why += (
                    "; credentials that may list only one namespace (a notebook pod's, a user's own "
                    "kubeconfig) need CubeWorkbench.role = 'user' and CubeWorkbench.namespace"
                )
            raise BackendUnavailable(
                f"could not load {informer.kind} objects from the Kubernetes API at {informer.client.host} "
                f"within {timeout:.0f}s: {why}{hint}"
            )


def stop_all(informers: Sequence[Informer]) -> None:
    """Stop every informer: all are told at once, then each thread is joined."""
    for informer in informers:
        informer._stop.set()
    for informer in informers:
        informer.stop()

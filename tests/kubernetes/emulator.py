"""KMock's Kubernetes emulator, made to answer the way a real API server does where the backend relies on it.

KMock 0.8's `KubernetesEmulator` stores objects and streams changes, but unlike kube-apiserver it
answers 200 to POST, fills no metadata (resourceVersion, uid, creationTimestamp), lists with a
placeholder resourceVersion, ignores label/field selectors and `timeoutSeconds`, replays every object
on each watch, and records an object even when a test's reaction answered the request with an error.
This subclass fixes those: 201 on create, 409 AlreadyExists, 404 NotFound with real Status bodies,
404 for a namespace that does not exist, a monotonically increasing resourceVersion, watches that
resume from a resourceVersion (with selector-aware ADDED/MODIFIED/DELETED), BOOKMARKs, paging, and
410 Gone after `compact()`, which tests use to prove that informers re-list. State changes happen
only in the default handlers, so a test's `fail_next(...)` leaves nothing behind, as on a real server.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import copy
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any

import attrs
import jsonpatch
import kmock
from kmock._internal import parsing, rendering

NAMESPACES = kmock.resource("", "v1", "namespaces")
Event = dict[str, Any]
_kmock_parse_path = parsing.parse_path
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


def _parse_path(path: str) -> parsing.ParsedPath:
    """KMock reads `/api/v1/namespaces[/{name}[/status]]` as a namespace holding no resource (and
    fails on the bare collection): there, as in kube-apiserver, the resource is `namespaces` itself."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and (
        len(parts) <= 4 or (len(parts) == 5 and parts[4] in _NAMESPACE_SUBRESOURCES)
    ):
        name = parts[3] if len(parts) > 3 else None
        subresource = parts[4] if len(parts) > 4 else None
        return parsing.ParsedPath("", "v1", "namespaces", None, name, subresource)
    return _kmock_parse_path(path)


parsing.parse_path = _parse_path  # what KMock's request parsing calls


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def status_error(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=code, reason=reason, message=message, details=details or {})


class Selector:
    """Label and field selectors as kube-apiserver evaluates them (equality and set-based)."""

    _SET_EXPR = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")

    def __init__(self, labels: str | None, fields: str | None) -> None:
        self.labels = [self._parse(part) for part in self._split(labels or "")]
        self.fields = [self._parse(part) for part in self._split(fields or "")]

    @staticmethod
    def _split(text: str) -> list[str]:
        parts, depth, current = [], 0, ""
        for char in text:
            depth += char == "("
            depth -= char == ")"
            if char == "," and depth == 0:
                parts.append(current)
                current = ""
            else:
                current += char
        parts.append(current)
        return [p.strip() for p in parts if p.strip()]

    def _parse(self, part: str) -> tuple[str, str, set[str]]:
        match = self._SET_EXPR.match(part)
        if match:
            return match.group(1), match.group(2), {v.strip() for v in match.group(3).split(",") if v.strip()}
        for op in ("!=", "==", "="):
            if op in part:
                key, value = part.split(op, 1)
                return key.strip(), "!=" if op == "!=" else "=", {value.strip()}
        if part.startswith("!"):
            return part[1:].strip(), "!exists", set()
        return part, "exists", set()

    def matches(self, obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for key, op, values in self.labels:
            if not _check(op, key in labels, labels.get(key), values):
                return False
        for path, op, values in self.fields:
            value: Any = obj
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if not _check(op, value is not None, "" if value is None else str(value), values):
                return False
        return True


def _check(op: str, present: bool, value: str | None, values: set[str]) -> bool:
    if op == "exists":
        return present
    if op == "!exists":
        return not present
    if op in ("=", "in"):
        return present and value in values
    return not present or value not in values  # "!=" and "notin"


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesEmulator):
    """The emulator with kube-apiserver's metadata, status codes, resourceVersions and watch semantics."""

    require_namespaces: bool = True  # creating in a namespace that does not exist is a 404, as in a cluster
    default_watch_timeout: float = 1800.0
    _rv: int = attrs.field(default=0, init=False)
    _log: list[tuple[int, kmock.resource, str, dict[str, Any], dict[str, Any] | None]] = attrs.field(
        factory=list, init=False
    )
    _log_rvs: list[int] = attrs.field(factory=list, init=False)
    _compacted: int = attrs.field(default=0, init=False)
    _expiry: int = attrs.field(default=0, init=False)
    _waiters: set[asyncio.Event] = attrs.field(factory=set, init=False)
    _watch_gate: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)
    _gone_next: dict[Any, int] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._watch_gate.set()

    # -- test controls -----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def open_watches(self) -> int:
        """Watches past their initial events, waiting for changes (all resources)."""
        return len(self._waiters)

    def compact(self, expire_open_watches: bool = True) -> None:
        """Forget the change history, as etcd compaction does: a watch from an older resourceVersion
        gets 410 Gone; with `expire_open_watches`, open watches end with an ERROR 410 event now."""
        self._compacted = self._rv
        if expire_open_watches:
            self._expiry += 1
        self._notify()

    def hold_watches(self) -> None:
        """New watch requests wait (headers sent, no events) until `release_watches()`."""
        self._watch_gate.clear()

    def release_watches(self) -> None:
        self._watch_gate.set()

    def gone_on_next_watch(self, resource: str, times: int = 1) -> None:
        """Answer the next `times` watches of `resource` with HTTP 410 Gone."""
        self._gone_next[kmock.resource(resource)] = times

    def fail_next(
        self, action: str, resource: str, code: int, message: str, *, times: int | None = 1, reason: str = ""
    ) -> None:
        """Answer the next `times` (None: all) `action` requests on `resource` with a Status error,
        before the emulator touches its state, as a real server failing the request would."""
        remaining = [times]

        def react(request: kmock.Request) -> Any:
            if remaining[0] is not None:
                if remaining[0] <= 0:
                    return NotImplemented  # exhausted: fall through to the emulator from now on
                remaining[0] -= 1
            raise status_error(code, reason or _REASONS.get(code, "InternalError"), message)

        self[kmock.action[action.upper()], kmock.resource(resource)] << react

    def requests_of(self, action: str, resource: str) -> list[kmock.Request]:
        """Requests the server got for `action` ('list', 'watch', 'create', ...) on `resource`."""
        return list(self[kmock.action[action.upper()], kmock.resource(resource)])

    def preload(self, objects: Iterable[dict[str, Any]]) -> None:
        """Store objects as if created long ago (no watch events): namespaces, benchmark fixtures."""
        for obj in objects:
            res = self._resource_of(obj)
            meta = obj.setdefault("metadata", {})
            self._fill_metadata(meta)
            meta["resourceVersion"] = str(self._next_rv())
            self._objects[res, meta.get("namespace"), meta["name"]] = obj

    def find(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = (kmock.resource(resource), namespace, name)
        if key not in self._objects or self._objects[key].deleted:
            return None
        return self._objects[key].raw

    def names(self, resource: str, namespace: str | None = None) -> list[str]:
        res = kmock.resource(resource)
        return sorted(
            name
            for (r, ns, name), obj in self._objects.items()
            if r == res and not obj.deleted and (namespace is None or ns == namespace)
        )

    # -- request handling --------------------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> Any:
        # Skip KubernetesEmulator._handle, which changes state even when a test's reaction answered
        # with an error; here only the default handlers below change state.
        return await kmock.RawHandler._handle(self, request)

    async def _render_error(self, exc: Exception) -> Any:
        if isinstance(exc, kmock.KubernetesError):
            import aiohttp.web

            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": exc.message or "",
                "reason": exc.reason or "",
                "details": exc.details or {},
                "code": exc.status,
            }
            return aiohttp.web.json_response(body, status=exc.status)
        return await super()._render_error(exc)

    async def _serve_create(self, request: kmock.Request) -> Any:
        res = self._known(request)
        obj = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
        if obj is None:
            raise status_error(400, "BadRequest", "the body of the request was not a JSON object")
        meta = obj.setdefault("metadata", {})
        if request.namespace:
            if meta.get("namespace") not in (None, request.namespace):
                raise status_error(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = request.namespace
            self._require_namespace(request.namespace)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        if not name:
            raise status_error(422, "Invalid", f'{res.plural} "" is invalid: metadata.name: Required value')
        key = (res, request.namespace, name)
        if key in self._objects and not self._objects[key].deleted:
            raise status_error(
                409,
                "AlreadyExists",
                f'{_describe(res)} "{name}" already exists',
                {"name": name, "group": res.group, "kind": res.plural},
            )
        self._fill_metadata(meta)
        if self._has_status(res):
            obj.pop("status", None)  # status is the controllers' to write, through /status
        meta["resourceVersion"] = str(self._next_rv())
        if key in self._objects:
            self._objects[key].create(obj)
        else:
            self._objects[key] = obj
        self._record(res, "ADDED", obj, None)
        return rendering.Response(status=201, payload=obj)

    async def _serve_fetch(self, request: kmock.Request) -> Any:
        res = self._known(request)
        return self._existing(res, request.namespace, request.name).raw

    async def _serve_update(self, request: kmock.Request) -> Any:
        res = self._known(request)
        stored = self._existing(res, request.namespace, request.name)
        old = stored.raw
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        data = request.data
        if content_type == "application/json-patch+json":
            if not isinstance(data, list):
                raise status_error(400, "BadRequest", "a JSON patch must be a list of operations")
            new = jsonpatch.apply_patch(old, data)
        elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(data, dict):
                raise status_error(400, "BadRequest", "a merge patch must be a JSON object")
            if request.subresource == "status":
                data = {"status": data.get("status")} if "status" in data else {}
            elif self._has_status(res):
                data = {k: v for k, v in data.items() if k != "status"}
            wanted_rv = (data.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise status_error(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {_describe(res)} "{request.name}": the '
                    "object has been modified; please apply your changes to the latest version and try again",
                )
            new = merge_patch(old, data)
        else:
            raise status_error(
                415, "UnsupportedMediaType", f"the content type {content_type!r} is not supported"
            )
        # Identity and bookkeeping fields are the server's.
        for field in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
            if field in old["metadata"]:
                new["metadata"][field] = old["metadata"][field]
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            stored.delete()
            self._record(res, "DELETED", new, old)
        else:
            stored.history.append(new)
            self._record(res, "MODIFIED", new, old)
        return new

    async def _serve_delete(self, request: kmock.Request) -> Any:
        res = self._known(request)
        stored = self._existing(res, request.namespace, request.name)
        old = stored.raw
        if old["metadata"].get("finalizers"):
            if not old["metadata"].get("deletionTimestamp"):
                new = merge_patch(old, {"metadata": {"deletionTimestamp": now_rfc3339()}})
                new["metadata"]["resourceVersion"] = str(self._next_rv())
                stored.history.append(new)
                self._record(res, "MODIFIED", new, old)
            return stored.raw
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self._next_rv())
        stored.delete()
        self._record(res, "DELETED", gone, old)
        return gone

    async def _serve_list(self, request: kmock.Request) -> Any:
        res = self._known(request)
        params = request.params
        selector = Selector(params.get("labelSelector"), params.get("fieldSelector"))
        start_after, list_rv = "", self._rv
        if params.get("continue"):
            try:
                token = json.loads(base64.b64decode(params["continue"]))
                start_after, list_rv = token["start"], int(token["rv"])
            except (ValueError, KeyError, TypeError):
                raise status_error(400, "BadRequest", "invalid continue token") from None
            if list_rv < self._compacted:
                raise status_error(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a "
                    "consistent list result. You can start a new list without the continue "
                    "parameter.",
                )
        items = sorted(
            (
                (f"{ns or ''}/{name}", obj.raw)
                for (r, ns, name), obj in self._objects.items()
                if r == res
                and not obj.deleted
                and (request.namespace is None or ns == request.namespace)
                and selector.matches(obj.raw)
            ),
            key=lambda pair: pair[0],
        )
        items = [pair for pair in items if pair[0] > start_after]
        limit = int(params.get("limit") or 0)
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit and len(items) > limit:
            items = items[:limit]
            token = {"start": items[-1][0], "rv": list_rv}
            meta["continue"] = base64.b64encode(json.dumps(token).encode()).decode()
        return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": [obj for _, obj in items]}

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        res = self._known(request)
        params = request.params
        if self._gone_next.get(res, 0) > 0:
            self._gone_next[res] -= 1
            raise status_error(410, "Expired", "too old resource version")
        selector = Selector(params.get("labelSelector"), params.get("fieldSelector"))
        timeout = float(params.get("timeoutSeconds") or self.default_watch_timeout)
        bookmarks = params.get("allowWatchBookmarks") == "true"
        since = params.get("resourceVersion") or ""
        yield b""  # send the headers now, as the API server does
        await self._watch_gate.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        expiry = self._expiry
        if since in ("", "0"):
            for (r, ns, _name), obj in list(self._objects.items()):
                if r == res and not obj.deleted and self._visible(request, ns, obj.raw, selector):
                    yield {"type": "ADDED", "object": obj.raw}
            position = self._rv
        else:
            try:
                position = int(since)
            except ValueError:
                raise status_error(400, "BadRequest", f"invalid resourceVersion {since!r}") from None
            if position < self._compacted:
                yield _gone_event(f"too old resource version: {position} ({self._compacted})")
                return
        index = bisect.bisect_right(self._log_rvs, position)
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        try:
            while True:
                if self._expiry != expiry:
                    yield _gone_event(f"too old resource version: {position} ({self._compacted})")
                    return
                while index < len(self._log):
                    rv, r, kind, changed, previous = self._log[index]
                    index += 1
                    position = rv
                    if r != res:
                        continue
                    event = self._event_for(request, selector, kind, changed, previous)
                    if event is not None:
                        yield event
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if bookmarks:
                        yield {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": "",
                                "apiVersion": "",
                                "metadata": {"resourceVersion": str(self._rv)},
                            },
                        }
                    return
                waiter.clear()
                if index == len(self._log) and self._expiry == expiry:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(waiter.wait(), remaining)
        finally:
            self._waiters.discard(waiter)

    # -- internals ---------------------------------------------------------------------------------

    def _event_for(
        self,
        request: kmock.Request,
        selector: Selector,
        kind: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> Event | None:
        """What a selective watch sees: an object entering the selection is ADDED, leaving is DELETED."""
        namespace = (obj.get("metadata") or {}).get("namespace")
        now_in = self._visible(request, namespace, obj, selector)
        was_in = old is not None and self._visible(request, namespace, old, selector)
        if kind == "DELETED":
            return {"type": "DELETED", "object": obj} if was_in else None
        if now_in and was_in:
            return {"type": "MODIFIED", "object": obj}
        if now_in:
            return {"type": "ADDED", "object": obj}
        if was_in:
            return {"type": "DELETED", "object": obj}
        return None

    @staticmethod
    def _visible(
        request: kmock.Request, namespace: str | None, obj: dict[str, Any], selector: Selector
    ) -> bool:
        return (request.namespace is None or namespace == request.namespace) and selector.matches(obj)

    def _known(self, request: kmock.Request) -> kmock.resource:
        res = request.resource
        assert res is not None
        for known in self._get_resources():
            if known == res:
                return res
        raise status_error(404, "NotFound", "the server could not find the requested resource")

    def _existing(self, res: kmock.resource, namespace: str | None, name: str | None) -> Any:
        key = (res, namespace, name or "")
        if key not in self._objects or self._objects[key].deleted:
            raise status_error(
                404,
                "NotFound",
                f'{_describe(res)} "{name}" not found',
                {"name": name, "group": res.group, "kind": res.plural},
            )
        return self._objects[key]

    def _require_namespace(self, namespace: str) -> None:
        if self.require_namespaces and self.find("v1/namespaces", None, namespace) is None:
            raise status_error(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )

    def _has_status(self, res: kmock.resource) -> bool:
        return res in self.resources and "status" in self.resources[res].subresources

    @staticmethod
    def _resource_of(obj: dict[str, Any]) -> kmock.resource:
        from cube_jupyter.kube.client import resource_type

        rtype = resource_type(obj["apiVersion"], obj["kind"])
        group, _, version = obj["apiVersion"].rpartition("/")
        return kmock.resource(group, version, rtype.plural)

    def _fill_metadata(self, meta: dict[str, Any]) -> None:
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta.setdefault("generation", 1)
        meta.pop("deletionTimestamp", None)

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _record(
        self, res: kmock.resource, kind: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._log.append((rv, res, kind, obj, old))
        self._log_rvs.append(rv)
        self._notify()

    def _notify(self) -> None:
        for waiter in self._waiters:
            waiter.set()


_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


def _describe(res: kmock.resource) -> str:
    return f"{res.plural}.{res.group}" if res.group else str(res.plural)


def _gone_event(message: str) -> Event:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "Expired",
            "code": 410,
        },
    }

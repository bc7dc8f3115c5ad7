"""The path router: `/cube/notebook/{user}/{name}/...` on the main server reaches a local child server.

One handler serves plain HTTP (every method, streamed back) and WebSockets (kernels, terminals). The
caller is authenticated by the main server and must be allowed the `cube` resource by its Authorizer.
Only the owner gets through; anyone else, admins included, sees a 404 so the router does not reveal
which servers exist. (A child's pages run on the workbench's origin: an admin opening them would run
the owner's JavaScript with the admin's session. Admins list, stop and delete servers through the
REST API instead.) The child is reached on loopback with its own token; the caller's credentials
(Authorization, the main server's cookies, a `?token=` for the main server) never reach it, since
code running in the child could read them.

The child trusts the token and therefore skips XSRF checks, so the router checks XSRF itself, in the
form a child's JupyterLab page sends it: the `X-XSRFToken` header (or `_xsrf` argument) must equal one
of the `_xsrf` cookies the browser sent. The browser holds two of them (the main server's at `/` and
the child's at its base_url) and JupyterLab echoes whichever it reads first, so any of them is
accepted; a cross-site page can read none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import json
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import unquote_plus, urlencode

from jupyter_server.auth.utils import HTTP_METHOD_TO_AUTH_ACTION
from jupyter_server.base.handlers import JupyterHandler
from tornado import httputil, web
from tornado.escape import utf8
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import (
    WebSocketClientConnection,
    WebSocketClosedError,
    WebSocketHandler,
    websocket_connect,
)

from cube_jupyter.errors import BackendUnavailable, CubeError, Forbidden, NotFound
from cube_jupyter.names import user_slug
from cube_jupyter.notebooks.backend import ROUTE_PREFIX, RoutableBackend, Upstream
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookServer, ServerStatus
from cube_jupyter_server.authorizer import CUBE_RESOURCE
from cube_jupyter_server.handlers import error_body
from cube_jupyter_server.lifecycle import STARTER_SETTING, BackendStarter

ROUTE_PATTERN = rf"/{ROUTE_PREFIX}/(?P<user>[^/]+)/(?P<name>[^/]+)(?P<path>/.*)?"
# Query arguments meant for the main server: its token must not be logged (or refused) by the child,
# and the router checks `_xsrf` itself.
PRIVATE_QUERY_ARGUMENTS = frozenset({"token", "_xsrf"})

# RFC 9110 7.6.1: meaningful for one connection only, never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Request headers replaced on the way to the child: its Host is loopback, its auth is our token, and
# the main server already checked Origin.
REPLACED_REQUEST_HEADERS = frozenset(
    {"host", "authorization", "cookie", "origin", "content-length", "expect"}
)
WEBSOCKET_HANDSHAKE_HEADERS = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol"}
)
HTTP_CLIENT_SETTING = "cube_router_http_client"
MAX_UPSTREAM_MESSAGE = 1024 * 1024 * 1024  # kernel messages with large outputs; the browser side limits too


def forwarded_request_headers(
    headers: httputil.HTTPHeaders, token: str, private_cookies: Iterable[str], websocket: bool = False
) -> httputil.HTTPHeaders:
    """The caller's headers as the child should see them: no hop-by-hop headers, no credentials of
    the main server, the child's token instead."""
    connection_tokens = {t.strip().lower() for t in headers.get("Connection", "").split(",") if t.strip()}
    dropped = HOP_BY_HOP | REPLACED_REQUEST_HEADERS | connection_tokens
    if websocket:
        dropped |= WEBSOCKET_HANDSHAKE_HEADERS
    out = httputil.HTTPHeaders()
    for name, value in headers.get_all():
        if name.lower() not in dropped:
            out.add(name, value)
    cookies = strip_cookies(headers.get_list("Cookie"), set(private_cookies))
    if cookies:
        out["Cookie"] = cookies
    out["Authorization"] = f"token {token}"
    return out


def forwarded_query(query: str) -> str:
    """The raw query string without the main server's own arguments (`token`, `_xsrf`), the rest
    untouched: same order, same encoding."""
    return "&".join(
        part
        for part in query.split("&")
        if part and unquote_plus(part.split("=", 1)[0]) not in PRIVATE_QUERY_ARGUMENTS
    )


def strip_cookies(cookie_headers: list[str], private: set[str]) -> str:
    """The Cookie header without the cookies named in `private`, order and duplicates kept."""
    kept = [
        part.strip()
        for header in cookie_headers
        for part in header.split(";")
        if part.strip() and part.split("=", 1)[0].strip() not in private
    ]
    return "; ".join(kept)


def cookie_values(cookie_headers: list[str], name: str) -> list[str]:
    """Every value of cookie `name` in raw Cookie headers (a browser sends one per matching path)."""
    values = []
    for header in cookie_headers:
        for part in header.split(";"):
            key, sep, value = part.strip().partition("=")
            if sep and key.strip() == name:
                values.append(value.strip().strip('"'))
    return values


def response_headers(headers: httputil.HTTPHeaders) -> list[tuple[str, str]]:
    """The child's response headers minus hop-by-hop ones (Set-Cookie kept, one per cookie)."""
    connection_tokens = {t.strip().lower() for t in headers.get("Connection", "").split(",") if t.strip()}
    return [
        (name, value)
        for name, value in headers.get_all()
        if name.lower() not in HOP_BY_HOP and name.lower() not in connection_tokens
    ]


def _close_code(code: int | None) -> int | None:
    """A close code that may be sent on the wire (1005, 1006 and 1015 are reserved for reporting)."""
    if code is None or code in (1004, 1005, 1006, 1015) or not 1000 <= code <= 4999:
        return None
    return code


class NotebookRouterHandler(JupyterHandler, WebSocketHandler):
    """Forwards HTTP and WebSocket traffic for one user's local notebook server.

    JupyterHandler comes first in the MRO so authentication, Origin checks and the XSRF hook behave as
    on every Jupyter handler; WebSocketHandler supplies the upgrade when a request asks for one.
    """

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")
    auth_resource = CUBE_RESOURCE

    _owner: str | None = None
    _server: NotebookServer | None = None
    _upstream_ws: WebSocketClientConnection | None = None
    _pump: asyncio.Task[None] | None = None
    _relay_head: tuple[httputil.ResponseStartLine, httputil.HTTPHeaders] | None = None
    _relay_started = False

    # -- authentication and authorization ----------------------------------------------------------

    async def prepare(self) -> None:  # type: ignore[override]
        """Authenticate (403, or the login page for a browser), authorize with the server's
        Authorizer (403), then find the server (404/503)."""
        try:
            await super().prepare(_redirect_to_login=False)
        except web.HTTPError as exc:
            if (
                exc.status_code == 403
                and getattr(self, "_jupyter_current_user", "x") is None
                and self.check_host()
            ):
                self._refuse_unauthenticated()
                return
            raise
        caller = self.settings["cube_caller"](self)
        if inspect.isawaitable(caller):
            caller = await caller
        if not caller:
            self._refuse_unauthenticated()
            return
        if not await self._authorized():
            return
        try:
            self._owner, self._server = self._find_server(str(caller))
        except CubeError as exc:
            self._finish_error(exc)

    async def _authorized(self) -> bool:
        """Ask the server's Authorizer, as Jupyter's `@authorized` does; a refusal is a 403."""
        user = self.current_user
        action = (
            "execute"
            if self._is_websocket_request()
            else HTTP_METHOD_TO_AUTH_ACTION.get(self.request.method or "GET", "write")
        )
        allowed = self.authorizer.is_authorized(self, user, action, self.auth_resource)
        if inspect.isawaitable(allowed):
            allowed = await allowed
        if not allowed:
            self._finish_error(Forbidden(f"not allowed to {action} {self.auth_resource!r}", field="user"))
        return bool(allowed)

    def _find_server(self, caller: str) -> tuple[str, NotebookServer]:
        """The caller's own server named in the path; NotFound for anyone else's (see the module doc)."""
        starter: BackendStarter | None = self.settings.get(STARTER_SETTING)
        if starter is not None:
            starter.require_ready()
        service = cast(NotebookService, self.settings["cube_notebooks"])
        slug, name = self.path_kwargs["user"], self.path_kwargs["name"]
        if not isinstance(service.backend, RoutableBackend):
            raise NotFound("the notebook path router serves the local backend only", field="name")
        server = service.backend.get_server(caller, name) if user_slug(caller) == slug else None
        if server is None:  # another user's server gets the same answer as no server at all
            raise NotFound(f"there is no notebook server {slug}/{name} you can reach", field="name")
        return caller, server

    def _refuse_unauthenticated(self) -> None:
        """Browsers asking for a page go to the login page (as @web.authenticated does); API calls
        and WebSockets get a 403."""
        wants_page = (
            self.request.method in ("GET", "HEAD")
            and not self._is_websocket_request()
            and "text/html" in self.request.headers.get("Accept", "")
            and self.identity_provider.login_available
        )
        if wants_page:
            login = str(self.settings.get("login_url") or self.base_url + "login")
            self.redirect(login + ("&" if "?" in login else "?") + urlencode({"next": self.request.uri}))
            return
        self._finish_error(Forbidden("authentication required to reach a notebook server", field="user"))

    def check_xsrf_cookie(self) -> None:
        """Unsafe methods must echo one of the `_xsrf` cookies the browser sent (see the module doc).

        Token-authenticated calls are exempt, as everywhere in Jupyter: a cross-site page cannot set
        an Authorization header.
        """
        if not hasattr(self, "_jupyter_current_user"):
            return  # called by tornado before authentication; prepare() calls it again
        if self.token_authenticated or self.settings.get("disable_check_xsrf", False):
            return
        if not self.check_origin():
            raise web.HTTPError(404)
        sent = (
            self.get_argument("_xsrf", None)
            or self.request.headers.get("X-Xsrftoken")
            or self.request.headers.get("X-Csrftoken")
        )
        if not sent:
            raise web.HTTPError(403, "'_xsrf' argument or X-XSRFToken header missing")
        _, sent_token, _ = self._decode_xsrf_token(sent)
        if not sent_token:
            raise web.HTTPError(403, "'_xsrf' argument has an invalid format")
        for cookie in cookie_values(self.request.headers.get_list("Cookie"), "_xsrf"):
            _, cookie_token, _ = self._decode_xsrf_token(cookie)
            if cookie_token and hmac.compare_digest(utf8(sent_token), utf8(cookie_token)):
                return
        raise web.HTTPError(403, "XSRF cookie does not match the X-XSRFToken header or _xsrf argument")

    def compute_etag(self) -> str | None:
        return None  # the child's own ETag (if any) is passed through untouched

    # -- HTTP --------------------------------------------------------------------------------------

    async def get(self, *args: Any, **kwargs: Any) -> None:
        if self._is_websocket_request():
            await self._open_websocket()
        else:
            await self._forward()

    async def head(self, *args: Any, **kwargs: Any) -> None:
        await self._forward()

    async def post(self, *args: Any, **kwargs: Any) -> None:
        await self._forward()

    async def put(self, *args: Any, **kwargs: Any) -> None:
        await self._forward()

    async def patch(self, *args: Any, **kwargs: Any) -> None:
        await self._forward()

    async def delete(self, *args: Any, **kwargs: Any) -> None:
        await self._forward()

    async def options(self, *args: Any, **kwargs: Any) -> None:
        await self._forward()

    async def _forward(self) -> None:
        upstream = self._require_upstream()
        if upstream is None:
            return
        path = self._upstream_path(upstream)
        if path is None:  # `.../{name}` without the slash: the child lives under `.../{name}/`
            self.redirect(self.request.path + "/" + (f"?{self.request.query}" if self.request.query else ""))
            return
        method = self.request.method or "GET"
        body = self.request.body if (self.request.body or method in ("POST", "PUT", "PATCH")) else None
        request = HTTPRequest(
            f"http://{upstream.host}:{upstream.port}{path}",
            method=method,
            headers=forwarded_request_headers(self.request.headers, upstream.token, self._private_cookies()),
            body=body,
            follow_redirects=False,
            decompress_response=False,
            allow_nonstandard_methods=True,
            header_callback=self._on_upstream_header,
            streaming_callback=self._on_upstream_chunk,
            connect_timeout=10,
            request_timeout=3600,
        )
        try:
            response = await self._http_client().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as exc:
            if self._relay_started:  # part of the body is out: cut the connection so it looks truncated
                close = getattr(self.request.connection, "close", None)
                if close is not None:
                    close()
                self.finish()
                return
            self._finish_error(
                BackendUnavailable(
                    f"notebook server {self.path_kwargs['name']!r} did not answer: {exc}", field="name"
                )
            )
            return
        if not self._relay_started:
            self._start_relay(
                httputil.ResponseStartLine("HTTP/1.1", response.code, response.reason or ""), response.headers
            )
        self.finish()

    def _on_upstream_header(self, line: str) -> None:
        line = line.rstrip("\r\n")
        if line.startswith("HTTP/"):
            self._relay_head = (httputil.parse_response_start_line(line), httputil.HTTPHeaders())
        elif line and self._relay_head is not None:
            self._relay_head[1].parse_line(line)

    def _on_upstream_chunk(self, chunk: bytes) -> None:
        if not self._relay_started and self._relay_head is not None:
            self._start_relay(*self._relay_head)
        self.write(chunk)
        _consume_later(self.flush())

    def _start_relay(self, start: httputil.ResponseStartLine, headers: httputil.HTTPHeaders) -> None:
        """Status and headers of the child's response, replacing our defaults where it sets them."""
        self._relay_started = True
        self.set_status(start.code, start.reason or None)
        relayed = response_headers(headers)
        for name in {name for name, _ in relayed}:
            self.clear_header(name)
        for name, value in relayed:
            self.add_header(name, value)

    # -- WebSocket ---------------------------------------------------------------------------------

    async def _open_websocket(self) -> None:
        """Connect to the child first (so a failure is still an HTTP answer), then accept the client
        with the subprotocol the child chose from those the client offered."""
        upstream = self._require_upstream()
        if upstream is None:
            return
        if not self.check_origin():
            self._finish_error(Forbidden("cross-origin WebSocket refused", field="Origin"))
            return
        path = self._upstream_path(upstream) or upstream.base_url
        offered = [
            p.strip() for p in self.request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()
        ]
        request = HTTPRequest(
            f"ws://{upstream.host}:{upstream.port}{path}",
            headers=forwarded_request_headers(
                self.request.headers, upstream.token, self._private_cookies(), websocket=True
            ),
            connect_timeout=10,
            request_timeout=10,
        )
        try:
            self._upstream_ws = await websocket_connect(
                request, subprotocols=offered or None, max_message_size=MAX_UPSTREAM_MESSAGE
            )
        except HTTPClientError as exc:
            code = exc.code if exc.code and exc.code < 599 else 503
            self._finish_error(
                BackendUnavailable(f"notebook server refused the WebSocket: {exc}", field="name"), code
            )
            return
        except OSError as exc:
            self._finish_error(BackendUnavailable(f"notebook server did not answer: {exc}", field="name"))
            return
        await WebSocketHandler.get(self)
        if self.ws_connection is None and self._upstream_ws is not None:  # the handshake was refused
            self._upstream_ws.close()

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        chosen = self._upstream_ws.selected_subprotocol if self._upstream_ws else None
        return chosen if chosen in subprotocols else None

    def open(self, *args: Any, **kwargs: Any) -> None:
        self._pump = asyncio.create_task(self._pump_from_upstream())

    async def on_message(self, message: str | bytes) -> None:
        if self._upstream_ws is None:
            return
        try:
            await self._upstream_ws.write_message(message, binary=isinstance(message, bytes))
        except WebSocketClosedError:
            self.close()

    def on_close(self) -> None:
        if self._upstream_ws is not None:
            self._upstream_ws.close(_close_code(self.close_code), self.close_reason)

    async def _pump_from_upstream(self) -> None:
        upstream = self._upstream_ws
        assert upstream is not None
        while True:
            message = await upstream.read_message()
            if message is None:
                if self.ws_connection is not None:
                    self.close(_close_code(upstream.close_code), upstream.close_reason)
                return
            try:
                await self.write_message(message, binary=isinstance(message, bytes))
            except WebSocketClosedError:
                upstream.close()
                return

    # -- helpers -----------------------------------------------------------------------------------

    def _is_websocket_request(self) -> bool:
        return self.request.headers.get("Upgrade", "").lower() == "websocket"

    def _require_upstream(self) -> Upstream | None:
        """The child's address, or a 503 naming the server's status and reason (a queued server's
        place in the queue and what it waits for: opening it says why it is not up yet)."""
        service = cast(NotebookService, self.settings["cube_notebooks"])
        assert self._owner is not None and self._server is not None
        assert isinstance(service.backend, RoutableBackend)  # checked by _find_server
        upstream = service.backend.upstream(self._owner, self._server.name)
        if upstream is None:
            server = service.backend.get_server(self._owner, self._server.name) or self._server
            status = server.status.value
            error = BackendUnavailable(
                f"notebook server {server.name!r} is not running (status: {server.state})"
                + (f": {server.reason}" if server.reason else ""),
                field="name",
            )
            extra: dict[str, Any] = {"status": status, "server_reason": server.reason}
            if server.status == ServerStatus.QUEUED:
                extra |= {"queue_position": server.queue_position, "queue_reason": server.queue_reason}
            self._finish_error(error, extra=extra)
        return upstream

    def _upstream_path(self, upstream: Upstream) -> str | None:
        """The raw (still percent-encoded) request path re-rooted at the child's base_url, with the
        query; None when the request names the server without a trailing slash."""
        prefix = self.base_url.rstrip("/") + f"/{ROUTE_PREFIX}/"
        raw = self.request.path
        tail = raw[len(prefix) :] if raw.startswith(prefix) else raw.split(f"/{ROUTE_PREFIX}/", 1)[-1]
        parts = tail.split("/", 2)
        if len(parts) < 3:
            return None
        path = upstream.base_url.rstrip("/") + "/" + parts[2]
        query = forwarded_query(self.request.query)
        return path + (f"?{query}" if query else "")

    def _private_cookies(self) -> set[str]:
        """The main server's own cookies: the caller's session and XSRF token stay here."""
        names = {"_xsrf"}
        with contextlib.suppress(Exception):  # an identity provider without login cookies
            names.add(self.identity_provider.get_cookie_name(self))
        return names

    def _http_client(self) -> AsyncHTTPClient:
        """One client for all forwarded requests, with room for a busy JupyterLab's parallel calls."""
        client = self.settings.get(HTTP_CLIENT_SETTING)
        if client is None:
            client = AsyncHTTPClient(force_instance=True, max_clients=64)
            self.settings[HTTP_CLIENT_SETTING] = client
        return cast(AsyncHTTPClient, client)

    def _finish_error(
        self, error: CubeError, status: int | None = None, extra: dict[str, Any] | None = None
    ) -> None:
        self.clear()
        self.set_status(status or error.status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({**error.to_dict(), **(extra or {})}))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors are JSON here, as on the workbench's REST API."""
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(error_body(status_code, kwargs.get("exc_info"))))


def _consume_later(future: Any) -> None:
    """Mark a fire-and-forget write as observed: a client that went away is not an error here."""
    if isinstance(future, asyncio.Future):
        future.add_done_callback(lambda done: done.cancelled() or done.exception())

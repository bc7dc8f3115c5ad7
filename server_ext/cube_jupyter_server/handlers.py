"""REST handlers: parse the request, name the caller, call one core function, serialize the answer.

Every handler is a Jupyter `APIHandler`, so Jupyter auth, XSRF and the server's Authorizer apply.
Errors are JSON `{"message", "reason", "field"}` with the status the core chose; those raised before a
handler runs (no identity, XSRF, the Authorizer) carry `message` and `reason` the same way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from http.client import responses
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import httputil, web
from tornado.http1connection import HTTP1Connection

from cube_jupyter.errors import (
    QUOTE_LIMIT,
    BackendUnavailable,
    Conflict,
    CubeError,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    quote,
)
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookServer
from cube_jupyter.safe_text import check_text
from cube_jupyter_server.authorizer import CUBE_RESOURCE
from cube_jupyter_server.json_body import MAX_BODY_BYTES, parse_json_body
from cube_jupyter_server.lifecycle import STARTER_SETTING, BackendStarter

AUTH_RESOURCE = CUBE_RESOURCE
# The `reason` of an error tornado or Jupyter raised, by status: the CubeError names where one exists.
REASONS = {
    error.status: error.reason
    for error in (InvalidInput, Forbidden, NotFound, Conflict, PayloadTooLarge, BackendUnavailable)
}
Method = TypeVar("Method", bound=Callable[..., Awaitable[None]])
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FLAG_YES = ("1", "true", "yes")
FLAG_NO = ("0", "false", "no", "")
# What the bodies read at once may hold together: a few at the limit, so a burst of uploads (even
# unauthenticated ones, refused before a byte is read) cannot take the server's memory.
MAX_READING_BYTES = 4 * MAX_BODY_BYTES


def declared_size(headers: httputil.HTTPHeaders) -> int:
    """The most bytes a request's body can have, from its headers: its Content-Length; a chunked
    body's is unknown, so the limit (tornado cuts it off there); without either there is none."""
    length = headers.get("Content-Length", "")
    if length.isdigit():
        return int(length)
    return MAX_BODY_BYTES if "chunked" in headers.get("Transfer-Encoding", "").lower() else 0


class ReadingBudget:
    """Bytes reserved by the bodies being read now, all handlers together (one event loop: no lock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved = 0

    def reserve(self, size: int) -> bool:
        if self.reserved + size > self.limit:
            return False
        self.reserved += size
        return True

    def release(self, size: int) -> None:
        self.reserved -= size


READING = ReadingBudget(MAX_READING_BYTES)


def cube_endpoint(method: Method) -> Method:
    """Authenticate, authorize, and turn a CubeError into its JSON error response."""

    @web.authenticated
    @authorized
    @functools.wraps(method)
    async def wrapper(self: CubeAPIHandler, *args: Any, **kwargs: Any) -> None:
        try:
            await method(self, *args, **kwargs)
        except CubeError as exc:
            self.set_status(exc.status)
            self.finish(json.dumps(exc.to_dict()))

    return wrapper  # type: ignore[return-value]


@web.stream_request_body
class CubeAPIHandler(APIHandler):
    """The API's base handler. Bodies are streamed in, never buffered by tornado: a request is refused
    before its body is read when its caller is unknown, it declares more than MAX_BODY_BYTES, or the
    bodies being read at once already hold MAX_READING_BYTES; no connection can make the server hold
    more than its own limit."""

    auth_resource = AUTH_RESOURCE
    _body: bytearray
    _reserved = 0

    async def prepare(self) -> None:  # type: ignore[override]
        await super().prepare()  # the caller (identity provider), XSRF, the origin
        self._body = bytearray()
        if self.request.method not in BODY_METHODS:
            return
        if self.current_user is None:
            raise web.HTTPError(403, "not authenticated")
        size = declared_size(self.request.headers)
        if size > MAX_BODY_BYTES:
            message = f"request body is {size} bytes; the limit is {MAX_BODY_BYTES} bytes"
            raise FieldError("body", message, 413)
        if not READING.reserve(size):
            raise FieldError("body", "too many request bodies are being read at once; try again shortly", 503)
        self._reserved = size
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):  # a chunked body is cut off at the limit
            connection.set_max_body_size(MAX_BODY_BYTES)

    def data_received(self, chunk: bytes) -> None:
        # tornado reads no more than Content-Length, and cuts a chunked body at max_body_size.
        self._body += chunk

    def on_finish(self) -> None:
        self._release()

    def on_connection_close(self) -> None:
        super().on_connection_close()
        self._release()  # a client gone mid-body never finishes its request

    def _release(self) -> None:
        READING.release(self._reserved)
        self._reserved = 0

    @property
    def notebooks(self) -> NotebookService:
        """The notebook service; BackendUnavailable (503) until its backend has started."""
        starter: BackendStarter | None = self.settings.get(STARTER_SETTING)
        if starter is not None:
            starter.require_ready()
        service: NotebookService = self.settings["cube_notebooks"]
        return service

    @property
    def caller(self) -> str:
        name = self.settings["cube_caller"](self)
        if name is None:
            raise web.HTTPError(403, "not authenticated")
        return str(name)

    def json_body(self) -> Any:
        return parse_json_body(bytes(self._body))

    def flag_param(self, name: str) -> bool:
        """A yes/no query parameter (`?all=1`): absent, '', 0, false or no is no; 1, true or yes is yes, in
        any case; anything else is a 400 naming it, not a quiet no."""
        text = self.get_query_argument(name, "").strip().lower()
        if text in FLAG_YES or text in FLAG_NO:
            return text in FLAG_YES
        raise InvalidInput(f"{name} must be 1, true, yes, 0, false or no; got {quote(text)}", field=name)

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """Path and query parameters as text the API takes: not UTF-8 (tornado's own 400 names no
        field) or holding a NUL (which tornado would quietly turn into a space) is a 400 naming it."""
        field = (name or "path")[:QUOTE_LIMIT]
        try:
            return check_text(value.decode("utf-8"), field)
        except UnicodeDecodeError:
            raise FieldError(field, f"{field} is not UTF-8 text") from None
        except InvalidInput as exc:
            raise FieldError(field, exc.message) from None

    def write_json(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def serialize(self, server: NotebookServer) -> dict[str, Any]:
        return self.notebooks.view(self.caller, server)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors raised outside the handler (no identity, XSRF, the Authorizer) in the API's
        `{"message", "reason"}` form rather than Jupyter's `{"message", "reason": null}`."""
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(error_body(status_code, kwargs.get("exc_info"))))


class FieldError(web.HTTPError):
    """A request refused before its handler runs, naming the field: a path or query parameter
    tornado could not decode, a body refused before it is read."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(status, "%s", message)
        self.field = field


def error_body(status_code: int, exc_info: Any = None) -> dict[str, str]:
    """`{"message", "reason"}` (and `field`, when known) for an error tornado or Jupyter raised;
    never a traceback."""
    exc = exc_info[1] if exc_info else None
    message = responses.get(status_code, "Unknown HTTP Error")
    if isinstance(exc, web.HTTPError) and exc.log_message:
        message = exc.log_message % exc.args if exc.args else exc.log_message
    reason = REASONS.get(status_code) or responses.get(status_code, "Error").replace(" ", "")
    body = {"message": message, "reason": reason}
    if isinstance(exc, FieldError):
        body["field"] = exc.field
    return body


class ProfilesHandler(CubeAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        self.caller  # noqa: B018  - anonymous callers get 403 before seeing the offer
        service: NotebookService = self.settings["cube_notebooks"]  # needs no started backend
        self.write_json({"profiles": service.profiles()})


class NotebooksHandler(CubeAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        caller = self.caller
        all_users = self.flag_param("all")
        servers = self.notebooks.list_servers(caller, self.get_query_argument("user", None), all_users)
        self.write_json(
            {
                "user": caller,
                "is_admin": self.notebooks.settings.is_admin(caller),
                "notebooks": [self.serialize(s) for s in servers],
            }
        )

    @cube_endpoint
    async def post(self) -> None:
        server = await self.notebooks.create(
            self.caller, self.json_body(), self.get_query_argument("user", None)
        )
        self.write_json(self.serialize(server), status=201)


class NotebookHandler(CubeAPIHandler):
    @cube_endpoint
    async def get(self, name: str) -> None:
        server = self.notebooks.get(self.caller, name, self.get_query_argument("user", None))
        self.write_json(self.serialize(server))

    @cube_endpoint
    async def patch(self, name: str) -> None:
        body = self.json_body()
        if not isinstance(body, dict) or set(body) != {"stopped"}:
            raise InvalidInput('request body must be {"stopped": true|false}', field="stopped")
        server = await self.notebooks.set_stopped(
            self.caller, name, body["stopped"], self.get_query_argument("user", None)
        )
        self.write_json(self.serialize(server))

    @cube_endpoint
    async def delete(self, name: str) -> None:
        await self.notebooks.delete(self.caller, name, self.get_query_argument("user", None))
        self.set_status(204)
        self.finish()


API_PREFIX = "/cube/api/v1"
HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (rf"{API_PREFIX}/profiles", ProfilesHandler),
    (rf"{API_PREFIX}/notebooks", NotebooksHandler),
    (rf"{API_PREFIX}/notebooks/(?P<name>[^/]+)", NotebookHandler),
]

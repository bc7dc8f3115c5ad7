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
from tornado import web

from cube_jupyter.errors import (
    QUOTE_LIMIT,
    BackendUnavailable,
    Conflict,
    CubeError,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
)
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookServer
from cube_jupyter.safe_text import check_text
from cube_jupyter_server.authorizer import CUBE_RESOURCE
from cube_jupyter_server.json_body import parse_json_body
from cube_jupyter_server.lifecycle import STARTER_SETTING, BackendStarter

AUTH_RESOURCE = CUBE_RESOURCE
# The `reason` of an error tornado or Jupyter raised, by status: the CubeError names where one exists.
REASONS = {
    error.status: error.reason
    for error in (InvalidInput, Forbidden, NotFound, Conflict, PayloadTooLarge, BackendUnavailable)
}
Method = TypeVar("Method", bound=Callable[..., Awaitable[None]])


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


class CubeAPIHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

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
        return parse_json_body(self.request.body)

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """Path and query parameters as text the API takes: not UTF-8 (tornado's own 400 names no
        field) or holding a NUL (which tornado would quietly turn into a space) is a 400 naming it."""
        field = (name or "path")[:QUOTE_LIMIT]
        try:
            return check_text(value.decode("utf-8"), field)
        except UnicodeDecodeError:
            raise ParameterError(field, f"{field} is not UTF-8 text") from None
        except InvalidInput as exc:
            raise ParameterError(field, exc.message) from None

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


class ParameterError(web.HTTPError):
    """A path or query parameter refused while tornado decodes it, before the handler runs."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(400, "%s", message)
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
    if isinstance(exc, ParameterError):
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
        all_users = self.get_query_argument("all", "") in ("1", "true", "yes")
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

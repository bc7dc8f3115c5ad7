"""REST handlers: parse the request, name the caller, call one core function, serialize the answer.

Every handler is a Jupyter `APIHandler`, so Jupyter auth, XSRF and the server's Authorizer apply.
Errors are JSON `{"message", "reason", "field"}` with the status the core chose.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from cube_jupyter.errors import CubeError, InvalidInput
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import NotebookServer

AUTH_RESOURCE = "cube"
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
        service: NotebookService = self.settings["cube_notebooks"]
        return service

    @property
    def caller(self) -> str:
        name = self.settings["cube_caller"](self)
        if name is None:
            raise web.HTTPError(403, "not authenticated")
        return str(name)

    def json_body(self) -> Any:
        try:
            return json.loads(self.request.body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"request body is not valid JSON: {exc}", field="body") from None

    def write_json(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def serialize(self, server: NotebookServer) -> dict[str, Any]:
        return server.to_dict()


class ProfilesHandler(CubeAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        self.caller  # noqa: B018  - anonymous callers get 403 before seeing the offer
        self.write_json({"profiles": self.notebooks.profiles()})


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

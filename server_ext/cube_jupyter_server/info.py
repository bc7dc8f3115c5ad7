"""What this server is: the central workbench or a user server, whose, and which features it serves.

    GET /cube/api/v1/info    {role, user, backend, features, workbench_url}

The Lab extension asks once per page and adds only the panels whose feature is listed, so a user
server (which has no spawner) never asks for what it does not serve.
"""

from __future__ import annotations

from typing import Any

from tornado import web

from cube_jupyter.config import Settings
from cube_jupyter.errors import NotFound
from cube_jupyter_server.handlers import API_PREFIX, CubeAPIHandler, cube_endpoint

INFO_SETTING = "cube_info"
USER_FEATURES = ("pipelines", "jobs", "gpu")
WORKBENCH_FEATURES = ("notebooks", "schedules", *USER_FEATURES)


def server_info(settings: Settings) -> dict[str, Any]:
    """The parts of the answer that do not depend on the caller."""
    workbench = settings.workbench
    return {
        "role": workbench.role,
        "backend": workbench.backend,
        "features": list(USER_FEATURES if settings.user_server else WORKBENCH_FEATURES),
        "workbench_url": settings.workbench_url or None,
    }


class InfoHandler(CubeAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        caller = self.caller
        settings: Settings = self.settings["cube_settings"]
        self.write_json(
            {**self.settings[INFO_SETTING], "user": caller, "is_admin": settings.is_admin(caller)}
        )


class NotServedHandler(CubeAPIHandler):
    """Any other path under the API: a JSON 404 that says why (a user server spawns no servers)."""

    @cube_endpoint
    async def get(self, path: str) -> None:
        self.caller  # noqa: B018  - anonymous callers get 403
        settings: Settings = self.settings["cube_settings"]
        feature = path.split("/", 1)[0]
        if settings.user_server and feature in ("notebooks", "profiles", "schedules"):
            where = settings.workbench_url or "the workbench"
            managed = "schedules" if feature == "schedules" else "notebook servers"
            message = (
                f"{feature} are not served here: this is a notebook server of "
                f"{settings.workbench.default_user!r}; {managed} are managed at {where}"
            )
        else:
            message = f"no such API: /cube/api/v1/{path}"
        raise NotFound(message, field="path")

    post = patch = put = delete = get


INFO_HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [(rf"{API_PREFIX}/info", InfoHandler)]
# Registered after every other handler of the API.
NOT_SERVED_HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (rf"{API_PREFIX}/(?P<path>.*)", NotServedHandler)
]

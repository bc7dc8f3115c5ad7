"""REST handlers of schedules: parse the request, name the caller, call `ScheduleService`.

    GET|POST          /cube/api/v1/schedules                    the caller's schedules | save one
    GET               /cube/api/v1/schedules/preview?cron=&timezone=&count=   next fire times, in words
    GET|PATCH|DELETE  /cube/api/v1/schedules/{name}             one schedule | edit it | delete it
    POST              /cube/api/v1/schedules/{name}/run         a run now (logical time: now)
    POST              /cube/api/v1/schedules/{name}/backfill    {start, end, parallel, dry_run, rerun}
    GET               /cube/api/v1/schedules/{name}/runs        its runs by logical time, newest first

Served by the central workbench only, where the scheduler runs (a user server says where to go).
Admins may name another user with `?user=` (and list everyone's with `?all=1`).
"""

from __future__ import annotations

import re

from tornado import web

from cube_jupyter.errors import InvalidInput
from cube_jupyter.schedules.service import ScheduleService
from cube_jupyter_server.handlers import API_PREFIX, CubeAPIHandler, cube_endpoint

MAX_RUNS = 2000
PREVIEW_ARGUMENTS = ("cron", "interval_seconds", "timezone", "count", "start")


class ScheduleAPIHandler(CubeAPIHandler):
    @property
    def schedules(self) -> ScheduleService:
        service: ScheduleService = self.settings["cube_schedules"]
        return service

    @property
    def user_param(self) -> str | None:
        return self.get_query_argument("user", None)


class SchedulesHandler(ScheduleAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        caller = self.caller
        listed = self.schedules.list(caller, self.user_param, all_users=self.flag_param("all"))
        self.write_json({"user": caller, "schedules": listed})

    @cube_endpoint
    async def post(self) -> None:
        schedule = await self.schedules.create(self.caller, self.json_body(), self.user_param)
        self.write_json(self.schedules.view(schedule), status=201)


class PreviewHandler(ScheduleAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        self.caller  # noqa: B018  - anonymous callers get 403
        # Only the preview's own arguments: a browser client adds a cache-busting one to each GET.
        query = {
            name: self.get_query_argument(name)
            for name in PREVIEW_ARGUMENTS
            if name in self.request.query_arguments
        }
        self.write_json(self.schedules.preview(query))


class ScheduleHandler(ScheduleAPIHandler):
    @cube_endpoint
    async def get(self, name: str) -> None:
        self.write_json(self.schedules.view(self.schedules.get(self.caller, name, self.user_param)))

    @cube_endpoint
    async def patch(self, name: str) -> None:
        schedule = await self.schedules.patch(self.caller, name, self.json_body(), self.user_param)
        self.write_json(self.schedules.view(schedule))

    @cube_endpoint
    async def delete(self, name: str) -> None:
        await self.schedules.delete(self.caller, name, self.user_param)
        self.set_status(204)
        self.finish()


class RunNowHandler(ScheduleAPIHandler):
    @cube_endpoint
    async def post(self, name: str) -> None:
        if self.json_body() not in (None, {}):
            raise InvalidInput("run now takes no options: send no body", field="body")
        slot = self.schedules.run_now(self.caller, name, self.user_param)
        self.write_json(slot.to_dict(), status=201)


class BackfillHandler(ScheduleAPIHandler):
    @cube_endpoint
    async def post(self, name: str) -> None:
        result = self.schedules.backfill(self.caller, name, self.json_body(), self.user_param)
        self.write_json(result, status=202 if "batch" in result else 200)  # 202: runs were queued


class ScheduleRunsHandler(ScheduleAPIHandler):
    @cube_endpoint
    async def get(self, name: str) -> None:
        text = self.get_query_argument("limit", "500")
        if not re.fullmatch(r"[0-9]{1,4}", text) or not 1 <= int(text) <= MAX_RUNS:
            raise InvalidInput(
                f"limit must be a whole number from 1 to {MAX_RUNS}, got {text!r}", field="limit"
            )
        slots = self.schedules.runs(self.caller, name, self.user_param, int(text))
        self.write_json({"name": name, "runs": [slot.to_dict() for slot in slots]})


SCHEDULES = f"{API_PREFIX}/schedules"
SCHEDULE_HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (rf"{SCHEDULES}", SchedulesHandler),
    (rf"{SCHEDULES}/preview", PreviewHandler),
    (rf"{SCHEDULES}/(?P<name>[^/]+)", ScheduleHandler),
    (rf"{SCHEDULES}/(?P<name>[^/]+)/run", RunNowHandler),
    (rf"{SCHEDULES}/(?P<name>[^/]+)/backfill", BackfillHandler),
    (rf"{SCHEDULES}/(?P<name>[^/]+)/runs", ScheduleRunsHandler),
]

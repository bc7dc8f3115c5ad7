"""REST handlers of notebook pipelines: parse the request, name the caller, call `PipelineService`.

    GET         /cube/api/v1/pipelines/config                 which run targets this server offers
    POST        /cube/api/v1/pipelines/graph                  {path} or {path, notebook}: steps, edges
    GET|POST    /cube/api/v1/pipelines/runs                   the caller's runs | start one
    GET|DELETE  /cube/api/v1/pipelines/runs/{id}              one run with its steps | cancel it
    POST        /cube/api/v1/pipelines/runs/{id}/resume       run a failed or interrupted run on
    GET         /cube/api/v1/pipelines/runs/{id}/steps/{step}/notebook   the executed step notebook

`graph` takes the notebook's unsaved content as `notebook` (nbformat JSON) so the Lab panel can show
the graph of what is on screen; `path` then only names it. A run takes it too, so the panel runs what
is on screen without saving it: `path` must then still be the caller's notebook (the steps run in its
folder), and the file is left as it is.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tornado import web

from cube_jupyter.errors import InvalidInput
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter.pipelines.targets import RunRequest
from cube_jupyter_server.handlers import API_PREFIX, CubeAPIHandler, cube_endpoint


class PipelineAPIHandler(CubeAPIHandler):
    @property
    def pipelines(self) -> PipelineService:
        service: PipelineService = self.settings["cube_pipelines"]
        return service

    def json_object(self, allowed: frozenset[str]) -> dict[str, Any]:
        """The request body as a JSON object with only the `allowed` keys."""
        body = self.json_body()
        if not isinstance(body, dict):
            raise InvalidInput("request body must be a JSON object", field="body")
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise InvalidInput(f"unknown field {unknown[0]!r}", field=unknown[0])
        return body


class PipelineConfigHandler(PipelineAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        self.caller  # noqa: B018  - anonymous callers get 403
        self.write_json(self.pipelines.config())


class GraphHandler(PipelineAPIHandler):
    @cube_endpoint
    async def post(self) -> None:
        caller = self.caller
        body = self.json_object(frozenset({"path", "notebook"}))
        if "notebook" in body:
            pipeline = self.pipelines.graph_of_content(caller, body.get("path"), body["notebook"])
        else:
            pipeline = self.pipelines.graph(caller, body.get("path"))
        self.write_json(pipeline.to_dict())


class RunsHandler(PipelineAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        caller = self.caller
        runs = self.pipelines.list_runs(caller)
        self.write_json({"user": caller, "runs": [run.to_dict() for run in runs]})

    @cube_endpoint
    async def post(self) -> None:
        caller = self.caller
        request = RunRequest.from_dict(self.json_body(), self.pipelines.target_names())
        run = await self.pipelines.start_run(caller, request)
        self.write_json(run.to_dict(), status=201)


class RunHandler(PipelineAPIHandler):
    @cube_endpoint
    async def get(self, run_id: str) -> None:
        self.write_json(self.pipelines.get_run(self.caller, run_id).to_dict())

    @cube_endpoint
    async def delete(self, run_id: str) -> None:
        run = await self.pipelines.cancel(self.caller, run_id)
        self.write_json(run.to_dict())


class ResumeHandler(PipelineAPIHandler):
    @cube_endpoint
    async def post(self, run_id: str) -> None:
        if self.json_body() not in (None, {}):
            raise InvalidInput(
                "a resume takes no options (it runs as the run started): send no body", field="body"
            )
        run = await self.pipelines.resume_run(self.caller, run_id)
        self.write_json(run.to_dict())


class StepNotebookHandler(PipelineAPIHandler):
    @cube_endpoint
    async def get(self, run_id: str, step: str) -> None:
        # The store may be S3: read it off the event loop.
        notebook = await asyncio.to_thread(self.pipelines.executed_notebook, self.caller, run_id, step)
        self.write_json(notebook)


PIPELINES = f"{API_PREFIX}/pipelines"
PIPELINE_HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (rf"{PIPELINES}/config", PipelineConfigHandler),
    (rf"{PIPELINES}/graph", GraphHandler),
    (rf"{PIPELINES}/runs", RunsHandler),
    (rf"{PIPELINES}/runs/(?P<run_id>[^/]+)", RunHandler),
    (rf"{PIPELINES}/runs/(?P<run_id>[^/]+)/resume", ResumeHandler),
    (rf"{PIPELINES}/runs/(?P<run_id>[^/]+)/steps/(?P<step>[^/]+)/notebook", StepNotebookHandler),
]

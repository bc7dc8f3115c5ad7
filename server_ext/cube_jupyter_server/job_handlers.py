"""REST handlers of training, tuning and serving jobs: parse the request, name the caller, call `JobService`.

    GET|POST    /cube/api/v1/jobs[?kind=training|tuning|serving]   the caller's jobs | submit {kind, spec}
    GET         /cube/api/v1/jobs/config                            what the forms offer, what runs here
    GET|DELETE  /cube/api/v1/jobs/{name}                            one job with its replicas | delete it
    GET         /cube/api/v1/jobs/{name}/logs?replica=worker-0&follow=1&tail=N   text/plain, streamed
    GET         /cube/api/v1/jobs/specs/file?path=P                  a YAML spec file as {path, kind, spec}
    POST        /cube/api/v1/jobs/specs/yaml                        {kind, spec} rendered as {kind, yaml}
    GET         /cube/api/v1/jobs/{name}/history                    a tuning job's optimization history
    POST        /cube/api/v1/jobs/{name}/predict                    {inputs, protocol} to a served model
    GET         /cube/api/v1/queue[?user=U|all=1]                   queued jobs and servers, running jobs

Admins may name another user with `?user=` (and list everyone's with `?all=1`), as for notebooks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tornado import web
from tornado.iostream import StreamClosedError

from cube_jupyter.errors import CubeError, InvalidInput
from cube_jupyter.jobs.service import JobService
from cube_jupyter.jobs.spec_files import render_spec
from cube_jupyter.jobs.vocabulary import form_vocabulary
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter_server.handlers import API_PREFIX, CubeAPIHandler, cube_endpoint


class JobAPIHandler(CubeAPIHandler):
    @property
    def jobs(self) -> JobService:
        service: JobService = self.settings["cube_jobs"]
        service.require_available()
        return service

    @property
    def user_param(self) -> str | None:
        return self.get_query_argument("user", None)


class JobsHandler(JobAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        caller = self.caller
        jobs = self.jobs.list_jobs(
            caller,
            self.user_param,
            all_users=self.flag_param("all"),
            kind=self.get_query_argument("kind", None),
        )
        self.write_json(
            {
                "user": caller,
                "is_admin": self.jobs.settings.is_admin(caller),
                "jobs": [job.to_dict() for job in jobs],
            }
        )

    @cube_endpoint
    async def post(self) -> None:
        job = await self.jobs.submit(self.caller, self.json_body(), self.user_param)
        self.write_json(job.to_dict(), status=201)


class JobsConfigHandler(JobAPIHandler):
    """The forms' vocabulary and what can run here: it needs no started backend, so it also answers
    while jobs are 503 (availability then says the cluster was not asked yet)."""

    @cube_endpoint
    async def get(self) -> None:
        self.caller  # noqa: B018  - anonymous callers get 403
        service: JobService = self.settings["cube_jobs"]
        self.write_json({**form_vocabulary(), "availability": service.availability()})


class JobSpecFileHandler(JobAPIHandler):
    """A job spec file opened into the Jobs panel's form (`?path=` under the caller's root)."""

    @cube_endpoint
    async def get(self) -> None:
        path = self.get_query_argument("path", None)
        if path is None:
            raise InvalidInput("path is required: the spec file to read", field="path")
        self.write_json(self.jobs.read_spec_file(self.caller, path))


class JobSpecYamlHandler(JobAPIHandler):
    """A form's spec as the YAML a spec file holds; the panel saves it through the Contents API."""

    @cube_endpoint
    async def post(self) -> None:
        self.caller  # noqa: B018  - anonymous callers get 403
        self.write_json(render_spec(self.json_body()))


class JobHandler(JobAPIHandler):
    @cube_endpoint
    async def get(self, name: str) -> None:
        self.write_json(self.jobs.get(self.caller, name, self.user_param).to_dict())

    @cube_endpoint
    async def delete(self, name: str) -> None:
        await self.jobs.delete(self.caller, name, self.user_param)
        self.set_status(204)
        self.finish()


class JobLogsHandler(JobAPIHandler):
    """Chunked text/plain, flushed as lines arrive; ends when the replica has finished (with
    `follow=1`) or when the client goes away, which also stops reading the log."""

    _gone: asyncio.Event | None = None

    def on_connection_close(self) -> None:
        if self._gone is not None:
            self._gone.set()

    @cube_endpoint
    async def get(self, name: str) -> None:
        self._gone = asyncio.Event()
        tail_text = self.get_query_argument("tail", None)
        try:
            tail = int(tail_text) if tail_text is not None else None
        except ValueError:
            raise InvalidInput(f"tail must be a whole number, got {tail_text!r}", field="tail") from None
        stream = self.jobs.logs(
            self.caller,
            name,
            self.get_query_argument("replica", None) or None,
            follow=self.flag_param("follow"),
            tail=tail,
            user=self.user_param,
        )
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")  # proxies must not hold lines back
        await self._pump(stream, self._gone)

    async def _pump(self, stream: AsyncIterator[str], gone: asyncio.Event) -> None:
        chunks = stream.__aiter__()
        waiting_gone = asyncio.ensure_future(gone.wait())
        try:
            await self.flush()  # headers now: the client sees the stream open before the first line
            while True:
                next_chunk = asyncio.ensure_future(chunks.__anext__())
                done, _ = await asyncio.wait({next_chunk, waiting_gone}, return_when=asyncio.FIRST_COMPLETED)
                if next_chunk not in done:
                    next_chunk.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await next_chunk
                    return
                try:
                    chunk = next_chunk.result()
                except StopAsyncIteration:
                    break
                except CubeError as exc:  # the status line is sent: say it in the text, and end
                    self.write(f"\n[cube-jupyter: the log stream ended: {exc.message}]\n")
                    break
                self.write(chunk)
                await self.flush()
            self.finish()
        except StreamClosedError:
            return
        finally:
            waiting_gone.cancel()
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


class JobHistoryHandler(JobAPIHandler):
    @cube_endpoint
    async def get(self, name: str) -> None:
        self.write_json(self.jobs.history(self.caller, name, self.user_param))


class JobPredictHandler(JobAPIHandler):
    @cube_endpoint
    async def post(self, name: str) -> None:
        answer: Any = await self.jobs.predict(self.caller, name, self.json_body(), self.user_param)
        self.write_json(answer)


class QueueHandler(JobAPIHandler):
    """The caller's queued jobs (in queue order, each with its place and reason) and running ones,
    and their notebook servers waiting in the same queue (the machine's, on the local backend): the
    two services side by side, neither reading the other; admins pass `?user=` or `?all=1`."""

    @cube_endpoint
    async def get(self) -> None:
        caller = self.caller
        all_users = self.flag_param("all")
        jobs = self.jobs.queue(caller, self.user_param, all_users=all_users)
        notebooks: NotebookService | None = self.settings.get("cube_notebooks")  # none in a user server
        servers = notebooks.queued(caller, self.user_param, all_users) if notebooks is not None else []
        self.write_json({"user": caller, **jobs, "servers": servers})


JOBS = f"{API_PREFIX}/jobs"
JOB_HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [
    (rf"{JOBS}", JobsHandler),
    (rf"{JOBS}/config", JobsConfigHandler),  # before {name}: `config` is no job's name
    (rf"{JOBS}/specs/file", JobSpecFileHandler),  # two segments: no job's route
    (rf"{JOBS}/specs/yaml", JobSpecYamlHandler),
    (rf"{JOBS}/(?P<name>[^/]+)", JobHandler),
    (rf"{JOBS}/(?P<name>[^/]+)/logs", JobLogsHandler),
    (rf"{JOBS}/(?P<name>[^/]+)/history", JobHistoryHandler),
    (rf"{JOBS}/(?P<name>[^/]+)/predict", JobPredictHandler),
    (rf"{API_PREFIX}/queue", QueueHandler),
]

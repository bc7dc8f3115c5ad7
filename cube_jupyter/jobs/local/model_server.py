"""The local model server: one process that answers KServe's V1 and V2 (Open Inference) REST protocols.

    python -m cube_jupyter.jobs.local.model_server --config /state/serving/alice/iris/server-2.json

The config names the model, its revisions (format, model file, share of traffic: a canary rollout
sends `traffic` percent of requests to the latest revision and the rest to the previous one) and a
file to write the bound port to once every revision is loaded, which is when the server is ready.

V1:  GET /v1/models/{name}            → {"name", "ready"}
     POST /v1/models/{name}:predict   {"instances": [...]} → {"predictions": [...]}
V2:  GET /v2/health/live|ready, GET /v2/models/{name}[/ready]
     POST /v2/models/{name}/infer     {"inputs": [{name, shape, datatype, data}]} → {"outputs": [...]}

The `kserve` package's ModelServer would pin pandas<3 and psutil<6 below this project's versions, so
this is a small tornado server instead; its routes, bodies and error shapes follow KServe's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tornado.web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from cube_jupyter.jobs.local.model_formats import Predictor, load_predictor

LOG = logging.getLogger("cube_jupyter.model_server")
SERVER_NAME = "cube-jupyter-model-server"

# V2 datatypes ↔ numpy dtype names.
V2_TO_NUMPY = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BYTES": "object",
}
NUMPY_TO_V2 = {v: k for k, v in V2_TO_NUMPY.items()}


class RequestError(tornado.web.HTTPError):
    """A request the model cannot answer (400 bad body, 404 no such model, 503 not ready, 500 the model
    raised); the body is KServe's `{"error": message}`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(status)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass
class Revision:
    number: int
    model_format: str
    path: Path
    traffic: int  # percent of requests
    predictor: Predictor | None = None


class ModelRouter:
    """The served model: its revisions and the traffic split between them."""

    def __init__(self, name: str, revisions: list[Revision]) -> None:
        self.name = name
        self.revisions = revisions
        self.ready = False
        self._random = random.Random()

    def load(self) -> None:
        for revision in self.revisions:
            started = time.monotonic()
            revision.predictor = load_predictor(revision.model_format, revision.path)
            LOG.info(
                "loaded revision %d (%s) from %s in %.2fs",
                revision.number,
                revision.model_format,
                revision.path,
                time.monotonic() - started,
            )
        self.ready = True

    def pick(self) -> Revision:
        """A revision drawn by traffic share."""
        live = [r for r in self.revisions if r.traffic > 0]
        point = self._random.uniform(0, sum(r.traffic for r in live))
        for revision in live:
            point -= revision.traffic
            if point <= 0:
                return revision
        return live[-1]

    def check(self, name: str) -> None:
        if name != self.name:
            raise RequestError(f"Model with name {name} does not exist.", 404)


def v2_input_array(raw: Any, index: int) -> tuple[str, Any]:
    """One V2 input tensor → (name, numpy array of its shape and datatype)."""
    import numpy as np

    where = f"inputs[{index}]"
    if not isinstance(raw, dict):
        raise RequestError(f"{where} must be an object with name, shape, datatype and data")
    missing = [key for key in ("name", "shape", "datatype", "data") if key not in raw]
    if missing:
        raise RequestError(f"{where} is missing {', '.join(missing)}")
    datatype = raw["datatype"]
    if datatype not in V2_TO_NUMPY:
        raise RequestError(f"{where}.datatype {datatype!r} is not one of {', '.join(V2_TO_NUMPY)}")
    shape = raw["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise RequestError(f"{where}.shape must be a list of non-negative integers")
    try:
        array = np.asarray(raw["data"], dtype=V2_TO_NUMPY[datatype]).reshape(shape)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"{where}: data does not fit shape {shape} as {datatype}: {exc}") from None
    return str(raw["name"]), array


def v2_output(name: str, array: Any) -> dict[str, Any]:
    import numpy as np

    array = np.asarray(array)
    kind = array.dtype.name if array.dtype.kind != "U" else "object"
    datatype = NUMPY_TO_V2.get(kind, "BYTES" if array.dtype.kind in "OSU" else "FP64")
    if datatype == "FP64" and array.dtype.name not in NUMPY_TO_V2:
        array = array.astype("float64")
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": array.ravel().tolist()}


class BaseHandler(tornado.web.RequestHandler):
    def initialize(self, router: ModelRouter, pool: ThreadPoolExecutor) -> None:
        self.router = router
        self.pool = pool

    def write_json(self, body: dict[str, Any], status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = exc.message if isinstance(exc, RequestError) else self._reason
        self.write_json({"error": message}, status_code)

    def json_body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.request.body or b"null")
        except ValueError as exc:
            raise RequestError(f"Unrecognized request format: {exc}") from None
        if not isinstance(body, dict):
            raise RequestError("Unrecognized request format: the body must be a JSON object")
        return body

    async def run_model(self, inputs: list[Any]) -> tuple[Revision, list[tuple[str, Any]]]:
        if not self.router.ready:
            raise RequestError(f"Model with name {self.router.name} is not ready.", 503)
        revision = self.router.pick()
        predictor = revision.predictor
        assert predictor is not None
        loop = asyncio.get_running_loop()
        try:
            outputs = await loop.run_in_executor(self.pool, predictor.predict, inputs)
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise RequestError(
                f"the model could not predict on this input: {type(exc).__name__}: {exc}"
            ) from None
        except Exception as exc:
            LOG.exception("revision %d failed on a request", revision.number)
            raise RequestError(f"the model failed: {type(exc).__name__}: {exc}", 500) from None
        return revision, outputs


class LiveHandler(BaseHandler):
    def get(self) -> None:
        self.write_json({"status": "alive"})


class V2LiveHandler(BaseHandler):
    def get(self) -> None:
        self.write_json({"live": True})


class V2ReadyHandler(BaseHandler):
    def get(self) -> None:
        self.write_json({"ready": self.router.ready}, 200 if self.router.ready else 503)


class V2ServerHandler(BaseHandler):
    def get(self) -> None:
        self.write_json({"name": SERVER_NAME, "version": "1", "extensions": []})


class V1ListHandler(BaseHandler):
    def get(self) -> None:
        self.write_json({"models": [self.router.name]})


class V1ModelHandler(BaseHandler):
    def get(self, name: str) -> None:
        self.router.check(name)
        self.write_json({"name": name, "ready": self.router.ready}, 200 if self.router.ready else 503)


class V1PredictHandler(BaseHandler):
    async def post(self, name: str) -> None:
        import numpy as np

        self.router.check(name)
        body = self.json_body()
        instances = body.get("instances", body.get("inputs"))
        if not isinstance(instances, list):
            raise RequestError('Expected "instances" to be a list')
        try:
            array = np.asarray(instances)
        except ValueError as exc:
            raise RequestError(f"instances are not a regular array: {exc}") from None
        _revision, outputs = await self.run_model([array])
        self.write_json({"predictions": np.asarray(outputs[0][1]).tolist()})


class V2ModelHandler(BaseHandler):
    def get(self, name: str, _version: str | None = None) -> None:
        self.router.check(name)
        revision = self.router.revisions[0]
        inputs = revision.predictor.input_names if revision.predictor else ()
        self.write_json(
            {
                "name": name,
                "versions": [str(r.number) for r in self.router.revisions],
                "platform": revision.model_format,
                "inputs": [{"name": n, "datatype": "FP32", "shape": [-1, -1]} for n in inputs],
                "outputs": [],
            }
        )


class V2ModelReadyHandler(BaseHandler):
    def get(self, name: str, _version: str | None = None) -> None:
        self.router.check(name)
        self.write_json({"name": name, "ready": self.router.ready}, 200 if self.router.ready else 503)


class V2InferHandler(BaseHandler):
    async def post(self, name: str, _version: str | None = None) -> None:
        self.router.check(name)
        body = self.json_body()
        raw_inputs = body.get("inputs")
        if not isinstance(raw_inputs, list) or not raw_inputs:
            raise RequestError('Expected "inputs" to be a non-empty list of tensors')
        named = [v2_input_array(raw, i) for i, raw in enumerate(raw_inputs)]
        revision = self.router.revisions[0]
        wanted = revision.predictor.input_names if revision.predictor else ()
        by_name = dict(named)
        if len(wanted) > 1 and set(wanted) <= set(by_name):
            arrays = [by_name[n] for n in wanted]  # multi-input models take tensors by name
        else:
            arrays = [array for _, array in named]
        used, outputs = await self.run_model(arrays)
        requested = body.get("outputs")
        result = [v2_output(n, a) for n, a in outputs]
        if isinstance(requested, list) and requested:
            names = {o.get("name") for o in requested if isinstance(o, dict)}
            result = [o for o in result if o["name"] in names] or result
        response: dict[str, Any] = {"model_name": name, "model_version": str(used.number), "outputs": result}
        if "id" in body:
            response["id"] = body["id"]
        self.write_json(response)


def make_app(router: ModelRouter, pool: ThreadPoolExecutor) -> tornado.web.Application:
    args = {"router": router, "pool": pool}
    model = r"([A-Za-z0-9_.-]+)"
    version = rf"{model}/versions/([A-Za-z0-9_.-]+)"
    v2_model = {"": V2ModelHandler, "/ready": V2ModelReadyHandler, "/infer": V2InferHandler}
    # Each v2 model route, for the model and for one of its versions.
    v2_model_routes = [
        (rf"/v2/models/{name}{path}", handler, args)
        for path, handler in v2_model.items()
        for name in (model, version)
    ]
    return tornado.web.Application(
        [
            (r"/", LiveHandler, args),
            (r"/v1/models", V1ListHandler, args),
            (rf"/v1/models/{model}", V1ModelHandler, args),
            (rf"/v1/models/{model}:predict", V1PredictHandler, args),
            (r"/v2", V2ServerHandler, args),
            (r"/v2/health/live", V2LiveHandler, args),
            (r"/v2/health/ready", V2ReadyHandler, args),
            *v2_model_routes,
        ],
        default_handler_class=NotFoundHandler,
        default_handler_args=args,
    )


class NotFoundHandler(BaseHandler):
    def prepare(self) -> None:
        raise RequestError(f"no route {self.request.method} {self.request.path}", 404)


def read_config(path: Path) -> tuple[str, list[Revision], Path]:
    raw = json.loads(path.read_text())
    revisions = [
        Revision(int(r["revision"]), str(r["format"]), Path(r["path"]), int(r["traffic"]))
        for r in raw["revisions"]
    ]
    return str(raw["name"]), revisions, Path(raw["port_file"])


def write_port(port_file: Path, port: int) -> None:
    """Atomically, so the supervisor never reads half a number."""
    partial = port_file.with_suffix(".partial")
    partial.write_text(str(port))
    os.replace(partial, port_file)


async def serve(config: Path) -> None:
    name, revisions, port_file = read_config(config)
    router = ModelRouter(name, revisions)
    router.load()
    pool = ThreadPoolExecutor(1, thread_name_prefix="predict")
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(make_app(router, pool))
    server.add_sockets(sockets)
    port = int(sockets[0].getsockname()[1])
    write_port(port_file, port)
    split = ", ".join(f"revision {r.number}: {r.traffic}%" for r in revisions)
    LOG.info("model %r ready on http://127.0.0.1:%d (%s)", name, port, split)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cube_jupyter.jobs.local.model_server")
    parser.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("tornado.access").setLevel(logging.INFO)
    try:
        asyncio.run(serve(args.config))
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # a model that does not load: the supervisor shows this line
        LOG.error("the model server could not start: %s: %s", type(exc).__name__, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

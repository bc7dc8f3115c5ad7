"""A stand-in for Kubeflow Pipelines' API server (REST v2beta1) on loopback, for the KFP client and target.

It answers in KFP's own shapes, and every body it sends is first read back with the `kfp_server_api`
models (generated from KFP's swagger): a key those models do not know, a value of the wrong type or an
enum value KFP does not have fails the test, so the stand-in cannot drift from KFP. Like KFP in
Kubeflow's multi-user mode it checks who asks on every request (the userid header or a bearer token)
and answers 401 without one, 403 for a namespace the caller may not use. Errors are the swagger's
`googleRpcStatus` (`code`, `message`, `details`).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kfp_server_api
import yaml

EPOCH = "1970-01-01T00:00:00Z"
# grpc codes KFP's errors carry, by HTTP status (grpc-gateway's mapping).
GRPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6, 500: 13}
API = kfp_server_api.ApiClient()


def conform(body: Any, model: str) -> None:
    """`body` reads as KFP's `model` with nothing left over and only KFP's enum values."""
    parsed = API.deserialize(SimpleNamespace(data=json.dumps(body)), model)
    _same_keys(body, API.sanitize_for_serialization(parsed), model)
    _known_enums(parsed, model)


def _same_keys(sent: Any, read: Any, where: str) -> None:
    if isinstance(sent, dict):
        assert isinstance(read, dict) and set(sent) == set(read), (
            f"{where}: not in KFP's model: {sorted(set(sent) ^ set(read or {}))}"
        )
        for key, value in sent.items():
            _same_keys(value, read[key], f"{where}.{key}")
    elif isinstance(sent, list):
        assert isinstance(read, list) and len(sent) == len(read), where
        for i, (a, b) in enumerate(zip(sent, read, strict=True)):
            _same_keys(a, b, f"{where}[{i}]")


def _known_enums(obj: Any, where: str) -> None:
    for attr, kind in getattr(obj, "openapi_types", {}).items():
        value = getattr(obj, attr)
        model = getattr(kfp_server_api.models, kind.removeprefix("list[").removesuffix("]"), None)
        if value is None or model is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            if hasattr(model, "allowable_values"):
                assert item in model.allowable_values, f"{where}.{attr}: {item!r} is not a {kind}"
            else:
                _known_enums(item, f"{where}.{attr}")


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class KfpServer:
    """The stand-in's state and its view of who may use which namespace."""

    access: dict[str, set[str]]  # user → namespaces they may use
    userid_header: str = "kubeflow-userid"
    userid_prefix: str = ""
    tokens: dict[str, str] = field(default_factory=dict)  # bearer token → user
    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    recurring: dict[str, dict[str, Any]] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)  # object id → its namespace
    calls: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of each request
    ids: Any = field(default_factory=lambda: itertools.count(1))

    def new_id(self, kind: str) -> str:
        return f"{kind}-{next(self.ids):04d}"

    # -- identity, as KFP's multi-user mode checks it -----------------------------------------------

    def who(self, headers: Any) -> str:
        bearer = headers.get("Authorization", "")
        if bearer.startswith("Bearer ") and bearer[7:] in self.tokens:
            return self.tokens[bearer[7:]]
        header = headers.get(self.userid_header)
        if header and header.startswith(self.userid_prefix):
            return str(header[len(self.userid_prefix) :])
        raise Refused(401, "Unauthenticated: Request header error: there is no user identity header.")

    def check(self, user: str, namespace: str | None) -> None:
        if not namespace or namespace not in self.access.get(user, set()):
            raise Refused(
                403,
                f"PermissionDenied: User '{user}' is not authorized with reason:  (request: "
                f"&ResourceAttributes{{Namespace:{namespace},Verb:...}})",
            )

    # -- test controls -----------------------------------------------------------------------------

    def fire(self, recurring_id: str, scheduled_at: str, state: str = "RUNNING") -> str:
        """A run of a recurring run, as KFP's ScheduledWorkflow controller starts one; its id."""
        recurring = self.recurring[recurring_id]
        run_id = self.new_id("run")
        self.runs[run_id] = {
            "display_name": f"{recurring['display_name']}-{scheduled_at}",
            "experiment_id": recurring["experiment_id"],
            "pipeline_version_reference": recurring["pipeline_version_reference"],
            "runtime_config": recurring["runtime_config"],
            "recurring_run_id": recurring_id,
            "run_id": run_id,
            "state": state,
            "storage_state": "AVAILABLE",
            "created_at": stamp(),
            "scheduled_at": scheduled_at,
            "finished_at": EPOCH,
        }
        self.namespaces[run_id] = recurring["namespace"]
        return run_id

    def set_run(
        self, run_id: str, state: str, tasks: list[dict[str, Any]] | None = None, **more: Any
    ) -> None:
        """Move a run on as KFP's persistence agent would."""
        run = self.runs[run_id]
        run["state"] = state
        if tasks is not None:
            run["run_details"] = {"task_details": tasks}
        run.update(more)


def serve(state: KfpServer) -> tuple[ThreadingHTTPServer, str]:
    """Start the stand-in on a free loopback port; (server, its URL)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def do_DELETE(self) -> None:
            self._answer("DELETE")

        def _answer(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            state.calls.append((method, parts.path))
            try:
                user = state.who(self.headers)
                body, model = route(state, method, parts.path, query, raw, self.headers, user)
                status = 200
            except Refused as exc:
                status, model = exc.status, "GoogleRpcStatus"
                body = {
                    "code": GRPC_CODES[exc.status],
                    "message": exc.message,
                    "details": [],
                }
            conform(body, model)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _upload(raw: bytes, headers: Any) -> str:
    """The `uploadfile` part of a multipart body."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + raw
    )
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "uploadfile":
            return str(part.get_payload(decode=True).decode())
    raise Refused(400, "Invalid input error: no uploadfile")


def _named(objects: dict[str, dict[str, Any]], query: dict[str, str], **match: str) -> list[dict[str, Any]]:
    """Those of `objects` matching `match` and the request's filter (display_name EQUALS)."""
    found = [o for o in objects.values() if all(o.get(k) == v for k, v in match.items())]
    if "filter" in query:
        for predicate in json.loads(query["filter"])["predicates"]:
            assert predicate["operation"] == "EQUALS", predicate
            found = [o for o in found if o.get(predicate["key"]) == predicate["string_value"]]
    return found


def route(
    state: KfpServer, method: str, path: str, query: dict[str, str], raw: bytes, headers: Any, user: str
) -> tuple[dict[str, Any], str]:
    """(body, KFP model) of one call."""
    body = json.loads(raw) if raw and headers.get("Content-Type") == "application/json" else {}
    path = path.removeprefix("/apis/v2beta1")
    if (method, path) == ("POST", "/pipelines/upload"):
        namespace = query.get("namespace")
        state.check(user, namespace)
        if _named(state.pipelines, {}, name=query["name"], namespace=str(namespace)):
            raise Refused(409, f"Already exist error: pipeline {query['name']!r} exists in {namespace}")
        pipeline_id = state.new_id("pipeline")
        pipeline = {
            "pipeline_id": pipeline_id,
            "name": query["name"],
            "display_name": query.get("display_name", query["name"]),
            "namespace": str(namespace),
            "created_at": stamp(),
        }
        state.pipelines[pipeline_id] = pipeline
        _new_version(state, pipeline_id, query["name"], _upload(raw, headers))
        return pipeline, "V2beta1Pipeline"
    if (method, path) == ("POST", "/pipelines/upload_version"):
        pipeline = state.pipelines.get(query.get("pipelineid", ""))
        if pipeline is None:
            raise Refused(404, f"Not found: pipeline {query.get('pipelineid')}")
        state.check(user, pipeline["namespace"])
        if _named(state.versions, {}, pipeline_id=pipeline["pipeline_id"], name=query["name"]):
            raise Refused(409, f"Already exist error: version {query['name']!r}")
        return _new_version(state, pipeline["pipeline_id"], query["name"], _upload(raw, headers)), (
            "V2beta1PipelineVersion"
        )
    if (method, path) == ("GET", "/pipelines"):
        state.check(user, query.get("namespace"))
        found = _named(state.pipelines, query, namespace=query["namespace"])
        return {"pipelines": found, "total_size": len(found)} if found else {}, "V2beta1ListPipelinesResponse"
    if method == "GET" and (m := re.fullmatch(r"/pipelines/([^/]+)/versions", path)):
        pipeline = state.pipelines[m[1]]
        state.check(user, pipeline["namespace"])
        found = _named(state.versions, query, pipeline_id=m[1])
        response = {"pipeline_versions": found, "total_size": len(found)} if found else {}
        return response, "V2beta1ListPipelineVersionsResponse"
    if (method, path) == ("GET", "/experiments"):
        state.check(user, query.get("namespace"))
        found = _named(state.experiments, query, namespace=query["namespace"])
        return {
            "experiments": found,
            "total_size": len(found),
        } if found else {}, "V2beta1ListExperimentsResponse"
    if (method, path) == ("POST", "/experiments"):
        state.check(user, body.get("namespace"))
        experiment_id = state.new_id("experiment")
        experiment = {
            "experiment_id": experiment_id,
            "display_name": body["display_name"],
            "namespace": body["namespace"],
            "created_at": stamp(),
            "storage_state": "AVAILABLE",
        }
        state.experiments[experiment_id] = experiment
        return experiment, "V2beta1Experiment"
    if path == "/runs" or path.startswith("/runs/"):
        return _runs(state, method, path, query, body, user)
    return _recurring(state, method, path, query, body, user)


def _new_version(state: KfpServer, pipeline_id: str, name: str, package: str) -> dict[str, Any]:
    version_id = state.new_id("version")
    version = {
        "pipeline_id": pipeline_id,
        "pipeline_version_id": version_id,
        "name": name,
        "display_name": name,
        "created_at": stamp(),
        "pipeline_spec": next(yaml.safe_load_all(package)),
    }
    state.versions[version_id] = version
    return version


def _create_run(state: KfpServer, user: str, body: dict[str, Any]) -> dict[str, Any]:
    experiment = state.experiments.get(body.get("experiment_id", ""))
    if experiment is None:
        raise Refused(400, "Invalid input error: in multi-user mode a run needs an experiment")
    state.check(user, experiment["namespace"])
    reference = body["pipeline_version_reference"]
    version = state.versions.get(reference["pipeline_version_id"])
    if version is None or version["pipeline_id"] != reference["pipeline_id"]:
        raise Refused(404, f"Not found: pipeline version {reference['pipeline_version_id']}")
    declared = version["pipeline_spec"]["root"].get("inputDefinitions", {}).get("parameters", {})
    unknown = sorted(set(body["runtime_config"].get("parameters", {})) - set(declared))
    if unknown:
        raise Refused(400, f"Invalid input error: unrecognized input parameter {unknown[0]!r}")
    run_id = state.new_id("run")
    run = {
        **body,
        "run_id": run_id,
        "state": "PENDING",
        "storage_state": "AVAILABLE",
        "created_at": stamp(),
        "scheduled_at": stamp(),
        "finished_at": EPOCH,
    }
    state.runs[run_id] = run
    state.namespaces[run_id] = experiment["namespace"]
    return run


def _runs(
    state: KfpServer, method: str, path: str, query: dict[str, str], body: dict[str, Any], user: str
) -> tuple[dict[str, Any], str]:
    if (method, path) == ("POST", "/runs"):
        return _create_run(state, user, body), "V2beta1Run"
    if (method, path) == ("GET", "/runs"):
        return _list_runs(state, user, query), "V2beta1ListRunsResponse"
    m = re.fullmatch(r"/runs/([^/:]+)(:terminate)?", path)
    run = None if m is None else state.runs.get(m[1])
    if m is None or run is None:
        raise Refused(404, f"Not found: Failed to get run: run {path.removeprefix('/runs/')} not found")
    state.check(user, state.namespaces[m[1]])
    if m[2]:
        if run["state"] not in ("SUCCEEDED", "FAILED", "CANCELED"):
            run["state"] = "CANCELING"
        return {}, "object"
    return run, "V2beta1Run"


def _list_runs(state: KfpServer, user: str, query: dict[str, str]) -> dict[str, Any]:
    """The namespace's runs matching the filter (a recurring run's), newest first, one page."""
    state.check(user, query.get("namespace"))
    runs = {r: run for r, run in state.runs.items() if state.namespaces[r] == query["namespace"]}
    assert query.get("sort_by") in (None, "created_at desc"), query
    found = sorted(_named(runs, query), key=lambda r: (r["created_at"], r["run_id"]), reverse=True)
    found = found[: int(query.get("page_size", 20))]
    return {"runs": found, "total_size": len(found)} if found else {}


def _recurring(
    state: KfpServer, method: str, path: str, query: dict[str, str], body: dict[str, Any], user: str
) -> tuple[dict[str, Any], str]:
    if (method, path) == ("POST", "/recurringruns"):
        state.check(user, body.get("namespace"))
        reference = body["pipeline_version_reference"]
        if reference["pipeline_version_id"] not in state.versions:
            raise Refused(404, f"Not found: pipeline version {reference['pipeline_version_id']}")
        recurring_id = state.new_id("recurring")
        recurring = {
            **body,
            "recurring_run_id": recurring_id,
            "status": "ENABLED" if body.get("mode", "ENABLE") == "ENABLE" else "DISABLED",
            "created_at": stamp(),
            "updated_at": stamp(),
        }
        state.recurring[recurring_id] = recurring
        return recurring, "V2beta1RecurringRun"
    if (method, path) == ("GET", "/recurringruns"):
        state.check(user, query.get("namespace"))
        found = _named(state.recurring, query, namespace=query["namespace"])
        return ({"recurringRuns": found, "total_size": len(found)} if found else {}), (
            "V2beta1ListRecurringRunsResponse"
        )
    m = re.fullmatch(r"/recurringruns/([^/:]+)(?::(enable|disable))?", path)
    if m is None or m[1] not in state.recurring:
        raise Refused(404, f"Not found: {method} {path}")
    recurring = state.recurring[m[1]]
    state.check(user, recurring["namespace"])
    if method == "DELETE":
        del state.recurring[m[1]]
        return {}, "object"
    if m[2]:
        recurring["mode"], recurring["status"] = (
            ("ENABLE", "ENABLED") if m[2] == "enable" else ("DISABLE", "DISABLED")
        )
        return {}, "object"
    return recurring, "V2beta1RecurringRun"

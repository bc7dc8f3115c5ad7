"""Served models on this machine: one model server process per model (KServe V1 and V2 REST).

`deploy(spec)` finds the model file (a local path, or an s3:// prefix downloaded into the job's
directory), starts `cube_jupyter.jobs.local.model_server` on a free loopback port, waits until it is
ready and returns the job, Ready with its endpoint, or Failed with the server's log tail. Deploying
a name again rolls out a new revision the way KServe does: with `canary_traffic_percent` the new
revision gets that share of requests and the previous one the rest (a split inside the server);
without it the new revision takes all traffic. The old process is stopped only once the new one is
ready, so the model keeps answering; a new revision that fails leaves the old one serving.

Locally there is one server process whatever min/max_replicas say (no autoscaler); the job's message
says so. Each job lives in `{state_dir}/serving/{user_slug}/{name}/` as `record.json` (rewritten
atomically) plus the server's log, so jobs survive a restart of the workbench, and their processes
keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from cube_jupyter import tracebacks
from cube_jupyter.errors import InvalidInput, NotFound
from cube_jupyter.jobs.local.model_formats import LOCAL_FORMATS, find_model_file
from cube_jupyter.jobs.model import Condition, Job, Replica
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.local import files, processes
from cube_jupyter.local.locks import KeyedLocks
from cube_jupyter.local.records import RecordStore
from cube_jupyter.storage import CubeStorage, open_store

LOG = "server.log"
STOP_GRACE = 5.0  # seconds a model server gets to exit on SIGTERM


@dataclass(frozen=True)
class Revision:
    """One deployed model version: where its file is, and its share of traffic (percent)."""

    number: int
    model_format: str
    storage_uri: str
    path: str  # the local model file
    traffic: int


@dataclass(frozen=True)
class ServingRecord:
    """What `record.json` holds: the job as last seen, plus the process that serves it."""

    user: str
    name: str
    created: float
    spec: dict[str, Any]
    phase: str
    conditions: tuple[Condition, ...] = ()
    message: str | None = None
    revisions: tuple[Revision, ...] = ()
    pid: int | None = None
    marker: str | None = None  # the server's config path, on its command line
    port: int | None = None
    completed: float | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> ServingRecord:
        raw = json.loads(text)
        raw["conditions"] = tuple(Condition(**c) for c in raw.get("conditions", ()))
        raw["revisions"] = tuple(Revision(**r) for r in raw.get("revisions", ()))
        return cls(**raw)


def endpoint_url(port: int, name: str) -> str:
    """KServe's V1 model URL on loopback; the V2 routes live on the same host and port."""
    return f"http://{processes.LOOPBACK}:{port}/v1/models/{name}"


class LocalModelServing:
    """Deploy, read, log and delete locally served models."""

    def __init__(
        self, state_dir: str | Path, *, storage: CubeStorage | None = None, ready_timeout: float = 120.0
    ) -> None:
        self.records = RecordStore(Path(state_dir) / "serving", "served model")
        self.storage = storage
        self.ready_timeout = ready_timeout
        self._locks = KeyedLocks()

    # -- paths and records ----------------------------------------------------------------------------

    def job_dir(self, user: str, name: str) -> Path:
        return self.records.directory(user, name)

    def log_path(self, user: str, name: str) -> Path:
        return self.job_dir(user, name) / LOG

    def _read(self, user: str, name: str) -> ServingRecord | None:
        text = self.records.read(user, name)
        return ServingRecord.from_json(text) if text is not None else None

    def _write(self, record: ServingRecord) -> None:
        self.records.write(record.user, record.name, record.to_json())

    # -- reads -----------------------------------------------------------------------------------------

    def status(self, user: str, name: str) -> Job | None:
        """The job as it is now: a Ready job whose server died is Failed, with the log's last lines."""
        record = self._read(user, name)
        if record is None:
            return None
        if record.phase == "Ready" and self._process(record) is None:
            tail = processes.log_tail(self.log_path(user, name), *tracebacks.LOG_TAIL)
            record = _failed(record, "ServerExited", "the model server exited", tail)
            with contextlib.suppress(OSError):
                self._write(record)
        return self._job(record)

    def list(self, user: str | None = None) -> list[Job]:
        """Jobs of `user` (every user's when None)."""
        return [job for owner, name in self.records.keys(user) if (job := self.status(owner, name))]

    def logs(self, user: str, name: str, tail: int | None = None) -> str:
        """The model server's log (every revision's, each after a separator line)."""
        if self._read(user, name) is None:
            raise NotFound(f"user {user!r} has no served model named {name!r}", field="name")
        return processes.select_lines(processes.read_log(self.log_path(user, name)), (), tail).decode(
            "utf-8", "replace"
        )

    # -- writes ----------------------------------------------------------------------------------------

    async def deploy(self, spec: ServingSpec) -> Job:
        """Serve `spec`'s model; a second deploy of the same name rolls out a new revision."""
        async with self._locks.hold((spec.user, spec.name)):
            return await self._deploy(spec)

    async def _deploy(self, spec: ServingSpec) -> Job:
        _check_local(spec)
        previous = self._read(spec.user, spec.name)
        live = previous is not None and previous.phase == "Ready" and self._process(previous) is not None
        number = max((r.number for r in previous.revisions), default=0) + 1 if previous else 1
        job_dir = files.private_dir(self.job_dir(spec.user, spec.name))
        revision_dir = job_dir / "revisions" / str(number)
        try:
            model_file = await asyncio.to_thread(self._fetch_model, spec, revision_dir)
        except BaseException:
            shutil.rmtree(revision_dir, ignore_errors=True)
            if previous is None:
                shutil.rmtree(job_dir, ignore_errors=True)
            raise
        newest = Revision(number, spec.model_format, str(spec.storage_uri), str(model_file), 100)
        revisions = [newest]
        canary = spec.canary_traffic_percent
        if live and previous is not None and canary is not None and canary < 100:
            latest = max(previous.revisions, key=lambda r: r.number)
            revisions = [replace(newest, traffic=canary), replace(latest, traffic=100 - canary)]
            revisions = [r for r in revisions if r.traffic > 0] or [newest]
        now = time.time()
        created = previous.created if previous is not None else now
        starting = ServingRecord(
            user=spec.user,
            name=spec.name,
            created=created,
            spec=spec.to_dict(),
            phase="Created",
            conditions=(Condition("Created", "True", "Created", f"revision {number} created", now),),
            revisions=tuple(revisions),
        )
        if previous is None:
            self._write(starting)
        started = await self._start_server(spec, starting, number)
        if started.phase == "Ready":
            if live and previous is not None:
                await self._stop(previous)
            self._write(started)
            return self._job(started)
        if live and previous is not None:
            # KServe keeps routing to the last ready revision when a new one fails.
            kept = replace(
                previous, message=f"revision {number} failed; revision(s) still serving: {started.message}"
            )
            self._write(kept)
            return self._job(kept)
        self._write(started)
        return self._job(started)

    def _fetch_model(self, spec: ServingSpec, revision_dir: Path) -> Path:
        uri = str(spec.storage_uri)
        scheme = urlsplit(uri).scheme
        if scheme == "s3":
            return find_model_file(self._download(uri, revision_dir), spec.model_format, "storage_uri", uri)
        if scheme == "pvc":
            raise InvalidInput(
                f"storage_uri {uri!r}: pvc:// names a volume on the cluster; locally give a path or s3://",
                field="storage_uri",
            )
        path = Path(urlsplit(uri).path if scheme == "file" else uri)
        return find_model_file(path, spec.model_format, "storage_uri", uri)

    def _download(self, uri: str, target: Path) -> Path:
        """Copy the object, or every object under the prefix, at `uri` into `target`."""
        parts = urlsplit(uri)
        store = open_store(f"s3://{parts.netloc}", self.storage)
        key = parts.path.strip("/")
        files.private_dir(target)
        if key and store.exists(key):
            local = target / PurePosixPath(key).name
            store.get_file(key, local)
            return local
        keys = store.list(f"{key}/" if key else "")
        if not keys:
            raise InvalidInput(f"storage_uri {uri!r}: no model file or objects there", field="storage_uri")
        for item in keys:
            relative = PurePosixPath(item[len(key) :].lstrip("/") if key else item)
            local = target.joinpath(*relative.parts)
            local.parent.mkdir(parents=True, exist_ok=True)
            store.get_file(item, local)
        return target

    async def _start_server(self, spec: ServingSpec, record: ServingRecord, number: int) -> ServingRecord:
        job_dir = self.job_dir(spec.user, spec.name)
        config = job_dir / f"server-{number}.json"
        port_file = job_dir / f"port-{number}"
        port_file.unlink(missing_ok=True)
        config.write_text(
            json.dumps(
                {
                    "name": spec.name,
                    "port_file": str(port_file),
                    "revisions": [
                        {"revision": r.number, "format": r.model_format, "path": r.path, "traffic": r.traffic}
                        for r in record.revisions
                    ],
                }
            )
        )
        argv = [sys.executable, "-m", "cube_jupyter.jobs.local.model_server", "--config", str(config)]
        split = ", ".join(f"revision {r.number} {r.traffic}%" for r in record.revisions)
        try:
            child = processes.spawn(
                argv, _server_env(spec), job_dir, job_dir / LOG, f"{spec.name} revision {number} ({split})"
            )
        except OSError as exc:
            return _failed(record, "ServerNotStarted", f"the model server did not start: {exc}")
        running = replace(record, pid=child.pid, marker=str(config))
        port = await self._wait_ready(child, port_file)
        if port is None:
            if child.poll() is None:
                proc = processes.find_marked(child.pid, str(config))
                if proc is not None:
                    await processes.stop_tree(proc, STOP_GRACE)
                why = f"the model server was not ready within {self.ready_timeout:g} s"
            else:
                why = f"the model server exited with code {child.returncode} before it was ready"
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)
            tail = processes.log_tail(job_dir / LOG, *tracebacks.LOG_TAIL)
            return _failed(running, "ServerFailed", why, tail)
        now = time.time()
        message = _replica_note(spec)
        return replace(
            running,
            phase="Ready",
            port=port,
            message=message,
            conditions=(
                *record.conditions,
                Condition(
                    "Ready", "True", "Ready", f"serving {split} at {endpoint_url(port, spec.name)}", now
                ),
            ),
        )

    async def _wait_ready(self, child: subprocess.Popen[bytes], port_file: Path) -> int | None:
        """The server's port once it answers `/v2/health/ready`; None if it exits or takes too long."""
        deadline = time.monotonic() + self.ready_timeout
        port: int | None = None
        while time.monotonic() < deadline:
            if child.poll() is not None:
                return None
            if port is None:
                with contextlib.suppress(OSError, ValueError):
                    port = int(port_file.read_text())
            if port is not None and await _ready(port):
                return port
            await asyncio.sleep(0.1)
        return None

    async def delete(self, user: str, name: str) -> None:
        """Stop the model server and remove the job and its downloaded models."""
        async with self._locks.hold((user, name)):
            record = self._read(user, name)
            if record is None:
                raise NotFound(f"user {user!r} has no served model named {name!r}", field="name")
            await self._stop(record)
            self.records.remove(user, name)

    async def _stop(self, record: ServingRecord) -> None:
        proc = self._process(record)
        if proc is not None:
            await processes.stop_tree(proc, STOP_GRACE)

    def _process(self, record: ServingRecord) -> Any:
        if record.pid is None or record.marker is None:
            return None
        return processes.find_marked(record.pid, record.marker)

    def _job(self, record: ServingRecord) -> Job:
        ready = record.phase == "Ready" and record.port is not None
        state = "Running" if ready else ("Failed" if record.phase == "Failed" else "Pending")
        replica = Replica(
            role="Predictor",
            index=0,
            state=state,  # type: ignore[arg-type]
            gpus=int(record.spec.get("resources", {}).get("gpu", 0)),
            pid=record.pid if ready else None,
            message=None if ready else record.message,
        )
        return Job(
            name=record.name,
            kind="serving",
            user=record.user,
            phase=record.phase,  # type: ignore[arg-type]
            created=record.created,
            framework=str(record.spec.get("model_format")),
            backend="local",
            conditions=record.conditions,
            replicas=(replica,),
            gpus=replica.gpus if ready else 0,
            message=record.message,
            spec=record.spec,
            endpoint=endpoint_url(record.port, record.name) if ready and record.port else None,
            completed=record.completed,
        )


def _check_local(spec: ServingSpec) -> None:
    if spec.model_format not in LOCAL_FORMATS:
        raise InvalidInput(
            f"model_format {spec.model_format!r} runs a container image ({spec.image}); the local model "
            f"server serves {', '.join(LOCAL_FORMATS)} models: use the kubernetes backend for it",
            field="model_format",
        )
    if spec.storage_uri is None:
        raise InvalidInput("storage_uri is required to serve a model locally", field="storage_uri")
    if spec.model_format == "onnx":
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise InvalidInput(
                "model_format 'onnx' needs the onnxruntime package in the workbench's environment "
                "(pip install onnxruntime)",
                field="model_format",
            ) from None


def _replica_note(spec: ServingSpec) -> str | None:
    if spec.max_replicas > 1 or spec.min_replicas > 1:
        return (
            f"local serving runs one model server process; min_replicas={spec.min_replicas} and "
            f"max_replicas={spec.max_replicas} ({spec.scale_metric} target) apply on the cluster"
        )
    return None


def _failed(record: ServingRecord, reason: str, why: str, log_tail: str = "") -> ServingRecord:
    """Failed: the condition says why in one line (with the cause, when the server's log ends with a
    traceback); the job's message adds the last lines of the log."""
    now = time.time()
    failure = tracebacks.last_failure(log_tail)
    line = f"{why}: {failure.cause}" if failure is not None else why
    return replace(
        record,
        phase="Failed",
        message=tracebacks.with_log_tail(line, log_tail) if log_tail else line,
        completed=now,
        port=None,
        conditions=(*record.conditions, Condition("Ready", "False", reason, line, now)),
    )


def _server_env(spec: ServingSpec) -> dict[str, str]:
    env = processes.python_child_environ(spec.env, supervised=True)
    if not spec.resources.gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


async def _ready(port: int) -> bool:
    from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

    request = HTTPRequest(
        f"http://{processes.LOOPBACK}:{port}/v2/health/ready", connect_timeout=2, request_timeout=2
    )
    try:
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
    except (TimeoutError, OSError, HTTPClientError):
        return False
    return response.code == 200

"""Train, deploy and predict from a notebook, through the workbench this kernel belongs to.

    import cube_jupyter
    job = cube_jupyter.train(train_fn, framework="pytorch", workers=2)   # ships train_fn, waits
    cube_jupyter.deploy(model, name="iris")                              # an sklearn/xgboost model
    cube_jupyter.predict("iris", [[5.1, 3.5, 1.4, 0.2]])

The code is packaged with the local modules it imports (`cube_jupyter.jobs.package`, no Dockerfile)
and submitted through the workbench's REST API, so the server applies the same validation,
authorization and GPU quota as for the Jobs panel. The server is the Jupyter server that started this
kernel (found from its `jpserver-*.json` runtime file), or `CUBE_JUPYTER_URL` + `CUBE_JUPYTER_TOKEN`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube_jupyter.errors import BackendUnavailable, CubeError, InvalidInput, NotFound
from cube_jupyter.storage import ArtifactStore, open_store

URL_ENV = "CUBE_JUPYTER_URL"
TOKEN_ENV = "CUBE_JUPYTER_TOKEN"
STORE_ENV = "CUBE_JUPYTER_STORE"
API = "cube/api/v1"
REQUEST_TIMEOUT = 60.0
POLL_SECONDS = 0.5
ERRORS = {400: InvalidInput, 404: NotFound}


@dataclass(frozen=True)
class ServerConnection:
    """Where the workbench's REST API is (the server's URL, with its base_url) and its token."""

    url: str
    token: str

    def endpoint(self, path: str, **query: str) -> str:
        url = self.url.rstrip("/") + "/" + API + "/" + path.lstrip("/")
        return url + ("?" + urllib.parse.urlencode(query) if query else "")


def server_connection() -> ServerConnection:
    """The server this kernel belongs to: env first, else the runtime file of a parent process."""
    url = os.environ.get(URL_ENV, "").strip()
    if url:
        return ServerConnection(url=url, token=os.environ.get(TOKEN_ENV, ""))
    import psutil
    from jupyter_core.paths import jupyter_runtime_dir

    ancestors: set[int] = set()
    with contextlib.suppress(psutil.Error):
        ancestors = {p.pid for p in psutil.Process().parents()}
    for info_file in sorted(Path(jupyter_runtime_dir()).glob("jpserver-*.json")):
        try:
            info = json.loads(info_file.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and info.get("pid") in ancestors and info.get("url"):
            return ServerConnection(url=str(info["url"]), token=str(info.get("token") or ""))
    raise BackendUnavailable(
        "cannot find the Jupyter server this kernel belongs to (no jpserver-*.json runtime file of a "
        f"parent process); set {URL_ENV} (and {TOKEN_ENV}) to the workbench's URL",
        field=URL_ENV,
    )


def call(
    method: str, path: str, body: Any = None, *, connection: ServerConnection | None = None, **query: str
) -> Any:
    """One REST call; a 4xx/5xx answer is raised as the CubeError the server chose."""
    conn = connection or server_connection()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(conn.endpoint(path, **query), data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if conn.token:
        request.add_header("Authorization", f"token {conn.token}")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as exc:
        raise _error(exc.code, exc.read().decode(errors="replace")) from None
    except (urllib.error.URLError, OSError) as exc:
        raise BackendUnavailable(f"the workbench at {conn.url} is unreachable: {exc}") from None
    return json.loads(text) if text.strip() else None


def _error(status: int, text: str) -> CubeError:
    try:
        body = json.loads(text)
    except ValueError:
        body = {}
    message = str(body.get("message") or text.strip() or f"HTTP {status}") if isinstance(body, dict) else text
    field = body.get("field") if isinstance(body, dict) else None
    error = ERRORS.get(status)
    if error is None:
        from cube_jupyter.errors import Conflict, Forbidden

        error = {403: Forbidden, 409: Conflict}.get(status, BackendUnavailable)
    exc = error(message, field=field)
    if isinstance(body, dict) and body.get("reason") == "QuotaExceeded":
        from cube_jupyter.errors import QuotaExceeded

        exc = QuotaExceeded(message, field=field)
    return exc


class RemoteJob:
    """A submitted job, read through the REST API: `.refresh()`, `.wait()`, `.logs()`, `.delete()`."""

    def __init__(self, body: dict[str, Any], connection: ServerConnection) -> None:
        self.body = body
        self.connection = connection

    @property
    def name(self) -> str:
        return str(self.body["name"])

    @property
    def phase(self) -> str:
        return str(self.body["phase"])

    @property
    def endpoint(self) -> str | None:
        return self.body.get("endpoint")

    def refresh(self) -> RemoteJob:
        self.body = call("GET", f"jobs/{self.name}", connection=self.connection)
        return self

    def wait(self, timeout: float | None = None, show: bool = True) -> RemoteJob:
        """Follow the job until it has finished (a served model: until Ready), showing its progress."""
        from cube_jupyter.jobs.model import Job, describe_progress

        display = _LineDisplay() if show else None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if display is not None:
                display.show(describe_progress(_job_of(self.body, Job)))
            if self.body.get("finished") or (self.body["kind"] == "serving" and self.phase == "Ready"):
                return self
            if deadline is not None and time.monotonic() > deadline:
                return self
            time.sleep(POLL_SECONDS)
            self.refresh()

    def logs(self, replica: str | None = None, tail: int | None = None) -> str:
        """The replica's log so far (default: the first replica)."""
        query = {k: str(v) for k, v in (("replica", replica), ("tail", tail)) if v is not None}
        conn = self.connection
        request = urllib.request.Request(conn.endpoint(f"jobs/{self.name}/logs", **query))
        if conn.token:
            request.add_header("Authorization", f"token {conn.token}")
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
                return str(response.read().decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            raise _error(exc.code, exc.read().decode(errors="replace")) from None

    def delete(self) -> None:
        call("DELETE", f"jobs/{self.name}", connection=self.connection)

    def __repr__(self) -> str:
        return f"<{self.body.get('kind')} job {self.name}: {self.phase}>"


def _job_of(body: dict[str, Any], job_type: Any) -> Any:
    from cube_jupyter.jobs.model import Condition, JobError, Replica, Trial

    fields = {k: v for k, v in body.items() if k in job_type.__dataclass_fields__}
    fields["replicas"] = tuple(
        Replica(**{k: v for k, v in r.items() if k != "name"}) for r in body.get("replicas", ())
    )
    fields["trials"] = tuple(Trial(**t) for t in body.get("trials", ()))
    fields["conditions"] = tuple(Condition(**c) for c in body.get("conditions", ()))
    fields["error"] = JobError.from_dict(body["error"]) if body.get("error") else None
    return job_type(**fields)


class _LineDisplay:
    """One live line in a notebook (a display handle updated in place), else printed lines."""

    def __init__(self) -> None:
        self.last = ""
        self.handle: Any = None
        try:
            from IPython import get_ipython
            from IPython.display import display

            if get_ipython() is not None:
                self.handle = display({"text/plain": ""}, raw=True, display_id=True)
        except ImportError:
            self.handle = None

    def show(self, line: str) -> None:
        if line == self.last:
            return
        self.last = line
        if self.handle is not None:
            self.handle.update({"text/plain": line}, raw=True)
        else:
            print(line, flush=True)


# -- shipping code --------------------------------------------------------------------------------


def _store(store: str | ArtifactStore | None) -> ArtifactStore:
    if store is None or isinstance(store, str):
        return open_store(store or os.environ.get(STORE_ENV) or None)
    return store


def _job_name(hint: str, name: str | None) -> str:
    if name:
        return name
    base = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-") or "job"
    if not base[0].isalpha():
        base = "job-" + base
    return f"{base[:30].rstrip('-')}-{secrets.token_hex(3)}"


def code_spec(
    code: Callable[..., Any] | str | os.PathLike[str], store: ArtifactStore
) -> tuple[dict[str, Any], str]:
    """Package a function, script or notebook: the spec's code keys and a name hint."""
    from cube_jupyter.jobs.package import package_file, package_function

    if callable(code):
        shipped = package_function(code, store)
        hint = getattr(code, "__name__", "train")
    else:
        shipped = package_file(code, store)
        hint = Path(code).stem
    return {shipped.kind: shipped.target, "package": shipped.uri}, hint


def default_replicas(framework: str, workers: int) -> dict[str, int]:
    """`workers` processes training together (WORLD_SIZE): for PyTorch and XGBoost one of them is
    the Master, as the operators count ranks; TensorFlow and MPI get that many Workers."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidInput(f"workers must be a whole number >= 1, got {workers!r}", field="workers")
    if str(framework).lower() in ("pytorch", "xgboost"):
        return {"master": 1, "worker": workers - 1} if workers > 1 else {"master": 1}
    return {"worker": workers}


def training_spec(
    code: dict[str, Any],
    name: str,
    *,
    framework: str,
    workers: int,
    replicas: dict[str, Any] | None,
    image: str | None,
    resources: dict[str, Any] | None,
    args: Sequence[str],
    env: dict[str, str] | None,
    extra: dict[str, Any],
) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "framework": framework, **code}
    spec["replicas"] = replicas if replicas is not None else default_replicas(framework, workers)
    for key, value in (("image", image), ("resources", resources), ("env", env)):
        if value:
            spec[key] = value
    if args:
        spec["args"] = [str(a) for a in args]
    spec.update(extra)
    return spec


def submit(kind: str, spec: dict[str, Any], connection: ServerConnection | None = None) -> RemoteJob:
    conn = connection or server_connection()
    body = call("POST", "jobs", {"kind": kind, "spec": spec}, connection=conn)
    return RemoteJob(body, conn)


def train(
    fn_or_path: Callable[..., Any] | str | os.PathLike[str],
    framework: str = "pytorch",
    workers: int = 2,
    *,
    name: str | None = None,
    replicas: dict[str, Any] | None = None,
    image: str | None = None,
    resources: dict[str, Any] | None = None,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    store: str | ArtifactStore | None = None,
    wait: bool = True,
    timeout: float | None = None,
    show: bool = True,
    **spec: Any,
) -> RemoteJob:
    """Run `fn_or_path` (a function, a .py script or an .ipynb notebook) as a distributed training job
    of `workers` processes (see `default_replicas`; or the roles in `replicas`); other training-spec
    keys (e.g. `restart_policy`, `backoff_limit`) pass through. With `wait`, follows it to its end."""
    code, hint = code_spec(fn_or_path, _store(store))
    body = training_spec(
        code,
        _job_name(hint, name),
        framework=framework,
        workers=workers,
        replicas=replicas,
        image=image,
        resources=resources,
        args=args,
        env=env,
        extra=spec,
    )
    job = submit("training", body)
    return job.wait(timeout, show) if wait else job


def train_source(source: str, **options: Any) -> RemoteJob:
    """What `%%cube_train` does: ship a cell's source as a script and train with it."""
    from cube_jupyter.jobs.package import package_source

    store = _store(options.pop("store", None))
    shipped = package_source(source, store)
    name = _job_name("cell", options.pop("name", None))
    wait, timeout, show = options.pop("wait", True), options.pop("timeout", None), options.pop("show", True)
    body = training_spec(
        {shipped.kind: shipped.target, "package": shipped.uri},
        name,
        framework=options.pop("framework", "pytorch"),
        workers=options.pop("workers", 2),
        replicas=options.pop("replicas", None),
        image=options.pop("image", None),
        resources=options.pop("resources", None),
        args=options.pop("args", ()),
        env=options.pop("env", None),
        extra=options,
    )
    job = submit("training", body)
    return job.wait(timeout, show) if wait else job


# -- serving --------------------------------------------------------------------------------------

# Where a model object's class comes from → the model format and the file KServe's server loads.
MODEL_SAVERS = {"sklearn": "model.joblib", "xgboost": "model.json"}


def model_format_of(model: Any) -> str:
    module = type(model).__module__.split(".")[0]
    if module == "xgboost":
        return "xgboost"
    if module == "sklearn":
        return "sklearn"
    raise InvalidInput(
        f"cannot tell how to save a {type(model).__module__}.{type(model).__name__}; save it yourself and "
        "deploy its path or URI with model_format=...",
        field="model",
    )


def save_model(model: Any, name: str, store: ArtifactStore, user: str) -> tuple[str, str]:
    """Save an in-memory sklearn or xgboost model to the store, among `user`'s models; (storage URI,
    model format)."""
    from cube_jupyter.jobs.model import saved_models_prefix

    model_format = model_format_of(model)
    file_name = MODEL_SAVERS[model_format]
    with tempfile.TemporaryDirectory(prefix="cube-model-") as tmp:
        path = Path(tmp) / file_name
        if model_format == "sklearn":
            import joblib

            joblib.dump(model, path)
        else:
            booster = model.get_booster() if hasattr(model, "get_booster") else model
            booster.save_model(str(path))
        key = f"{saved_models_prefix(user)}/{name}/{secrets.token_hex(6)}"
        store.put_file(f"{key}/{file_name}", path)
    url = store.url(key)
    if url.startswith("file://"):
        url = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    return url, model_format


def deploy(
    model_or_uri: Any,
    name: str | None = None,
    model_format: str | None = None,
    *,
    store: str | ArtifactStore | None = None,
    wait: bool = True,
    timeout: float | None = None,
    show: bool = True,
    **spec: Any,
) -> RemoteJob:
    """Serve a model: an in-memory sklearn/xgboost model (saved to the artifact store first) or a
    storage URI / local path. Other serving-spec keys (min_replicas, resources, ...) pass through."""
    if isinstance(model_or_uri, (str, os.PathLike)):
        storage_uri = os.fspath(model_or_uri)
        if model_format is None:
            raise InvalidInput("model_format is required when deploying a path or URI", field="model_format")
        job_name = _job_name(Path(storage_uri).stem or "model", name)
    else:
        job_name = _job_name(type(model_or_uri).__name__, name)
        user = str(call("GET", "info")["user"])  # whose models the store keeps it among
        storage_uri, detected = save_model(model_or_uri, job_name, _store(store), user)
        model_format = model_format or detected
    body = {"name": job_name, "model_format": model_format, "storage_uri": storage_uri, **spec}
    job = submit("serving", body)
    return job.wait(timeout, show) if wait else job


def predict(name: str, inputs: Any, protocol: str = "v1") -> Any:
    """Ask the served model `name` (V1: instances → {"predictions"}; V2: its `inputs` tensors)."""
    answer = call("POST", f"jobs/{name}/predict", {"inputs": inputs, "protocol": protocol})
    return answer["predictions"]

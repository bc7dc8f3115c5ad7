"""Jobs as users see them: who may act, what a spec may ask for, and the GPU quota.

Handlers, the CLI and the notebook API call this; it parses the spec at the edge, checks the caller,
the name and the quota, and calls one backend method. The same rules hold on both backends.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cube_jupyter import access
from cube_jupyter.errors import (
    BackendUnavailable,
    Conflict,
    CubeError,
    Forbidden,
    InvalidInput,
    NotFound,
)
from cube_jupyter.fields import choice, mapping
from cube_jupyter.jobs.backend import JobBackend, gpu_holders
from cube_jupyter.jobs.bounds import check_bounds
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.fields import job_name
from cube_jupyter.jobs.model import Job, JobKind, saved_models_prefix
from cube_jupyter.jobs.render import render_job
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.jobs.spec_files import read_spec_file, spec_kind
from cube_jupyter.jobs.specs import Spec, parse_kind, parse_spec, spec_gpus
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.storage import open_store

PROTOCOLS = ("v1", "v2")


class JobService:
    def __init__(
        self,
        settings: JobSettings,
        backend: JobBackend,
        *,
        ledger: GpuLedger | None = None,
        root_dir: str | None = None,
        multi_user: bool = False,
    ) -> None:
        """`ledger` is the workbench's one GPU ledger (the composition root's, which counts servers
        too); without one, jobs count only against each other. `multi_user`: a trusted header names
        many callers (see `access.readable_file`)."""
        self.settings = settings
        self.backend = backend
        self.root_dir = root_dir  # relative paths in specs are under it, as scripts are for replicas
        self.multi_user = multi_user
        self.ledger = ledger if ledger is not None else GpuLedger(settings.gpu_quota, [gpu_holders(backend)])
        self.unavailable: str | None = None  # why the backend did not start

    async def start(self) -> None:
        """Start the backend; if it cannot start (no operators' CRDs), every call says why (503)."""
        try:
            await self.backend.start()
        except CubeError as exc:
            self.unavailable = exc.message
            raise
        self.unavailable = None

    def availability(self) -> dict[str, Any]:
        """What the launch forms may offer here (`JobBackend.availability`); needs no started backend."""
        return self.backend.availability()

    def require_available(self) -> None:
        if self.unavailable is not None:
            raise BackendUnavailable(f"jobs are unavailable: {self.unavailable}")

    async def close(self) -> None:
        await self.backend.close()

    # -- who ---------------------------------------------------------------------------------------

    def owner(self, caller: str, user: str | None) -> str:
        """Whose jobs a request means: the caller's own, or (admins only) another user's."""
        return access.owner(self.settings, caller, user, "jobs")

    # -- reads -------------------------------------------------------------------------------------

    def list_jobs(
        self, caller: str, user: str | None = None, *, all_users: bool = False, kind: str | None = None
    ) -> list[Job]:
        wanted = parse_kind(kind) if kind else None
        jobs = self.backend.list(access.listed_user(self.settings, caller, user, all_users, "jobs"))
        return sorted(
            (job for job in jobs if wanted is None or job.kind == wanted),
            key=lambda j: (j.user, j.created, j.name),
        )

    def get(self, caller: str, name: str, user: str | None = None) -> Job:
        owner = self.owner(caller, user)
        job = self.backend.get(owner, job_name(name))
        if job is None:
            raise NotFound(f"user {owner!r} has no job named {name!r}", field="name")
        return job

    def logs(
        self,
        caller: str,
        name: str,
        replica: str | None = None,
        *,
        follow: bool = False,
        tail: int | None = None,
        user: str | None = None,
    ) -> AsyncIterator[str]:
        """Check everything before the first byte, so a bad request is an error status, not a stream."""
        job = self.get(caller, name, user)
        if tail is not None and tail < 0:
            raise InvalidInput(f"tail must be >= 0, got {tail}", field="tail")
        if replica is not None and job.replicas and replica not in {r.name for r in job.replicas}:
            offered = ", ".join(r.name for r in job.replicas)
            raise NotFound(f"job {name!r} has no replica {replica!r}; it has: {offered}", field="replica")
        return self.backend.logs(job, replica, follow=follow, tail=tail)

    def history(self, caller: str, name: str, user: str | None = None) -> dict[str, Any]:
        """A tuning job's optimization history: each finished trial's objective and the best so far."""
        job = self.get(caller, name, user)
        if job.kind != "tuning":
            raise InvalidInput(
                f"job {name!r} is a {job.kind} job; only tuning jobs have a history", field="name"
            )
        return optimization_history(job)

    def queue(self, caller: str, user: str | None = None, *, all_users: bool = False) -> dict[str, Any]:
        """The queue as its users see it: the caller's (admins: anyone's, or all) queued jobs in queue
        order, and their admitted, unfinished ones."""
        jobs = self.list_jobs(caller, user, all_users=all_users)
        queued = sorted(
            (j for j in jobs if j.queue is not None),
            key=lambda j: (j.queue.position is None, j.queue.position or 0, j.created) if j.queue else (),
        )
        running = [j for j in jobs if j.queue is None and not j.finished]
        return {"queued": [j.to_dict() for j in queued], "running": [j.to_dict() for j in running]}

    def read_spec_file(self, caller: str, path: str) -> dict[str, Any]:
        """A YAML job spec among the caller's files as {path, kind, spec}: the kind told by its keys,
        the spec as written (a form opens it; the launch checks it)."""
        raw = read_spec_file(self._readable(caller, path, "path"), field="path")
        return {"path": path, "kind": spec_kind(raw, "path"), "spec": raw}

    # -- writes ------------------------------------------------------------------------------------

    async def submit(self, caller: str, body: object, user: str | None = None) -> Job:
        """`body` is {kind, spec}: validate, check the name and the GPU quota, then start it."""
        owner = self.owner(caller, user)
        if self.settings.workbench.backend == "local":
            access.require_local_execution(self.settings, caller, self.multi_user, "run jobs", "kind")
        kind, spec = self.parse_request(body, owner, caller)
        async with self.ledger.locked(owner):
            # Checked before the quota so a duplicate is a 409 even at the limit; the backend's own
            # atomic check (state file, API 409) is what holds across processes.
            existing = self.backend.get(owner, spec.name)
            if existing is not None and isinstance(spec, ServingSpec) and existing.kind == "serving":
                # Like `kubectl apply` of an InferenceService: a new revision of the served model,
                # taking canary_traffic_percent of the traffic when set.
                self.ledger.check(owner, spec_gpus(spec), field="resources.gpu", replacing=("job", spec.name))
                return await self.backend.roll_out(spec)
            if existing is not None:
                raise Conflict(f"user {owner!r} already has a job named {spec.name!r}", field="name")
            if self.backend.queues(kind):  # past the quota it waits its turn, unless it never could fit
                self.ledger.check_possible(spec_gpus(spec), field="resources.gpu")
            else:
                self.ledger.check(owner, spec_gpus(spec), field="resources.gpu")
            return await self.backend.submit(kind, spec)

    async def delete(self, caller: str, name: str, user: str | None = None) -> None:
        job = self.get(caller, name, user)
        await self.backend.delete(job.user, job.name)

    async def stop_idle(self, user: str, name: str, reason: str) -> None:
        """Stop a training job the workbench finds idle (its GPUs, `CubeGPU.cull_idle_gpu_jobs`),
        saying why; one finished, queued or gone is left alone."""
        job = self.backend.get(user, name)
        if job is not None and job.kind == "training" and not job.finished and job.queue is None:
            await self.backend.stop(user, name, reason)

    async def predict(self, caller: str, name: str, body: object, user: str | None = None) -> Any:
        """Forward {inputs, protocol} to a served model's endpoint: {name, protocol, predictions}."""
        from cube_jupyter.jobs.predict import predict

        request = mapping(body, "body")
        unknown = sorted(set(request) - {"inputs", "protocol"})
        if unknown:
            raise InvalidInput(f"unknown field {unknown[0]!r}; send inputs and protocol", field=unknown[0])
        if "inputs" not in request:
            raise InvalidInput("inputs is required: the instances to predict on", field="inputs")
        protocol = choice(request.get("protocol", "v1"), "protocol", PROTOCOLS)
        job = self.get(caller, name, user)
        if job.kind != "serving":
            raise InvalidInput(f"job {name!r} is a {job.kind} job, not a served model", field="name")
        if not job.endpoint or job.phase != "Ready":
            raise Conflict(f"model {name!r} is not ready to serve (it is {job.phase})", field="name")
        predictions = await asyncio.to_thread(predict, job.endpoint, request["inputs"], protocol)
        return {"name": job.name, "protocol": protocol, "predictions": predictions}

    # -- helpers -----------------------------------------------------------------------------------

    def parse_request(self, body: object, owner: str, caller: str | None = None) -> tuple[JobKind, Spec]:
        """{kind, spec} parsed; each local file the spec names is one `caller` (default: `owner`) may read."""
        request = mapping(body, "body")
        unknown = sorted(set(request) - {"kind", "spec"})
        if unknown:
            raise InvalidInput(
                f"unknown field {unknown[0]!r}; a job is submitted as {{kind, spec}}", field=unknown[0]
            )
        kind = parse_kind(request.get("kind"))
        if "spec" not in request:
            raise InvalidInput("spec is required", field="spec")
        reader = caller or owner
        raw = self._readable_model(reader, request["spec"]) if kind == "serving" else request["spec"]
        spec = parse_spec(kind, raw, owner, self.root_dir)
        check_bounds(spec, self.settings.jobs)
        if isinstance(spec, (TrainingSpec, TuningSpec)):  # a queue or priority not offered: a 400
            self.settings.queues.choose(
                "training" if kind == "training" else "tuning", queue=spec.queue, priority=spec.priority
            )
        return kind, self._readable_code(reader, spec)

    def _readable(self, caller: str, path: str, field: str, *, folder: bool = False) -> str:
        root = Path(self.root_dir or os.getcwd())
        full = access.readable_file(
            self.settings, caller, root, path, field, multi_user=self.multi_user, absolute=True, folder=folder
        )
        return str(full)

    def _readable_code(self, caller: str, spec: Spec) -> Spec:
        """The spec with the script or notebook it ships from this disk resolved (absolute) among the
        files `caller` may read; packaged code is not read from here."""
        if isinstance(spec, TrainingSpec) and spec.code.package_uri is None:
            if spec.code.kind == "function":
                self._require_server_modules(caller)
            if spec.code.path is not None:
                path = self._readable(caller, spec.code.path, spec.code.kind)
                return replace(spec, code=replace(spec.code, path=path))
        if isinstance(spec, TuningSpec):
            trial = spec.trial_training
            if trial is not None and trial.code.kind == "function" and trial.code.package_uri is None:
                self._require_server_modules(caller)
            if spec.trial_notebook is not None and spec.trial_package_uri is None:
                notebook = self._readable(caller, spec.trial_notebook, "trial.notebook")
                return replace(spec, trial_notebook=notebook)
        return spec

    def _require_server_modules(self, caller: str) -> None:
        """A `module:function` target is imported from the server root, which on a shared workbench
        is the admins' (`access.readable_root`): others ship a script or notebook of their own."""
        if self.multi_user and not self.settings.is_admin(caller):
            raise Forbidden(
                "function: a 'module:function' target is shipped from the workbench's own files, which "
                "only admins read here; submit a script or notebook from your files instead",
                field="function",
            )

    def _readable_model(self, caller: str, raw: object) -> object:
        """A serving spec whose local model path (a path or file:// URL) is resolved among the files
        `caller` may read, before the parser looks at the disk (which would tell whether any path
        exists): their own files, or the models `deploy()` saved for them in a local artifact store."""
        if not isinstance(raw, dict) or not isinstance(raw.get("storage_uri"), str):
            return raw
        uri = raw["storage_uri"].strip()
        parts = urlsplit(uri)
        if parts.scheme not in ("", "file") or parts.query or parts.fragment:
            return raw
        local = parts.path if parts.scheme == "file" else uri
        if self._own_saved_model(caller, local):
            return raw  # a model `deploy()` saved to the artifact store, as an s3:// one would be
        # a model is a file or, as KServe's storage initializer fetches it, a folder
        return {**raw, "storage_uri": self._readable(caller, local, "storage_uri", folder=True)}

    def _own_saved_model(self, caller: str, path: str) -> bool:
        """Whether `path` is a model `deploy()` saved for `caller` in the local artifact store
        (`models/<user>/...`; on a workbench many users share, another's is refused without saying
        whether it exists)."""
        store = open_store(None, self.settings.storage, check=False)
        root = getattr(store, "root", None)
        if not isinstance(root, Path):
            return False
        try:
            full = Path(os.path.abspath(path)).resolve()
        except (ValueError, OSError, RuntimeError):  # NUL, a lone surrogate, a loop: `_readable` says
            return False
        if not full.is_relative_to(root):
            return False
        if not self.multi_user or full.is_relative_to(root / saved_models_prefix(caller)):
            return True
        raise Forbidden(
            f"storage_uri {path!r} is in the shared artifact store, outside the models saved for you "
            f"({saved_models_prefix(caller)}/)",
            field="storage_uri",
        )

    def render(self, kind: str, raw: object, user: str) -> list[dict[str, Any]]:
        return render_job(self.settings, kind, raw, user)


def optimization_history(job: Job) -> dict[str, Any]:
    """Finished trials in the order they ran, with the best objective reached so far after each."""
    goal = _goal(job.spec)
    points: list[dict[str, Any]] = []
    best: float | None = None
    for number, trial in enumerate(job.trials):
        if trial.state != "Succeeded" or trial.objective is None:
            continue
        if best is None or (trial.objective > best if goal == "maximize" else trial.objective < best):
            best = trial.objective
        points.append({"number": number, "trial": trial.name, "objective": trial.objective, "best": best})
    return {"name": job.name, "goal": goal, "best_trial": job.best_trial, "points": points}


def _goal(spec: dict[str, Any]) -> str:
    objective = spec.get("objective") or {}
    goal = str(objective.get("type") or objective.get("direction") or "minimize").lower()
    return "maximize" if goal.startswith("max") else "minimize"

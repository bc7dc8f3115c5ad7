"""Training jobs on this machine: the supervisor that starts, reaps and stops one process per
replica, with the env the operator would set (planned, and judged by the operator's rules, in
`training_plan`).

`LocalTrainingRunner` is the synchronous core: `start(spec)` ships the code (when it is not shipped
yet), records the job and starts every replica as `python -m cube_jupyter.jobs.entry ...` (or the
spec's command) in its own process group, in the job's work directory, with stdout and stderr in a
per-replica log. `refresh` is the operator's reconcile loop: it reaps replicas, restarts failed ones
while the restart policy and backoff limit allow, marks the job Succeeded or Failed (the failed
replica's name, exit code and log tail in the message), stops the others by `clean_pod_policy`
(SIGTERM to the process group, SIGKILL after a grace period), enforces `active_deadline_seconds`,
and deletes finished jobs after `ttl_seconds_after_finished`.

The process that starts a job supervises it (`owner` in the record). A job whose owner died while
it ran — the workbench restarted — is marked Failed ("the workbench restarted while it ran") and its
leftover replicas are killed: their exit codes cannot be known by a process that is not their parent,
so re-attaching would report guesses. `AsyncLocalTraining` is the small facade the server uses: it
runs `refresh_all` in a thread every `poll` seconds and never blocks the event loop.

Not enforced locally: the image (the workbench's Python runs the code), CPU and memory (recorded),
volumes and the workspace PVC (the work directory stands in). GPUs are handed out by
`CUDA_VISIBLE_DEVICES`, never more than this machine has.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import psutil

from cube_jupyter.errors import BackendUnavailable, InvalidInput, NotFound
from cube_jupyter.jobs import package as packaging
from cube_jupyter.jobs.local import conditions as ops
from cube_jupyter.jobs.local import rendezvous
from cube_jupyter.jobs.local import training_plan as plan
from cube_jupyter.jobs.local.training_state import JobRecord, ReplicaRecord
from cube_jupyter.jobs.model import Job, wait_until_finished
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.local import files, gpus, processes
from cube_jupyter.local.records import RecordStore
from cube_jupyter.storage import ArtifactStore, open_store

log = logging.getLogger(__name__)

TAIL_LINES = 20
# How long the other replicas may take to exit on their own once the job has succeeded.
SUCCESS_SETTLE_SECONDS = 5.0


class LocalTrainingRunner:
    """Runs training specs as local processes; state under `state_dir/training/`."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        store: ArtifactStore | None = None,
        python: str = sys.executable,
        mpirun: str | None = None,
        stop_grace_seconds: float = 10.0,
    ) -> None:
        self.root = files.private_dir(Path(state_dir) / "training")
        self.records = RecordStore(self.root, "training job")
        self._store = store
        self.python = python
        # None: Open MPI's mpirun when installed; "": start MPI ranks directly (see local.mpi).
        self.mpirun = (shutil.which("mpirun") or "") if mpirun is None else mpirun
        self.stop_grace_seconds = stop_grace_seconds
        self.owner = processes.this_process_id()
        self._procs: dict[tuple[str, str, str], subprocess.Popen[bytes]] = {}
        self._lock = threading.RLock()

    @property
    def store(self) -> ArtifactStore:
        if self._store is None:
            self._store = open_store(None)
        return self._store

    # -- paths ---------------------------------------------------------------------------------------

    def work_dir(self, user: str, name: str) -> Path:
        return self.records.directory(user, name) / "work"

    def log_dir(self, user: str, name: str) -> Path:
        return self.records.directory(user, name) / "logs"

    # -- start ---------------------------------------------------------------------------------------

    def start(self, spec: TrainingSpec, *, code_dir: str | Path | None = None) -> Job:
        """Ship the code (from `code_dir`, default the working directory, unless the spec names a
        package), record the job and start its replicas. Conflict for a duplicate name; when a
        replica cannot be started, nothing of the job is left."""
        spec = packaging.ship_training_code(spec, self.store, Path(code_dir or os.getcwd()))
        record = plan.plan_job(
            spec,
            rdv=rendezvous.plan(spec.framework, [(role.role, role.replicas) for role in spec.roles]),
            gpu_ids=plan.assign_gpus(spec, gpus.visible_gpu_ids() if spec.total_gpus else []),
            work_dir=str(self.work_dir(spec.user, spec.name)),
            log_dir=str(self.log_dir(spec.user, spec.name)),
            package_uri=spec.code.package_uri,
            python=self.python,
            mpirun=self.mpirun,
            now=time.time(),
            as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
        )
        record.owner = self.owner
        with self._lock:
            self.records.create(record.user, record.name, record.to_json())
            try:
                files.private_dir(Path(record.work_dir))
                files.private_dir(Path(record.log_dir))
                if spec.framework == "mpi":
                    self._write_hostfile(spec, Path(record.work_dir))
                plan.mark_created(record, time.time())
                for replica in record.replicas:
                    if not replica.virtual:
                        self._spawn(record, replica)
                self._reconcile(record)
                self._save(record)
            except BaseException:
                self._kill_all(record)
                self.records.remove(record.user, record.name)
                raise
            return plan.job_view(record)

    def _write_hostfile(self, spec: TrainingSpec, work_dir: Path) -> None:
        text = rendezvous.mpi_hostfile(spec.replicas_of("Worker"), spec.slots_per_worker or 1)
        (work_dir / rendezvous.MPI_HOSTFILE).write_text(text)

    def _log_path(self, record: JobRecord, replica: ReplicaRecord) -> Path:
        return Path(record.log_dir) / plan.log_name(replica)

    def _save(self, record: JobRecord) -> bool:
        """Write the record as its supervisor; False when the job was deleted meanwhile."""
        record.owner = self.owner
        return self.records.write(record.user, record.name, record.to_json())

    def _load(self, user: str, name: str) -> JobRecord | None:
        text = self.records.read(user, name)
        return JobRecord.from_json(text) if text is not None else None

    def _all(self, user: str | None = None) -> list[JobRecord]:
        records = [JobRecord.from_json(text) for text in self.records.list(user)]
        return sorted(records, key=lambda r: (r.created, r.name))

    def _spawn(self, record: JobRecord, replica: ReplicaRecord) -> None:
        env = {k: v for k, v in os.environ.items() if k not in plan.DROPPED_ENV}
        env.update(replica.env)
        header = f"{record.name} {replica.name} (attempt {replica.restarts + 1})"
        try:
            proc = processes.spawn(
                replica.argv, env, Path(record.work_dir), self._log_path(record, replica), header
            )
        except OSError as exc:
            if exc.filename == replica.argv[0]:  # the spec's command is what cannot run, not the backend
                raise InvalidInput(
                    f"command {replica.argv[0]!r} of replica {replica.name} cannot be run on this "
                    f"machine: {exc.strerror or exc}",
                    field="command",
                ) from None
            raise BackendUnavailable(
                f"replica {replica.name} of {record.name!r} could not be started: {exc.strerror or exc}",
                field="command",
            ) from None
        self._procs[(record.user, record.name, replica.name)] = proc
        replica.pid = proc.pid
        try:
            replica.started = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            replica.started = None  # already gone: the next poll reaps it
        replica.state = "Running"
        replica.exit_code = None
        replica.message = None

    # -- reconcile -----------------------------------------------------------------------------------

    def refresh(self, user: str, name: str) -> Job:
        """Reconcile one job (when this process supervises it) and return its status."""
        with self._lock:
            record = self._load(user, name)
            if record is None:
                self._forget(user, name)
                raise NotFound(f"training job {name!r} not found", field="name")
            return plan.job_view(self._reconcile_owned(record))

    def refresh_all(self) -> None:
        """Reconcile every job: ours, orphans of a dead owner, and finished ones past their TTL."""
        with self._lock:
            for record in self._all():
                try:
                    record = self._reconcile_owned(record)
                    if plan.expired(record, time.time()):
                        self._delete_record(record)
                except Exception:
                    log.exception("reconciling training job %s/%s failed", record.user, record.name)

    def _reconcile_owned(self, record: JobRecord) -> JobRecord:
        if record.owner != self.owner:
            if processes.owner_alive(record.owner):
                return record  # another live process (the server, a CLI run) supervises it
            if record.completed is None or self._has_live_replicas(record):
                self._orphaned(record)
            return record
        before = record.to_json()
        self._reconcile(record)
        if record.to_json() != before and not self._save(record):
            self._kill_all(record)  # deleted meanwhile (another process): leave nothing running
            self._forget(record.user, record.name)
        return record

    def abandon(self) -> None:
        """This process stops supervising (the workbench shuts down, `train run` is interrupted): its
        unfinished jobs fail now and their replicas are stopped. They run in their own sessions, so
        they would otherwise outlive it, unsupervised, until another process reconciles them."""
        with self._lock:
            for record in self._all():
                if record.owner == self.owner and record.completed is None:
                    self._orphaned(record, "SupervisorStopped", plan.STOPPED_MESSAGE)

    def _orphaned(
        self, record: JobRecord, reason: str = "WorkbenchRestarted", why: str = plan.RESTARTED_MESSAGE
    ) -> None:
        """The job's supervisor died: kill what is left and, if it was still running, fail it."""
        self._kill_all(record)
        plan.mark_orphaned(record, reason, why, time.time())
        self._save(record)

    def _poll(self, record: JobRecord) -> None:
        """Reap replicas that exited: state, exit status. What a replica left running in its process
        group goes with it, as a container's processes do when its main process exits."""
        for replica in record.replicas:
            if replica.virtual or replica.state != "Running":
                continue
            proc = self._procs.get((record.user, record.name, replica.name))
            if proc is None or not processes.exited(proc):
                continue
            processes.kill_group(
                proc.pid
            )  # the leader is a zombie until reaped: its group id is still its own
            code = proc.wait()
            self._procs.pop((record.user, record.name, replica.name), None)
            replica.exit_code = ops.exit_status(code)
            replica.state = "Succeeded" if code == 0 else "Failed"

    def _reconcile(self, record: JobRecord) -> None:
        """One pass of the operator's loop over a job this process supervises."""
        self._poll(record)
        if record.completed is None:
            now = time.time()
            for replica in [r for r in record.replicas if r.state == "Failed" and not r.virtual]:
                if record.completed is not None:
                    break
                failure = plan.failure_of(record, replica)
                if failure is None:
                    plan.mark_restarting(record, replica, now)
                    self._spawn(record, replica)
                else:
                    tail = processes.log_tail(self._log_path(record, replica), TAIL_LINES)
                    plan.mark_failed(record, replica, *failure, tail, now)
                    self._clean_up(record)
            if record.completed is None:
                if plan.mark_succeeded_if_done(record, now):
                    self._let_finish(record)
                    self._clean_up(record)
                elif plan.mark_deadline_exceeded_if_past(record, now):
                    self._stop_running(record)
                else:
                    plan.mark_running_if_all_run(record, now)
        plan.mirror_virtual(record)

    def _let_finish(self, record: JobRecord) -> None:
        """The success rule fires when the Master exits, often while the other ranks are still leaving
        their last collective: give them a moment to exit on their own before cleanPodPolicy stops
        them, so a finished worker shows its own exit code rather than the kill's."""
        deadline = time.monotonic() + SUCCESS_SETTLE_SECONDS
        while time.monotonic() < deadline and any(
            r.state == "Running" for r in record.replicas if not r.virtual
        ):
            time.sleep(0.05)
            self._poll(record)

    def _clean_up(self, record: JobRecord) -> None:
        """cleanPodPolicy once the job finished: Running and All stop the replicas still running
        (All also removes the finished replicas' logs, as deleting their pods does); None leaves
        them running until the job is deleted."""
        if record.clean_pod_policy == "None":
            return
        self._stop_running(record)
        if record.clean_pod_policy == "All":
            shutil.rmtree(record.log_dir, ignore_errors=True)

    def _stop_running(self, record: JobRecord) -> None:
        running = [r for r in record.replicas if r.state == "Running" and not r.virtual]
        self._terminate(record, running)
        for replica in running:
            self._poll_one(record, replica)
            if replica.state == "Running":  # ours were reaped above; this one was not our child
                replica.state = "Failed"
            replica.message = replica.message or f"stopped: the job {ops.phase(record.conditions).lower()}"

    def _poll_one(self, record: JobRecord, replica: ReplicaRecord) -> None:
        proc = self._procs.pop((record.user, record.name, replica.name), None)
        if proc is not None:
            code = proc.wait()
            replica.exit_code = ops.exit_status(code)
            replica.state = "Succeeded" if code == 0 else "Failed"

    def _terminate(self, record: JobRecord, replicas: Sequence[ReplicaRecord]) -> None:
        """Stop each replica's process group (ours, or one a previous supervisor started)."""
        leaders: list[subprocess.Popen[bytes] | psutil.Process] = []
        for replica in replicas:
            ours = self._procs.get((record.user, record.name, replica.name))
            proc = ours if ours is not None else processes.live_process(replica.pid, replica.started)
            if proc is not None:
                leaders.append(proc)
        processes.stop_groups(leaders, self.stop_grace_seconds)

    def _kill_all(self, record: JobRecord) -> None:
        live = [r for r in record.replicas if not r.virtual and (r.state == "Running" or r.pid)]
        self._terminate(record, live)
        for replica in live:
            self._poll_one(record, replica)

    def _has_live_replicas(self, record: JobRecord) -> bool:
        return any(processes.live_process(r.pid, r.started) for r in record.replicas if not r.virtual)

    def _forget(self, user: str, name: str) -> None:
        for key in [k for k in self._procs if k[:2] == (user, name)]:
            self._procs.pop(key, None)

    # -- reading -------------------------------------------------------------------------------------

    def status(self, user: str, name: str) -> Job:
        """The job's status, reconciled first when this process supervises it."""
        return self.refresh(user, name)

    def get(self, user: str, name: str) -> Job | None:
        """The recorded status, without reconciling (never waits on a process)."""
        record = self._load(user, name)
        return plan.job_view(record) if record is not None else None

    def list(self, user: str | None = None) -> list[Job]:
        return [plan.job_view(record) for record in self._all(user)]

    def wait(self, user: str, name: str, timeout: float, poll: float = 0.1) -> Job:
        """Reconcile until the job has finished or `timeout` seconds passed; the last status."""
        return wait_until_finished(lambda: self.status(user, name), timeout, poll)

    def _require(self, user: str, name: str) -> JobRecord:
        record = self._load(user, name)
        if record is None:
            raise NotFound(f"training job {name!r} not found", field="name")
        return record

    def _replica(self, record: JobRecord, replica: str | None) -> ReplicaRecord:
        if replica is None:
            real = [r for r in record.replicas if not r.virtual]
            return real[0]
        found = record.replica(replica)
        if found is None:
            names = ", ".join(r.name for r in record.replicas)
            raise NotFound(
                f"job {record.name!r} has no replica {replica!r} (it has {names})", field="replica"
            )
        return found

    def _log_source(self, record: JobRecord, replica: ReplicaRecord) -> tuple[Path, tuple[bytes, ...]]:
        name, tags = plan.log_source(record, replica)
        return Path(record.log_dir) / name, tags

    def logs(self, user: str, name: str, replica: str | None = None, tail: int | None = None) -> str:
        """One replica's log (all attempts), or its last `tail` lines."""
        record = self._require(user, name)
        path, tags = self._log_source(record, self._replica(record, replica))
        return processes.select_lines(processes.read_log(path), tags, tail).decode("utf-8", "replace")

    def follow(
        self, user: str, name: str, replica: str | None = None, *, tail: int | None = None, poll: float = 0.2
    ) -> Iterator[str]:
        """A replica's log as it grows: first what is there (or its last `tail` lines), then new
        lines until the replica has finished and all is read, or the job is gone. Reconciles the
        job while it waits when this process supervises it."""
        record = self._require(user, name)
        chosen = self._replica(record, replica)
        path, tags = self._log_source(record, chosen)
        data = processes.read_log(path)
        offset = len(data)
        complete, _, pending = data.rpartition(b"\n")
        first = processes.select_lines(complete + b"\n" if complete else b"", tags, tail)
        if first:
            yield first.decode("utf-8", "replace")
        while True:
            try:
                job = self.refresh(user, name)
            except NotFound:
                return
            state = next((r.state for r in job.replicas if r.name == chosen.name), "Failed")
            done = state not in ("Pending", "Running")
            data = processes.read_log(path, offset)
            offset += len(data)
            pending += data
            complete, _, pending = pending.rpartition(b"\n")
            chunk = processes.select_lines(complete + b"\n" if complete else b"", tags, None)
            if chunk:
                yield chunk.decode("utf-8", "replace")
            if done and not data:
                rest = processes.select_lines(pending, tags, None)
                if rest:
                    yield rest.decode("utf-8", "replace")
                return
            time.sleep(poll)

    # -- delete --------------------------------------------------------------------------------------

    def delete(self, user: str, name: str) -> None:
        """Stop every replica (process groups), forget the job, remove its logs and work directory."""
        with self._lock:
            self._delete_record(self._require(user, name))

    def _delete_record(self, record: JobRecord) -> None:
        self._kill_all(record)
        self.records.remove(record.user, record.name)
        self._forget(record.user, record.name)


class AsyncLocalTraining:
    """The runner for an asyncio server: reconciles in a thread every `poll` seconds; reads never
    wait on a process, and anything that may (start, delete) runs in a thread."""

    def __init__(self, runner: LocalTrainingRunner, poll: float = 0.5) -> None:
        self.runner = runner
        self.poll = poll
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Reconcile once (orphans of a previous workbench are failed now), then keep reconciling."""
        await asyncio.to_thread(self.runner.refresh_all)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._supervise(), name="cube-local-training")

    async def close(self) -> None:
        """Stop reconciling; the jobs this process supervises fail and their replicas are stopped."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await asyncio.to_thread(self.runner.abandon)

    async def _supervise(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.runner.refresh_all)
            except Exception:
                log.exception("local training supervisor pass failed")
            await asyncio.sleep(self.poll)

    async def submit(self, spec: TrainingSpec, *, code_dir: str | Path | None = None) -> Job:
        return await asyncio.to_thread(self.runner.start, spec, code_dir=code_dir)

    def list(self, user: str | None = None) -> list[Job]:
        return self.runner.list(user)

    def get(self, user: str, name: str) -> Job | None:
        return self.runner.get(user, name)

    async def delete(self, user: str, name: str) -> None:
        await asyncio.to_thread(self.runner.delete, user, name)

    async def logs(
        self,
        user: str,
        name: str,
        replica: str | None = None,
        *,
        follow: bool = False,
        tail: int | None = None,
    ) -> AsyncIterator[str]:
        """Log chunks of one replica; with `follow`, until it has finished."""
        if not follow:
            text = await asyncio.to_thread(self.runner.logs, user, name, replica, tail)
            if text:
                yield text
            return
        chunks = self.runner.follow(user, name, replica, tail=tail)
        done = object()
        while True:
            chunk = await asyncio.to_thread(next, chunks, done)
            if chunk is done:
                return
            yield chunk  # type: ignore[misc]

"""Training jobs on this machine: the supervisor that starts, reaps and stops one process per
replica, with the env the operator would set (planned, and judged by the operator's rules, in
`training_plan`).

`LocalTrainingRunner` is the synchronous core: `start(spec)` ships the code (when it is not shipped
yet), records the job and starts every replica as `python -m cube_jupyter.jobs.entry ...` (or the
spec's command, checked first: one that cannot run here is bad input) in its own process group, in
the job's work directory, with stdout and stderr in a per-replica log. Each replica runs under a
monitor (`cube_jupyter.local.monitor`, conmon's role for a container) that leads its process group
and writes the replica's exit code to a file next to its log. `refresh` is the operator's reconcile
loop: it reaps replicas, restarts failed ones while the restart policy and backoff limit allow, marks
the job Succeeded or Failed (the failed replica's name, exit code and the cause its traceback gives,
else its log tail, in the message: `training_plan.mark_failed`), stops the others by
`clean_pod_policy` (SIGTERM to the process group, SIGKILL after a grace period), enforces
`active_deadline_seconds`, and deletes finished jobs after `ttl_seconds_after_finished`.

The process that starts a job supervises it (`owner` in the record). Replicas outlive it, as notebook
servers do: the workbench's close leaves them running, and when a job's owner has died the next
supervisor re-attaches the job (`refresh_all`, at start and on every pass): live replicas are
supervised from there on, and those that ended meanwhile are judged by the exit code their monitor
recorded (unknown, and so failed, only when the monitor itself was killed); the operator's rules then
apply as usual. Only an interrupted `train run` stops its own job (`abandon`). `AsyncLocalTraining`
is the small facade the server uses: it runs `refresh_all` in a thread every `poll` seconds and never
blocks the event loop.

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
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import psutil

from cube_jupyter import tracebacks
from cube_jupyter.errors import BackendUnavailable, CubeError, InvalidInput, NotFound, QuotaExceeded
from cube_jupyter.jobs import package as packaging
from cube_jupyter.jobs.local import conditions as ops
from cube_jupyter.jobs.local import rendezvous
from cube_jupyter.jobs.local import training_plan as plan
from cube_jupyter.jobs.local.training_state import JobRecord, ReplicaRecord
from cube_jupyter.jobs.model import IDLE_GPU_REASON, Job, wait_until_finished
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.local import admission, files, gpus, locks, monitor, processes
from cube_jupyter.local.records import RecordStore
from cube_jupyter.storage import ArtifactStore, open_store

log = logging.getLogger(__name__)

# How long the other replicas may take to exit on their own once the job has succeeded.
SUCCESS_SETTLE_SECONDS = 5.0
ADOPT_LOCK = "supervisor.lock"
ADMISSION_LOCK = "admission.lock"


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
        policy: admission.QueuePolicy | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.root = files.private_dir(self.state_dir / "training")
        self.records = RecordStore(self.root, "training job")
        self._store = store
        self.python = python
        # None: Open MPI's mpirun when installed; "": start MPI ranks directly (see local.mpi).
        self.mpirun = (shutil.which("mpirun") or "") if mpirun is None else mpirun
        self.stop_grace_seconds = stop_grace_seconds
        self.policy = policy or admission.QueuePolicy()
        self._wake = admission.Wake()  # whether a supervision pass (`refresh_all`) admits
        self.owner = processes.this_process_id()
        self._procs: dict[tuple[str, str, str], processes.Leader] = {}  # replicas' monitors
        self._started: set[tuple[str, str]] = set()  # the jobs this runner started (`abandon`)
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
        package), record the job in the queue and admit what fits (`admit_waiting`): it starts now,
        or waits its turn. Conflict for a duplicate name; bad input (a command that cannot run, more
        GPUs or CPU slots than this machine could ever give), a replica that cannot be started, or a
        user already at `max_queued` waiting jobs leaves nothing of the job."""
        plan.check_gpus(spec, len(gpus.visible_gpu_ids()) if spec.total_gpus else 0)
        plan.check_slots(spec, self.policy.cpu_slots)
        spec = packaging.ship_training_code(spec, self.store, Path(code_dir or os.getcwd()))
        now = time.time()
        record = plan.plan_job(
            spec,
            rdv=rendezvous.plan(spec.framework, [(role.role, role.replicas) for role in spec.roles]),
            work_dir=str(self.work_dir(spec.user, spec.name)),
            log_dir=str(self.log_dir(spec.user, spec.name)),
            package_uri=spec.code.package_uri,
            python=self.python,
            mpirun=self.mpirun,
            now=now,
            as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
        )
        record.owner = self.owner
        record.waiting, record.enqueued = True, now
        key = (record.user, record.name)
        with self._lock:
            self.records.create(record.user, record.name, record.to_json())
            try:
                files.private_dir(Path(record.work_dir))
                files.private_dir(Path(record.log_dir))
                self._check_commands(record)
                if spec.framework == "mpi":
                    self._write_hostfile(spec, Path(record.work_dir))
                self.admit_waiting(fresh=key)
                current = self._require(*key)
                if current.waiting:
                    check_queued(self.queue_side(), self.policy, current.user)
            except BaseException:
                self.records.remove(record.user, record.name)
                self._forget(*key)
                raise
            self._started.add(key)
            return plan.job_view(current)

    # -- the queue -----------------------------------------------------------------------------------

    def admit_waiting(self, fresh: tuple[str, str] | None = None) -> None:
        """The queue's admission pass (`admission.decide`, the one rule): start every waiting job that
        fits now, all its replicas at once, and record the others' places and reasons. Run when a job
        is submitted, ends or is deleted, and at start-up; one process at a time on this machine. A
        job that cannot be started fails, except `fresh` (the one being submitted): its error is
        raised, for `start` to leave nothing of it."""
        with self._lock:
            if any(r.waiting for r in self._all()):
                admission_pass(
                    self.root, self.state_dir, self.queue_side(), self.policy, self._admit, self._place, fresh
                )

    def _admit(self, user: str, name: str, free: list[str], fresh: bool) -> None:
        record = self._load(user, name)
        if record is not None and record.waiting:
            self._launch(record, free, raise_error=fresh)

    def _place(self, user: str, name: str, position: int, reason: str) -> None:
        record = self._load(user, name)
        if (
            record is not None
            and record.waiting
            and (record.queue_position, record.queue_reason) != (position, reason)
        ):
            record.queue_position, record.queue_reason = position, reason
            self.records.write(record.user, record.name, record.to_json())

    def queue_side(self) -> admission.QueueSide:
        """The training jobs' part of the machine's queue: waiting jobs, and what admitted,
        unfinished ones hold (GPU ids and CPU slots)."""
        return admission.QueueSide(waiting=self._waiting_items, held=self._held_items)

    def _waiting_items(self) -> list[admission.Waiting]:
        return [
            admission.Waiting(r.user, r.name, r.enqueued or r.created, *_demand(r), kind=admission.JOB)
            for r in self._all()
            if r.waiting
        ]

    def _held_items(self) -> list[admission.Held]:
        return [
            admission.Held(
                r.user, admission.JOB, tuple(g for rep in r.replicas for g in rep.gpu_ids), _demand(r)[1]
            )
            for r in self._all()
            if r.active
        ]

    def _launch(self, record: JobRecord, free: list[str], *, raise_error: bool) -> None:
        """Start every replica of an admitted job; when one cannot start, none runs and the job fails
        (or, with `raise_error`, the error is raised)."""
        plan.assign_gpus(record, free)
        record.waiting, record.queue_position, record.queue_reason = False, None, None
        record.owner = self.owner
        plan.mark_created(record, time.time())
        try:
            for replica in record.replicas:
                if not replica.virtual:
                    self._spawn(record, replica)
            self._reconcile(record)
        except CubeError as exc:
            self._kill_all(record)
            if raise_error:
                raise
            plan.mark_stopped(record, "NotStarted", exc.message, time.time())
        self._save(record)
        log.info("admitted training job %s/%s from the queue", record.user, record.name)

    def _write_hostfile(self, spec: TrainingSpec, work_dir: Path) -> None:
        text = rendezvous.mpi_hostfile(spec.replicas_of("Worker"), spec.slots_per_worker or 1)
        (work_dir / rendezvous.MPI_HOSTFILE).write_text(text)

    def _log_path(self, record: JobRecord, replica: ReplicaRecord) -> Path:
        return Path(record.log_dir) / plan.log_name(replica)

    def _exit_path(self, record: JobRecord, replica: ReplicaRecord) -> Path:
        """Where the replica's monitor records its exit code."""
        return Path(record.log_dir) / f"{replica.name}.exit"

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

    @staticmethod
    def _env(replica: ReplicaRecord) -> dict[str, str]:
        env = processes.user_code_environ()
        env.update(replica.env)
        return env

    def _check_commands(self, record: JobRecord) -> None:
        """Every replica's command can be started here (InvalidInput naming `command` otherwise),
        before any starts: once under its monitor, a failed exec is only an exit code (127, 126)."""
        for replica in record.replicas:
            if replica.virtual:
                continue
            program = replica.argv[0]
            path = self._env(replica).get("PATH", os.defpath)
            why = processes.unrunnable(program, Path(record.work_dir), path)
            if why is not None:
                raise InvalidInput(
                    f"command {program!r} of replica {replica.name} cannot be run on this machine: {why}",
                    field="command",
                )

    def _spawn(self, record: JobRecord, replica: ReplicaRecord) -> None:
        exit_path = self._exit_path(record, replica)
        exit_path.unlink(missing_ok=True)  # a previous attempt's
        header = f"{record.name} {replica.name} (attempt {replica.restarts + 1})"
        argv = monitor.command(exit_path, replica.argv)
        try:
            proc = processes.spawn(
                argv, self._env(replica), Path(record.work_dir), self._log_path(record, replica), header
            )
        except OSError as exc:
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
        """Reconcile every job: ours, those of a dead owner (re-attached), and finished ones past
        their TTL."""
        with self._lock:
            for record in self._all():
                try:
                    record = self._reconcile_owned(record)
                    if plan.expired(record, time.time()):
                        self._delete_record(record)
                except Exception:
                    log.exception("reconciling training job %s/%s failed", record.user, record.name)
            self._wake_queue()

    def _wake_queue(self) -> None:
        """Admit when what the queue waits on changed since the last pass (`admission.Wake`)."""
        if self._wake.due(self.queue_side(), self.policy, waiting=any(r.waiting for r in self._all())):
            self.admit_waiting()

    def _reconcile_owned(self, record: JobRecord) -> JobRecord:
        if record.waiting:
            return record  # nothing runs yet: the admission pass starts it
        if record.owner != self.owner:
            if processes.owner_alive(record.owner) or not plan.needs_supervisor(record):
                return record  # another live process (the server, a CLI run) supervises it, or none must
            return self._adopt(record)
        self._reconcile_and_save(record)
        return record

    def _reconcile_and_save(self, record: JobRecord) -> None:
        before = record.to_json()
        self._reconcile(record)
        if record.to_json() != before and not self._save(record):
            self._kill_all(record)  # deleted meanwhile (another process): leave nothing running
            self._forget(record.user, record.name)
        elif record.completed is not None and JobRecord.from_json(before).completed is None:
            self.admit_waiting()  # it ended: what it held is free

    def _adopt(self, record: JobRecord) -> JobRecord:
        """Re-attach a job whose supervisor died (the workbench restarted while it ran): its live
        replicas are supervised from here on, those that ended meanwhile are reaped from their exit
        files, and the operator's rules go on. Of two processes starting at once, one adopts it."""
        with locks.try_file_lock(self.records.directory(record.user, record.name) / ADOPT_LOCK) as held:
            current = self._load(record.user, record.name) if held else None
            if current is None or current.owner != record.owner:
                return current or record  # deleted, or being (or just) adopted by another process
            for replica in current.replicas:
                if replica.virtual or replica.state not in ("Pending", "Running"):
                    continue
                leader = processes.live_process(replica.pid, replica.started)
                if leader is not None:
                    self._procs[(current.user, current.name, replica.name)] = leader
                else:
                    self._reap(current, replica)  # it ended while nobody supervised it
            log.info(
                "re-attached training job %s/%s: its supervisor (process %s) is gone",
                current.user,
                current.name,
                current.owner.partition(":")[0],
            )
            current.owner = self.owner
            self._reconcile_and_save(current)
            return current

    def abandon(self) -> None:
        """Stop supervising the jobs this runner started (an interrupted `train run`, which runs its
        job in the foreground): those still unfinished fail now and their replicas are stopped. Jobs
        it re-attached, and every job when the workbench closes, keep running."""
        with self._lock:
            for user, name in sorted(self._started):
                record = self._load(user, name)
                if record is not None and record.owner == self.owner and record.completed is None:
                    self._kill_all(record)
                    plan.mark_stopped(record, "SupervisorStopped", plan.STOPPED_MESSAGE, time.time())
                    self._save(record)

    def _poll(self, record: JobRecord) -> None:
        """Reap replicas that exited: state, exit status. What a replica left running in its process
        group goes with it, as a container's processes do when its main process exits."""
        for replica in record.replicas:
            if replica.virtual or replica.state != "Running":
                continue
            leader = self._procs.get((record.user, record.name, replica.name))
            if leader is None or not processes.leader_exited(leader):
                continue
            if processes.holds_pid(leader):  # a zombie until reaped: its group id is still its own
                processes.kill_group(leader.pid)
            self._reap(record, replica)

    def _reap(
        self, record: JobRecord, replica: ReplicaRecord, unknown: str = plan.UNKNOWN_EXIT_MESSAGE
    ) -> None:
        """Record how a replica whose leader exited ended (Failed, saying `unknown`, when that is)."""
        code = self._exit_code(record, replica)
        replica.exit_code = None if code is None else ops.exit_status(code)
        replica.state = "Succeeded" if code == 0 else "Failed"
        if code is None:
            replica.message = unknown

    def _exit_code(self, record: JobRecord, replica: ReplicaRecord) -> int | None:
        """The returncode of a replica whose leader exited: our child's, or the one its monitor wrote
        for a replica this process did not start (None when its monitor was killed)."""
        leader = self._procs.pop((record.user, record.name, replica.name), None)
        if isinstance(leader, subprocess.Popen):
            return leader.wait()
        return monitor.read_exit_code(self._exit_path(record, replica))

    def _reconcile(self, record: JobRecord) -> None:
        """One pass of the operator's loop over a job this process supervises."""
        self._poll(record)
        if record.completed is None and record.stop_requested:
            self._stop_idle(record, record.stop_requested)
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
                    tail = processes.log_tail(self._log_path(record, replica), *tracebacks.LOG_TAIL)
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
        stopped = f"stopped: the job {ops.phase(record.conditions).lower()}"
        for replica in running:
            self._reap(record, replica, unknown=stopped)  # unknown: its monitor was killed with it
            replica.message = replica.message or stopped

    def _terminate(self, record: JobRecord, replicas: Sequence[ReplicaRecord]) -> None:
        """Stop each replica's process group (ours, or one a previous supervisor started)."""
        leaders: list[processes.Leader] = []
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
            if (record.user, record.name, replica.name) in self._procs:
                self._reap(record, replica)  # and so never left a zombie

    def _forget(self, user: str, name: str) -> None:
        for key in [k for k in self._procs if k[:2] == (user, name)]:
            self._procs.pop(key, None)
        self._started.discard((user, name))

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

    # -- stop and delete -----------------------------------------------------------------------------

    def stop(self, user: str, name: str, why: str) -> Job:
        """Stop a running job from outside its replicas (the workbench found its GPUs idle): their
        process groups are stopped and the job fails with reason IdleGPU, saying `why`; its record
        and logs stay until it is deleted. One another live process supervises (a `train run`) is
        asked to, and stops it on its next pass, so that the two never race over its replicas. One
        finished, or still waiting in the queue, is left."""
        with self._lock:
            record = self._require(user, name)
            if record.completed is not None or record.waiting:
                return plan.job_view(record)
            if record.owner != self.owner and processes.owner_alive(record.owner):
                record.stop_requested = why
            else:
                self._stop_idle(record, why)
            if self._save(record) and record.completed is not None:
                self.admit_waiting()  # what it held is free
            return plan.job_view(record)

    def _stop_idle(self, record: JobRecord, why: str) -> None:
        live = [r for r in record.replicas if r.state in ("Pending", "Running") and not r.virtual]
        self._kill_all(record)
        plan.mark_stopped(record, IDLE_GPU_REASON, why, time.time())
        for replica in live:
            replica.message = replica.message or why

    def delete(self, user: str, name: str) -> None:
        """Stop every replica (process groups), forget the job, remove its logs and work directory."""
        with self._lock:
            self._delete_record(self._require(user, name))
            self.admit_waiting()  # what it held (or its place in the queue) is free

    def _delete_record(self, record: JobRecord) -> None:
        self._kill_all(record)
        self.records.remove(record.user, record.name)
        self._forget(record.user, record.name)


Admit = Callable[[str, str, list[str], bool], None]  # (user, name, free GPU ids, fresh): start it
Place = Callable[[str, str, int, str], None]  # (user, name, position, reason): record its place


def admission_pass(
    lock_dir: Path,
    state_dir: Path,
    own: admission.QueueSide,
    policy: admission.QueuePolicy,
    admit: Admit,
    place: Place,
    fresh: tuple[str, str] | None = None,
) -> None:
    """One local job kind's admission pass (training jobs, tuning experiments): the machine's verdict
    under the kind's own lock and the machine's assignment lock; `admit` each admitted job (`fresh`:
    the one being submitted, whose start error is raised) and `place` each waiting one. Both are
    handed every job-kind item and skip those not of their kind (names are unique across kinds)."""
    with (
        locks.blocking_file_lock(lock_dir / ADMISSION_LOCK),
        locks.blocking_file_lock(gpus.assign_lock_path(state_dir)),
    ):
        verdict, free = admission.machine_verdict(own, policy)
        for chosen in verdict.admit:
            if chosen.kind == admission.JOB:
                admit(chosen.user, chosen.name, free, (chosen.user, chosen.name) == fresh)
        for (kind, user, name), (position, reason) in verdict.waiting.items():
            if kind == admission.JOB:
                place(user, name, position, reason)


def check_queued(own: admission.QueueSide, policy: admission.QueuePolicy, user: str) -> None:
    """QuotaExceeded when a job of `user` just queued makes more than `max_queued` of their jobs (of
    every kind: training and tuning, from `own` and the other sides) waiting in the machine's queue."""
    limit = policy.max_queued
    sides = [own, *policy.others]
    queued = sum(1 for side in sides for w in side.waiting() if w.user == user and w.kind == admission.JOB)
    if limit and queued > limit:
        raise QuotaExceeded(
            f"user {user!r} has {queued - 1} jobs waiting in the queue, the limit "
            f"(CubeJobs.max_queued_per_user) is {limit}; delete one or wait for one to start",
            field="name",
        )


def _demand(record: JobRecord) -> tuple[int, int]:
    """The GPUs and CPU slots a job takes, all replicas together."""
    return sum(r.gpus for r in record.replicas), sum(r.slots for r in record.replicas)


class AsyncLocalTraining:
    """The runner for an asyncio server: reconciles in a thread every `poll` seconds; reads never
    wait on a process, and anything that may (start, delete) runs in a thread. `also` are the other
    local job kinds' supervision passes (the tuner's queue), run in the same thread after it."""

    def __init__(
        self, runner: LocalTrainingRunner, poll: float = 0.5, also: Sequence[Callable[[], None]] = ()
    ) -> None:
        self.runner = runner
        self.poll = poll
        self.passes = (runner.refresh_all, *also)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Reconcile once (jobs of a previous workbench are re-attached now), then keep reconciling."""
        await asyncio.to_thread(self._pass)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._supervise(), name="cube-local-training")

    async def close(self) -> None:
        """Stop reconciling. The jobs keep running, as notebook servers do; the next start re-attaches
        them (their monitors keep the exit codes of replicas that end meanwhile)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def abandon(self) -> None:
        """`LocalTrainingRunner.abandon`: an interrupted `train run` stops the job it started."""
        await asyncio.to_thread(self.runner.abandon)

    async def _supervise(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self._pass)
            except Exception:
                log.exception("local jobs' supervisor pass failed")
            await asyncio.sleep(self.poll)

    def _pass(self) -> None:
        for supervise in self.passes:
            supervise()

    async def submit(self, spec: TrainingSpec, *, code_dir: str | Path | None = None) -> Job:
        return await asyncio.to_thread(self.runner.start, spec, code_dir=code_dir)

    def list(self, user: str | None = None) -> list[Job]:
        return self.runner.list(user)

    def get(self, user: str, name: str) -> Job | None:
        return self.runner.get(user, name)

    async def delete(self, user: str, name: str) -> None:
        await asyncio.to_thread(self.runner.delete, user, name)

    async def stop(self, user: str, name: str, why: str) -> Job:
        return await asyncio.to_thread(self.runner.stop, user, name, why)

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

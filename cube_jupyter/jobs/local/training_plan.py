"""A local training job, planned and judged without touching a process: pure functions of the spec,
the job's record and the clock.

- `plan_job` gives every replica its argv and env (the operator's env from `rendezvous`, the spec's,
  GPU ids, thread caps) before anything starts;
- the `mark_*` functions apply the Training Operator's rules (`conditions`) to a record: Running,
  Restarting, Succeeded, Failed, DeadlineExceeded, with the messages `kubectl describe` would show;
- `job_view` is the record as the API shows it.

The supervisor (`training.py`) does the I/O: it starts and reaps the processes these plans describe
and saves the records these functions change.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict

from cube_jupyter import tracebacks
from cube_jupyter.errors import InvalidInput
from cube_jupyter.fields import parse_quantity
from cube_jupyter.jobs.local import conditions as ops
from cube_jupyter.jobs.local import rendezvous
from cube_jupyter.jobs.local.training_state import JobRecord, ReplicaRecord
from cube_jupyter.jobs.model import Condition, Job, JobError, QueuePlace, Replica
from cube_jupyter.jobs.training_spec import RoleSpec, TrainingSpec
from cube_jupyter.local import admission

ENTRY_MODULE = "cube_jupyter.jobs.entry"
MPI_MODULE = "cube_jupyter.jobs.local.mpi"
PYTHON_NAMES = ("python", "python3", f"python3.{sys.version_info.minor}")
STOPPED_MESSAGE = "the process supervising it stopped while it ran"
UNKNOWN_EXIT_MESSAGE = "its exit status is unknown: its monitor was killed while no workbench supervised it"


# -- planning --------------------------------------------------------------------------------------


def plan_job(
    spec: TrainingSpec,
    *,
    rdv: rendezvous.Rendezvous,
    work_dir: str,
    log_dir: str,
    package_uri: str | None,
    python: str,
    mpirun: str,
    now: float,
    as_root: bool = False,
) -> JobRecord:
    """Every replica's argv and env: the record the supervisor starts from."""
    roles = [(role.role, role.replicas) for role in spec.roles]
    hostfile = os.path.join(work_dir, rendezvous.MPI_HOSTFILE)
    slots = rendezvous.slots(roles)
    replicas = []
    for slot in slots:
        role = spec.role(slot.role)
        assert role is not None
        env = {**cpu_threads_env(role.resources.cpu, len(slots)), **spec.env, **role.env}
        env.update(rendezvous.replica_env(spec.framework, roles, slot, rdv, hostfile=hostfile))
        env["CUDA_VISIBLE_DEVICES"] = ""  # its GPUs are assigned when it is admitted
        env["CUBE_JOB_NAME"] = spec.name
        env["CUBE_REPLICA"] = slot.name
        virtual = spec.framework == "mpi" and slot.role == "Worker"
        if spec.framework == "mpi" and slot.role == "Launcher" and as_root:
            env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
        argv = [] if virtual else replica_argv(spec, role, package_uri, hostfile, python, mpirun)
        replicas.append(
            ReplicaRecord(
                role=slot.role,
                index=slot.index,
                argv=argv,
                env=env,
                gpus=role.resources.gpu,
                slots=replica_slots(role),
                virtual=virtual,
            )
        )
    return JobRecord(
        user=spec.user,
        name=spec.name,
        framework=spec.framework,
        spec=spec.to_dict(),
        created=now,
        work_dir=work_dir,
        log_dir=log_dir,
        replicas=replicas,
        restart_policy=spec.restart_policy,
        backoff_limit=spec.backoff_limit,
        clean_pod_policy=spec.clean_pod_policy,
        ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
        active_deadline_seconds=spec.active_deadline_seconds,
        package_uri=package_uri,
    )


def check_gpus(spec: TrainingSpec, visible: int) -> None:
    """InvalidInput naming the role when the job asks for more GPUs than this machine has: no wait
    could give them."""
    total = spec.total_gpus
    if total > visible:
        role = next(role for role in spec.roles if role.resources.gpu)
        field = f"replicas.{role.role.lower()}.resources.gpu"
        raise InvalidInput(
            f"{field}: the job asks for {total} GPUs in all and this machine has {visible}", field=field
        )


def check_slots(spec: TrainingSpec, cpu_slots: int) -> None:
    """InvalidInput naming `replicas` when the job takes more CPU slots than `CubeJobs.cpu_slots`."""
    asked = sum(replica_slots(role) * role.replicas for role in spec.roles)
    if cpu_slots and asked > cpu_slots:
        raise InvalidInput(
            f"replicas: the job takes {asked} CPU slots in all (a replica takes its cpu rounded up, or 1) "
            f"and CubeJobs.cpu_slots is {cpu_slots}",
            field="replicas",
        )


def replica_slots(role: RoleSpec) -> int:
    cpu = role.resources.cpu
    return admission.replica_slots(parse_quantity(cpu, "cpu") if cpu else None)


def assign_gpus(record: JobRecord, free: list[str]) -> None:
    """Hand each replica its GPUs from `free` (taken from it) as it is admitted."""
    for replica in record.replicas:
        replica.gpu_ids = [free.pop(0) for _ in range(replica.gpus)]
        replica.env["CUDA_VISIBLE_DEVICES"] = ",".join(replica.gpu_ids)


def command_argv(command: Sequence[str], python: str) -> list[str]:
    """A command as given, with a leading `python` meaning the workbench's interpreter (the image's
    Python, locally)."""
    argv = list(command)
    if argv and argv[0] in PYTHON_NAMES:
        argv[0] = python
    return argv


def entry_argv(spec: TrainingSpec, package_uri: str | None, python: str) -> list[str]:
    """The spec's code: its command, or the shared entrypoint running its script, notebook or
    function (from the shipped package)."""
    code = spec.code
    if code.kind == "command":
        return command_argv([*(code.command or ()), *code.args], python)
    argv = [python, "-m", ENTRY_MODULE]
    if package_uri:
        argv += ["--package", package_uri]
    return [*argv, "--kind", code.kind, "--target", code.target, "--", *code.args]


def replica_argv(
    spec: TrainingSpec, role: RoleSpec, package_uri: str | None, hostfile: str, python: str, mpirun: str
) -> list[str]:
    """A replica's argv: its role's command, the MPI launcher around the entrypoint, or the entrypoint."""
    if role.command is not None:
        return command_argv(role.command, python)
    if spec.framework == "mpi" and role.role == "Launcher" and spec.code.kind != "command":
        ranks = spec.replicas_of("Worker") * (spec.slots_per_worker or 1)
        launcher = [python, "-m", MPI_MODULE, "--hostfile", hostfile, "--np", str(ranks)]
        if mpirun:
            launcher += ["--mpirun", mpirun]
        return [*launcher, "--", *entry_argv(spec, package_uri, python)]
    return entry_argv(spec, package_uri, python)


def cpu_threads_env(cpu: str | None, replicas: int) -> dict[str, str]:
    """A pod's CPU limit caps its math libraries' threads; local replicas share one machine, so each
    gets the role's `cpu` (whole cores, at least one) or its share of the cores, else every rank's
    thread pool would claim every core. The spec's own env wins."""
    if cpu:
        threads = max(1, math.floor(parse_quantity(cpu, "resources.cpu")))
    else:
        threads = max(1, (os.cpu_count() or 1) // max(1, replicas))
    return {name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


# -- the operator's rules on a record ---------------------------------------------------------------


def _add(record: JobRecord, type_: str, reason: str, message: str, now: float) -> None:
    record.conditions = ops.add_condition(record.conditions, type_, reason, message, now)


def mark_created(record: JobRecord, now: float) -> None:
    kind = ops.kind_name(record.framework)
    _add(record, "Created", f"{kind}Created", f"{kind} {record.name} is created.", now)


def mark_running_if_all_run(record: JobRecord, now: float) -> None:
    """Running once every real replica runs (after Created or a restart)."""
    if ops.phase(record.conditions) in ("Created", "Restarting") and all(
        r.state == "Running" for r in record.replicas if not r.virtual
    ):
        kind = ops.kind_name(record.framework)
        _add(record, "Running", f"{kind}Running", f"{kind} {record.name} is running.", now)


def mark_restarting(record: JobRecord, replica: ReplicaRecord, now: float) -> None:
    """Count a restart of `replica` (which the supervisor then starts again)."""
    record.restarts += 1
    replica.restarts += 1
    kind = ops.kind_name(record.framework)
    limit = f" of {record.backoff_limit})." if record.backoff_limit is not None else ")."
    _add(
        record,
        "Restarting",
        f"{kind}Restarting",
        f"{kind} {record.name} is restarting because replica {replica.name} {how_it_ended(replica)} "
        f"(restart {record.restarts}{limit}",
        now,
    )


def failure_of(record: JobRecord, replica: ReplicaRecord) -> tuple[str, str] | None:
    """For a failed replica of an unfinished job: None when its policy restarts it, else the reason
    and summary the job fails with (the operator's BackoffLimitExceeded or {Kind}Failed)."""
    kind = ops.kind_name(record.framework)
    if ops.should_restart(record.restart_policy, replica.exit_code or 0):
        if ops.within_backoff(record.restarts, record.backoff_limit):
            return None
        return (
            "BackoffLimitExceeded",
            f"{kind} {record.name} has reached the specified backoff limit ({record.backoff_limit} restarts)",
        )
    return f"{kind}Failed", f"{kind} {record.name} has failed"


def mark_failed(
    record: JobRecord, replica: ReplicaRecord, reason: str, summary: str, log_tail: str, now: float
) -> None:
    """Failed because of `replica`: the condition says so in one line, with the cause when its log
    ends with a traceback; the job's message leads with that cause and the user's frames, else it
    shows the last lines of the log."""
    context = f"{summary}: replica {replica.name} {how_it_ended(replica)}"
    failure = tracebacks.last_failure(log_tail)
    if failure is None:
        line = context
        message = tracebacks.with_log_tail(context, log_tail)
    else:
        line = f"{context}: {failure.cause}"
        error = JobError(failure.cause, failure.user_frames, failure.traceback, context, replica.name)
        record.error = asdict(error)
        message = error.report()
    replica.message = line
    record.message = message
    _add(record, "Failed", reason, line, now)
    record.completed = now


def mark_succeeded_if_done(record: JobRecord, now: float) -> bool:
    """Succeeded by the operator's success policy; True when it just did."""
    states = [(r.role, r.state) for r in record.replicas if not r.virtual]
    if not ops.succeeded(record.framework, states):
        return False
    kind = ops.kind_name(record.framework)
    _add(record, "Succeeded", f"{kind}Succeeded", f"{kind} {record.name} is successfully completed.", now)
    record.completed = now
    return True


def mark_deadline_exceeded_if_past(record: JobRecord, now: float) -> bool:
    """Failed with DeadlineExceeded once `active_deadline_seconds` have passed; True when it just did."""
    deadline = record.active_deadline_seconds
    if deadline is None or now - record.created < deadline:
        return False
    kind = ops.kind_name(record.framework)
    _add(
        record,
        "Failed",
        "DeadlineExceeded",
        f"{kind} {record.name} was active longer than specified deadline ({deadline}s)",
        now,
    )
    record.message = record.conditions[-1]["message"]
    record.completed = now
    return True


def how_it_ended(replica: ReplicaRecord) -> str:
    if replica.exit_code is None:
        return f"ended and {UNKNOWN_EXIT_MESSAGE}"
    return f"exited with code {replica.exit_code}"


def mark_stopped(record: JobRecord, reason: str, why: str, now: float) -> None:
    """The job was stopped from outside its replicas (`SupervisorStopped`: an interrupted `train run`;
    `NotStarted`: a replica of a job admitted from the queue could not start): its unfinished
    replicas and (if unfinished) the job fail, saying `why`; a queued one waits no more."""
    record.waiting = False
    for replica in record.replicas:
        if replica.state in ("Pending", "Running"):
            replica.state = "Failed"
            replica.message = why
    if not record.completed:
        kind = ops.kind_name(record.framework)
        _add(record, "Failed", reason, f"{kind} {record.name}: {why}", now)
        record.message = f"{kind} {record.name} failed: {why}"
        record.completed = now


def needs_supervisor(record: JobRecord) -> bool:
    """Unfinished, or with replicas still recorded as running (cleanPodPolicy None): a job someone
    must reap; one whose supervisor died is re-attached."""
    return record.completed is None or any(
        r.state in ("Pending", "Running") for r in record.replicas if not r.virtual
    )


def mirror_virtual(record: JobRecord) -> None:
    """MPI workers are ranks under the launcher: they are in the launcher's state."""
    launcher = next((r for r in record.replicas if r.role == "Launcher"), None)
    for replica in record.replicas:
        if replica.virtual and launcher is not None:
            replica.state = launcher.state
            replica.exit_code = launcher.exit_code
            replica.message = "its ranks run under launcher-0"


def expired(record: JobRecord, now: float) -> bool:
    """Finished longer ago than `ttl_seconds_after_finished`: the job is to be deleted."""
    ttl = record.ttl_seconds_after_finished
    return ttl is not None and record.completed is not None and now - record.completed >= ttl


def log_source(record: JobRecord, replica: ReplicaRecord) -> tuple[str, tuple[bytes, ...]]:
    """The log file a replica's lines are in, and for an MPI worker the rank tags that are its lines."""
    if not replica.virtual:
        return log_name(replica), ()
    launcher = next(r for r in record.replicas if r.role == "Launcher")
    slots = int(record.spec.get("slots_per_worker") or 1)
    ranks = range(replica.index * slots, (replica.index + 1) * slots)
    return log_name(launcher), tuple(f"[1,{rank}]<".encode() for rank in ranks)


def log_name(replica: ReplicaRecord) -> str:
    return f"{replica.name}.log"


# -- the record as the API shows it ----------------------------------------------------------------


def job_view(record: JobRecord) -> Job:
    replicas = tuple(
        Replica(
            role=r.role,
            index=r.index,
            state=r.state,  # type: ignore[arg-type]
            gpus=r.gpus,
            exit_code=r.exit_code,
            pid=r.pid,
            message=r.message,
        )
        for r in record.replicas
    )
    return Job(
        name=record.name,
        kind="training",
        user=record.user,
        phase="Queued" if record.waiting else ops.phase(record.conditions),  # type: ignore[arg-type]
        created=record.created,
        framework=record.framework,
        backend="local",
        conditions=tuple(
            Condition(
                type=c["type"],
                status=c["status"],
                reason=c["reason"],
                message=c["message"],
                last_transition_time=c["last_transition_time"],
            )
            for c in record.conditions
        ),
        replicas=replicas,
        gpus=sum(r.gpus for r in record.replicas),
        message=record.message,
        error=JobError.from_dict(record.error) if record.error is not None else None,
        spec=record.spec,
        completed=record.completed,
        queue=QueuePlace(record.queue_position or 0, record.queue_reason or "") if record.waiting else None,
    )

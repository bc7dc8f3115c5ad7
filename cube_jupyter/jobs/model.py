"""What a job is once submitted, on either backend: the record the REST API, CLI and Jobs panel show.

A job is a training run (TFJob/PyTorchJob/XGBoostJob/MPIJob, or replica processes locally), a tuning
experiment (Katib Experiment, or Optuna trials locally) or a served model (KServe InferenceService, or
a local model server). Names are DNS-1123 labels, unique per user across the three kinds, and are the
job's id in `/cube/api/v1/jobs/{name}`. Status follows the Kubeflow operators' conditions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from cube_jupyter.names import user_slug

JobKind = Literal["training", "tuning", "serving"]
# The last true condition, as the Training Operator reports it; serving adds Ready; Queued: waiting in
# the local queue or Kueue's, before any replica started; Admitted: Kueue let it go, no replica runs yet.
JobPhase = Literal[
    "Queued", "Admitted", "Created", "Running", "Restarting", "Succeeded", "Failed", "Ready", "Deleting"
]
ReplicaState = Literal["Pending", "Running", "Succeeded", "Failed"]
FINISHED_PHASES: frozenset[str] = frozenset({"Succeeded", "Failed"})
# The Failed condition's reason when the workbench stopped a training job whose GPUs sat idle
# (`CubeGPU.cull_idle_gpu_jobs`), as DeadlineExceeded is a job's that ran past its deadline.
IDLE_GPU_REASON = "IdleGPU"


@dataclass(frozen=True)
class Condition:
    """One operator condition (type Created/Running/Succeeded/Failed/Ready), latest last."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    last_transition_time: float  # unix seconds


@dataclass(frozen=True)
class Replica:
    """One replica process or pod: `role` is the operator's replica type (Master, Worker, Chief, PS,
    Evaluator, Launcher, Trial, Predictor), `index` its ordinal within the role."""

    role: str
    index: int
    state: ReplicaState
    gpus: int = 0
    exit_code: int | None = None
    pod: str | None = None  # the pod name on the cluster
    pid: int | None = None  # the process id locally
    message: str | None = None

    @property
    def name(self) -> str:
        """`worker-1`: the key of its log stream."""
        return f"{self.role.lower()}-{self.index}"


@dataclass(frozen=True)
class Trial:
    """One tuning trial: its parameter assignment and the objective it reported."""

    name: str
    parameters: dict[str, Any]
    state: Literal["Pending", "Running", "Succeeded", "Failed", "Pruned"]
    metrics: dict[str, float] = field(default_factory=dict)
    objective: float | None = None


@dataclass(frozen=True)
class JobError:
    """Why a job failed, cause first (read by `cube_jupyter.tracebacks` from the failed replica's log):
    the exception and the user's own frames to show, the whole traceback for whoever asks."""

    cause: str  # one line: the exception's type and message
    frames: tuple[str, ...]  # the user's own frames, oldest first, as Python printed them
    traceback: str  # the whole traceback as logged, the workbench's frames too
    context: str  # what ended: "PyTorchJob x has failed: replica worker-0 exited with code 1"
    replica: str | None = None  # whose log holds it

    def report(self) -> str:
        """The cause, the user's frames, then what ended: the job's message, as the CLI prints it."""
        return "\n".join([self.cause, *self.frames, self.context])

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> JobError:
        """From its JSON (a local job's record, or the API's answer)."""
        return cls(**{**raw, "frames": tuple(raw["frames"])})


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued job is: its 1-based place in the queue (None where Kueue does not say), what it
    waits for, and on the cluster its Kueue LocalQueue."""

    position: int | None
    reason: str
    queue: str | None = None


@dataclass(frozen=True)
class Job:
    """A submitted job and its live status."""

    name: str
    kind: JobKind
    user: str
    phase: JobPhase
    created: float  # unix seconds
    framework: str | None = None  # training: pytorch|tensorflow|xgboost|mpi; serving: model format
    backend: Literal["local", "kubernetes"] = "local"
    namespace: str | None = None  # where its objects are, on a cluster
    conditions: tuple[Condition, ...] = ()
    replicas: tuple[Replica, ...] = ()
    gpus: int = 0  # GPUs the job holds in total, for the quota and the panel
    message: str | None = (
        None  # why it failed (cause first, else the failed replica's log tail), or is pending
    )
    error: JobError | None = None  # the traceback that failed it, when its log has one
    spec: dict[str, Any] = field(default_factory=dict)  # the normalized spec it was submitted with
    trials: tuple[Trial, ...] = ()  # tuning
    best_trial: str | None = None  # tuning
    endpoint: str | None = None  # serving: the URL predictions go to
    completed: float | None = None
    queue: QueuePlace | None = None  # while Queued

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["finished"] = self.finished
        body["replicas"] = [dict(r, name=f"{r['role'].lower()}-{r['index']}") for r in body["replicas"]]
        return body


def wait_until_finished(read: Callable[[], Job], timeout: float, poll: float) -> Job:
    """Read the job until it has finished or `timeout` seconds passed; its last status."""
    deadline = time.monotonic() + timeout
    job = read()
    while not job.finished and time.monotonic() < deadline:
        time.sleep(poll)
        job = read()
    return job


def describe_progress(job: Job) -> str:
    """One line of how the job is doing: its phase and each replica's state, or its trials and best."""
    parts = [f"{job.name} {job.phase}"]
    if job.kind == "tuning":
        done = sum(1 for t in job.trials if t.state in ("Succeeded", "Failed", "Pruned"))
        parts.append(f"trials {done}/{len(job.trials)} done")
        best = next((t for t in job.trials if t.name == job.best_trial), None)
        if best is not None and best.objective is not None:
            parts.append(f"best {best.name} = {best.objective:g}")
    else:
        parts.append(", ".join(f"{r.name} {r.state}" for r in job.replicas))
    return "  ".join(p for p in parts if p)


def saved_models_prefix(user: str) -> str:
    """Where `deploy()` saves `user`'s in-memory models in the artifact store: the one key prefix of a
    shared local store that the job service lets that user, and only that user, serve from."""
    return f"models/{user_slug(user)}"

"""The local training queue's one admission rule: which waiting jobs start now, and why the rest wait.

A pure function of the queue, what each user holds (the GPU ledger's count, the running jobs and
their CPU slots) and what the machine has free, so it is tested with a simulated clock and nothing
else decides. The rule:

- users with a higher `CubeJobs.user_priorities` go first; within a priority, the user holding the
  least of the machine (their dominant share: the larger of their GPUs over the machine's and their
  CPU slots over `cpu_slots`; then fewer running jobs), ties to the oldest head;
- each user's jobs go in submission order (FIFO): a user's later job never overtakes their head;
- a job starts only whole (every replica: gang-wise) and only within its owner's limits (GPU quota,
  `max_running_jobs_per_user`): a job waiting on its own owner's limits holds nothing back for others;
- a job waiting for the machine (GPUs or CPU slots) reserves what it asks for: jobs behind it may
  use only what is free beyond that reservation, so a big job at the head is never overtaken forever
  by a stream of small ones; it starts as soon as enough is freed (within one priority: a stream of
  higher-priority work goes first by design).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cube_jupyter.ledger import over_quota

Key = tuple[str, str]  # (user, name)


@dataclass(frozen=True)
class Waiting:
    """A queued job: what it asks for, all replicas together."""

    user: str
    name: str
    enqueued: float
    gpus: int
    slots: int

    @property
    def key(self) -> Key:
        return (self.user, self.name)


@dataclass(frozen=True)
class Holding:
    """What one user holds now: running training jobs, GPUs (the ledger: servers and jobs), CPU slots."""

    jobs: int = 0
    gpus: int = 0
    slots: int = 0


@dataclass(frozen=True)
class Machine:
    """GPUs this machine has and has free; CPU slots (`cpu_slots`, 0: no limit) and those free."""

    gpus: int
    free_gpus: int
    slots: int
    free_slots: int


@dataclass(frozen=True)
class Rules:
    gpu_quota: int | None
    max_running: int  # 0: no limit
    priorities: Mapping[str, int]


@dataclass(frozen=True)
class QueuePolicy:
    """The queue's configuration (`CubeJobs`, `CubeWorkbench.gpu_quota_per_user`) and how to read the
    GPUs a user holds: the workbench's one ledger (servers too); None counts the runner's own jobs.
    `gpus_taken` are the GPU ids other local work holds (running pipeline steps), not free to jobs."""

    rules: Rules = field(default_factory=lambda: Rules(None, 0, {}))
    cpu_slots: int = 0
    max_queued: int = 0  # 0: no limit
    gpus_held: Callable[[str], int] | None = None
    gpus_taken: Callable[[], Iterable[str]] | None = None


@dataclass(frozen=True)
class Verdict:
    """The jobs to start now, and each job left waiting with its 1-based position and reason."""

    admit: tuple[Waiting, ...]
    waiting: dict[Key, tuple[int, str]]


def replica_slots(cpu: float | None) -> int:
    """The CPU slots one replica takes: its cpu rounded up, or 1."""
    return max(1, math.ceil(cpu)) if cpu else 1


def decide(
    queue: Sequence[Waiting], holding: Mapping[str, Holding], machine: Machine, rules: Rules
) -> Verdict:
    held = dict(holding)
    lines: dict[str, list[Waiting]] = {}
    for item in sorted(queue, key=lambda w: (w.enqueued, w.name)):
        lines.setdefault(item.user, []).append(item)
    free_gpus, free_slots = machine.free_gpus, machine.free_slots
    admit: list[Waiting] = []
    waiting: dict[Key, tuple[int, str]] = {}
    reserved = False

    def order(user: str) -> tuple[int, float, int, float, str]:
        mine = held.get(user, Holding())
        share = max(
            mine.gpus / machine.gpus if machine.gpus else 0.0,
            mine.slots / machine.slots if machine.slots else 0.0,
        )
        return (-rules.priorities.get(user, 0), share, mine.jobs, lines[user][0].enqueued, user)

    while lines:
        user = min(lines, key=order)
        head, *behind = lines.pop(user)
        mine = held.get(user, Holding())
        own = _own_limit(head, mine, rules)
        reason = own or _capacity(head, machine, free_gpus, free_slots)
        if reason is None:
            admit.append(head)
            held[user] = replace(
                mine, jobs=mine.jobs + 1, gpus=mine.gpus + head.gpus, slots=mine.slots + head.slots
            )
            free_gpus -= head.gpus
            free_slots -= head.slots
            if behind:
                lines[user] = behind
            continue
        waiting[head.key] = (len(waiting) + 1, reason)
        if own is None and not reserved:  # the first to wait for the machine reserves what it asks
            reserved = True
            free_gpus -= head.gpus
            free_slots -= head.slots
        for later in behind:  # per-user FIFO: the rest of this user's jobs wait behind their head
            waiting[later.key] = (len(waiting) + 1, f"behind {head.name}, submitted before it")
    return Verdict(tuple(admit), waiting)


def _own_limit(job: Waiting, mine: Holding, rules: Rules) -> str | None:
    """Why `job` waits on its owner's own limits, or None."""
    if rules.max_running and mine.jobs >= rules.max_running:
        running = f"{mine.jobs} job{'s' if mine.jobs != 1 else ''} running"
        return f"{running}, the limit is {rules.max_running} (CubeJobs.max_running_jobs_per_user)"
    if job.gpus and over_quota(rules.gpu_quota, mine.gpus, job.gpus):
        return (
            f"waiting for {job.gpus} GPU(s) of quota: {job.user!r} holds {mine.gpus} of "
            f"{rules.gpu_quota} (CubeWorkbench.gpu_quota_per_user)"
        )
    return None


def _capacity(job: Waiting, machine: Machine, free_gpus: int, free_slots: int) -> str | None:
    """Why `job` waits for the machine (free beyond what jobs ahead reserved), or None."""
    if job.gpus > free_gpus:
        return f"waiting for {job.gpus} GPUs: {max(free_gpus, 0)} of {machine.gpus} free"
    if machine.slots and job.slots > free_slots:
        return (
            f"waiting for {job.slots} CPU slots: {max(free_slots, 0)} of {machine.slots} free "
            "(CubeJobs.cpu_slots)"
        )
    return None

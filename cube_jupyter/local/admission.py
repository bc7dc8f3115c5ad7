"""This machine's one queue and its one admission rule: which waiting work starts now (training jobs,
notebook servers, GPU pipeline steps, together), and why the rest waits.

`decide` is a pure function of the queue, what each user holds (the GPU ledger's count, the running
jobs and their CPU slots) and what the machine has free, so it is tested with a simulated clock and
nothing else decides. The rule:

- users with a higher `CubeJobs.user_priorities` go first; within a priority, the user holding the
  least of the machine (their dominant share: the larger of their GPUs over the machine's and their
  CPU slots over `cpu_slots`; then fewer running jobs), ties to the oldest head;
- each user's work goes in the order it asked (FIFO), whatever its kind: a user's later item never
  overtakes their head (but for a job waiting on `max_running_jobs_per_user`, a limit of jobs
  alone: the user's servers and steps behind it go on);
- an item starts only whole (every replica of a job: gang-wise) and only within its owner's limits
  (GPU quota; `max_running_jobs_per_user` for jobs): one waiting on its own owner's limits holds
  nothing back for others;
- an item waiting for the machine (GPUs or CPU slots) reserves what it asks for: items behind it, of
  any kind, may use only what is free beyond that reservation, so a big one at the head is never
  overtaken forever by a stream of small ones; it starts as soon as enough is freed (within one
  priority: a stream of higher-priority work goes first by design).

The queue knows no feature: each feature that queues or holds this machine's GPUs contributes a
`QueueSide` read from its own state (the composition root hands each feature the others'), and
`machine_verdict` reads them all. Every feature runs that same pass over the same data under the
machine's assignment lock (`gpus.assign_lock_path`), so they agree; each starts only its own admitted
items and leaves the others' to their feature.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cube_jupyter.local import gpus as machine_gpus

Key = tuple[str, str, str]  # (kind, user, name); the kinds are the GPU ledger's holder kinds
JOB = "job"  # the kind `Rules.max_running` counts


@dataclass(frozen=True)
class Waiting:
    """A queued item (a job, all replicas together; a server; a step): what it asks for."""

    user: str
    name: str
    enqueued: float
    gpus: int
    slots: int
    kind: str

    @property
    def key(self) -> Key:
        return (self.kind, self.user, self.name)


@dataclass(frozen=True)
class Held:
    """Admitted, unfinished work on this machine: whose, which GPU ids and CPU slots it holds."""

    user: str
    kind: str
    gpu_ids: tuple[str, ...] = ()
    slots: int = 0


@dataclass(frozen=True)
class QueueSide:
    """One feature's part of the machine's queue, read from its own state when a pass runs."""

    waiting: Callable[[], Iterable[Waiting]]
    held: Callable[[], Iterable[Held]]


def deferred(side: Callable[[], QueueSide]) -> QueueSide:
    """A side found when a pass reads it (the composition root's features are built on first use)."""
    return QueueSide(waiting=lambda: side().waiting(), held=lambda: side().held())


@dataclass(frozen=True)
class Holding:
    """What one user holds now: running training jobs, GPUs (the ledger: every holder), CPU slots."""

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
    max_running: int  # running jobs per user; 0: no limit
    priorities: Mapping[str, int]


@dataclass(frozen=True)
class QueuePolicy:
    """One feature's view of the queue: the rules every feature shares (`CubeJobs`,
    `CubeWorkbench.gpu_quota_per_user`), its own bound on a user's waiting items (`max_queued`, 0: no
    limit), how to read the GPUs a user holds (the workbench's one ledger; None: the sides' own count)
    and the other features' sides of the queue."""

    rules: Rules = field(default_factory=lambda: Rules(None, 0, {}))
    cpu_slots: int = 0
    max_queued: int = 0
    gpus_held: Callable[[str], int] | None = None
    others: Sequence[QueueSide] = ()


@dataclass(frozen=True)
class Verdict:
    """The jobs to start now, and each job left waiting with its 1-based position and reason."""

    admit: tuple[Waiting, ...]
    waiting: dict[Key, tuple[int, str]]


def over_quota(limit: int | None, held: int, wanted: int) -> bool:
    """The quota rule itself, for the GPU ledger's check and for this queue, which admits a waiting
    item only once its owner's holders (the ledger's) leave room for it."""
    return bool(limit) and held + wanted > (limit or 0)


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
                mine,
                jobs=mine.jobs + (head.kind == JOB),
                gpus=mine.gpus + head.gpus,
                slots=mine.slots + head.slots,
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
        if _running_limited(head, mine, rules):  # a limit of jobs alone: the user's other kinds go on
            go_on = [later for later in behind if later.kind != JOB]
            behind = [later for later in behind if later.kind == JOB]
            if go_on:
                lines[user] = go_on
        for later in behind:  # per-user FIFO: the rest of this user's work waits behind their head
            waiting[later.key] = (len(waiting) + 1, f"behind {_label(head, later)}, submitted before it")
    return Verdict(tuple(admit), waiting)


def _label(head: Waiting, later: Waiting) -> str:
    """How `later`'s reason names the head it waits behind: by name, and its kind when another."""
    return head.name if head.kind == later.kind else f"{head.kind} {head.name}"


def _count(number: int, noun: str) -> str:
    """`number` of `noun`, singular for one: the queue's reasons are read by people."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _running_limited(item: Waiting, mine: Holding, rules: Rules) -> bool:
    """`item` is a job and its owner runs `max_running` jobs already."""
    return item.kind == JOB and bool(rules.max_running) and mine.jobs >= rules.max_running


def _own_limit(job: Waiting, mine: Holding, rules: Rules) -> str | None:
    """Why `job` waits on its owner's own limits, or None."""
    if _running_limited(job, mine, rules):
        return (
            f"{_count(mine.jobs, 'job')} running, the limit is {rules.max_running} "
            "(CubeJobs.max_running_jobs_per_user)"
        )
    if job.gpus and over_quota(rules.gpu_quota, mine.gpus, job.gpus):
        return (
            f"waiting for {_count(job.gpus, 'GPU')} of quota: {job.user!r} holds {mine.gpus} of "
            f"{rules.gpu_quota} (CubeWorkbench.gpu_quota_per_user)"
        )
    return None


def _capacity(job: Waiting, machine: Machine, free_gpus: int, free_slots: int) -> str | None:
    """Why `job` waits for the machine (free beyond what work ahead reserved), or None."""
    if job.gpus > free_gpus:
        return f"waiting for {_count(job.gpus, 'GPU')}: {max(free_gpus, 0)} of {machine.gpus} free"
    if machine.slots and job.slots > free_slots:
        return (
            f"waiting for {_count(job.slots, 'CPU slot')}: {max(free_slots, 0)} of {machine.slots} free "
            "(CubeJobs.cpu_slots)"
        )
    return None


def machine_verdict(own: QueueSide, policy: QueuePolicy) -> tuple[Verdict, list[str]]:
    """The pass every feature runs (under `gpus.assign_lock_path`): every side's waiting items and
    holdings through `decide`, and this machine's free GPU ids (the one rule, `gpus.free_gpu_ids`),
    from which the caller hands its own admitted items theirs."""
    sides = [own, *policy.others]
    queue = [item for side in sides for item in side.waiting()]
    held = [item for side in sides for item in side.held()]
    free = machine_gpus.free_gpu_ids(gpu for item in held for gpu in item.gpu_ids)
    count = policy.gpus_held

    def holding(user: str) -> Holding:
        mine = [item for item in held if item.user == user]
        return Holding(
            jobs=sum(1 for item in mine if item.kind == JOB),
            gpus=count(user) if count is not None else sum(len(item.gpu_ids) for item in mine),
            slots=sum(item.slots for item in mine),
        )

    slots = policy.cpu_slots
    machine = Machine(
        gpus=len(machine_gpus.visible_gpu_ids()),
        free_gpus=len(free),
        slots=slots,
        free_slots=slots - sum(item.slots for item in held),
    )
    users = {item.user for item in queue} | {item.user for item in held}
    return decide(queue, {user: holding(user) for user in users}, machine, policy.rules), free


class Wake:
    """When a feature's supervision pass should admit: when what the queue waits on changed since
    its last pass (work of any kind ended or left the queue, in any process; a waiting user's GPUs
    in the ledger), and on the first pass."""

    def __init__(self) -> None:
        self._seen: object = None

    def due(self, own: QueueSide, policy: QueuePolicy, *, waiting: bool) -> bool:
        """`waiting`: the feature has items in the queue (nothing to admit otherwise)."""
        if not waiting:
            self._seen = None
            return False
        sides = [own, *policy.others]
        queue = sorted(item.key for side in sides for item in side.waiting())
        held = sorted(
            (item.user, item.kind, item.gpu_ids, item.slots) for side in sides for item in side.held()
        )
        count = policy.gpus_held
        users = sorted({user for _kind, user, _name in queue})
        seen = (queue, held, [count(user) for user in users] if count is not None else [])
        due, self._seen = seen != self._seen, seen
        return due

"""Which Kueue queue and priority a user's work goes to on the cluster: the `CubeQueues` traitlets and
the one rule that picks them.

    c.CubeQueues.queues = {"training": "gpu-jobs", "pipeline-step": "pipelines"}
    c.CubeQueues.profile_queues = {"gpu": "gpu-notebooks"}
    c.CubeQueues.user_queues = ["gpu-jobs", "cpu-batch"]
    c.CubeQueues.priority_classes = {"notebook": "interactive"}

A server, job, trial or step whose queue resolves carries Kueue's `kueue.x-k8s.io/queue-name` label
(and `kueue.x-k8s.io/priority-class` for its WorkloadPriorityClass), so Kueue admits it by the
LocalQueue's ClusterQueue quota, gang-wise. The queue is, first to last: what the user chose for one
job (`queue:`) or step (`queue:NAME` tag), among `user_queues`; the notebook profile's; the workload
kind's; `default_queue`; none (not queued). No feature is imported: each renderer asks `choose`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, get_args

from traitlets import CaselessStrEnum, Dict, List, Unicode

from cube_jupyter.configurable import CubeConfigurable, checked, dns_name, optional
from cube_jupyter.errors import InvalidInput
from cube_jupyter.names import validate_dns_label

WorkloadKind = Literal["notebook", "training", "tuning", "pipeline-step"]
WORKLOAD_KINDS: tuple[str, ...] = get_args(WorkloadKind)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the LocalQueue a workload waits in
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # its WorkloadPriorityClass
GANG_SCHEDULERS = ("none", "volcano")


def queue_name(value: object, field: str) -> str:
    """A LocalQueue or WorkloadPriorityClass name: a DNS label short enough to be a label's value."""
    return validate_dns_label(value, field, 63)


def _per_kind(value: dict[str, Any], field: str) -> None:
    for kind, name in value.items():
        if kind not in WORKLOAD_KINDS:
            raise InvalidInput(
                f"{field}.{kind}: {kind!r} is not one of {', '.join(WORKLOAD_KINDS)}", field=f"{field}.{kind}"
            )
        queue_name(name, f"{field}.{kind}")


def _per_profile(value: dict[str, Any], field: str) -> None:
    for profile, name in value.items():
        queue_name(name, f"{field}.{profile}")


def _names(value: list[str], field: str) -> None:
    for index, name in enumerate(value):
        queue_name(name, f"{field}[{index}]")


class CubeQueues(CubeConfigurable):
    """Kueue LocalQueues and WorkloadPriorityClasses for servers, jobs, trials and steps on the cluster,
    and Volcano gang scheduling for the Training Operator's v1 jobs. The local backend has its own
    fair queue (`CubeJobs.cpu_slots`, `CubeJobs.user_priorities`)."""

    default_queue = Unicode(
        "", help="LocalQueue of work whose kind has none in `queues`; '' leaves it unqueued."
    )
    queues = Dict(
        {},
        help="LocalQueue per workload kind: notebook, training, tuning (Katib trials), pipeline-step "
        "(Argo and KFP step pods), e.g. {'training': 'gpu-jobs'}.",
    )
    profile_queues = Dict(
        {}, help="LocalQueue per notebook profile name, before queues['notebook'], e.g. {'gpu': 'gpu-nb'}."
    )
    user_queues = List(
        Unicode(),
        help="LocalQueues a user may choose for one job (`queue:` in its spec) or pipeline step "
        "(`queue:NAME` tag) instead of the admin's; any other is a 400 naming the field.",
    )
    priority_classes = Dict(
        {},
        help="WorkloadPriorityClass per workload kind (the `kueue.x-k8s.io/priority-class` label), "
        "e.g. {'notebook': 'interactive', 'training': 'batch'}.",
    )
    user_priority_classes = List(
        Unicode(),
        help="WorkloadPriorityClasses a user may choose for one job (`priority:`) or step "
        "(`priority:NAME` tag).",
    )
    gang_scheduler = CaselessStrEnum(
        list(GANG_SCHEDULERS),
        default_value="none",
        help="'volcano': the Training Operator's v1 jobs (PyTorchJob, TFJob, XGBoostJob, MPIJob) run "
        "their pods with schedulerName volcano and runPolicy.schedulingPolicy.minAvailable = all "
        "replicas, so the operator (started with --gang-scheduler-name=volcano) makes a Volcano "
        "PodGroup and no replica starts before all can. TrainJobs follow their runtime's "
        "podGroupPolicy (coscheduling or volcano), which the workbench leaves alone.",
    )
    volcano_queue = Unicode("", help="Volcano queue of v1 jobs (gang_scheduler 'volcano'); '' its default.")

    _per_kind_ok = checked(_per_kind, "queues", "priority_classes")
    _per_profile_ok = checked(_per_profile, "profile_queues")
    _names_ok = checked(_names, "user_queues", "user_priority_classes")
    _default_ok = checked(optional(dns_name), "default_queue", "volcano_queue")

    @property
    def kueue(self) -> bool:
        """Whether any work goes to a Kueue queue: then Kueue's ClusterQueue quotas stand in for the
        namespace's GPU ResourceQuota, which would refuse a queued pod Kueue holds back (its gate)
        and an admitted job's pods past it."""
        return bool(self.default_queue or self.queues or self.profile_queues or self.user_queues)

    def check_profiles(self, profiles: Iterable[str]) -> None:
        """`profile_queues` names only profiles that exist (a typo would leave servers unqueued)."""
        known = set(profiles)
        for name in self.profile_queues:
            if name not in known:
                raise InvalidInput(
                    f"CubeQueues.profile_queues.{name}: no profile is named {name!r} "
                    f"(CubeSpawner.profiles: {', '.join(sorted(known))})",
                    field=f"CubeQueues.profile_queues.{name}",
                )

    def choose(
        self,
        kind: WorkloadKind,
        *,
        queue: str | None = None,
        priority: str | None = None,
        profile: str | None = None,
        field: str = "",
    ) -> dict[str, str]:
        """The Kueue labels of one workload: the queue and priority the user chose (each among those
        offered or the admin's own, else InvalidInput naming `field` + queue/priority), else the
        admin's. Empty: unqueued."""
        admins_queue = (
            (self.profile_queues.get(profile) if profile else None)
            or self.queues.get(kind)
            or self.default_queue
        )
        admins_priority = self.priority_classes.get(kind, "")
        labels: dict[str, str] = {}
        chosen = self._offered(queue, self.user_queues, admins_queue, "queue", field)
        if chosen or admins_queue:
            labels[QUEUE_LABEL] = chosen or admins_queue
        chosen = self._offered(priority, self.user_priority_classes, admins_priority, "priority", field)
        if chosen or admins_priority:
            labels[PRIORITY_LABEL] = chosen or admins_priority
        return labels

    @staticmethod
    def _offered(value: str | None, offered: list[str], admins: str, what: str, field: str) -> str | None:
        """`value` when the user may choose it: one offered (`user_queues`, `user_priority_classes`),
        or the admin's own for this work."""
        if value is None or value == admins:
            return value
        where = f"{field}{what}"
        if value not in offered:
            trait = "user_queues" if what == "queue" else "user_priority_classes"
            choices = ", ".join(offered) if offered else "none are offered"
            raise InvalidInput(
                f"{where}: {value!r} is not a {what} this workbench offers (CubeQueues.{trait}: {choices})",
                field=where,
            )
        return value

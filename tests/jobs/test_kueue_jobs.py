"""Jobs on Kueue queues, rendered and read purely: the queue and priority labels an admin maps
(`CubeQueues`) or a user picks among those offered, created suspended as Kueue expects (TrainJob,
the v1 kinds, Katib's trial jobs), Volcano gang scheduling for v1 jobs, and a job's `Queued` /
`Admitted` state read from its Kueue Workload. Kueue admitting them for real: tests/cluster."""

from __future__ import annotations

from typing import Any

import pytest

from cube_jupyter.errors import BackendUnavailable, InvalidInput
from cube_jupyter.jobs.kubernetes.status import trainjob_job, with_admission
from cube_jupyter.jobs.render import render_job
from cube_jupyter.kube.kueue import QueuePositions, admission
from cube_jupyter.queues import PRIORITY_LABEL, QUEUE_LABEL
from tests.jobs.helpers import make_config, substitute_trial_parameters
from tests.k8s_schemas import validate_object

QUEUES = {
    "queues": {"training": "gpu-jobs", "tuning": "trials"},
    "user_queues": ["cpu-batch"],
    "priority_classes": {"training": "batch"},
    "user_priority_classes": ["urgent"],
}
STORE = {"url": "s3://ml/jobs", "endpoint": "http://minio:9000", "credentials_secret": "minio-creds"}
TRAINING = {
    "name": "mnist",
    "framework": "pytorch",
    "replicas": {"master": 1, "worker": 3},
    "script": "train.py",
    "package": "s3://ml/jobs/code.tar.gz",
}
TUNING = {
    "name": "sweep",
    "objective": {"metric": "loss", "type": "minimize"},
    "parameters": {"lr": {"min": 0.001, "max": 0.1}},
    "trial": {"notebook": "train.ipynb", "package": "s3://ml/jobs/nb.tar.gz"},
}


def rendered(kind: str, spec: dict[str, Any], **queues: Any) -> dict[str, Any]:
    config = make_config(CubeStorage=STORE, CubeQueues={**QUEUES, **queues})
    [obj] = render_job(config, kind, spec, "alice")
    return obj


def test_a_trainjob_on_the_admins_queue_is_created_suspended_with_its_priority() -> None:
    obj = rendered("training", TRAINING)
    assert obj["kind"] == "TrainJob"
    labels = obj["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == "gpu-jobs" and labels[PRIORITY_LABEL] == "batch"
    assert obj["spec"]["suspend"] is True
    assert "schedulerName" not in str(obj["spec"])  # the runtime's podGroupPolicy is left to decide
    validate_object(obj)


def test_a_user_picks_an_offered_queue_and_priority_and_is_refused_others_naming_the_field() -> None:
    obj = rendered("training", {**TRAINING, "queue": "cpu-batch", "priority": "urgent"})
    assert obj["metadata"]["labels"][QUEUE_LABEL] == "cpu-batch"
    assert obj["metadata"]["labels"][PRIORITY_LABEL] == "urgent"
    admins = rendered("training", {**TRAINING, "queue": "gpu-jobs", "priority": "batch"})  # the admin's own
    assert admins["metadata"]["labels"][QUEUE_LABEL] == "gpu-jobs"
    assert admins["metadata"]["labels"][PRIORITY_LABEL] == "batch"
    for field, value in (("queue", "gpu-jobs-2"), ("priority", "critical")):
        with pytest.raises(InvalidInput) as caught:
            rendered("training", {**TRAINING, field: value})
        assert caught.value.field == field and value in caught.value.message
    for bad in ("Not A Name", "q" * 64, 5):  # a label's value: at most 63 characters
        with pytest.raises(InvalidInput) as caught:
            rendered("training", {**TRAINING, "queue": bad})
        assert caught.value.field == "queue"


def test_without_a_queue_nothing_is_labelled_or_suspended() -> None:
    config = make_config(CubeStorage=STORE)
    [obj] = render_job(config, "training", TRAINING, "alice")
    assert QUEUE_LABEL not in obj["metadata"]["labels"] and "suspend" not in obj["spec"]


def test_a_v1_job_is_suspended_in_its_run_policy_and_gang_scheduled_by_volcano() -> None:
    config = make_config(
        CubeStorage=STORE,
        CubeQueues={**QUEUES, "gang_scheduler": "volcano", "volcano_queue": "research"},
        CubeJobs={"training_api": "training-operator-v1"},
    )
    [obj] = render_job(config, "training", TRAINING, "alice")
    assert obj["kind"] == "PyTorchJob" and obj["metadata"]["labels"][QUEUE_LABEL] == "gpu-jobs"
    policy = obj["spec"]["runPolicy"]
    assert policy["suspend"] is True
    assert policy["schedulingPolicy"] == {"minAvailable": 4, "queue": "research"}
    replicas = obj["spec"]["pytorchReplicaSpecs"].values()
    assert {r["template"]["spec"]["schedulerName"] for r in replicas} == {"volcano"}
    validate_object(obj)


def test_katib_trials_carry_the_tuning_queue_and_are_created_suspended() -> None:
    obj = rendered("tuning", {**TUNING, "priority": "urgent"})
    trial = obj["spec"]["trialTemplate"]["trialSpec"]
    assert trial["kind"] == "Job" and trial["spec"]["suspend"] is True
    assert trial["metadata"]["labels"] == {QUEUE_LABEL: "trials", PRIORITY_LABEL: "urgent"}
    validate_object(obj)
    validate_object({**substitute_trial_parameters(trial), "metadata": {"name": "t", **trial["metadata"]}})


def workload(*conditions: dict[str, str], owner: str = "uid-1") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "trainjob-mnist-1", "namespace": "alice", "ownerReferences": [{"uid": owner}]},
        "spec": {"queueName": "gpu-jobs"},
        "status": {"conditions": list(conditions)},
    }


PENDING = {
    "type": "QuotaReserved",
    "status": "False",
    "reason": "Pending",
    "message": "couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu "
    "in flavor gpu, 2 more needed",
}
ADMITTED = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""}


def test_kueues_reason_is_read_from_the_workload() -> None:
    assert admission(workload(PENDING)).reason == PENDING["message"]
    preempted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted by urgent"}
    state = admission(workload({**PENDING, "status": "True"}, preempted))
    assert not state.admitted and state.reason == "Preempted: Preempted by urgent"
    inadmissible = {**PENDING, "reason": "Inadmissible", "message": "LocalQueue gpu-jobs doesn't exist"}
    assert admission(workload(inadmissible)).reason == "Inadmissible: LocalQueue gpu-jobs doesn't exist"
    admitted = admission(workload(ADMITTED))
    assert admitted.admitted and admitted.queue == "gpu-jobs"


def test_a_suspended_trainjob_is_queued_then_admitted_then_running() -> None:
    obj = rendered("training", TRAINING)
    obj["metadata"]["uid"] = "uid-1"
    job = trainjob_job(obj, [], ("nvidia.com/gpu",))
    queued = with_admission(job, obj, admission(workload(PENDING)))
    assert queued.phase == "Queued" and queued.queue is not None
    assert queued.queue.queue == "gpu-jobs" and queued.queue.position is None
    assert "2 more needed" in queued.queue.reason
    not_seen = with_admission(job, obj, None)
    assert not_seen.phase == "Queued" and "gpu-jobs" in not_seen.queue.reason  # type: ignore[union-attr]
    admitted = admission(workload(ADMITTED))
    assert with_admission(job, obj, admitted).phase == "Admitted"
    running_pod = {
        "metadata": {
            "name": "mnist-node-0-0",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "mnist",
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "batch.kubernetes.io/job-completion-index": "0",
            },
        },
        "status": {"phase": "Running"},
    }
    running = trainjob_job(obj, [running_pod], ("nvidia.com/gpu",))
    assert with_admission(running, obj, admitted).phase == "Running"


class VisibilityApi:
    """Kueue's visibility API as `QueuePositions` asks it (`get_path`): each LocalQueue's pending
    workloads with their 0-based places in the ClusterQueue, or an error while it is not served."""

    def __init__(self) -> None:
        self.pending: dict[str, list[str]] = {}  # queue → workload names in the ClusterQueue's order
        self.served = True
        self.asked: list[str] = []

    def get_path(self, path: str, action: str) -> dict[str, Any]:
        self.asked.append(path)
        if not self.served:
            raise BackendUnavailable(f"cannot {action}: the server could not find the requested resource")
        queue = path.split("/localqueues/")[1].split("/")[0]
        items = [
            {"metadata": {"name": name}, "positionInClusterQueue": place, "positionInLocalQueue": place}
            for place, name in enumerate(self.pending.get(queue, []))
        ]
        return {"items": items}


def test_queue_places_are_asked_in_the_background_at_most_every_refresh_and_count_from_one() -> None:
    api, now, work = VisibilityApi(), [0.0], []
    places = QueuePositions(api, work.append, refresh_seconds=3, retry_seconds=60, clock=lambda: now[0])
    api.pending["gpu-jobs"] = ["wl-a", "wl-b"]
    assert places.position("alice", "gpu-jobs", "wl-b") is None  # not heard yet: asked, not waited on
    assert places.position("alice", "gpu-jobs", "wl-b") is None and len(work) == 1  # one ask in flight
    work.pop()()
    assert places.position("alice", "gpu-jobs", "wl-b") == 2 and not work  # fresh: not asked again
    api.pending["gpu-jobs"] = ["wl-b"]  # wl-a admitted
    now[0] = 3.0
    assert places.position("alice", "gpu-jobs", "wl-b") == 2 and len(work) == 1  # stale: the last heard
    work.pop()()
    assert places.position("alice", "gpu-jobs", "wl-b") == 1
    assert places.position("alice", "gpu-jobs", "wl-a") is None  # no longer pending
    assert (
        api.asked
        == ["/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/alice/localqueues/gpu-jobs/pendingworkloads"]
        * 2
    )


def test_without_kueues_visibility_api_places_are_unknown_and_asked_again_only_after_a_while() -> None:
    api, now, work = VisibilityApi(), [0.0], []
    places = QueuePositions(api, work.append, refresh_seconds=3, retry_seconds=60, clock=lambda: now[0])
    api.served = False
    places.position("alice", "gpu-jobs", "wl-a")
    work.pop()()
    now[0] = 30.0
    assert places.position("bob", "other", "wl-c") is None and not work  # not asked while it is not served
    api.served, api.pending["other"] = True, ["wl-c"]
    now[0] = 60.0
    places.position("bob", "other", "wl-c")
    work.pop()()
    assert places.position("bob", "other", "wl-c") == 1


def test_one_command_asks_inline_so_its_first_read_has_the_place() -> None:
    api = VisibilityApi()
    api.pending["gpu-jobs"] = ["wl-a"]
    places = QueuePositions(api, lambda ask: ask())  # the CLI's cluster: `Cluster(one_command=True)`
    assert places.position("alice", "gpu-jobs", "wl-a") == 1

"""Reading Kubernetes objects one way for every feature (`cube_jupyter.kube.objects`): which resources
are GPUs, and why a pod is not running — init containers included."""

from __future__ import annotations

from typing import Any

import pytest

from cube_jupyter.jobs.kubernetes.status import training_job
from cube_jupyter.kube.objects import container_gpus, current, gpu_request, newest_warning, pod_state

INTEL = "gpu.intel.com/i915"


def waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def pod(
    phase: str = "Pending",
    init: list[dict[str, Any]] | None = None,
    main: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if init is not None:
        status["initContainerStatuses"] = init
    if main is not None:
        status["containerStatuses"] = main
    return {"metadata": {"name": "job-worker-0"}, "status": status}


def test_gpus_are_the_configured_resource_names_whatever_their_domain() -> None:
    resources = {"limits": {"cpu": "4", INTEL: "2", "hugepages-2Mi": "1Gi", "example.com/fpga": "1"}}
    assert gpu_request(resources, (INTEL, "nvidia.com/gpu")) == (INTEL, 2)
    assert gpu_request(resources, ("nvidia.com/gpu",)) is None  # not named: not a GPU
    containers = [{"resources": resources}, {"resources": {"limits": {"nvidia.com/gpu": 1}}}]
    assert container_gpus(containers, (INTEL, "nvidia.com/gpu")) == 3
    assert container_gpus(containers, ("example.com/fpga",)) == 1  # only because an admin said so


def test_an_init_container_that_cannot_pull_is_why_the_pod_is_not_running() -> None:
    state = pod(
        init=[waiting("cube-runtime-wheels", "ImagePullBackOff", "Back-off pulling image mirror/runtime:1")],
        main=[waiting("pytorch", "PodInitializing")],
    )
    read = pod_state(state)
    assert read.failed and read.reason == "ImagePullBackOff: Back-off pulling image mirror/runtime:1"


def test_a_pod_waits_for_its_init_containers_then_for_the_scheduler() -> None:
    initializing = pod(init=[waiting("cube-runtime-install", "PodInitializing")], main=[])
    assert pod_state(initializing) == pod_state(initializing)  # a pure reading
    assert not pod_state(initializing).failed
    assert pod_state(initializing).reason == "PodInitializing"
    unscheduled = pod(
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ]
    )
    assert pod_state(unscheduled).reason == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@pytest.mark.parametrize(
    ("statuses", "reason"),
    [
        (
            [{"name": "m", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}],
            "exited with code 2: Error",
        ),
        (
            [{**waiting("m", "CrashLoopBackOff"), "lastState": {"terminated": {"exitCode": 137}}}],
            "CrashLoopBackOff (last exit code 137)",
        ),
    ],
)
def test_a_failed_main_container_fails_the_pod(statuses: list[dict[str, Any]], reason: str) -> None:
    read = pod_state(pod("Running", main=statuses))
    assert read.failed and read.reason == reason


def test_the_exit_code_is_the_first_main_containers() -> None:
    done = pod("Succeeded", main=[{"name": "m", "state": {"terminated": {"exitCode": 0}}}])
    assert (pod_state(done).exit_code, pod_state(done).failed) == (0, False)


def test_a_job_replica_shows_its_init_containers_reason() -> None:
    """The jobs feature reads a replica pod as the notebooks feature reads a server's."""
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "job", "namespace": "cube-alice", "annotations": {"cube-jupyter/user": "alice"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "template": {
                        "spec": {"containers": [{"name": "pytorch", "resources": {"limits": {INTEL: 2}}}]}
                    },
                }
            }
        },
        "status": {},
    }
    replica_pod = pod(
        init=[waiting("cube-runtime-wheels", "ImagePullBackOff", "Back-off pulling image")],
        main=[waiting("pytorch", "PodInitializing")],
    )
    replica_pod["metadata"]["labels"] = {
        "training.kubeflow.org/job-name": "job",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
    }
    [replica] = training_job(job, [replica_pod], (INTEL,)).replicas
    assert replica.message == "ImagePullBackOff: Back-off pulling image"
    assert replica.gpus == 2


def test_the_newest_warning_leads_with_its_reason() -> None:
    events = [
        {
            "type": "Warning",
            "reason": "FailedMount",
            "message": "old",
            "lastTimestamp": "2026-01-01T00:00:01Z",
        },
        {"type": "Normal", "reason": "Pulled", "message": "x", "lastTimestamp": "2026-01-01T00:00:09Z"},
        {"type": "Warning", "reason": "BackOff", "message": "new", "lastTimestamp": "2026-01-01T00:00:05Z"},
    ]
    assert newest_warning(events) == "BackOff: new"
    assert newest_warning([]) is None


def test_of_two_warnings_in_one_second_the_one_written_last_is_newest_and_microseconds_count() -> None:
    def warning(reason: str, when: str, version: str) -> dict[str, object]:
        return {
            "type": "Warning",
            "reason": reason,
            "message": "m",
            "lastTimestamp": when,
            "metadata": {"resourceVersion": version},
        }

    pulled = warning("Failed", "2026-01-01T00:00:05Z", "1009")
    backoff = warning("BackOff", "2026-01-01T00:00:05Z", "1010")
    assert newest_warning([backoff, pulled]) == newest_warning([pulled, backoff]) == "BackOff: m"
    fraction = {**warning("Evicted", "", "7"), "eventTime": "2026-01-01T00:00:05.500000Z"}
    assert newest_warning([fraction, backoff]) == "Evicted: m"


def test_the_current_object_is_one_not_being_deleted_then_the_newest_then_by_name() -> None:
    def made(name: str, when: str, **meta: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "creationTimestamp": when, **meta}}

    old = made("old", "2026-01-01T00:00:01Z")
    leaving = made("leaving", "2026-01-01T00:00:09Z", deletionTimestamp="2026-01-01T00:00:10Z")
    twin_a, twin_b = made("a", "2026-01-01T00:00:05Z"), made("b", "2026-01-01T00:00:05Z")
    assert current([old, leaving]) is old
    assert current([twin_b, old, twin_a]) is current([twin_a, twin_b]) is twin_b
    assert current([]) is None

"""Reading Kubernetes objects as the API returns them (plain dicts, from the informer caches): their
metadata, pod specs and containers (init included), conditions, events, what they ask for — and the
one rule for why a pod is not running and for which resources are GPUs. Pure functions, no client:
every feature's status code reads objects through these, so two features never read one object two
ways.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cube_jupyter.fields import parse_timestamp
from cube_jupyter.kube.labels import USER_ANNOTATION

Obj = dict[str, Any]
# A container waiting for one of these will not start by waiting longer: the pod has failed.
FAILED_WAITING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


# -- metadata ----------------------------------------------------------------------------------------


def metadata_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name") or "")


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("namespace") or "")


def qualified_name(obj: Mapping[str, Any]) -> str:
    """'namespace/name': how indexes key a namespaced object."""
    return f"{namespace_of(obj)}/{name_of(obj)}"


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(metadata_of(obj).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(metadata_of(obj).get("annotations") or {})


def owner_of(obj: Mapping[str, Any]) -> str:
    """The raw name of the user an object the workbench made belongs to ('' for anyone else's)."""
    return str(annotations_of(obj).get(USER_ANNOTATION) or "")


def index_owner(obj: Mapping[str, Any]) -> list[str]:
    """An informer index of objects by their owner (`owner_of`)."""
    owner = owner_of(obj)
    return [owner] if owner else []


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("uid") or "")


def is_deleting(obj: Mapping[str, Any]) -> bool:
    """The API server has been asked to delete it (finalizers may keep it a while)."""
    return bool(metadata_of(obj).get("deletionTimestamp"))


def created_at(obj: Mapping[str, Any]) -> datetime | None:
    return parse_timestamp(metadata_of(obj).get("creationTimestamp"))


def current(objs: Iterable[Obj]) -> Obj | None:
    """Of objects that stand for one thing (a server's pods while it restarts, a job's Workloads, a
    run's Workflows), the one that counts: not being deleted, then the newest, then by name, so two
    made in the same second (timestamps have whole seconds) give the same answer every time."""
    return max(
        objs,
        key=lambda o: (not is_deleting(o), metadata_of(o).get("creationTimestamp") or "", name_of(o)),
        default=None,
    )


# -- pod specs and containers ------------------------------------------------------------------------


def pod_spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec of a Pod, or of a workload's pod template (StatefulSet, Notebook, a replica spec)."""
    spec = obj.get("spec") or {}
    template = spec.get("template")
    return (template.get("spec") or {}) if isinstance(template, Mapping) else dict(spec)


def containers_of(pod_spec: Mapping[str, Any], *, init: bool = False) -> list[dict[str, Any]]:
    """The main containers of a pod spec, with its init containers first when `init`."""
    main = list(pod_spec.get("containers") or [])
    return [*(pod_spec.get("initContainers") or []), *main] if init else main


def container_named(pod_spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The main container called `name`, else the first one ({} when there is none)."""
    containers = containers_of(pod_spec)
    found = next((c for c in containers if c.get("name") == name), containers[0] if containers else {})
    return dict(found)


def condition_of(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The status condition of type `kind` ({} when the object reports none)."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


# -- what containers ask for -------------------------------------------------------------------------


def gpu_request(resources: Mapping[str, Any], gpu_resources: Collection[str]) -> tuple[str, int] | None:
    """The GPUs one container's `resources` ask for, as (resource name, count), or None.

    The one rule for which resources are GPUs: the names the admin configured (each profile's
    `gpu_resource`, `CubeWorkload.gpu_resource` of jobs and steps), whatever their domain —
    'nvidia.com/gpu', 'amd.com/gpu', 'gpu.intel.com/i915'. Extended resources are set in limits (and
    requests, equal, when given)."""
    asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    for name in sorted(gpu_resources):
        if name in asked:
            with contextlib.suppress(TypeError, ValueError):
                return name, int(str(asked[name]))
    return None


def container_gpus(containers: Iterable[Mapping[str, Any]], gpu_resources: Collection[str]) -> int:
    """GPUs the containers ask for together (`gpu_request`)."""
    total = 0
    for container in containers:
        request = gpu_request(container.get("resources") or {}, gpu_resources)
        total += request[1] if request else 0
    return total


# -- why a pod is not running ------------------------------------------------------------------------


@dataclass(frozen=True)
class PodState:
    """What a pod's status says, read one way for servers, replicas and predictors alike."""

    phase: str  # Pending, Running, Succeeded, Failed ('' before the kubelet reports)
    ready: bool
    failed: bool  # it will not run by waiting: a crash loop, a bad image, a non-zero exit
    reason: str | None  # why it is not running (or how it failed), leading with its cause
    exit_code: int | None  # its own (first main) container's, once that has terminated


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """Read a pod's status: init containers first (a runtime-injection init container stuck in
    ImagePullBackOff is why its pod shows PodInitializing), then the main ones, then the scheduler."""
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "")
    ready = condition_of(pod, "Ready").get("status") == "True"
    main = list(status.get("containerStatuses") or [])
    exit_code = ((main[0].get("state") or {}).get("terminated") or {}).get("exitCode") if main else None
    failure, waiting = _container_problem([*(status.get("initContainerStatuses") or []), *main])
    if failure is None and phase == "Failed":
        failure = status.get("message") or status.get("reason") or "the pod failed"
    if failure is not None:
        return PodState(phase, ready, True, failure, exit_code)
    scheduled = condition_of(pod, "PodScheduled")
    unscheduled = (
        scheduled.get("message") or scheduled.get("reason") if scheduled.get("status") == "False" else None
    )
    return PodState(phase, ready, False, unscheduled or waiting, exit_code)


def _container_problem(statuses: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(why the pod failed, why it is still waiting) from container statuses, in pod order."""
    waiting_reason = None
    for status in statuses:
        state = status.get("state") or {}
        waiting = state.get("waiting") or {}
        terminated = state.get("terminated") or {}
        if waiting.get("reason"):
            text = _join(waiting.get("reason"), waiting.get("message"))
            if waiting["reason"] in FAILED_WAITING_REASONS:
                last = (status.get("lastState") or {}).get("terminated") or {}
                if last.get("exitCode") not in (None, 0):
                    text += f" (last exit code {last['exitCode']})"
                return text, None
            waiting_reason = waiting_reason or text
        if terminated.get("exitCode") not in (None, 0):
            code = terminated["exitCode"]
            return _join(
                f"exited with code {code}", terminated.get("reason"), terminated.get("message")
            ), None
    return None, waiting_reason


def _join(*parts: object) -> str:
    return ": ".join(str(p) for p in parts if p)


# -- events ------------------------------------------------------------------------------------------


def event_time(event: Mapping[str, Any]) -> str:
    """When an event was last seen, whichever of its time fields the reporter filled."""
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or metadata_of(event).get("creationTimestamp")
        or ""
    )


def _event_order(event: Mapping[str, Any]) -> tuple[datetime, int]:
    """When an event was last seen, then the order the API server wrote it in: a kubelet often posts
    two warnings in one second (ErrImagePull, then ImagePullBackOff), and some reporters write
    microseconds, which compared as text would sort before the same whole second."""
    version = str(metadata_of(event).get("resourceVersion") or "")
    return (
        parse_timestamp(event_time(event)) or datetime.min.replace(tzinfo=UTC),
        int(version) if version.isdigit() else 0,
    )


def newest_warning(events: Iterable[Mapping[str, Any]]) -> str | None:
    """'Reason: message' of the newest Warning among `events`."""
    warnings = [e for e in events if e.get("type") == "Warning"]
    if not warnings:
        return None
    newest = max(warnings, key=_event_order)
    return _join(newest.get("reason"), newest.get("message")) or None

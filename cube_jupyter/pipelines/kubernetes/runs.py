"""Pipeline runs on the cluster: submit the compiled Argo Workflow, follow its nodes, cancel it.

Like the notebook backend, writes go to the API (in a worker thread: the official client blocks) and
every read is answered from one informer cache of the workbench's Workflows, so a run view polling
step states never lists the cluster. The Argo controller reports progress in `status.nodes`; each
step is the DAG task node whose `displayName` is the step's name (a `Retry` node when the step has
retries, its attempts being the node's children), mapped to the run view's step statuses.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from cube_jupyter.errors import BackendUnavailable, Conflict, CubeError, NotFound, NotServed
from cube_jupyter.kube import kueue
from cube_jupyter.kube.client import ApiNotFound
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.discovery import missing_crd
from cube_jupyter.kube.labels import MANAGED_BY, MANAGED_BY_LABEL
from cube_jupyter.kube.namespaces import (
    UserNamespaces,
    is_missing_namespace,
    missing_namespace,
    prepare_namespace,
)
from cube_jupyter.kube.objects import (
    Obj,
    current,
    index_owner,
    labels_of,
    metadata_of,
    namespace_of,
    owner_of,
)
from cube_jupyter.kube.resources import ResourceType, register_resource_type
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.kubernetes.argo import (
    API_VERSION,
    COMPONENT,
    COMPONENT_LABEL,
    KIND,
    RUN_ID_LABEL,
    STEP_LABEL,
    compile_workflow,
)
from cube_jupyter.pipelines.model import Pipeline

log = logging.getLogger(__name__)

WORKFLOWS = ResourceType(API_VERSION, KIND, "workflows")
register_resource_type(WORKFLOWS)

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL}={COMPONENT}"
SHUTDOWN = "Terminate"
FINISHED_PHASES = {"Succeeded", "Failed", "Error"}
# How Argo words the failure of nodes it stopped because of `spec.shutdown`.
SHUTDOWN_MESSAGE = re.compile(r"shutdown|stopped with strategy|terminat", re.IGNORECASE)
STEP_NODE_TYPES = {"Pod", "Retry"}
# Argo's workflow and node phases → the run view's statuses (a node not listed is pending).
RUN_STATUS = {"Running": "running", "Succeeded": "succeeded", "Failed": "failed", "Error": "failed"}
NODE_STATUS = {**RUN_STATUS, "Skipped": "skipped", "Omitted": "skipped"}
# How long a write waits for its watch event, so the caller's next read sees what it just did.
CACHE_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class StepState:
    """One step as the run view shows it, from its Argo node (or the lack of one)."""

    name: str
    status: str  # pending | queued (Kueue gates its pod) | running | succeeded | failed | cached | ...
    started: str | None = None
    finished: str | None = None
    attempts: int = 0
    message: str | None = None
    node: str | None = None  # the Argo node id (the pod name's source), for logs


@dataclass(frozen=True)
class WorkflowRun:
    """A pipeline run on the cluster: its Workflow and the state of each step."""

    name: str  # the Workflow's name
    namespace: str
    user: str
    run_id: str
    status: str  # queued | running | succeeded | failed | cancelled
    message: str | None
    created: str | None
    started: str | None
    finished: str | None
    steps: dict[str, StepState] = field(default_factory=dict)  # in the DAG's (topological) order

    def step_statuses(self) -> dict[str, str]:
        return {name: state.status for name, state in self.steps.items()}

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["steps"] = [asdict(state) for state in self.steps.values()]
        return result


def _index_run_step(pod: Obj) -> list[str]:
    labels = labels_of(pod)
    run_id, step = labels.get(RUN_ID_LABEL), labels.get(STEP_LABEL)
    return [f"{namespace_of(pod)}/{run_id}/{step}"] if run_id and step else []


def _index_run(obj: Obj) -> list[str]:
    run_id = labels_of(obj).get(RUN_ID_LABEL)
    return [f"{namespace_of(obj)}/{run_id}"] if run_id else []


class ClusterPipelineRuns:
    """Pipeline runs as Argo Workflows in each user's namespace."""

    def __init__(
        self,
        settings: PipelineSettings,
        cluster: Cluster | None = None,
        *,
        sync_timeout: float = 30.0,
    ) -> None:
        """`cluster` is the workbench's shared one; without it the runs connect on their own (the
        CLI) and close that connection with themselves."""
        self.settings = settings
        self._owns_cluster = cluster is None
        self.cluster = cluster if cluster is not None else Cluster(settings)
        self.client = self.cluster.client
        self.sync_timeout = sync_timeout
        self.workflows = self.cluster.informer(
            API_VERSION, KIND, label_selector=SELECTOR, indexers={"run": _index_run, "user": index_owner}
        )
        self.user_namespaces = UserNamespaces(settings, self.cluster)
        # Step pods and Kueue's Workloads (when served): why a step Kueue gates waits.
        self.pods = self.cluster.pods({"run-step": _index_run_step})
        self.kueue_workloads: kueue.KueueWorkloads | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the informer and wait for its first list, so the first read sees the cluster; a
        cluster without Argo's CRD is said so at once, instead of after the wait."""
        try:
            served = await self.cluster.discover([API_VERSION, *kueue.GROUP_VERSIONS])
            if not served.serves(API_VERSION, KIND):
                raise NotServed(
                    f"cluster pipeline runs need Argo Workflows: {missing_crd(API_VERSION, KIND)}"
                )
            self.kueue_workloads = kueue.follow_workloads(self.cluster, served)
            queueing = [self.pods, self.kueue_workloads.informer] if self.kueue_workloads is not None else []
            await self.cluster.start(
                [self.workflows, *queueing, *self.user_namespaces.informers],
                self.sync_timeout,
                " (is Argo Workflows installed?)",
            )
        except CubeError:
            await self.close()
            raise

    async def close(self) -> None:
        if self._owns_cluster:  # a shared cluster's informers stop with it, for every feature
            await self.cluster.close()

    # -- reads: the informer cache only ------------------------------------------------------------

    def namespace(self, user: str) -> str:
        """Where `user`'s runs go; NotFound naming the setting when they own no Profile. Blocking (it
        may ask the API why): run it in a thread."""
        return self.user_namespaces.require(user)

    def get(self, user: str, run_id: str) -> WorkflowRun:
        obj = self._workflow(user, run_id)
        if obj is None:
            raise NotFound(f"user {user!r} has no cluster run {run_id!r}", field="run_id")
        return self._run(obj)

    def _run(self, obj: Obj) -> WorkflowRun:
        """The run as Argo has it, with each step whose pod Kueue gates `queued`, with Kueue's reason."""
        run = workflow_run(obj)
        if self.kueue_workloads is None:
            return run
        steps = dict(run.steps)
        for name, state in steps.items():
            if state.status != "pending":
                continue
            pods = self.pods.by_index("run-step", f"{run.namespace}/{run.run_id}/{name}")
            gated = current(pod for pod in pods if kueue.is_gated(pod))
            if gated is not None:
                place = self.kueue_workloads.of_pod(gated).place
                steps[name] = replace(state, status="queued", message=place)
        return replace(run, steps=steps)

    def status(self, user: str, run_id: str) -> dict[str, str]:
        """{step: status} of one run."""
        return self.get(user, run_id).step_statuses()

    def list_runs(self, user: str | None) -> list[WorkflowRun]:
        objs = self.workflows.list() if user is None else self.workflows.by_index("user", user)
        return [self._run(obj) for obj in objs if labels_of(obj).get(RUN_ID_LABEL)]

    def _workflow(self, user: str, run_id: str) -> Obj | None:
        namespace = self.user_namespaces.lookup(user)
        found = [
            obj for obj in self.workflows.by_index("run", f"{namespace}/{run_id}") if owner_of(obj) == user
        ]
        return current(found)

    # -- writes ------------------------------------------------------------------------------------

    async def submit(
        self,
        pipeline: Pipeline,
        user: str,
        run_id: str,
        store_url: str | None = None,
        parameters: dict[str, Any] | None = None,
        *,
        parallel: int | None = None,
        labels: dict[str, str] | None = None,
    ) -> str:
        """Create the run's Workflow in the user's namespace (`labels` added to its own); return its
        (generated) name.

        One object holds the whole run (the pipeline travels inside it), so a failed create leaves
        nothing behind and there is nothing to roll back.
        """
        namespace = await asyncio.to_thread(self.namespace, user)
        workflow = compile_workflow(
            pipeline,
            self.settings,
            run_id=run_id,
            store_url=store_url,
            parameters=parameters,
            user=user,
            parallel=parallel,
            namespace=namespace,
            labels=labels,
        )
        if self._workflow(user, run_id) is not None:
            raise Conflict(f"user {user!r} already has a cluster run {run_id!r}", field="run_id")
        await asyncio.to_thread(prepare_namespace, self.client, self.settings, user, namespace)
        try:
            created = await asyncio.to_thread(self.client.create, workflow)
        except ApiNotFound as exc:
            raise self._not_found_on_create(user, namespace, exc) from None
        name = created["metadata"]["name"]
        if not await asyncio.to_thread(
            self.workflows.wait_for,
            lambda: self.workflows.get(namespace, name) is not None,
            CACHE_WAIT_SECONDS,
        ):
            self.workflows.upsert(created)  # read-your-writes even if the watch lags
        log.info("submitted pipeline %s run %s as Workflow %s/%s", pipeline.name, run_id, namespace, name)
        return str(name)

    def _not_found_on_create(self, user: str, namespace: str, exc: ApiNotFound) -> CubeError:
        if is_missing_namespace(exc, namespace):
            return missing_namespace(self.settings, user, namespace)
        return BackendUnavailable(
            f"the cluster does not serve {WORKFLOWS.describe()} ({API_VERSION} {KIND}): is Argo Workflows "
            f"installed? ({exc.message})"
        )

    async def cancel(self, user: str, run_id: str) -> WorkflowRun:
        """Stop a run as `argo terminate` does: `spec.shutdown: Terminate` makes the controller kill
        running pods and start nothing more. A finished run is left as it is."""
        obj = self._workflow(user, run_id)
        if obj is None:
            raise NotFound(f"user {user!r} has no cluster run {run_id!r}", field="run_id")
        if _phase(obj) in FINISHED_PHASES or _shutdown(obj):
            return self._run(obj)
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        patched = await asyncio.to_thread(
            self.client.patch, API_VERSION, KIND, namespace, name, {"spec": {"shutdown": SHUTDOWN}}
        )

        def applied() -> bool:
            cached = self.workflows.get(namespace, name)
            return cached is not None and bool(_shutdown(cached))

        if not await asyncio.to_thread(self.workflows.wait_for, applied, CACHE_WAIT_SECONDS):
            self.workflows.upsert(patched)
        return self._run(self.workflows.get(namespace, name) or patched)

    async def wait_finished(self, user: str, run_id: str, timeout: float | None = None) -> WorkflowRun:
        """Block (in a thread) until the run's Workflow reaches a final phase; the run as it is then."""

        def finished() -> bool:
            obj = self._workflow(user, run_id)
            return obj is None or _phase(obj) in FINISHED_PHASES

        await asyncio.to_thread(self.workflows.wait_for, finished, timeout)
        return self.get(user, run_id)


# -- mapping a Workflow to what the run view shows -------------------------------------------------


def workflow_run(obj: Obj) -> WorkflowRun:
    meta = metadata_of(obj)
    status = obj.get("status") or {}
    phase = _phase(obj)
    run_status = RUN_STATUS.get(phase, "queued")
    if _shutdown(obj) and phase != "Succeeded":
        run_status = "cancelled"  # nothing more will run, whatever is still being stopped
    return WorkflowRun(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        user=owner_of(obj),
        run_id=labels_of(obj).get(RUN_ID_LABEL, ""),
        status=run_status,
        message=status.get("message") or None,
        created=meta.get("creationTimestamp") or None,
        started=status.get("startedAt") or None,
        finished=status.get("finishedAt") or None,
        steps=step_states(obj),
    )


def step_states(obj: Obj) -> dict[str, StepState]:
    """Each DAG task's state, in the DAG's order; a task without a node yet is pending (or, once the
    run is over, skipped, or cancelled when the run was)."""
    nodes: dict[str, Obj] = (obj.get("status") or {}).get("nodes") or {}
    steps = _dag_tasks(obj)
    found: dict[str, Obj] = {}
    for node in nodes.values():
        name = node.get("displayName")
        if name in steps and node.get("type") in STEP_NODE_TYPES:
            found[name] = node
    shutdown = bool(_shutdown(obj))
    finished = _phase(obj) in FINISHED_PHASES
    states = {}
    for step in steps:
        task_node = found.get(step)
        if task_node is None:
            status = "cancelled" if shutdown else "skipped" if finished else "pending"
            states[step] = StepState(name=step, status=status)
        else:
            states[step] = _node_state(step, task_node, nodes, shutdown)
    return states


def _node_state(step: str, node: Obj, nodes: dict[str, Obj], shutdown: bool) -> StepState:
    attempts = (
        [nodes[c] for c in node.get("children") or [] if c in nodes] if node.get("type") == "Retry" else []
    )
    message = node.get("message") or (attempts[-1].get("message") if attempts else None) or None
    phase = node.get("phase") or "Pending"
    status = NODE_STATUS.get(phase, "pending")
    if status == "succeeded" and (node.get("memoizationStatus") or {}).get("hit"):
        status = "cached"
    elif status == "failed" and shutdown and SHUTDOWN_MESSAGE.search(message or ""):
        status = "cancelled"
    return StepState(
        name=step,
        status=status,
        started=node.get("startedAt") or None,
        finished=node.get("finishedAt") or None,
        attempts=len(attempts) if node.get("type") == "Retry" else int(phase not in ("Skipped", "Omitted")),
        message=message,
        node=node.get("id") or None,
    )


def _dag_tasks(obj: Obj) -> list[str]:
    spec = obj.get("spec") or {}
    for template in spec.get("templates") or []:
        if template.get("name") == spec.get("entrypoint"):
            return [
                task["name"] for task in (template.get("dag") or {}).get("tasks") or [] if task.get("name")
            ]
    return []


def _phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def _shutdown(obj: Obj) -> str:
    return str((obj.get("spec") or {}).get("shutdown") or "")

"""The cluster's other actors, played by tests over real HTTP: the notebook controller, the scheduler
and the kubelet. The backend must learn what they do only through its watches."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from cube_jupyter.errors import NotFound
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.notebooks.render import NOTEBOOK_LABEL, STATEFULSET_LABEL
from tests.kubernetes.emulator import now_rfc3339

# The User-Agent of the actors' own client (`kube` fixture): their requests are not the workbench's.
ACTOR_AGENT = "cube-jupyter-tests/cluster-actors"


async def controller_creates_pod(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """What Kubeflow's notebook controller does: a StatefulSet pod `{name}-0` carrying the Notebook's
    labels plus `notebook-name` and `statefulset`, with the Notebook's pod template spec."""
    notebook = await asyncio.to_thread(kube.get, "kubeflow.org/v1", "Notebook", namespace, name)
    labels = {**notebook["metadata"].get("labels", {}), NOTEBOOK_LABEL: name, STATEFULSET_LABEL: name}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0", "namespace": namespace, "labels": labels},
        "spec": notebook["spec"]["template"]["spec"],
    }
    created: dict[str, Any] = await asyncio.to_thread(kube.create, pod)
    return created


async def kubelet_sets_status(kube: KubeClient, namespace: str, pod: str, status: dict[str, Any]) -> None:
    await asyncio.to_thread(kube.patch, "v1", "Pod", namespace, pod, {"status": status}, subresource="status")


def ready_status() -> dict[str, Any]:
    now = now_rfc3339()
    return {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {"name": "c", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": now}}}
        ],
    }


def unschedulable_status(message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": now_rfc3339(),
            }
        ],
    }


async def scheduler_warns(
    kube: KubeClient, pod: dict[str, Any], reason: str, message: str, *, when: str | None = None
) -> dict[str, Any]:
    """A Warning event about `pod` (or any object: a StatefulSet, a Notebook), as the scheduler, the
    kubelet or a controller records it (core/v1 Event)."""
    meta = pod["metadata"]
    stamp = when or now_rfc3339()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "kind": pod.get("kind", "Pod"),
            "apiVersion": pod.get("apiVersion", "v1"),
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        },
        "type": "Warning",
        "reason": reason,
        "message": message,
        "source": {"component": "default-scheduler"},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    created: dict[str, Any] = await asyncio.to_thread(kube.create, event)
    return created


async def controller_deletes_pod(kube: KubeClient, namespace: str, pod: str) -> None:
    """What the StatefulSet controller does once a stopped server is scaled to 0."""
    await asyncio.to_thread(kube.delete, "v1", "Pod", namespace, pod)


# -- Kubeflow's notebook controller (USE_ISTIO=true, its default), after kubeflow/notebooks'
# components/notebook-controller/controllers/notebook_controller.go, and the garbage collector. --------

KUBEFLOW_GATEWAY = "kubeflow/kubeflow-gateway"  # the controller's ISTIO_GATEWAY default


def _owned_by(owner: dict[str, Any]) -> list[dict[str, Any]]:
    """A controller reference, as controller-runtime's SetControllerReference writes it."""
    meta = owner["metadata"]
    return [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def controller_objects(notebook: dict[str, Any]) -> list[dict[str, Any]]:
    """generateStatefulSet, generateService and generateVirtualServices for `notebook`. The real
    controller writes the VirtualService as networking.istio.io/v1alpha3; the API server serves that
    object under every Istio version, so the emulation writes the one version KMock stores (v1)."""
    meta = notebook["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    prefix = f"/notebook/{namespace}/{name}"
    pod_spec = copy.deepcopy(notebook["spec"]["template"]["spec"])
    container = pod_spec["containers"][0]
    container.setdefault("workingDir", "/home/jovyan")
    container.setdefault("ports", [{"name": "notebook-port", "containerPort": 8888, "protocol": "TCP"}])
    if not any(e["name"] == "NB_PREFIX" for e in container.get("env") or []):  # a set one is kept
        container.setdefault("env", []).append({"name": "NB_PREFIX", "value": prefix})
    pod_spec.setdefault("securityContext", {"fsGroup": 100})
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if "kubectl" not in k and "notebook" not in k
    }
    stopped = "kubeflow-resource-stopped" in (meta.get("annotations") or {})
    owned = {"namespace": namespace, "ownerReferences": _owned_by(notebook)}
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, **owned},
        "spec": {
            "replicas": 0 if stopped else 1,
            "selector": {"matchLabels": {STATEFULSET_LABEL: name}},
            "template": {
                "metadata": {
                    "labels": {STATEFULSET_LABEL: name, NOTEBOOK_LABEL: name, **(meta.get("labels") or {})},
                    "annotations": annotations,
                },
                "spec": pod_spec,
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, **owned},
        "spec": {
            "type": "ClusterIP",
            "selector": {STATEFULSET_LABEL: name},
            "ports": [
                {
                    "name": f"http-{name}",
                    "port": 80,
                    "targetPort": container["ports"][0]["containerPort"],
                    "protocol": "TCP",
                }
            ],
        },
    }
    virtual_service = {
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": f"notebook-{namespace}-{name}", **owned},
        "spec": {
            "gateways": [KUBEFLOW_GATEWAY],
            "hosts": ["*"],
            "http": [
                {
                    "headers": {"request": {"set": {}, "remove": ["Authorization"]}},
                    "match": [{"uri": {"prefix": f"{prefix}/"}}],
                    "rewrite": {"uri": f"{prefix}/"},
                    "route": [
                        {
                            "destination": {
                                "host": f"{name}.{namespace}.svc.cluster.local",
                                "port": {"number": 80},
                            }
                        }
                    ],
                }
            ],
        },
    }
    return [statefulset, service, virtual_service]


async def notebook_controller_reconciles(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    """One reconcile of a Notebook: each object is created when missing, else its spec brought back
    (the controller's Update); nothing while the Notebook is being deleted. Returns what it wrote."""
    notebook = await asyncio.to_thread(kube.get, "kubeflow.org/v1", "Notebook", namespace, name)
    if notebook["metadata"].get("deletionTimestamp"):
        return []
    written = []
    for obj in controller_objects(notebook):
        meta = obj["metadata"]
        try:
            await asyncio.to_thread(kube.get, obj["apiVersion"], obj["kind"], namespace, meta["name"])
        except NotFound:
            written.append(await asyncio.to_thread(kube.create, obj))
            continue
        patch = {"spec": obj["spec"]}
        written.append(
            await asyncio.to_thread(
                kube.patch, obj["apiVersion"], obj["kind"], namespace, meta["name"], patch
            )
        )
    return written


async def statefulset_controller_creates_pod(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """Pod `{name}-0` from the StatefulSet's template, owned by it."""
    statefulset = await asyncio.to_thread(kube.get, "apps/v1", "StatefulSet", namespace, name)
    template = statefulset["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-0",
            "namespace": namespace,
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"].get("annotations") or {},
            "ownerReferences": _owned_by(statefulset),
        },
        "spec": template["spec"],
    }
    created: dict[str, Any] = await asyncio.to_thread(kube.create, pod)
    return created


# What the garbage collector looks at: Notebooks own the controller's objects, StatefulSets their pods.
COLLECTED = (
    ("kubeflow.org/v1", "Notebook"),
    ("apps/v1", "StatefulSet"),
    ("v1", "Service"),
    ("networking.istio.io/v1", "VirtualService"),
    ("v1", "Pod"),
)


async def garbage_collector_runs(kube: KubeClient) -> list[str]:
    """Delete every object all of whose owners are gone, until none is left (a StatefulSet's pods
    after it): what kube-controller-manager's garbage collector does. Returns 'Kind ns/name' deleted."""
    deleted: list[str] = []
    while True:
        objects = []
        for api_version, kind in COLLECTED:
            listed = await asyncio.to_thread(kube.list, api_version, kind)
            objects += [{"apiVersion": api_version, "kind": kind, **o} for o in listed.items]
        alive = {o["metadata"]["uid"] for o in objects}
        orphans = [
            o
            for o in objects
            if o["metadata"].get("ownerReferences")
            and not any(ref["uid"] in alive for ref in o["metadata"]["ownerReferences"])
        ]
        if not orphans:
            return deleted
        for orphan in orphans:
            await asyncio.to_thread(kube.delete_object, orphan, missing_ok=True)
            deleted.append(f"{orphan['kind']} {orphan['metadata']['namespace']}/{orphan['metadata']['name']}")


# -- Kubeflow Trainer v2's controller, after kubeflow/trainer's jobset, torch and xgboost plugins: a
# TrainJob becomes a JobSet whose `node` replicated job is an indexed Job of numNodes pods, built from
# the ClusterTrainingRuntime's template, the TrainJob's trainer and its runtimePatches. ------------------

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
TRAINER_PORT = 29400  # constants.ContainerTrainerPort
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # label and annotation of indexed Jobs
RANK_FROM_INDEX = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}


def _rendezvous_env(runtime: dict[str, Any], trainjob: dict[str, Any]) -> list[dict[str, Any]]:
    """What the runtime's ML policy adds to the trainer container (torch.go, xgboost.go)."""
    name, trainer = trainjob["metadata"]["name"], trainjob["spec"]["trainer"]
    nodes, master = str(trainer.get("numNodes", 1)), f"{name}-node-0-0.{name}"
    policy = runtime["spec"]["mlPolicy"]
    if "torch" in policy:
        return [
            {"name": "PET_NNODES", "value": nodes},
            {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode", "auto"))},
            {"name": "PET_NODE_RANK", "valueFrom": RANK_FROM_INDEX},
            {"name": "PET_MASTER_ADDR", "value": master},
            {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
        ]
    if "xgboost" in policy:
        return [
            {"name": "DMLC_TRACKER_URI", "value": master},
            {"name": "DMLC_TRACKER_PORT", "value": str(TRAINER_PORT)},
            {"name": "DMLC_TASK_ID", "valueFrom": RANK_FROM_INDEX},
            {"name": "DMLC_NUM_WORKER", "value": nodes},
        ]
    raise AssertionError(f"the emulated Trainer knows no ML policy in {sorted(policy)}")


def trainer_node_pod(trainjob: dict[str, Any], runtime: dict[str, Any], rank: int) -> dict[str, Any]:
    """Node `rank` of `trainjob` on `runtime`, as JobSet's indexed Job creates it."""
    meta, spec = trainjob["metadata"], trainjob["spec"]
    job = next(j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node")
    template = copy.deepcopy(job["template"]["spec"]["template"])
    patches = [
        p["template"]["spec"]["template"]
        for entry in spec.get("runtimePatches") or []
        for p in entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        if p["name"] == "node"
    ]
    labels = dict((template.get("metadata") or {}).get("labels") or {})  # Job labels stay on the Job
    annotations = {COMPLETION_INDEX: str(rank)}
    pod = template["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "node"]
    trainer = spec["trainer"]
    container.update(
        {key: trainer[key] for key in ("image", "command", "args") if key in trainer},
        resources=trainer.get("resourcesPerNode", {}),
        env=[*container.get("env", []), *trainer.get("env", []), *_rendezvous_env(runtime, trainjob)],
        ports=[{"containerPort": TRAINER_PORT}],
    )
    for patch in patches:
        labels.update((patch.get("metadata") or {}).get("labels", {}))
        annotations.update((patch.get("metadata") or {}).get("annotations", {}))
        pod_patch = dict(patch.get("spec") or {})
        for patched in pod_patch.pop("containers", []):
            if patched["name"] == "node":
                container["volumeMounts"] = [
                    *container.get("volumeMounts", []),
                    *patched.get("volumeMounts", []),
                ]
        pod["volumes"] = [*pod.get("volumes", []), *pod_patch.pop("volumes", [])]
        pod.update(pod_patch)
    labels.update(
        {
            "jobset.sigs.k8s.io/jobset-name": meta["name"],
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "jobset.sigs.k8s.io/job-index": "0",
            COMPLETION_INDEX: str(rank),
        }
    )
    pod["restartPolicy"] = "OnFailure"
    name = f"{meta['name']}-node-0-{rank}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
        "spec": pod,
    }


async def trainer_creates_nodes(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    """The node pods of TrainJob `namespace/name`, created on the runtime its runtimeRef names."""
    trainjob = await asyncio.to_thread(kube.get, TRAINER_API, "TrainJob", namespace, name)
    runtime_name = trainjob["spec"]["runtimeRef"]["name"]
    runtime = await asyncio.to_thread(kube.get, TRAINER_API, "ClusterTrainingRuntime", None, runtime_name)
    nodes = int(trainjob["spec"]["trainer"].get("numNodes", 1))
    pods = [trainer_node_pod(trainjob, runtime, rank) for rank in range(nodes)]
    return [await asyncio.to_thread(kube.create, pod) for pod in pods]


async def trainer_reports(
    kube: KubeClient, namespace: str, name: str, conditions: list[dict[str, Any]], active: int
) -> None:
    """TrainJob status as the controller writes it: its conditions and the `node` child Job's counts."""
    done = {c["type"] for c in conditions if c["status"] == "True"}
    jobs = {"name": "node", "active": active, "ready": active, "suspended": 0}
    jobs.update(succeeded=int("Complete" in done), failed=int("Failed" in done))
    status = {"conditions": conditions, "jobsStatus": [jobs]}
    await asyncio.to_thread(
        kube.patch, TRAINER_API, "TrainJob", namespace, name, {"status": status}, subresource="status"
    )


def kubeflow_profile(name: str, owner: str) -> dict[str, Any]:
    """A Profile as a Kubeflow admin (or the dashboard's registration page) creates it: namespace
    `name` for `owner`."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Profile",
        "metadata": {"name": name},
        "spec": {"owner": {"kind": "User", "name": owner}},
    }

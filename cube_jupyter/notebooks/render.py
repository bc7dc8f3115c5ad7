"""Kubernetes objects for one notebook server: a pure function of the spec and the admin config.

The Kubernetes backend creates exactly what `render_notebook_objects` returns, in that order, and
`cube-jupyter notebook render` prints the same list, like `helm template`. Nothing here does I/O, so
the output is deterministic and every object can be checked against its upstream schema in tests.

Every server is a user server (`CubeWorkbench.role = "user"`): its container is told so, with its
owner, its namespace (downward API), the workbench's URL and the artifact store's endpoint and
credentials (as Secret references) in env, and the workbench's effective config, without secrets,
in a ConfigMap mounted on `JUPYTER_CONFIG_PATH` (`{name}-cube-config`). With
`CubeWorkbench.gpu_quota_per_user` set, the namespace gets a ResourceQuota (`cube-gpu-quota`) that holds
every pod there (servers, replicas, trials, steps) to it, however it was created.

The objects follow Kubeflow Notebooks (Notebook CRD, `notebook-name` pod label, Istio VirtualService
`notebook-{namespace}-{name}` on `/notebook/{namespace}/{name}/`) so existing Kubeflow dashboards,
culling and images keep working. A Notebook's StatefulSet, Service and VirtualService are its
controller's (USE_ISTIO=true, Kubeflow's default; Kubeflow's Jupyter web app relies on them): the
workbench makes only what the controller does not, the owner-only AuthorizationPolicy, the workspace,
the config and the quota, and makes Jupyter's base_url the controller's prefix. In StatefulSet mode
the workbench makes all of it, fixing Kubeflow's sore points: the route never times out WebSockets
and redirects the prefix without its slash.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from cube_jupyter.fields import format_timestamp
from cube_jupyter.kube.labels import (
    HOME,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    STOP_REASON_ANNOTATION,
    USER_ANNOTATION,
    USER_LABEL,
)
from cube_jupyter.names import user_slug
from cube_jupyter.notebooks.config import NotebookSettings
from cube_jupyter.notebooks.spec import NotebookSpec
from cube_jupyter.storage.config import pod_store_env
from cube_jupyter.workbench import NAMESPACE_ENV, OWNER_ENV, ROLE_ENV, WORKBENCH_URL_ENV

# Kubeflow's stop switch: the notebook controller scales the StatefulSet to 0 while it is set.
STOPPED_ANNOTATION = "kubeflow-resource-stopped"
CREATOR_ANNOTATION = "notebooks.kubeflow.org/creator"
PROFILE_ANNOTATION = "cube-jupyter/profile"
# Kubeflow's culler records activity here (RFC 3339); ours does too, so its dashboards show it.
LAST_ACTIVITY_ANNOTATION = "notebooks.kubeflow.org/last-activity"

NAME_LABEL = "app.kubernetes.io/name"
NOTEBOOK_LABEL = "notebook-name"  # the pod label Kubeflow's controller sets; policies select on it
STATEFULSET_LABEL = "statefulset"  # the selector label Kubeflow's controller uses

# The user server's config in the pod (a ConfigMap), first on JUPYTER_CONFIG_PATH.
USER_CONFIG_DIR = "/etc/cube-jupyter"
USER_CONFIG_FILE = "jupyter_server_config.json"
# What a user server decides for itself, from its env and its pod.
# What a user server decides for itself; local_code_execution too: its one user is the one who runs code.
USER_SERVER_OWN = (
    "role",
    "default_user",
    "namespace",
    "state_dir",
    "kubernetes_context",
    "workbench_url",
    "local_code_execution",
)
GPU_QUOTA_NAME = "cube-gpu-quota"

JUPYTER_PORT = 8888
SERVICE_PORT = 80
# jovyan's group in Jupyter docker-stacks and Kubeflow images: makes the workspace PVC writable.
FS_GROUP = 100


def route_prefix(settings: NotebookSettings, namespace: str, name: str) -> str:
    """The URL path of a server behind Istio; Jupyter's base_url is exactly this string."""
    return f"{settings.spawner.path_prefix}/{namespace}/{name}/"


def workspace_claim_name(name: str) -> str:
    return f"{name}-workspace"


def virtual_service_name(namespace: str, name: str) -> str:
    return f"notebook-{namespace}-{name}"


def authorization_policy_name(name: str) -> str:
    return f"notebook-{name}"


def render_notebook_objects(
    spec: NotebookSpec, settings: NotebookSettings, namespace: str | None = None
) -> list[dict[str, Any]]:
    """The objects for `spec` in `namespace` (default: the template's), in creation order: policy,
    PVC, GPU quota, user-server config, then a Notebook, or a StatefulSet, Service and VirtualService.

    The AuthorizationPolicy comes first: the pod has no token, and until an ALLOW policy selects it
    Istio lets anyone in the mesh reach it. (Deleting runs the other way: the policy goes last.)
    """
    namespace = namespace or settings.namespace_for(spec.user)
    objects = [_authorization_policy(spec, settings, namespace), _workspace_pvc(spec, settings, namespace)]
    quota = gpu_quota(settings, namespace)
    if quota is not None:
        objects.append(quota)
    objects.append(_user_config(spec, settings, namespace))
    if settings.spawner.resource_kind == "StatefulSet":
        objects += [
            _statefulset(spec, settings, namespace),
            _service(spec, namespace),
            _virtual_service(spec, settings, namespace),
        ]
    else:  # the controller makes the rest (see the module's docstring)
        objects.append(_notebook(spec, settings, namespace))
    return objects


def stop_annotation_patch(
    stopped: bool, now: datetime, resource_kind: str = "Notebook", reason: str | None = None
) -> dict[str, Any]:
    """A JSON merge patch that stops (annotation = RFC 3339 time) or starts (annotation removed) a server.

    For the StatefulSet kind there is no controller reading the annotation, so the patch also sets
    `spec.replicas`; the annotation is kept there too so both kinds report "stopped" the same way.
    `reason` (only when stopping) says why the workbench stopped it; without one any old reason goes.
    """
    value = format_timestamp(now) if stopped else None
    annotations = {STOPPED_ANNOTATION: value, STOP_REASON_ANNOTATION: reason if stopped else None}
    patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
    if resource_kind == "StatefulSet":
        patch["spec"] = {"replicas": 0 if stopped else 1}
    return patch


def object_labels(spec: NotebookSpec) -> dict[str, str]:
    """Labels on every object of a server; the backend's informers select on managed-by."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        NAME_LABEL: "notebook",
        USER_LABEL: user_slug(spec.user),
        NOTEBOOK_LABEL: spec.name,
    }


def queue_labels(spec: NotebookSpec, settings: NotebookSettings) -> dict[str, str]:
    """The server's Kueue LocalQueue and priority: its profile's (`CubeQueues.profile_queues`), else
    the admin's for servers; none: the server is not queued."""
    return settings.queues.choose("notebook", profile=spec.profile.name)


def object_annotations(spec: NotebookSpec) -> dict[str, str]:
    """The raw user name lives in annotations: label values cannot hold '@' or upper case."""
    return {
        CREATOR_ANNOTATION: spec.user,
        PROFILE_ANNOTATION: spec.profile.name,
        USER_ANNOTATION: spec.user,
    }


def _metadata(spec: NotebookSpec, name: str, namespace: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": object_labels(spec),
        "annotations": object_annotations(spec),
    }


def user_config_name(name: str) -> str:
    return f"{name}-cube-config"


def user_server_config(settings: NotebookSettings) -> dict[str, dict[str, Any]]:
    """The workbench's effective config as a user server loads it: what it decides for itself (role,
    owner, namespace, state) and every credential left out (those come from Secrets, in env)."""
    left_out = {"CubeWorkbench": USER_SERVER_OWN, "CubeStorage": ("access_key", "secret_key")}
    return {
        section: {name: value for name, value in values.items() if name not in left_out.get(section, ())}
        for section, values in settings.server_config.items()
    }


def _user_config(spec: NotebookSpec, settings: NotebookSettings, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(spec, user_config_name(spec.name), namespace),
        "data": {USER_CONFIG_FILE: json.dumps(user_server_config(settings), indent=1, sort_keys=True)},
    }


def _user_server_env(spec: NotebookSpec, settings: NotebookSettings) -> list[dict[str, Any]]:
    """What tells the extension in the pod that it is this user's server, and where things are."""
    env: list[dict[str, Any]] = [
        {"name": ROLE_ENV, "value": "user"},
        {"name": OWNER_ENV, "value": spec.user},
        {"name": NAMESPACE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "JUPYTER_CONFIG_PATH", "value": USER_CONFIG_DIR},
    ]
    if settings.workbench_url:
        env.append({"name": WORKBENCH_URL_ENV, "value": settings.workbench_url})
    return env + pod_store_env(settings.storage)


def gpu_quota(settings: NotebookSettings, namespace: str) -> dict[str, Any] | None:
    """The namespace's hold on GPUs, at `CubeWorkbench.gpu_quota_per_user` per GPU resource: the API
    server refuses any pod past it, whoever creates it (the workbench, a notebook's service account,
    kubectl in a terminal). None without a quota, or when work goes to Kueue's queues, whose
    ClusterQueue quotas hold GPUs instead (`CubeQueues.kueue`)."""
    quota = settings.workbench.gpu_quota_per_user
    if not quota or settings.queues.kueue:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": GPU_QUOTA_NAME,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, NAME_LABEL: "gpu-quota"},
        },
        "spec": {"hard": {f"requests.{name}": str(quota) for name in settings.gpu_resources}},
    }


def _workspace_pvc(spec: NotebookSpec, settings: NotebookSettings, namespace: str) -> dict[str, Any]:
    pvc_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.spawner.workspace_size}},
    }
    if settings.spawner.storage_class:
        pvc_spec["storageClassName"] = settings.spawner.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(spec, workspace_claim_name(spec.name), namespace),
        "spec": pvc_spec,
    }


def _notebook(spec: NotebookSpec, settings: NotebookSettings, namespace: str) -> dict[str, Any]:
    # The Notebook's template has no metadata: the controller copies the Notebook's labels onto the pod
    # and adds `notebook-name` and `statefulset` itself.
    metadata = _metadata(spec, spec.name, namespace)
    metadata["labels"].update(queue_labels(spec, settings))  # the pod's too: Kueue's pod integration
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "metadata": metadata,
        "spec": {"template": {"spec": _pod_spec(spec, settings, namespace)}},
    }


def _statefulset(spec: NotebookSpec, settings: NotebookSettings, namespace: str) -> dict[str, Any]:
    queue = queue_labels(spec, settings)  # Kueue's StatefulSet integration: on it and its pods
    pod_labels = {**object_labels(spec), STATEFULSET_LABEL: spec.name, **queue}
    metadata = _metadata(spec, spec.name, namespace)
    metadata["labels"].update(queue)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata,
        "spec": {
            "replicas": 1,
            "serviceName": spec.name,
            "selector": {"matchLabels": {STATEFULSET_LABEL: spec.name}},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": object_annotations(spec)},
                "spec": _pod_spec(spec, settings, namespace),
            },
        },
    }


def _service(spec: NotebookSpec, namespace: str) -> dict[str, Any]:
    """The Service Kubeflow's controller creates for a Notebook: `{name}`, port 80 -> 8888."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, spec.name, namespace),
        "spec": {
            "type": "ClusterIP",
            "selector": {STATEFULSET_LABEL: spec.name},
            "ports": [
                {
                    "name": "http-notebook",  # the http- prefix tells Istio the protocol
                    "port": SERVICE_PORT,
                    "targetPort": JUPYTER_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


def _pod_spec(spec: NotebookSpec, settings: NotebookSettings, namespace: str) -> dict[str, Any]:
    profile = spec.profile
    pod: dict[str, Any] = {
        "containers": [_container(spec, settings, namespace)],
        "securityContext": {"fsGroup": FS_GROUP},
        "volumes": [
            {"name": "workspace", "persistentVolumeClaim": {"claimName": workspace_claim_name(spec.name)}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "cube-config", "configMap": {"name": user_config_name(spec.name)}},
        ],
    }
    if settings.spawner.service_account:
        pod["serviceAccountName"] = settings.spawner.service_account
    if profile.node_selector:
        pod["nodeSelector"] = dict(sorted(profile.node_selector.items()))
    if profile.tolerations:
        pod["tolerations"] = [dict(t) for t in profile.tolerations]
    return pod


def _container(spec: NotebookSpec, settings: NotebookSettings, namespace: str) -> dict[str, Any]:
    profile = spec.profile
    prefix = route_prefix(settings, namespace, spec.name)
    # Only args: the image's entrypoint (tini + start.sh in docker-stacks, s6 /init in Kubeflow images)
    # still runs first and sets the user up, as with KubeSpawner.
    args = [
        *settings.spawner.cmd,
        f"--ServerApp.base_url={prefix}",
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={JUPYTER_PORT}",
        # No allow_origin: behind the gateway Origin matches Host, and Jupyter's own origin check is
        # what stops another site's page from opening a kernel or terminal WebSocket with the
        # user's gateway cookie. No token: the AuthorizationPolicy lets only the owner's requests in.
        "--IdentityProvider.token=",
    ]
    # NB_PREFIX is what Kubeflow images start Jupyter with; it must agree with the route (config
    # validation refuses a profile that sets it). For a Notebook it is the controller's own value,
    # `/notebook/{namespace}/{name}` (path_prefix must be '/notebook' then), which it leaves as set.
    env = [{"name": "NB_PREFIX", "value": prefix.rstrip("/")}]
    env += [{"name": k, "value": v} for k, v in sorted(profile.env.items())]
    env += _user_server_env(spec, settings)
    requests = {"cpu": profile.cpu, "memory": profile.memory}
    limits: dict[str, str] = dict(requests)
    if profile.gpu > 0:
        limits[profile.gpu_resource] = str(profile.gpu)  # extended resources belong in limits only
    container: dict[str, Any] = {
        "name": spec.name,
        "image": profile.image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": env,
        "ports": [{"name": "notebook-port", "containerPort": JUPYTER_PORT, "protocol": "TCP"}],
        "resources": {"requests": requests, "limits": limits},
        "workingDir": HOME,
        "volumeMounts": [
            {"name": "workspace", "mountPath": HOME},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "cube-config", "mountPath": USER_CONFIG_DIR, "readOnly": True},
        ],
        "readinessProbe": {
            "httpGet": {"path": f"{prefix}api/status", "port": JUPYTER_PORT, "scheme": "HTTP"},
            "initialDelaySeconds": 2,
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
    }
    return container


def _virtual_service(spec: NotebookSpec, settings: NotebookSettings, namespace: str) -> dict[str, Any]:
    """Route `{prefix}` to the Service with no route timeout, so kernel WebSockets are never cut.

    Istio's route timeout is disabled unless set, and its schema rejects `timeout: 0s` (durations must
    be >= 1ms), so the way to say "no timeout" is to leave it out; Kubeflow's controller sets 300s.
    """
    prefix = route_prefix(settings, namespace, spec.name)
    host = f"{spec.name}.{namespace}.svc.cluster.local"
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": _metadata(spec, virtual_service_name(namespace, spec.name), namespace),
        "spec": {
            "gateways": [settings.spawner.istio_gateway],
            "hosts": ["*"],
            "http": [
                {
                    # Without this, "/notebook/ns/nb" (no slash) falls through to whatever else matches.
                    "name": "add-trailing-slash",
                    "match": [{"uri": {"exact": prefix.rstrip("/")}}],
                    "redirect": {"uri": prefix},
                },
                {
                    "name": "notebook",
                    "match": [{"uri": {"prefix": prefix}}],
                    "rewrite": {"uri": prefix},
                    "route": [{"destination": {"host": host, "port": {"number": SERVICE_PORT}}}],
                },
            ],
        },
    }


def _authorization_policy(spec: NotebookSpec, settings: NotebookSettings, namespace: str) -> dict[str, Any]:
    """Admit requests from the ingress gateway that carry the owner's identity header, and the
    workbench's own reads of the kernel and terminal lists (for idle culling).

    The workbench's rule names exact paths, not `api/kernels*`: a kernel's WebSocket
    (`api/kernels/{id}/channels`) is a GET too, and would let the workbench run code in the server.
    """
    spawner = settings.spawner
    prefix = route_prefix(settings, namespace, spec.name)
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "AuthorizationPolicy",
        "metadata": _metadata(spec, authorization_policy_name(spec.name), namespace),
        "spec": {
            "action": "ALLOW",
            "selector": {"matchLabels": {NOTEBOOK_LABEL: spec.name}},
            "rules": [
                {
                    "from": [{"source": {"principals": [spawner.istio_ingress_principal]}}],
                    "when": [
                        {
                            "key": f"request.headers[{spawner.user_header}]",
                            "values": [f"{spawner.user_header_prefix}{spec.user}"],
                        }
                    ],
                },
                {
                    "from": [{"source": {"principals": [spawner.workbench_principal]}}],
                    "to": [
                        {
                            "operation": {
                                "methods": ["GET"],
                                "paths": [f"{prefix}api/kernels", f"{prefix}api/terminals"],
                            }
                        }
                    ],
                },
            ],
        },
    }

"""The pod-level pieces shared by training replicas and tuning trials: labels, the container's
command, resources, env, volumes, and the pod spec around it.

Store credentials reach pods only as `secretKeyRef`s to `CubeStorage.credentials_secret`, never as
values. Pod templates carry the user and job labels but not `app.kubernetes.io/managed-by`: the
notebook backend's pod informer selects on that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.resources import ResourceSpec
from cube_jupyter.jobs.training_spec import WORKSPACE_VOLUME, CodeSpec, VolumeSpec
from cube_jupyter.kube import pods
from cube_jupyter.kube.labels import HOME, MANAGED_BY, MANAGED_BY_LABEL, USER_ANNOTATION, USER_LABEL
from cube_jupyter.names import user_slug
from cube_jupyter.storage.config import pod_store_env

JOB_LABEL = "cube-jupyter/job"
JOB_KIND_LABEL = "cube-jupyter/job-kind"
PACKAGE_VOLUME = "cube-package"
PACKAGE_MOUNT = "/var/run/cube-jupyter/package"
PACKAGE_KEY = "package.tar.gz"
# Schemes a package may have on the cluster: the artifact store, or a ConfigMap the backend created.
CLUSTER_PACKAGE_SCHEMES = ("s3", "configmap")
# The normalized spec a job object was rendered from, as JSON (set by the job service).
SPEC_ANNOTATION = "cube-jupyter/spec"


def set_metadata(obj: dict[str, Any], metadata: dict[str, Any]) -> None:
    """Give `obj` its metadata where a manifest has it, after apiVersion and kind and before spec:
    a dict keeps its keys in the order they were set, and YAML (`train render`) shows them so."""
    rest = {key: obj.pop(key) for key in list(obj) if key not in ("apiVersion", "kind", "metadata")}
    obj["metadata"] = metadata
    obj.update(rest)


def job_metadata(kind: str, name: str, user: str, namespace: str) -> dict[str, Any]:
    """Metadata of a job object; the raw user name is an annotation (label values cannot hold '@')."""
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY,
            USER_LABEL: user_slug(user),
            JOB_LABEL: name,
            JOB_KIND_LABEL: kind,
        },
        "annotations": {USER_ANNOTATION: user},
    }


def pod_labels(name: str, user: str) -> dict[str, str]:
    return {USER_LABEL: user_slug(user), JOB_LABEL: name}


def container_resources(resources: ResourceSpec, config: JobSettings) -> dict[str, Any]:
    """A replica's resources, the admin's defaults where the spec gives none (`kube.pods`)."""
    jobs = config.jobs
    return pods.container_resources(
        resources.cpu or jobs.default_cpu,
        resources.memory or jobs.default_memory,
        resources.gpu,
        jobs.gpu_resource,
    )


def env_list(*maps: dict[str, str]) -> list[dict[str, Any]]:
    """Later maps win; always unbuffered Python output so logs stream line by line."""
    merged: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    for env in maps:
        merged.update(env)
    return [{"name": key, "value": value} for key, value in merged.items()]


def store_env(config: JobSettings) -> list[dict[str, Any]]:
    """How a replica reopens the artifact store (credentials only as Secret references)."""
    return pod_store_env(config.storage)


class ShippedCode:
    """What a container needs to run a CodeSpec: its argv, plus the env and volume a package needs."""

    def __init__(self, code: CodeSpec, config: JobSettings, field: str = "package") -> None:
        self.env: list[dict[str, Any]] = []
        self.volumes: list[dict[str, Any]] = []
        self.mounts: list[dict[str, Any]] = []
        # The user's own command needs nothing of ours; everything else runs through the entry.
        self.needs_runtime = code.kind != "command"
        if code.kind == "command":
            self.command = [*(code.command or ()), *code.args]
            return
        entry = [*config.jobs.entry_command]
        if code.package_uri is not None:
            entry += ["--package", self._package(code.package_uri, config, field)]
        self.command = [*entry, "--kind", code.kind, "--target", code.target, "--", *code.args]

    def _package(self, uri: str, config: JobSettings, field: str) -> str:
        parts = urlsplit(uri)
        if parts.scheme not in CLUSTER_PACKAGE_SCHEMES:
            raise InvalidInput(
                f"{field} {uri!r} is on this machine; on the cluster a package must be in the S3 artifact "
                "store (s3://) or a ConfigMap (configmap://NAME)",
                field=field,
            )
        if parts.scheme == "s3":
            self.env = store_env(config)
            return uri
        key = parts.path.strip("/") or PACKAGE_KEY
        if "/" in key or key.startswith("."):
            raise InvalidInput(f"{field} {uri!r}: the ConfigMap key must be a file name", field=field)
        source = {"name": parts.netloc, "items": [{"key": key, "path": key}]}
        self.volumes = [{"name": PACKAGE_VOLUME, "configMap": source}]
        self.mounts = [{"name": PACKAGE_VOLUME, "mountPath": PACKAGE_MOUNT, "readOnly": True}]
        return f"file://{PACKAGE_MOUNT}/{key}"


def volumes(
    specs: tuple[VolumeSpec, ...], workspace: bool, user: str, config: JobSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pod volumes and container mounts for the spec's volumes and, when asked, the workspace PVC."""
    pod: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if workspace:
        claim = config.jobs.workspace_claim_template.format(username=user_slug(user))
        pod.append({"name": WORKSPACE_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": WORKSPACE_VOLUME, "mountPath": HOME})
    for volume in specs:
        if volume.pvc is not None:
            source: dict[str, Any] = {"persistentVolumeClaim": {"claimName": volume.pvc}}
        elif volume.config_map is not None:
            source = {"configMap": {"name": volume.config_map}}
        elif volume.secret is not None:
            source = {"secret": {"secretName": volume.secret}}
        else:
            source = {"emptyDir": {}}
        pod.append({"name": volume.name, **source})
        mounts.append({"name": volume.name, "mountPath": volume.mount_path})
    return pod, mounts


def pod_spec(
    container: dict[str, Any],
    pod_volumes: list[dict[str, Any]],
    gpus: int,
    config: JobSettings,
    service_account: str | None = None,
) -> dict[str, Any]:
    """A pod spec around one container, with GPU scheduling (node selector, tolerations) when it asks
    for GPUs."""
    spec: dict[str, Any] = {"containers": [container]}
    account = config.jobs.service_account if service_account is None else service_account
    if account:
        spec["serviceAccountName"] = account
    if pod_volumes:
        spec["volumes"] = pod_volumes
    return spec | pods.gpu_placement(gpus, config.jobs)


@dataclass(frozen=True)
class Workload:
    """What one replica or trial pod runs: whose, which volumes, env and resources; its code shipped."""

    name: str
    user: str
    shipped: ShippedCode
    env: list[dict[str, Any]]
    resources: ResourceSpec
    volumes: tuple[VolumeSpec, ...] = ()
    workspace: bool = False
    workspace_claim: str | None = None  # the claim a tuning trial's or job's workspace uses instead


def pod_template(container: dict[str, Any], workload: Workload, config: JobSettings) -> dict[str, Any]:
    """The pod template of a replica or a trial around `container` (its name, image and command set):
    the workspace as working directory, the env, the resources, the volumes, the shipped code, and the
    runtime when the image lacks it; no Istio sidecar."""
    pod_volumes, mounts = volumes(workload.volumes, workload.workspace, workload.user, config)
    if workload.workspace_claim is not None and workload.workspace:
        pod_volumes[0]["persistentVolumeClaim"]["claimName"] = workload.workspace_claim
    if workload.workspace:
        container["workingDir"] = HOME
    container["env"] = [*workload.env, *workload.shipped.env]
    container["resources"] = container_resources(workload.resources, config)
    if mounts or workload.shipped.mounts:
        container["volumeMounts"] = [*mounts, *workload.shipped.mounts]
    spec = pod_spec(container, [*pod_volumes, *workload.shipped.volumes], workload.resources.gpu, config)
    if workload.shipped.needs_runtime:
        pods.inject_runtime(spec, container, config.jobs)
    return {
        "metadata": {
            "labels": pod_labels(workload.name, workload.user),
            "annotations": dict(pods.NO_ISTIO_SIDECAR),
        },
        "spec": spec,
    }

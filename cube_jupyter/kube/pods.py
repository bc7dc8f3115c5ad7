"""The pod-level pieces every pod the workbench renders for user code shares — job replicas, tuning
trials, pipeline steps: their resources, GPU placement, no Istio sidecar, and the runtime for an image
that lacks cube-jupyter. Pure functions over plain dicts, used by the jobs renderers and the Argo
compiler alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cube_jupyter.configurable import CubeWorkload
from cube_jupyter.wheelhouse import copy_argv, install_argv, runtime_paths

# An Istio sidecar keeps running after the main container exits, so a Job or Workflow whose pods have
# one never finishes; these pods talk only to the API server and the artifact store.
NO_ISTIO_SIDECAR = {"sidecar.istio.io/inject": "false"}
# The runtime given to an image without cube-jupyter: wheels copied in, installed into site/.
RUNTIME_VOLUME = "cube-runtime"
RUNTIME_MOUNT = "/var/run/cube-jupyter/runtime"
RUNTIME_WHEELS = f"{RUNTIME_MOUNT}/wheels"
RUNTIME_SITE = f"{RUNTIME_MOUNT}/site"
RUNTIME_PATHS = runtime_paths(RUNTIME_SITE)


def container_resources(cpu: str, memory: str, gpus: int, gpu_resource: str) -> dict[str, Any]:
    """Requests equal limits for CPU and memory (Guaranteed QoS); GPUs, an extended resource, in
    limits only."""
    requests = {"cpu": cpu, "memory": memory}
    limits = dict(requests)
    if gpus:
        limits[gpu_resource] = str(gpus)
    return {"requests": requests, "limits": limits}


def gpu_placement(gpus: int, workload: CubeWorkload) -> dict[str, Any]:
    """The nodeSelector and tolerations a pod (or an Argo template) asking for `gpus` gets, so it can
    land on the admin's (tainted) GPU nodes; none without GPUs."""
    if not gpus:
        return {}
    placement: dict[str, Any] = {}
    if workload.gpu_node_selector:
        placement["nodeSelector"] = dict(sorted(workload.gpu_node_selector.items()))
    if workload.gpu_tolerations:
        placement["tolerations"] = [dict(t) for t in workload.gpu_tolerations]
    return placement


@dataclass(frozen=True)
class RuntimeInjection:
    """What a pod whose image lacks cube-jupyter gets, so `python -m cube_jupyter...` runs in it with
    nothing downloaded: an init container of the runtime image copies its wheelhouse into a shared
    emptyDir, a second one, in the pod's own image, pip-installs the wheels for that image's Python
    into it, and the main container mounts it and finds it on PYTHONPATH and JUPYTER_PATH."""

    init_containers: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    volume_mounts: list[dict[str, Any]]  # the main container's

    def env(self, env: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The main container's `env` with the runtime first on its paths (a value it sets kept after)."""
        given = {var["name"]: var.get("value", "") for var in env}
        paths = {
            name: ":".join(filter(None, [path, given.get(name)])) for name, path in RUNTIME_PATHS.items()
        }
        kept = [var for var in env if var["name"] not in paths]
        return [*kept, *({"name": name, "value": value} for name, value in paths.items())]


def runtime_injection(
    image: str, workload: CubeWorkload, resources: dict[str, Any]
) -> RuntimeInjection | None:
    """The runtime for a pod whose main container runs `image` with `resources`, or None when the
    image has cube-jupyter (CubeWorkload.runtime_injection, images_with_runtime). The init containers
    get the main container's CPU and memory, which costs the pod nothing (it is scheduled on the
    larger of its init and main containers) and satisfies quotas that require limits."""
    if not workload.injects_runtime(image):
        return None
    mounts = [{"name": RUNTIME_VOLUME, "mountPath": RUNTIME_MOUNT}]
    init_resources = {
        kind: {name: value for name, value in amounts.items() if name in ("cpu", "memory")}
        for kind, amounts in resources.items()
    }

    def init_container(name: str, image: str, command: list[str]) -> dict[str, Any]:
        container = {"name": name, "image": image, "command": command, "volumeMounts": mounts}
        return container | ({"resources": init_resources} if init_resources else {})

    return RuntimeInjection(
        init_containers=[
            init_container("cube-runtime-wheels", workload.runtime_image, copy_argv(RUNTIME_WHEELS)),
            init_container("cube-runtime-install", image, install_argv(RUNTIME_WHEELS, RUNTIME_SITE)),
        ],
        volumes=[{"name": RUNTIME_VOLUME, "emptyDir": {}}],
        volume_mounts=[{"name": RUNTIME_VOLUME, "mountPath": RUNTIME_MOUNT, "readOnly": True}],
    )


def inject_runtime(pod: dict[str, Any], container: dict[str, Any], workload: CubeWorkload) -> None:
    """Give `container` the runtime when its image needs it (`runtime_injection`). `pod` is a pod spec
    or an Argo template: both hold `initContainers` and `volumes`."""
    injection = runtime_injection(container["image"], workload, container.get("resources", {}))
    if injection is None:
        return
    pod["initContainers"] = [*pod.get("initContainers", []), *injection.init_containers]
    pod["volumes"] = [*pod.get("volumes", []), *injection.volumes]
    container["volumeMounts"] = [*container.get("volumeMounts", []), *injection.volume_mounts]
    container["env"] = injection.env(container.get("env", []))

"""The workbench's pod exactly as a rendered install describes it, run by the pod harness
(tests/pods/harness.py, the one rule for env and mounts): its container's command, env (Secret
references resolved from values the test gives), working directory and volumes (the ConfigMap's files
written into its volume), in the venv that stands for the workbench image. Only what a kubelet would
differ in is added: the port and address to listen on here, a kubeconfig standing in for the
in-cluster service account, and `--allow-root` when the tests run as root.

    with run_workbench(objects, tmp_path, secrets={...}, kubeconfig=path) as pod:
        requests.get(pod.url(probe["httpGet"]["path"]))
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from cube_jupyter.images import image_repository
from cube_jupyter.local.processes import LOOPBACK, exited, free_port, stop_groups
from tests.deploy.rendered import Obj, of_kind, the, workbench_container
from tests.pods.harness import Cluster, Pod
from tests.pods.images import workbench_image
from tests.waiting import wait_until

# Where the pod finds the kubeconfig standing in for its service account: a file put in place, so the
# harness's path rule maps it like any other container path.
KUBECONFIG = "/var/run/cube-harness/kubeconfig"
START_TIMEOUT = 120.0  # a deadline, not an expectation: a cold `jupyter lab` start on a busy machine


@dataclass(frozen=True)
class LocalPod:
    port: int

    def url(self, path: str) -> str:
        return f"http://{LOOPBACK}:{self.port}{path}"


def workbench_pod(
    objects: list[Obj], root: Path, *, secrets: Mapping[str, Mapping[str, str]], kubeconfig: Path
) -> Pod:
    """The Deployment's pod on a cluster of this machine holding the install's ConfigMaps and the
    test's Secrets."""
    deployment = the(objects, "Deployment", "cube-jupyter")
    container = workbench_container(objects)
    cluster = Cluster(
        root,
        images={image_repository(container["image"]): workbench_image()},
        secrets={name: dict(data) for name, data in secrets.items()},
        namespace=deployment["metadata"]["namespace"],
        config_maps={c["metadata"]["name"]: c for c in of_kind(objects, "ConfigMap")},
    )
    template = deployment["spec"]["template"]
    pod = {
        "metadata": {**template["metadata"], "name": deployment["metadata"]["name"]},
        "spec": template["spec"],
    }
    env = {container["name"]: {"KUBECONFIG": KUBECONFIG}}
    return Pod(cluster, pod, operator_env=env, files={KUBECONFIG: kubeconfig.read_text()})


@contextmanager
def run_workbench(
    objects: list[Obj], root: Path, *, secrets: Mapping[str, Mapping[str, str]], kubeconfig: Path
) -> Iterator[LocalPod]:
    """Start the rendered workbench container here; yield once its startup probe passes."""
    container = workbench_container(objects)
    port = free_port()
    args = [f"--ServerApp.port={port}", f"--ServerApp.ip={LOOPBACK}"]
    args += ["--allow-root"] if os.geteuid() == 0 else []
    pod = workbench_pod(objects, root, secrets=secrets, kubeconfig=kubeconfig)
    running = pod.start_container(container["name"], extra_args=args)
    local = LocalPod(port=port)
    try:
        startup = container["startupProbe"]["httpGet"]["path"]

        def started() -> bool:
            assert not exited(running.process), f"the workbench exited:\n{running.log[-8000:]}"
            return requests.get(local.url(startup), timeout=5).status_code == 200

        wait_until(
            started, START_TIMEOUT, f"GET {startup} to answer 200", ignoring=(requests.ConnectionError,)
        )
        yield local
    finally:
        stop_groups([running.process], grace=10.0)
        running.wait(time.monotonic())

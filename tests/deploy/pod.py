"""The workbench's container exactly as a rendered install describes it, run as a local process: its
command, its env (Secret references resolved from values the test gives), its working directory, and
each volume a temp dir (a ConfigMap's files written into it). Only what a kubelet would differ in is
added: the port and address to listen on here, a kubeconfig standing in for the in-cluster service
account, and `--allow-root` when the tests run as root.

    with run_workbench(objects, tmp_path, secrets={...}, kubeconfig=path) as pod:
        requests.get(pod.url(probe["httpGet"]["path"]))
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from cube_jupyter.local.processes import LOOPBACK, exited, free_port, log_tail, spawn, stop_groups
from tests.deploy.rendered import Obj, pod_template, the, workbench_container, write_config_map
from tests.waiting import wait_until

START_TIMEOUT = 120.0  # a deadline, not an expectation: a cold `jupyter lab` start on a busy machine


@dataclass(frozen=True)
class LocalPod:
    port: int
    log: Path

    def url(self, path: str) -> str:
        return f"http://{LOOPBACK}:{self.port}{path}"


def mount_volumes(objects: list[Obj], root: Path) -> dict[str, Path]:
    """Each of the container's mount paths -> a temp dir holding what the volume would."""
    volumes = {v["name"]: v for v in pod_template(objects)["spec"]["volumes"]}
    mounts: dict[str, Path] = {}
    for mount in workbench_container(objects).get("volumeMounts", []):
        volume, host = volumes[mount["name"]], root / "volumes" / mount["name"]
        if "configMap" in volume:
            write_config_map(the(objects, "ConfigMap", volume["configMap"]["name"]), host)
        else:
            assert {"emptyDir", "persistentVolumeClaim"} & set(volume), f"unexpected volume {volume}"
            host.mkdir(parents=True)
        mounts[mount["mountPath"]] = host
    return mounts


def host_path(path: str, mounts: Mapping[str, Path]) -> str:
    """A container path under a mount, as the path of that mount's temp dir; other values as they are."""
    for mount_path in sorted(mounts, key=len, reverse=True):
        if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
            return str(mounts[mount_path] / os.path.relpath(path, mount_path))
    return path


def container_env(
    container: Obj, mounts: Mapping[str, Path], secrets: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The container's env: values (paths under a mount mapped to its temp dir), and Secret keys."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = os.pathsep.join(host_path(p, mounts) for p in var["value"].split(os.pathsep))
            continue
        ref = var["valueFrom"]["secretKeyRef"]
        assert ref["name"] in secrets, f"env {var['name']} needs Secret {ref['name']!r}, which the test lacks"
        env[var["name"]] = secrets[ref["name"]][ref["key"]]
    return env


@contextmanager
def run_workbench(
    objects: list[Obj], root: Path, *, secrets: Mapping[str, Mapping[str, str]], kubeconfig: Path
) -> Iterator[LocalPod]:
    """Start the rendered workbench container here; yield once its startup probe passes."""
    container = workbench_container(objects)
    mounts = mount_volumes(objects, root)
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "KUBECONFIG": str(kubeconfig),
        **container_env(container, mounts, secrets),
    }
    port = free_port()
    argv = [*container["command"], *container.get("args", [])]
    argv += [f"--ServerApp.port={port}", f"--ServerApp.ip={LOOPBACK}"]
    argv += ["--allow-root"] if os.geteuid() == 0 else []
    pod = LocalPod(port=port, log=root / "workbench.log")
    cwd = Path(host_path(container["workingDir"], mounts))
    process = spawn(argv, env, cwd, pod.log, "the rendered workbench container")
    try:
        startup = container["startupProbe"]["httpGet"]["path"]

        def started() -> bool:
            assert not exited(process), f"the workbench exited:\n{log_tail(pod.log, 40, 8000)}"
            return requests.get(pod.url(startup), timeout=5).status_code == 200

        wait_until(
            started, START_TIMEOUT, f"GET {startup} to answer 200", ignoring=(requests.ConnectionError,)
        )
        yield pod
    finally:
        stop_groups([process], grace=10.0)
        process.wait()

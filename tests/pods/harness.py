"""A kubelet on this machine: a rendered pod run as local processes, its containers exactly as
rendered, so a test proves the pod would run, not that a hand-written copy of it does.

What runs is the rendered argv (`command` + `args`), in the container's `workingDir`, with its `env`,
each container in the venv that stands for its `image` (tests/pods/images.py), init containers first,
one by one, then the main containers together (run to completion); or one main container started and
left running (a server, such as the workbench). The kubelet's part is done as the kubelet does it:

- `env`: `value`s with `$(VAR)` expanded from the variables before them; `secretKeyRef` read from the
  Secrets the test gives the cluster (a missing one fails the pod, like CreateContainerConfigError);
  `fieldRef` from the pod (metadata.name, metadata.namespace, metadata.uid, labels and annotations,
  spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP); `$(VAR)` in command and args;
- volumes: an `emptyDir` is a directory of the pod, shared by its containers (init containers
  included); a `persistentVolumeClaim` is a directory of the cluster, shared by every pod naming the
  claim; a `configMap` is a directory of the pod holding the ConfigMap's keys as files, from the
  ConfigMaps the test gives the cluster. Other volume kinds fail loudly: no test needs them yet.

The one rule for paths, since nothing here can mount: each mount path (a volumeMount's `mountPath`,
and a file an operator puts in place, such as an Argo input artifact's `path`) stands for a directory
(or file) of this machine, and is replaced by it wherever it starts a path in the container's
command, args, env values and workingDir: at the start of the text, or after ':' or '='. Nothing
else in the argv changes; `readOnly` is not enforced.

The process env is the image's (its PATH first, see ImageVenv.env), HOSTNAME (the pod's name) and
HOME (a directory of the pod: the container's writable layer), then the container's env, then what an
operator adds to a container by name (the Training Operator's MASTER_ADDR, RANK, ...; a kubeconfig
standing in for the service account's in-cluster credentials).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cube_jupyter.images import image_repository
from tests.pods.images import ImageVenv

NODE_NAME = "cube-harness-node"
POD_IP = "127.0.0.1"  # every pod shares this machine's network
VAR_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
FIELD_SELECTOR = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
POD_TIMEOUT = 240.0


@dataclass
class Cluster:
    """What pods see outside themselves: images (by repository), Secrets, ConfigMaps, the claims'
    storage."""

    root: Path
    images: Mapping[str, ImageVenv]  # image repository (no tag) → the venv standing for it
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    namespace: str = "cube-alice"
    config_maps: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → the ConfigMap object

    def image(self, reference: str) -> ImageVenv:
        repository = image_repository(reference)
        if repository not in self.images:
            raise AssertionError(
                f"no venv stands for image {reference!r}: the test gives {sorted(self.images)}"
            )
        return self.images[repository]

    def claim(self, name: str) -> Path:
        path = self.root / "claims" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass(frozen=True)
class ContainerRun:
    name: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def log(self) -> str:
        """What `kubectl logs` shows: both streams."""
        return self.stdout + self.stderr


@dataclass(frozen=True)
class ContainerProcess:
    """A container's process, started; its stdout and stderr are files of the pod."""

    name: str
    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def streams(self) -> list[str]:
        """What it has written so far: stdout, stderr."""
        return [path.read_bytes().decode(errors="replace") for path in (self.stdout, self.stderr)]

    @property
    def log(self) -> str:
        """What `kubectl logs` shows so far: both streams."""
        return "".join(self.streams())

    def wait(self, deadline: float) -> ContainerRun:
        """Its run, once it exits (its process group killed at `deadline`)."""
        try:
            returncode = self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            returncode = self.process.wait()
        return ContainerRun(self.name, returncode, *self.streams())


@dataclass
class PodRun:
    """A pod's containers as they ran: init containers in order, then the main ones."""

    name: str
    containers: list[ContainerRun] = field(default_factory=list)

    def container(self, name: str) -> ContainerRun:
        return next(c for c in self.containers if c.name == name)

    @property
    def succeeded(self) -> bool:
        return all(c.returncode == 0 for c in self.containers)

    def describe(self) -> str:
        return "\n".join(f"--- {c.name} exited {c.returncode}:\n{c.log[-4000:]}" for c in self.containers)


class Pod:
    """One pod on this machine: its directories, its path mapping, its resolved containers."""

    def __init__(
        self,
        cluster: Cluster,
        pod: dict[str, Any],
        *,
        operator_env: Mapping[str, Mapping[str, str]] | None = None,
        files: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.metadata: dict[str, Any] = {
            "namespace": cluster.namespace,
            "uid": str(uuid.uuid4()),
            **pod["metadata"],
        }
        self.spec: dict[str, Any] = pod["spec"]
        self.name: str = self.metadata["name"]
        self.root = cluster.root / "pods" / self.name
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        self.operator_env = operator_env or {}
        self.volumes = {volume["name"]: self._volume(volume) for volume in self.spec.get("volumes", [])}
        self.files: dict[str, Path] = {}
        for index, (path, content) in enumerate((files or {}).items()):
            local = self.root / "files" / str(index) / Path(path).name
            local.parent.mkdir(parents=True)
            local.write_text(content)
            self.files[path] = local

    def _volume(self, volume: dict[str, Any]) -> Path:
        if "emptyDir" in volume:
            path = self.root / "volumes" / volume["name"]
            path.mkdir(parents=True)
            return path
        if "persistentVolumeClaim" in volume:
            return self.cluster.claim(volume["persistentVolumeClaim"]["claimName"])
        if "configMap" in volume:
            source = volume["configMap"]
            if "items" in source or source["name"] not in self.cluster.config_maps:
                raise AssertionError(
                    f"pod {self.name}: volume {volume['name']!r}: the harness mounts a whole ConfigMap "
                    f"the test gives the cluster, not {source} (it has {sorted(self.cluster.config_maps)})"
                )
            return write_config_map(
                self.cluster.config_maps[source["name"]], self.root / "volumes" / volume["name"]
            )
        kinds = sorted(set(volume) - {"name"})
        raise AssertionError(f"volume {volume['name']!r}: the harness has no {kinds} volumes")

    # -- the one path rule ----------------------------------------------------------------------

    def _mounts(self, container: dict[str, Any]) -> dict[str, Path]:
        mounts = dict(self.files)
        for mount in container.get("volumeMounts", []):
            path = self.volumes[mount["name"]] / mount.get("subPath", "")
            path.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"].rstrip("/")] = path
        return mounts

    @staticmethod
    def _mapper(mounts: dict[str, Path]) -> Callable[[str], str]:
        if not mounts:
            return lambda text: text
        longest_first = sorted(mounts, key=len, reverse=True)
        pattern = re.compile(r"(^|[:=])(" + "|".join(re.escape(p) for p in longest_first) + r")(?=$|[/:])")
        return lambda text: pattern.sub(lambda m: m.group(1) + str(mounts[m.group(2)]), text)

    # -- what the kubelet resolves ---------------------------------------------------------------

    def _field(self, path: str) -> str:
        values = {
            "metadata.name": self.name,
            "metadata.namespace": self.metadata["namespace"],
            "metadata.uid": self.metadata["uid"],
            "spec.nodeName": NODE_NAME,
            "spec.serviceAccountName": self.spec.get("serviceAccountName", "default"),
            "status.podIP": POD_IP,
            "status.hostIP": POD_IP,
        }
        if path in values:
            return values[path]
        selected = FIELD_SELECTOR.match(path)
        if selected is None:
            raise AssertionError(f"pod {self.name}: the harness cannot resolve fieldRef {path!r}")
        return str(self.metadata.get(selected[1], {}).get(selected[2], ""))

    def _env(self, container: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = expand(var["value"], env)
                continue
            source = var["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self.cluster.secrets.get(ref["name"], {})
                if ref["key"] not in secret:
                    raise AssertionError(
                        f"pod {self.name}: CreateContainerConfigError: secret {ref['name']!r} "
                        f"has no key {ref['key']!r}"
                    )
                env[var["name"]] = secret[ref["key"]]
            elif "fieldRef" in source:
                env[var["name"]] = self._field(source["fieldRef"]["fieldPath"])
            else:
                raise AssertionError(
                    f"pod {self.name}: the harness cannot resolve env {var['name']!r}: {source}"
                )
        env.update(self.operator_env.get(container["name"], {}))
        return env

    # -- running ---------------------------------------------------------------------------------

    def _start(self, container: dict[str, Any], extra_args: Sequence[str] = ()) -> ContainerProcess:
        image = self.cluster.image(container["image"])
        if "command" not in container:
            raise AssertionError(
                f"container {container['name']!r} runs its image's entrypoint: the harness has none"
            )
        path = self._mapper(self._mounts(container))
        env = {key: path(value) for key, value in self._env(container).items()}
        argv = [path(expand(arg, env)) for arg in [*container["command"], *container.get("args", [])]]
        home = self.root / "home" / container["name"]
        home.mkdir(parents=True)
        workdir = Path(path(container["workingDir"])) if "workingDir" in container else home
        workdir.mkdir(parents=True, exist_ok=True)
        process_env = {**image.env(), "HOSTNAME": self.name, "HOME": str(home), **env}
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        stdout, stderr = logs / f"{container['name']}.out", logs / f"{container['name']}.err"
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            process = subprocess.Popen(
                [*argv, *extra_args],
                env=process_env,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        return ContainerProcess(container["name"], process, stdout, stderr)

    def start_container(self, name: str, *, extra_args: Sequence[str] = ()) -> ContainerProcess:
        """Start the main container `name` and leave it running (a server: the caller stops it), with
        `extra_args` after its argv: what only this machine needs, such as a free port to listen on."""
        if self.spec.get("initContainers"):
            raise AssertionError(f"pod {self.name} has init containers: run it with start()")
        [container] = [c for c in self.spec["containers"] if c["name"] == name]
        return self._start(container, extra_args)

    def start(self) -> RunningPod:
        return RunningPod(self)


class RunningPod:
    """A pod running in a thread of its own: init containers one at a time, then the main containers
    together; `wait` joins it (and raises what the kubelet would have refused the pod for)."""

    def __init__(self, pod: Pod) -> None:
        self.pod = pod
        self.run = PodRun(pod.name)
        self._error: BaseException | None = None
        self._deadline = time.monotonic() + POD_TIMEOUT
        self._thread = threading.Thread(target=self._run, name=f"pod {pod.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for container in self.pod.spec.get("initContainers", []):
                result = self.pod._start(container).wait(self._deadline)
                self.run.containers.append(result)
                if result.returncode != 0:
                    return  # restartPolicy Never: the pod fails at its first failed init container
            started = [self.pod._start(c) for c in self.pod.spec["containers"]]
            self.run.containers += [process.wait(self._deadline) for process in started]
        except BaseException as exc:
            self._error = exc

    def wait(self) -> PodRun:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.run


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: a defined variable's value; an unknown reference stays as it is;
    `$$` is a literal `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return VAR_REFERENCE.sub(replace, text)


def write_config_map(config_map: dict[str, Any], directory: Path) -> Path:
    """The ConfigMap's keys as files in `directory`, as the kubelet mounts a configMap volume."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, text in config_map.get("data", {}).items():
        (directory / key).write_text(text)
    return directory


def run_pods(pods: list[Pod]) -> list[PodRun]:
    """Start every pod at once (replicas find each other while running), then wait for all."""
    running = [pod.start() for pod in pods]
    return [pod.wait() for pod in running]

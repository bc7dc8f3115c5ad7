"""The cluster side of the end-to-end tests: `kubectl` with the test's kubeconfig (argv lists only, and
anything secret on stdin, never on a command line), the workbench installed from `deploy/` under an
overlay of the test's own, and a port-forward to the ingress gateway."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.controlplane import kubectl
from tests.deploy.rendered import OVERLAYS_DIR
from tests.waiting import wait_until

FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class Kubectl:
    """`kubectl --kubeconfig=...`; a failure is an AssertionError carrying kubectl's message."""

    kubeconfig: str

    def argv(self, *args: str) -> list[str]:
        return [str(kubectl()), f"--kubeconfig={self.kubeconfig}", *args]

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 600.0) -> str:
        result = subprocess.run(
            self.argv(*args), input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self("get", *args, "-o", "json"))

    def apply(self, obj: dict[str, Any]) -> None:
        """Apply one object given on stdin (how a Secret's values stay off the command line)."""
        self("apply", "-f", "-", stdin=json.dumps(obj))


def write_overlay(directory: Path, settings: str) -> Path:
    """A kustomization on the kubeflow overlay that adds `e2e.py` (the test's settings) to the
    workbench's config, as an admin's own overlay would; kustomize takes relative paths only."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "e2e.py").write_text(settings)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAYS_DIR / "kubeflow", directory)],
        "configMapGenerator": [{"name": "cube-jupyter-config", "behavior": "merge", "files": ["e2e.py"]}],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


def store_settings(url: str, endpoint: str, credentials_secret: str) -> str:
    """The workbench config that points pipelines and shipped code at the test's S3 store."""
    return "\n".join(
        [
            "c = get_config()  # noqa: F821",
            f"c.CubeStorage.url = {url!r}",
            f"c.CubeStorage.endpoint = {endpoint!r}",
            f"c.CubeStorage.credentials_secret = {credentials_secret!r}",
            "",
        ]
    )


def copy_s3_credentials(
    kubectl: Kubectl, namespace: str, source: str, target: str, annotations: dict[str, str]
) -> None:
    """Kubeflow Pipelines' per-profile S3 Secret (keys `accesskey`, `secretkey`) as the Secret the
    workbench and KServe read (keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), in the same namespace."""
    data = kubectl.get("secret", source, "-n", namespace)["data"]
    decoded = {key: base64.b64decode(value).decode() for key, value in data.items()}
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": target, "namespace": namespace, "annotations": annotations},
            "type": "Opaque",
            "stringData": {
                "AWS_ACCESS_KEY_ID": decoded["accesskey"],
                "AWS_SECRET_ACCESS_KEY": decoded["secretkey"],
            },
        }
    )


@contextmanager
def port_forward(kubectl: Kubectl, namespace: str, service: str, port: int, log: Path) -> Iterator[str]:
    """`kubectl port-forward` to `service` on a free local port; yields its http:// URL. Its output
    goes to a file: a pipe nobody reads would fill with "Handling connection" lines and stall it."""
    with log.open("w") as output:
        process = subprocess.Popen(
            kubectl.argv("-n", namespace, "port-forward", f"svc/{service}", f":{port}"),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:

        def forwarding() -> re.Match[str] | None:
            assert process.poll() is None, f"kubectl port-forward exited: {log.read_text()}"
            return FORWARDING.search(log.read_text())

        local = wait_until(forwarding, 60, f"kubectl port-forward to {namespace}/{service}")
        assert local is not None  # wait_until returns only a match
        yield f"http://127.0.0.1:{local[1]}"
    finally:
        process.terminate()
        process.wait(30)

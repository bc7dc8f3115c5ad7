"""The install manifests under `deploy/` as `kubectl kustomize` renders them (what `kubectl apply -k`
sends), and the workbench config their ConfigMap carries, loaded as Jupyter loads it.

    objects = render(OVERLAYS_DIR / "kubeflow")
    deployment = the(objects, "Deployment")
    config = load_workbench_config(objects, tmp_path)   # traitlets Config, as the pod reads it
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from traitlets.config import Config

from cube_jupyter.config import load_config_file
from tests.cluster.controlplane import kubectl
from tests.pods.harness import write_config_map

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy"
OVERLAYS_DIR = DEPLOY_DIR / "overlays"
OVERLAYS = ("kubeflow", "standalone")
CONFIG_FILE = "jupyter_server_config.py"

Obj = dict[str, Any]


def render(path: Path) -> list[Obj]:
    """Every object `kubectl kustomize path` renders; a failure names kustomize's error."""
    result = subprocess.run(
        [str(kubectl()), "kustomize", str(path)], capture_output=True, text=True, check=False, timeout=120
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {path} failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def the(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    """The one object of `kind` (named `name`, if given)."""
    found = [obj for obj in of_kind(objects, kind) if name is None or obj["metadata"]["name"] == name]
    names = [obj["metadata"]["name"] for obj in of_kind(objects, kind)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)} among {names}"
    return found[0]


def pod_template(objects: list[Obj]) -> Obj:
    return the(objects, "Deployment", "cube-jupyter")["spec"]["template"]


def workbench_container(objects: list[Obj]) -> Obj:
    containers = pod_template(objects)["spec"]["containers"]
    assert [c["name"] for c in containers] == ["workbench"], containers
    return dict(containers[0])


def config_map_of(objects: list[Obj], volume: str) -> Obj:
    """The ConfigMap the Deployment's volume `volume` mounts (its generated, hashed name)."""
    volumes = {v["name"]: v for v in pod_template(objects)["spec"]["volumes"]}
    return the(objects, "ConfigMap", volumes[volume]["configMap"]["name"])


def load_workbench_config(objects: list[Obj], directory: Path) -> Config:
    """The workbench config of a rendered install, through the traitlets loader Jupyter uses for
    `jupyter_server_config.py` (an overlay's files included)."""
    write_config_map(config_map_of(objects, "config"), directory)
    return load_config_file(directory / CONFIG_FILE)

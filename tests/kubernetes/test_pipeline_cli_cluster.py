"""`cube-jupyter pipeline run --target cluster`: the CLI submits an Argo Workflow through the kubeconfig,
as it would to a real cluster (here the KMock emulator), and follows the step states Argo reports."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest
import yaml

from cube_jupyter.cli import main
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.pipelines.dag import build_pipeline, load_notebook
from tests.kubernetes.emulator import ApiServerEmulator
from tests.pipelines.notebooks import EXAMPLES
from tests.waiting import wait_until_async

WORKFLOWS = "argoproj.io/v1alpha1/workflows"


@pytest.fixture
def kmock(kmock: ApiServerEmulator) -> ApiServerEmulator:
    kmock.resources[WORKFLOWS] = kmock_lib.ResourceInfo(kind="Workflow", namespaced=True)
    return kmock


@pytest.fixture
def cluster_cli(tmp_path: Path, api_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with the example notebook, a kubeconfig naming the emulator, and config."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [{"name": "test", "cluster": {"server": api_url}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                "users": [{"name": "test", "user": {}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "cube_config.py").write_text(
        'c.CubeWorkbench.backend = "kubernetes"\n'
        f"c.CubeWorkbench.state_dir = {str(tmp_path / 'state')!r}\n"
        'c.CubeWorkbench.default_user = "alice"\n'
        'c.CubeStorage.url = "s3://ml-artifacts/runs"\n'
    )
    shutil.copy(EXAMPLES / "fanout_ml.ipynb", tmp_path / "fanout_ml.ipynb")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def argo_finishes(workflow: dict[str, Any], steps: list[str]) -> dict[str, Any]:
    """The status the Argo controller writes when every task of the DAG has succeeded."""
    name = workflow["metadata"]["name"]
    stamp = "2025-03-01T10:00:00Z"
    nodes = {
        f"{name}-{i}": {
            "id": f"{name}-{i}",
            "name": f"{name}.{step}",
            "displayName": step,
            "type": "Pod",
            "templateName": f"step-{step}",
            "phase": "Succeeded",
            "startedAt": stamp,
            "finishedAt": stamp,
        }
        for i, step in enumerate(steps)
    }
    return {"status": {"phase": "Succeeded", "startedAt": stamp, "finishedAt": stamp, "nodes": nodes}}


async def test_run_on_the_cluster_submits_and_follows_the_workflow(
    cluster_cli: Path, kube: KubeClient
) -> None:
    steps = [s.name for s in build_pipeline(load_notebook(cluster_cli / "fanout_ml.ipynb"), "x").steps]
    argv = ["pipeline", "run", "fanout_ml.ipynb", "--target", "cluster", "-p", "n_samples", "300"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cube_jupyter.cli",
        *argv,
        "--config",
        "cube_config.py",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    cli = asyncio.ensure_future(process.communicate())

    async def submitted() -> list[dict[str, Any]]:
        # The emulator serves on this loop: list from a thread, never block it.
        listed = await asyncio.to_thread(kube.list, "argoproj.io/v1alpha1", "Workflow", "cube-alice")
        return list(listed.items)

    workflows = await wait_until_async(
        submitted, 60, "the CLI to submit a Workflow", until=lambda items: bool(items) or cli.done()
    )
    assert workflows and not cli.done(), await cli if cli.done() else "no Workflow submitted"
    workflow = workflows[0]
    assert workflow["metadata"]["labels"]["cube-jupyter/user"] == "alice"
    arguments = {p["name"]: p.get("value") for p in workflow["spec"]["arguments"]["parameters"]}
    assert arguments["n_samples"] == "300"
    await asyncio.to_thread(
        kube.patch,
        "argoproj.io/v1alpha1",
        "Workflow",
        "cube-alice",
        workflow["metadata"]["name"],
        argo_finishes(workflow, steps),
    )
    stdout, stderr = await asyncio.wait_for(cli, 30)
    assert process.returncode == 0, stderr.decode()[-2000:]
    for step in steps:
        assert f"{step}" in stdout.decode() and "succeeded" in stdout.decode()


def test_cluster_target_needs_the_kubernetes_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(EXAMPLES / "fanout_ml.ipynb", tmp_path / "fanout_ml.ipynb")
    (tmp_path / "cube_config.py").write_text(f"c.CubeWorkbench.state_dir = {str(tmp_path / 'state')!r}\n")
    monkeypatch.chdir(tmp_path)
    code = main(["pipeline", "run", "fanout_ml.ipynb", "--target", "cluster", "--config", "cube_config.py"])
    assert code in (1, 2) and "kubernetes backend" in capsys.readouterr().err

"""A compiled Argo pipeline run end to end by the pod harness: every step's pod as compiled, in DAG
order, in the runtime image, against the loopback S3 server; its outputs are those of a local run of
the same pipeline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from cube_jupyter.pipelines import marshal
from cube_jupyter.pipelines.dag import build_pipeline
from cube_jupyter.pipelines.kubernetes.argo import compile_workflow
from cube_jupyter.storage import ArtifactStore, open_store
from tests.k8s_schemas import validate_object
from tests.pipelines.notebooks import code, notebook, write
from tests.pods.argo import run_workflow, started
from tests.pods.conftest import cluster_settings
from tests.pods.harness import Cluster
from tests.storage.s3server import S3Server

# Fan-out and fan-in, a parameter overridden at submission, and braces Argo must leave alone; run in
# the "Python 3 (cube-jupyter)" kernel the runtime image carries.
PIPELINE = notebook(
    code("import math", "imports"),
    code("lr = 0.1\ntitle = '{{run}}'", "parameters"),
    code("data = [1, 2, 3]\nlabel = '{{' + title + '}}'", "step:prepare"),
    code("doubled = [v * 2 for v in data]", "step:double"),
    code("scaled = [v * lr for v in data]", "step:scale"),
    code("total = math.fsum(doubled) + math.fsum(scaled)\nprint(f'{total} {label}|{title}')", "step:report"),
    kernel="cube-python",
)
RUN = "fanout-x7k2p"  # the Workflow's name: its run id (no run id compiled in)


def outputs(store: ArtifactStore, run: str) -> dict[str, object]:
    """Every step output of a run, unpacked, by `step/variable`."""
    prefix = f"runs/{run}/outputs/"
    return {key.removeprefix(prefix): marshal.unpack(store.get(key)) for key in store.list(prefix)}


def printed(store: ArtifactStore, run: str, step: str) -> str:
    executed = nbformat.reads(store.get(f"runs/{run}/steps/{step}.ipynb").decode(), as_version=4)
    return "".join(o.get("text", "") for cell in executed.cells for o in cell.get("outputs", []))


def local_run(folder: Path, store: Path) -> str:
    """`cube-jupyter pipeline run` on this machine, as a user runs it; its run id."""
    (folder / "config.py").write_text(f"c.CubeWorkbench.state_dir = {str(folder / 'state')!r}\n")
    argv = [sys.executable, "-m", "cube_jupyter.cli", "pipeline", "run", "fanout.ipynb", "-p", "lr", "0.5"]
    argv += ["--store", str(store), "--no-cache", "--config", str(folder / "config.py")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=180, env=env, cwd=folder, check=False
    )
    assert result.returncode == 0, result.stderr
    finished = re.search(r"^run (\S+) succeeded", result.stdout, re.MULTILINE)
    assert finished is not None, result.stdout
    return finished[1]


def test_a_compiled_pipeline_runs_in_dag_order_with_a_local_runs_outputs(
    cluster: Cluster, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    path = write(PIPELINE, tmp_path / "fanout.ipynb")
    pipeline = build_pipeline(nbformat.read(str(path), as_version=4), "fanout.ipynb")
    settings = cluster_settings(s3, bucket)
    compiled = compile_workflow(pipeline, settings.pipelines, parameters={"lr": 0.5})
    validate_object(compiled)
    steps = [t for t in compiled["spec"]["templates"] if "container" in t]
    assert steps and all("initContainers" not in t for t in steps)  # the runtime image carries the runtime

    runs = run_workflow(cluster, started(compiled, RUN, cluster.namespace))
    assert all(run.succeeded for run in runs.values()), "\n".join(r.describe() for r in runs.values())
    for name, run in runs.items():
        assert json.loads(run.container("main").stdout)["status"] == "succeeded", name

    cluster_store = open_store(settings.storage.url, settings.storage)
    local_store = open_store(str(tmp_path / "local-store"))
    local_id = local_run(tmp_path, tmp_path / "local-store")
    on_cluster = outputs(cluster_store, RUN)
    assert on_cluster == outputs(local_store, local_id)
    assert on_cluster["scale/scaled"] == [0.5, 1.0, 1.5]  # lr overridden at submission
    assert on_cluster["prepare/label"] == "{{{{run}}}}"
    line = "15.0 {{{{run}}}}|{{run}}\n"  # braces intact through Argo's templating
    assert line in printed(cluster_store, RUN, "report") and line in printed(local_store, local_id, "report")

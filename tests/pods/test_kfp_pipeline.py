"""A notebook pipeline compiled to KFP v2 IR (`compile_kfp`) and run task by task as KFP's driver and
launcher would (tests/pods/kfp.py): each step's container exactly as compiled, in the runtime image,
its artifacts moved through the loopback S3 store under the pipeline root. Its outputs are a local
run's of the same notebook, and what KFP records of them (types, formats, metrics) is right."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from cube_jupyter.pipelines import marshal
from cube_jupyter.pipelines.dag import build_pipeline
from cube_jupyter.pipelines.kubernetes.kfp import compile_kfp
from cube_jupyter.storage import open_store
from tests.pipelines.notebooks import code, notebook, write
from tests.pods.conftest import cluster_settings
from tests.pods.harness import Cluster
from tests.pods.kfp import run_kfp, uri_object
from tests.pods.test_argo_pipeline import PIPELINE, local_run, outputs
from tests.storage.s3server import S3Server

# The Argo test's notebook (fan-out and fan-in, a parameter overridden, braces), with a metric.
WITH_METRIC = notebook(*PIPELINE.cells, code("total", "metrics"), kernel="cube-python")


def test_a_notebook_compiled_for_kfp_runs_as_kfps_launcher_would_with_a_local_runs_outputs(
    cluster: Cluster, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    path = write(WITH_METRIC, tmp_path / "fanout.ipynb")
    pipeline = build_pipeline(nbformat.read(str(path), as_version=4), "fanout.ipynb")
    settings = cluster_settings(s3, bucket)
    ir = compile_kfp(pipeline, settings.pipelines)
    client = s3.client()
    run = run_kfp(cluster, ir, {"lr": 0.5}, client=client, pipeline_root=f"s3://{bucket}/kfp", run_id="r-42")
    assert run.succeeded, run.describe()
    for name, task in run.tasks.items():
        assert json.loads(task.attempts[-1].container("main").stdout)["status"] == "succeeded", name

    on_kfp = {
        f"{name.removeprefix('step-')}/{output.removeprefix('out_')}": marshal.unpack(
            uri_object(client, artifact["uri"])
        )
        for name, task in run.tasks.items()
        for output, artifact in task.artifacts.items()
        if output.startswith("out_")
    }
    local_id = local_run(tmp_path, tmp_path / "local-store")
    assert on_kfp == outputs(open_store(str(tmp_path / "local-store")), local_id)
    assert on_kfp["scale/scaled"] == [0.5, 1.0, 1.5]  # lr given to the run

    report = run.tasks["step-report"]
    executed = nbformat.reads(
        uri_object(client, report.artifacts["step_notebook"]["uri"]).decode(), as_version=4
    )
    text = "".join(o.get("text", "") for cell in executed.cells for o in cell.get("outputs", []))
    assert "15.0 {{{{run}}}}|{{run}}\n" in text
    assert report.artifacts["step_metrics"]["type"]["schemaTitle"] == "system.Metrics"
    assert report.artifacts["step_metrics"]["metadata"]["total"] == 15.0  # what KFP's UI charts
    assert json.loads(uri_object(client, report.artifacts["step_metrics"]["uri"])) == {"total": 15.0}
    doubled = run.tasks["step-double"].artifacts["out_doubled"]
    assert doubled["metadata"]["kind"] == "cloudpickle" and len(doubled["metadata"]["sha256"]) == 64
    consumed = report.executor_input["inputs"]["artifacts"]["in_doubled"]["artifacts"][0]
    assert consumed["uri"] == doubled["uri"]  # lineage: the report read what double wrote

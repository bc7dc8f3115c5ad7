"""A notebook pipeline compiled to KFP v2 IR (`compile_kfp`) and run task by task as KFP's driver and
launcher would (tests/pods/kfp.py): each step's container exactly as compiled, in the runtime image,
its artifacts moved through the loopback S3 store under the pipeline root. Its outputs are a local
run's of the same notebook, and what KFP records of them (types, formats, metrics) is right; a step
in a user's image without cube-jupyter installs the runtime from the wheelhouse the admin uploaded
(`python -m cube_jupyter.wheelhouse upload`), imported into the run, and gives the same outputs."""

from __future__ import annotations

import copy
import json
import subprocess
import tempfile
from pathlib import Path

import nbformat
import yaml
from minio import Minio

from cube_jupyter.images import image_repository
from cube_jupyter.pipelines import marshal
from cube_jupyter.pipelines.dag import build_pipeline
from cube_jupyter.pipelines.kubernetes.kfp import compile_kfp
from cube_jupyter.storage import open_store
from tests.pipelines.notebooks import code, notebook, write
from tests.pods.conftest import PYTORCH_IMAGE, cluster_settings
from tests.pods.harness import Cluster
from tests.pods.images import ImageVenv
from tests.pods.kfp import KfpRun, run_kfp, uri_object
from tests.pods.test_argo_pipeline import PIPELINE, local_run, outputs
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, S3Server

# The Argo test's notebook (fan-out and fan-in, a parameter overridden, braces), with a metric.
WITH_METRIC = notebook(*PIPELINE.cells, code("total", "metrics"), kernel="cube-python")


def kfp_outputs(client: Minio, run: KfpRun) -> dict[str, object]:
    """Every step output of a KFP run, unpacked from its artifact, by `step/variable`."""
    return {
        f"{name.removeprefix('step-')}/{output.removeprefix('out_')}": marshal.unpack(
            uri_object(client, artifact["uri"])
        )
        for name, task in run.tasks.items()
        for output, artifact in task.artifacts.items()
        if output.startswith("out_")
    }


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

    on_kfp = kfp_outputs(client, run)
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


def with_tmpdir(ir: str, folder: str) -> str:
    """The IR with its containers' TMPDIR in `folder`, as a container's /tmp is its own: the runtime a
    step installs there (150 MB) goes when the test's folder does, not into this machine's /tmp. A
    short path, as a kernel's sockets live there."""
    documents = [d for d in yaml.safe_load_all(ir) if d]
    for executor in documents[0]["deploymentSpec"]["executors"].values():
        if "container" in executor:
            executor["container"].setdefault("env", []).append({"name": "TMPDIR", "value": folder})
    return yaml.safe_dump_all(documents)


def test_a_step_in_an_image_without_cube_jupyter_installs_the_runtime_from_the_imported_wheelhouse(
    cluster: Cluster, runtime: ImageVenv, pytorch: ImageVenv, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    bare = subprocess.run(
        ["python", "-c", "import cube_jupyter"],
        env=pytorch.env(),
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert b"No module named 'cube_jupyter'" in bare.stderr  # the user's image really lacks the runtime
    cluster.images = {**cluster.images, image_repository(PYTORCH_IMAGE): pytorch}
    in_pytorch = copy.deepcopy(PIPELINE)
    [double] = [cell for cell in in_pytorch.cells if "step:double" in cell.metadata.get("tags", [])]
    double.metadata["tags"].append(f"image:{PYTORCH_IMAGE}")
    path = write(in_pytorch, tmp_path / "fanout.ipynb")
    pipeline = build_pipeline(nbformat.read(str(path), as_version=4), "fanout.ipynb")

    # The admin puts the wheelhouse in the store, in the runtime image, with the store's env a pod gets.
    wheels = f"s3://{bucket}/cube-jupyter/wheels"
    store_env = {
        "MINIO_ENDPOINT": s3.endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    argv = ["python", "-m", "cube_jupyter.wheelhouse", "upload", wheels]
    uploaded = subprocess.run(
        argv, env={**runtime.env(), **store_env}, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert uploaded.returncode == 0, uploaded.stderr
    assert uploaded.stdout.startswith("uploaded ")

    settings = cluster_settings(s3, bucket, CubePipelines={"kfp_runtime_wheels": wheels})
    ir = compile_kfp(pipeline, settings.pipelines)
    client = s3.client()
    with tempfile.TemporaryDirectory(prefix="cube-pod-tmp-") as pod_tmp:
        run = run_kfp(
            cluster,
            with_tmpdir(ir, pod_tmp),
            {"lr": 0.5},
            client=client,
            pipeline_root=f"s3://{bucket}/kfp",
            run_id="r-43",
        )
    assert run.succeeded, run.describe()
    imported = run.tasks["importer"].artifacts["artifact"]
    assert imported["uri"] == wheels and not run.tasks["importer"].attempts  # no pod: a record
    double = run.tasks["step-double"]
    assert double.executor_input["inputs"]["artifacts"]["cube_runtime"]["artifacts"] == [imported]
    main = double.attempts[-1].container("main")
    assert "Successfully installed" in main.stderr and "cube-jupyter" in main.stderr
    assert json.loads(main.stdout)["status"] == "succeeded"  # pip's output kept off the runner's
    assert "cube_runtime" not in run.tasks["step-prepare"].executor_input["inputs"].get("artifacts", {})

    on_kfp = kfp_outputs(client, run)
    local_id = local_run(tmp_path, tmp_path / "local-store")
    assert on_kfp == outputs(open_store(str(tmp_path / "local-store")), local_id)
    assert on_kfp["double/doubled"] == [2, 4, 6]

"""One notebook on the three targets, side by side (wall time, medians; local is the baseline):

1. local: `cube-jupyter pipeline run` (a new process, no cache), steps in forked kernels;
2. Argo: the compiled Workflow run by the pod harness as Argo would (tests/pods/argo.py): each step
   a process running the step runner in the runtime image's venv, data through the loopback S3 store;
3. KFP: the compiled IR run as KFP's launcher would (tests/pods/kfp.py), the same way.

Each emulated pod is a fresh process starting its own kernel (as a pod does), with no scheduling,
image pulls or launcher downloads: the gap to local is the per-step process and kernel start that a
cluster pays at least, not a cluster's latency. The three runs' outputs are checked equal.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import nbformat

from cube_jupyter.images import RUNTIME_IMAGE, image_repository
from cube_jupyter.pipelines import marshal
from cube_jupyter.pipelines.dag import build_pipeline
from cube_jupyter.pipelines.kubernetes.argo import compile_workflow
from cube_jupyter.pipelines.kubernetes.kfp import compile_kfp
from cube_jupyter.storage import open_store
from tests.benchmarks.timing import print_table
from tests.pipelines.notebooks import write
from tests.pods.argo import run_workflow, started
from tests.pods.conftest import STORE_SECRET, cluster_settings
from tests.pods.harness import Cluster
from tests.pods.images import runtime_image
from tests.pods.kfp import run_kfp, uri_object
from tests.pods.test_argo_pipeline import PIPELINE, local_run, outputs
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, s3_server

RUNS = 3


async def main() -> None:
    runtime = runtime_image()
    local: list[float] = []
    argo: list[float] = []
    kfp: list[float] = []
    with s3_server() as s3, tempfile.TemporaryDirectory(prefix="bench-targets-") as name:
        folder = Path(name)
        path = write(PIPELINE, folder / "fanout.ipynb")
        pipeline = build_pipeline(nbformat.read(str(path), as_version=4), "fanout.ipynb")
        client = s3.client()
        for attempt in range(RUNS):
            bucket = s3.new_bucket()
            settings = cluster_settings(s3, bucket)
            cluster = Cluster(
                root=folder / f"cluster-{attempt}",
                images={image_repository(RUNTIME_IMAGE): runtime},
                secrets={
                    STORE_SECRET: {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
                },
            )
            store = folder / f"local-{attempt}"
            started_at = time.perf_counter()
            local_id = local_run(folder, store)
            local.append(time.perf_counter() - started_at)

            workflow = compile_workflow(pipeline, settings.pipelines, parameters={"lr": 0.5})
            started_at = time.perf_counter()
            pods = run_workflow(cluster, started(workflow, f"fanout-{attempt}", cluster.namespace))
            argo.append(time.perf_counter() - started_at)
            assert all(pod.succeeded for pod in pods.values())

            ir = compile_kfp(pipeline, settings.pipelines)
            started_at = time.perf_counter()
            run = run_kfp(cluster, ir, {"lr": 0.5}, client=client, pipeline_root=f"s3://{bucket}/kfp")
            kfp.append(time.perf_counter() - started_at)
            assert run.succeeded, run.describe()

            expected = outputs(open_store(str(store)), local_id)
            assert (
                outputs(open_store(settings.storage.url, settings.storage), f"fanout-{attempt}") == expected
            )
            on_kfp = {
                f"{task_name.removeprefix('step-')}/{output.removeprefix('out_')}": marshal.unpack(
                    uri_object(client, artifact["uri"])
                )
                for task_name, task in run.tasks.items()
                for output, artifact in task.artifacts.items()
                if output.startswith("out_")
            }
            assert on_kfp == expected
    print_table(
        f"One notebook ({len(pipeline.steps)} steps, a fan-out and fan-in) on each target, same outputs",
        [
            ("local: cube-jupyter pipeline run (baseline)", local),
            ("Argo Workflow, run by the pod harness", argo),
            ("KFP IR, run as KFP's launcher would", kfp),
        ],
        baseline="local: cube-jupyter pipeline run (baseline)",
    )


if __name__ == "__main__":
    asyncio.run(main())

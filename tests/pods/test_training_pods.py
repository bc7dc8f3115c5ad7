"""2-node PyTorch training run by the pod harness, real DDP over gloo between the two pods, under both
Kubeflow training APIs:

- a PyTorchJob (Training Operator v1), with the env the operator gives each replica, in a user's
  PyTorch image that has no cube-jupyter: the rendered init containers install the runtime from the
  runtime image's wheelhouse into the shared volume, offline, and the replica's
  `python -m cube_jupyter.jobs.entry` runs from it;
- a TrainJob (Trainer v2) on the cluster's `torch-distributed` ClusterTrainingRuntime, with the torch
  plugin's PET_* env, in cube-jupyter's GPU notebook image (PyTorch with cube-jupyter: a TrainJob
  cannot add init containers, so an image without the runtime is refused there).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from cube_jupyter.config import Settings
from cube_jupyter.images import image, image_repository
from cube_jupyter.jobs.package import ship_to_cluster
from cube_jupyter.jobs.render.training import render_training
from cube_jupyter.jobs.render.trainjob import render_trainjob
from cube_jupyter.jobs.training_spec import TrainingSpec
from tests.k8s_schemas import validate_object
from tests.pods.conftest import PYTORCH_IMAGE, cluster_settings
from tests.pods.harness import Cluster, PodRun, run_pods
from tests.pods.images import ImageVenv, layered_image
from tests.pods.operators import training_pods, trainjob_pods
from tests.storage.s3server import S3Server

CODE_DIR = Path(__file__).parent
REPLICA = re.compile(r"rank (\d) of (\d): all_reduce sum=(\S+) weights=(\S+)")
GPU_NOTEBOOK_IMAGE = image("notebook-gpu")


def ddp_spec(image: str, settings: Settings) -> TrainingSpec:
    """Two replicas running tests/pods/ddp_allreduce.py, shipped to the store as the backend ships it."""
    raw: dict[str, Any] = {
        "name": "ddp",
        "framework": "pytorch",
        "image": image,
        "replicas": {"master": 1, "worker": 1},
        "script": "ddp_allreduce.py",
        "resources": {"cpu": "1", "memory": "2Gi"},
    }
    return ship_to_cluster(TrainingSpec.from_dict(raw, user="alice"), settings.storage, CODE_DIR)


def assert_ddp_ran(runs: list[PodRun], container: str) -> None:
    """Both ranks met: all_reduce summed 1 + 2, and one DDP step left their weights equal."""
    assert all(run.succeeded for run in runs), "\n".join(run.describe() for run in runs)
    results = {}
    for run in runs:
        [(rank, world, total, weights)] = REPLICA.findall(run.container(container).log)
        results[int(rank)] = (int(world), float(total), weights)
    assert sorted(results) == [0, 1]
    assert {(world, total) for world, total, _ in results.values()} == {(2, 3.0)}
    assert results[0][2] == results[1][2]


def test_a_pytorchjob_runs_ddp_in_a_user_image_without_cube_jupyter(
    cluster: Cluster, pytorch: ImageVenv, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    argv = ["python", "-c", "import cube_jupyter"]
    bare = subprocess.run(argv, env=pytorch.env(), cwd=tmp_path, capture_output=True, check=False)
    assert b"No module named 'cube_jupyter'" in bare.stderr  # the user's image really lacks the runtime
    cluster.images = {**cluster.images, image_repository(PYTORCH_IMAGE): pytorch}
    settings = cluster_settings(s3, bucket)
    [job] = render_training(ddp_spec(PYTORCH_IMAGE, settings), settings.jobs)
    validate_object(job)

    runs = run_pods(training_pods(cluster, job))
    assert_ddp_ran(runs, "pytorch")
    for run in runs:
        assert [c.name for c in run.containers] == ["cube-runtime-wheels", "cube-runtime-install", "pytorch"]
        assert "Successfully installed" in run.container("cube-runtime-install").log


def test_a_trainjob_runs_ddp_on_the_torch_distributed_runtime(
    cluster: Cluster, pytorch: ImageVenv, runtime: ImageVenv, s3: S3Server, bucket: str
) -> None:
    notebook_gpu = layered_image("notebook-gpu", pytorch, runtime)
    cluster.images = {**cluster.images, image_repository(GPU_NOTEBOOK_IMAGE): notebook_gpu}
    settings = cluster_settings(s3, bucket)
    [trainjob] = render_trainjob(ddp_spec(GPU_NOTEBOOK_IMAGE, settings), settings.jobs)
    validate_object(trainjob)
    assert trainjob["spec"]["runtimeRef"]["name"] == "torch-distributed"

    runs = run_pods(trainjob_pods(cluster, trainjob))
    assert_ddp_ran(runs, "node")
    assert [[c.name for c in run.containers] for run in runs] == [["node"], ["node"]]

"""`train run` of a spec naming a local script, on the kubernetes backend: the script (and the local
modules it imports) travels to the S3 store the pods read, and the replicas run it from there; with
no S3 store configured the submit is refused naming the spec's field, and nothing is created."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.package import fetch_package
from cube_jupyter.jobs.training_spec import TrainingSpec
from tests.k8s_schemas import validate_object
from tests.kubernetes.conftest import StartOnEmulator, make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.kubernetes.test_jobs_k8s import JOB_RESOURCES
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, S3Server, s3_server

NS = "cube-alice"
SPEC = {
    "name": "shipped",
    "framework": "pytorch",
    "replicas": {"master": 1, "worker": 1},
    "script": "train.py",
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def kmock(kmock: ApiServerEmulator) -> ApiServerEmulator:
    """The shared fixture's cluster with the Training Operator's, Katib's and KServe's CRDs."""
    for name, info in JOB_RESOURCES.items():
        kmock.resources[name] = kmock_lib.ResourceInfo(**info)
    return kmock


@pytest.fixture
def make_backend(start_on_emulator: StartOnEmulator[Any], tmp_path: Path) -> Callable[..., Any]:
    async def make(storage: dict[str, Any]) -> KubernetesJobBackend:
        # The Training Operator's kind: a TrainJob ships the same argv (tests/jobs/test_render_trainjob.py).
        settings = make_settings(jobs={"training_api": "training-operator-v1"}, storage=storage)
        return await start_on_emulator(
            settings,
            lambda cluster: KubernetesJobBackend(
                settings.jobs, cluster, sync_timeout=10.0, root_dir=str(tmp_path)
            ),
        )

    return make


def write_code(root: Path) -> None:
    (root / "helpers.py").write_text("def greet():\n    return 'hello from a shipped module'\n")
    (root / "train.py").write_text("from helpers import greet\nprint(greet())\n")


async def test_a_local_script_is_shipped_to_s3_and_the_replicas_run_it_from_there(
    make_backend: Callable[..., Any], kmock: ApiServerEmulator, s3: S3Server, tmp_path: Path
) -> None:
    write_code(tmp_path)
    bucket = s3.new_bucket()
    backend = await make_backend(
        {
            "url": f"s3://{bucket}/jobs",
            "endpoint": s3.endpoint,
            "access_key": ACCESS_KEY,
            "secret_key": SECRET_KEY,
            "credentials_secret": "minio-creds",
        }
    )
    await backend.submit("training", TrainingSpec.from_dict(SPEC, user="alice"))
    job = kmock.find("kubeflow.org/v1/pytorchjobs", NS, "shipped")
    assert job is not None
    validate_object(job, strict=True)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    argv = [*container.get("command", []), *container.get("args", [])]
    package = argv[argv.index("--package") + 1]
    assert package.startswith(f"s3://{bucket}/jobs/") and argv[argv.index("--target") + 1] == "train.py"
    assert SECRET_KEY not in str(job)  # credentials only as references to the Secret

    unpacked = tmp_path / "unpacked"
    fetch_package(package, unpacked, backend.settings.storage)
    assert sorted(p.name for p in unpacked.iterdir()) == ["helpers.py", "train.py"]


async def test_without_an_s3_store_the_script_cannot_reach_the_pods_and_nothing_is_created(
    make_backend: Callable[..., Any], kmock: ApiServerEmulator, tmp_path: Path
) -> None:
    write_code(tmp_path)
    backend = await make_backend({})
    with pytest.raises(InvalidInput) as refused:
        await backend.submit("training", TrainingSpec.from_dict(SPEC, user="alice"))
    assert refused.value.field == "script" and "CubeStorage.url" in refused.value.message
    assert kmock.find("kubeflow.org/v1/pytorchjobs", NS, "shipped") is None

"""A notebook pod's user server on a cluster, over real HTTP against the KMock emulator: with its own
service account it can list and watch only its namespace, so everything it submits (Argo Workflows,
training jobs) goes there, and every request it makes names that namespace, whatever the templates
the workbench uses for users' namespaces say."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import kmock as kmock_lib
import pytest

from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns
from tests.k8s_schemas import validate_object
from tests.kubernetes.conftest import connect, make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.kubernetes.test_jobs_k8s import JOB_RESOURCES
from tests.pipelines.test_argo import fan_out_fan_in

pytestmark = pytest.mark.timeout(60)

POD_NAMESPACE = "cube-alice"
WORKFLOWS = "argoproj.io/v1alpha1/workflows"


@pytest.fixture
def kmock(kmock: ApiServerEmulator) -> ApiServerEmulator:
    kmock.resources[WORKFLOWS] = kmock_lib.ResourceInfo(kind="Workflow", namespaced=True)
    for name, info in JOB_RESOURCES.items():
        kmock.resources[name] = kmock_lib.ResourceInfo(**info)
    return kmock


@pytest.fixture
def pod_settings() -> Any:
    """alice's notebook pod: the workbench's templates would name `kf-alice` (jobs `jobs-alice`);
    the pod is in `cube-alice`, and that is what counts."""
    return make_settings(
        {"role": "user", "default_user": "alice", "namespace": POD_NAMESPACE},
        jobs={"namespace_template": "jobs-{username}"},
        namespace_template="kf-{username}",
    )


@pytest.fixture
def started(api_url: str, loop: asyncio.AbstractEventLoop, pod_settings: Any) -> Iterator[list[Any]]:
    objects: list[Any] = []
    yield objects
    for obj in objects:
        loop.run_until_complete(obj.close())
    for cluster in {id(obj.cluster): obj.cluster for obj in objects}.values():
        loop.run_until_complete(cluster.close())


async def test_a_pod_submits_workflows_and_jobs_into_its_own_namespace_only(
    kmock: ApiServerEmulator, api_url: str, pod_settings: Any, started: list[Any]
) -> None:
    cluster = connect(pod_settings, api_url)  # one connection for the pod's features, as its server has
    runs = ClusterPipelineRuns(pod_settings.pipelines, cluster, sync_timeout=10)
    jobs = KubernetesJobBackend(pod_settings.jobs, cluster, sync_timeout=10)
    started += [runs, jobs]
    await runs.start()
    await jobs.start()

    name = await runs.submit(fan_out_fan_in(), "alice", "run-1", "s3://ml-artifacts/runs")
    assert kmock.names(WORKFLOWS) == [name]
    workflow = kmock.find(WORKFLOWS, POD_NAMESPACE, name)
    assert workflow is not None
    validate_object(workflow, strict=True)

    spec = TrainingSpec.from_dict(
        {"name": "ddp", "framework": "pytorch", "replicas": {"worker": 2}, "command": ["python", "t.py"]},
        user="alice",
    )
    job = await jobs.submit("training", spec)
    assert jobs.namespace("alice") == POD_NAMESPACE and job.name == "ddp"
    assert kmock.find("trainer.kubeflow.org/v1alpha1/trainjobs", POD_NAMESPACE, "ddp") is not None

    # every list, watch and create named the pod's namespace: nothing cluster-wide, nothing elsewhere
    # (API discovery, /apis/<group>/<version>, names no resource: every user may read it)
    seen = [(r.action, r.resource.plural, r.namespace) for r in kmock if r.resource and r.resource.plural]
    assert seen, "the emulator recorded no requests"
    assert {namespace for _, _, namespace in seen} == {POD_NAMESPACE}, sorted(set(seen))
    actions = {(str(action), plural) for action, plural, _ in seen}
    assert any("create" in a.lower() and p == "workflows" for a, p in actions)
    assert any("watch" in a.lower() and p == "trainjobs" for a, p in actions)


async def test_the_workbench_keeps_each_users_namespace_at_the_gpu_quota(
    kmock: ApiServerEmulator, make_backend: Any
) -> None:
    """The namespace's ResourceQuota is what holds a pod's service account (or kubectl in a terminal)
    to gpu_quota_per_user: made with the first server, brought up to date by later ones."""
    from cube_jupyter.notebooks.spec import NotebookSpec

    settings = make_settings(gpu_quota_per_user=2)
    backend = await make_backend(settings)
    await backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile("gpu")))
    await backend.create_server(NotebookSpec("alice", "nb2", settings.notebooks.profile("cpu")))
    quota = kmock.find("v1/resourcequotas", POD_NAMESPACE, "cube-gpu-quota")
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "2"
    validate_object(quota, strict=True)

    raised = make_settings(gpu_quota_per_user=3)
    later = await make_backend(raised)
    await later.create_server(NotebookSpec("alice", "nb3", raised.notebooks.profile("cpu")))
    quota = kmock.find("v1/resourcequotas", POD_NAMESPACE, "cube-gpu-quota")
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "3"
    # deleting a server leaves the namespace's quota in place
    await later.delete_server("alice", "nb3")
    assert kmock.find("v1/resourcequotas", POD_NAMESPACE, "cube-gpu-quota") is not None

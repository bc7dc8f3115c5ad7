"""A notebook pod's user server on the real control plane, with the token of its namespace's
`default-editor` ServiceAccount (as a Kubeflow notebook pod has): it submits Argo Workflows and
training jobs into its own namespace, lists and watches only there, and cancels and deletes them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes import client as k8s

from cube_jupyter.errors import BackendUnavailable
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns, WorkflowRun
from cube_jupyter.services import Workbench
from tests.cluster.conftest import USERS, api_client, service_account_kubeconfig
from tests.cluster.controlplane import State
from tests.cluster.test_jobs_on_cluster import operator_pod, until_job
from tests.kubernetes.conftest import make_settings
from tests.pipelines.test_argo import fan_out_fan_in

ALICE = "alice@example.com"
NAMESPACE = USERS[ALICE]


@pytest.mark.parametrize("resource_kind", ["StatefulSet", "Notebook"])
def test_a_user_server_submits_workflows_and_jobs_into_its_own_namespace(
    installed: State, admin: k8s.ApiClient, tmp_path: Path, resource_kind: str
) -> None:
    """Through the composition root, as the server's extension runs: its owner's servers read for the
    GPU quota (whichever kind the admin chose), jobs and pipeline runs in its namespace only."""
    settings = make_settings(
        {"role": "user", "default_user": ALICE, "namespace": NAMESPACE, "gpu_quota_per_user": 4},
        jobs={"training_api": "training-operator-v1"},
        storage={"url": "s3://ml-artifacts/runs", "endpoint": "http://minio:9000"},
        resource_kind=resource_kind,
    )
    kubeconfig = service_account_kubeconfig(installed, NAMESPACE, "default-editor", tmp_path / "kubeconfig")

    operator = KubeClient(admin)  # the Training Operator, played by the test

    async def scenario() -> None:
        cluster = Cluster(settings, api_client(kubeconfig))
        workbench = Workbench(settings, cluster=cluster)
        runs = ClusterPipelineRuns(settings.pipelines, cluster, sync_timeout=60)
        await runs.start()
        await workbench.started_jobs()  # the servers the quota counts read too
        jobs = workbench.job_backend
        try:
            name = await runs.submit(
                fan_out_fan_in(), ALICE, f"run-{resource_kind.lower()}", "s3://ml-artifacts/runs"
            )
            assert name in [run.name for run in await _listed(runs)]
            await runs.cancel(ALICE, f"run-{resource_kind.lower()}")
            job_name = f"ddp-{resource_kind.lower()}"
            spec = TrainingSpec.from_dict(
                {
                    "name": job_name,
                    "framework": "pytorch",
                    "replicas": {"worker": 2},
                    "command": ["python", "t.py"],
                },
                user=ALICE,
            )
            job = await jobs.submit("training", spec)
            assert job.name == job_name
            workbench.ledger.check(ALICE, 1, field="resources.gpu")  # reads her servers and jobs
            owner = await asyncio.to_thread(
                operator.get, "kubeflow.org/v1", "PyTorchJob", NAMESPACE, job_name
            )
            await asyncio.to_thread(operator.create, operator_pod(owner, "worker", 0, 0))
            running = await until_job(jobs, job_name, lambda j: any(r.state == "Running" for r in j.replicas))
            with pytest.raises(BackendUnavailable):  # no kubelet here; the request got through RBAC
                async for _line in jobs.logs(running, "worker-0"):
                    pass
            await jobs.delete(ALICE, job_name)
        finally:
            await runs.close()
            await workbench.close()

    asyncio.run(scenario())


async def _listed(runs: ClusterPipelineRuns) -> list[WorkflowRun]:
    """The runs once the watch has brought the new Workflow into the cache."""
    for _ in range(300):
        listed = runs.list_runs(ALICE)
        if listed:
            return list(listed)
        await asyncio.sleep(0.1)
    raise AssertionError("the submitted Workflow never reached the cache")

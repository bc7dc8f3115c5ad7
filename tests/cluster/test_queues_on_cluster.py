"""The workbench's servers and jobs on a Kueue queue (`CubeQueues`), on the real control plane with
Kueue's own controller (`kueue` fixture) and the workbench's ServiceAccount: what the backends create
carries the LocalQueue label, Kueue holds it back while the ClusterQueue's GPU quota is short, and the
user sees `queued` / `Queued` with Kueue's own reason, read from its Workload through the workbench's
informer, and its place in the ClusterQueue from Kueue's visibility API (an aggregated API, through
the API server); when the quota frees, the same objects are admitted and run. No emulation: the
Workload, its conditions, the scheduling gate and the places are Kueue's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from cube_jupyter.config import Settings
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.objects import name_of
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.notebooks.spec import ServerStatus
from tests.cluster.conftest import (
    USERS,
    Kubectl,
    api_client,
    cli_in_user_pod,
    kueue_queue,
    service_account_kubeconfig,
)
from tests.cluster.controlplane import GPU_RESOURCE, State
from tests.cluster.servers import eventually
from tests.kubernetes.conftest import make_settings

ALICE = "alice@example.com"
NAMESPACE = USERS[ALICE]
QUEUE = "alice-gpus"
SHORT = f"insufficient unused quota for {GPU_RESOURCE}"


@pytest.fixture
def one_gpu_queue(kueue: State, kubectl: Kubectl) -> Iterator[str]:
    """A LocalQueue in alice's namespace onto a ClusterQueue of one GPU (and room for the rest)."""
    with kueue_queue(kubectl, NAMESPACE, QUEUE, {"cpu": "32", "memory": "128Gi", GPU_RESOURCE: "1"}) as name:
        yield name
        for kind in ("statefulsets.apps", "trainjobs.trainer.kubeflow.org"):
            kubectl("delete", kind, "--all", f"--namespace={NAMESPACE}", "--wait=true")


def queued_settings(queue: str) -> Settings:
    """Servers and training jobs on `queue`; a GPU quota of one per user, which Kueue's queue stands
    in for: a second GPU server waits instead of a 403."""
    return make_settings(
        {"namespace_source": "kubeflow-profile", "gpu_quota_per_user": 1},
        jobs={"training_api": "trainer-v2"},
        storage={"url": "s3://ml-artifacts/jobs", "endpoint": "http://minio:9000"},
        queues={"queues": {"notebook": queue, "training": queue}},
        resource_kind="StatefulSet",
    )


def test_a_server_and_a_trainjob_wait_for_gpu_quota_showing_kueues_reason_then_run(
    one_gpu_queue: str, workbench_kubeconfig: Path, kueue: State, tmp_path: Path
) -> None:
    settings = queued_settings(one_gpu_queue)
    # alice's own server (the user role, her namespace's default-editor token) sees the same places
    as_alice = service_account_kubeconfig(kueue, NAMESPACE, "default-editor", tmp_path / "kubeconfig")

    async def scenario() -> None:
        cluster = Cluster(settings, api_client(workbench_kubeconfig))
        notebooks = KubernetesNotebookBackend(settings.notebooks, cluster, sync_timeout=60)
        jobs = KubernetesJobBackend(settings.jobs, cluster, sync_timeout=60)
        try:
            await notebooks.start(supervise=False)
            await jobs.start(supervise=False)
            assert notebooks.kueue_workloads is not None and jobs.queues("training")

            service = NotebookService(settings.notebooks, notebooks)
            assert notebooks.queues("gpu")
            first = await service.create(ALICE, {"name": "first", "profile": "gpu"})
            assert first.status in (ServerStatus.QUEUED, ServerStatus.PENDING)
            await eventually(
                "the first GPU server admitted and running",
                lambda: notebooks.get_server(ALICE, "first"),
                lambda s: s.status == ServerStatus.RUNNING,
            )
            await service.create(ALICE, {"name": "second", "profile": "gpu"})  # past the quota: it waits
            second = await eventually(
                "the second GPU server queued with Kueue's reason",
                lambda: notebooks.get_server(ALICE, "second"),
                lambda s: s.status == ServerStatus.QUEUED and SHORT in (s.queue_reason or ""),
            )
            assert f"LocalQueue {one_gpu_queue}" in (second.queue_reason or "")
            assert second.gpus_held == 0  # waiting, it holds nothing
            second = await eventually(
                "the second server's place in the ClusterQueue, from Kueue's visibility API",
                lambda: notebooks.get_server(ALICE, "second"),
                lambda s: s.queue_position is not None,
            )
            assert second.queue_position == 1 and second.queue_place.startswith("#1: ")

            await _a_second_after_the_workload_of(notebooks, "statefulset-second-")
            job = await jobs.submit("training", _trainjob_spec())
            assert job.name == "ddp"
            queued = await eventually(
                "the TrainJob queued with Kueue's reason",
                lambda: jobs.get(ALICE, "ddp"),
                lambda j: j.phase == "Queued" and j.queue is not None and SHORT in j.queue.reason,
            )
            assert queued.queue is not None and queued.queue.queue == one_gpu_queue
            # The first place read may come while Kueue is still taking one of the two workloads
            # through its scheduler: the place to wait for is the one it settles on.
            queued = await eventually(
                "the TrainJob's place: behind the server queued before it",
                lambda: jobs.get(ALICE, "ddp"),
                lambda j: j.queue is not None and j.queue.position == 2,
            )
            assert [j.name for j in jobs.list(ALICE) if j.queue is not None] == ["ddp"]
            assert await _place_seen_by_alices_server(as_alice, one_gpu_queue) == 2
            [row] = [
                line for line in _train_list(as_alice, one_gpu_queue, tmp_path) if line.startswith("ddp ")
            ]
            assert f"#2 {one_gpu_queue}: " in row and SHORT in row, row

            await notebooks.delete_server(ALICE, "first")
            await eventually(
                "the second server admitted and running once the first one's GPU is free",
                lambda: notebooks.get_server(ALICE, "second"),
                lambda s: s.status == ServerStatus.RUNNING,
            )
            await notebooks.delete_server(ALICE, "second")
            ran = await eventually(
                "the TrainJob admitted, then run to the end",
                lambda: jobs.get(ALICE, "ddp"),
                lambda j: j.phase in ("Running", "Succeeded"),
            )
            assert ran.queue is None
        finally:
            await jobs.close()
            await notebooks.close()
            await cluster.close()

    asyncio.run(scenario())


async def _a_second_after_the_workload_of(notebooks: KubernetesNotebookBackend, prefix: str) -> None:
    """Kueue orders workloads of one priority by their creation time, which has whole seconds, then by
    uid: a workload made in the same second as another can go before it. Waiting a second after the
    server's Workload was made puts a workload made now behind it."""
    workloads = notebooks.kueue_workloads
    assert workloads is not None
    [workload] = await eventually(
        f"the Workload {prefix}…",
        lambda: [w for w in workloads.informer.list(NAMESPACE) if name_of(w).startswith(prefix)],
        lambda found: len(found) == 1,
    )
    made = datetime.fromisoformat(workload["metadata"]["creationTimestamp"]).timestamp()
    await eventually(f"a second past {prefix}…'s creation", time.time, lambda now: now >= made + 1)


async def _place_seen_by_alices_server(kubeconfig: Path, queue: str) -> int | None:
    """The TrainJob's place as alice's own server's extension reads it, with her token."""
    settings = make_settings(
        {"role": "user", "default_user": ALICE, "namespace": NAMESPACE},
        jobs={"training_api": "trainer-v2"},
        queues={"queues": {"training": queue}},
    )
    cluster = Cluster(settings, api_client(kubeconfig))
    jobs = KubernetesJobBackend(settings.jobs, cluster, sync_timeout=60)
    try:
        await jobs.start(supervise=False)
        job = await eventually(
            "the TrainJob's place, read with alice's token",
            lambda: jobs.get(ALICE, "ddp"),
            lambda j: j.queue is not None and j.queue.position is not None,
        )
        return job.queue.position if job.queue else None
    finally:
        await jobs.close()
        await cluster.close()


def _train_list(kubeconfig: Path, queue: str, folder: Path) -> list[str]:
    """`cube-jupyter train list` in alice's notebook pod's terminal (her role, namespace and token):
    one command, so it asks Kueue for places before it prints, not in the background."""
    config = [
        'c.CubeWorkbench.backend = "kubernetes"',
        f"c.CubeWorkbench.state_dir = {str(folder / 'state')!r}",
        'c.CubeWorkbench.default_user = "alice@example.com"',
        'c.CubeJobs.training_api = "trainer-v2"',
        f"c.CubeQueues.queues = {{'training': {queue!r}}}",
    ]
    done = cli_in_user_pod(kubeconfig, NAMESPACE, folder, config, ["train", "list"])
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def _trainjob_spec() -> TrainingSpec:
    """One node of one GPU: it fits the quota only once no server holds the GPU."""
    return TrainingSpec.from_dict(
        {
            "name": "ddp",
            "framework": "pytorch",
            "replicas": {"worker": 1},
            "script": "train.py",
            "package": "s3://ml-artifacts/jobs/code.tar.gz",
            "resources": {"gpu": 1, "cpu": "1", "memory": "1Gi"},
        },
        user=ALICE,
    )

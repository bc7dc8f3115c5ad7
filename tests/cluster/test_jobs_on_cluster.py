"""Training, tuning and serving jobs on a real control plane, submitted, listed and deleted by the
workbench with its own ServiceAccount's token. A TrainJob is run by Kubeflow Trainer v2's own
controller and JobSet's (built with the plane) down to pods kube-scheduler places and kwok completes.
For the Training Operator, Katib and KServe (not built here) the test plays the operator: it makes the
replica pods in the operator's shape and writes the objects' status; the backend learns all of it
from its watches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, Conflict, InvalidInput, NotFound, QuotaExceeded
from cube_jupyter.jobs.backend import JobBackend
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.kubernetes.status import (
    EXPERIMENT_LABEL,
    JOB_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    TRIAL_LABEL,
)
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.package import fetch_package
from cube_jupyter.jobs.service import JobService
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.jobs.trainer_env import operator_env
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.objects import is_deleting, metadata_of
from cube_jupyter.names import user_slug
from cube_jupyter.notebooks.spec import ServerStatus
from cube_jupyter.services import Workbench
from tests.cluster.conftest import USERS, api_client, requests_of, resource_quota
from tests.cluster.controlplane import State
from tests.cluster.servers import eventually, until
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.test_jobs_k8s import DDP, SERVE, TUNE  # the specs both suites submit
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, s3_server

ALICE, BOB = "alice@example.com", "bob@example.com"
NAMESPACE = USERS[ALICE]


def settings_for(training_api: str) -> Settings:
    return make_settings(
        {"namespace_source": "kubeflow-profile"},
        jobs={"training_api": training_api},
        storage={"url": "s3://ml-artifacts/jobs", "endpoint": "http://minio:9000"},
    )


def run_jobs(
    kubeconfig: Path, settings: Settings, scenario: Callable[[KubernetesJobBackend], Any], **options: Any
) -> None:
    """`scenario(backend)` with a started job backend connected as the workbench; `options` go to it."""

    async def go() -> None:
        cluster = Cluster(settings, api_client(kubeconfig))
        backend = KubernetesJobBackend(settings.jobs, cluster, **{"sync_timeout": 60.0, **options})
        await backend.start(supervise=False)
        try:
            await scenario(backend)
        finally:
            await backend.close()
            await cluster.close()

    asyncio.run(go())


async def until_job(backend: JobBackend, name: str, done: Callable[[Job], bool]) -> Job:
    return await eventually(f"job {name}", lambda: backend.get(ALICE, name), done)


async def gone(backend: JobBackend, name: str) -> None:
    await eventually(f"job {name} gone", lambda: backend.get(ALICE, name) is None or None, bool)


def report_status(
    operator: KubeClient, api_version: str, kind: str, name: str, status: dict[str, Any]
) -> None:
    """Write an object's status in the user's namespace, as its controller (or the kubelet) does."""
    operator.patch(api_version, kind, NAMESPACE, name, {"status": status}, subresource="status")


def operator_pod(owner: dict[str, Any], role: str, index: int, gpus: int, job: str = "") -> dict[str, Any]:
    """A replica pod as the Training Operator makes it: `{job}-{role}-{index}`, with its labels, owned
    by `owner` (so the garbage collector deletes it with that); `job` when the owner is not the job
    (a Katib trial's)."""
    job = job or owner["metadata"]["name"]
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": job,
        "uid": owner["metadata"]["uid"],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{role}-{index}",
            "namespace": NAMESPACE,
            "ownerReferences": [{**reference, "controller": True, "blockOwnerDeletion": True}],
            "labels": {
                "cube-jupyter/user": user_slug(ALICE),
                "cube-jupyter/job": job,
                JOB_NAME_LABEL: job,
                REPLICA_TYPE_LABEL: role,
                REPLICA_INDEX_LABEL: str(index),
            },
        },
        "spec": {
            "containers": [{"name": "pytorch", "image": "pytorch", "resources": resources}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never",
        },
    }


def test_a_training_job_is_submitted_run_and_deleted_through_rbac(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    operator = KubeClient(admin)
    settings = settings_for("training-operator-v1")

    async def scenario(backend: KubernetesJobBackend) -> None:
        job = await backend.submit("training", TrainingSpec.from_dict(DDP, user=ALICE))
        assert (job.name, job.phase) == ("mnist-ddp", "Created")
        owner = await asyncio.to_thread(operator.get, "kubeflow.org/v1", "PyTorchJob", NAMESPACE, "mnist-ddp")
        for role, index, gpus in (("master", 0, 0), ("worker", 0, 1), ("worker", 1, 1)):
            await asyncio.to_thread(operator.create, operator_pod(owner, role, index, gpus))
        condition = {"type": "Running", "status": "True", "reason": "JobRunning", "message": "running"}
        running_status = {"conditions": [condition]}
        await asyncio.to_thread(
            report_status, operator, "kubeflow.org/v1", "PyTorchJob", "mnist-ddp", running_status
        )
        running = await until_job(
            backend,
            "mnist-ddp",
            lambda j: j.phase == "Running" and all(r.state == "Running" for r in j.replicas),
        )
        assert [r.pod for r in running.replicas] == [
            "mnist-ddp-master-0",
            "mnist-ddp-worker-0",
            "mnist-ddp-worker-1",
        ]
        assert running.gpus == 2
        # kwok runs no kubelet: the API server (after RBAC let the request through) finds none to ask
        with pytest.raises(BackendUnavailable) as no_kubelet:
            async for _line in backend.logs(running, "master-0"):
                pass
        assert "mnist-ddp-master-0" in no_kubelet.value.message, no_kubelet.value.message
        # The kubelet's report of each replica's exit (kwok's nodes run nothing), then the operator's.
        terminated = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        for replica in running.replicas:
            status = {
                "phase": "Succeeded",
                "containerStatuses": [
                    {
                        "name": "pytorch",
                        "image": "pytorch",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": terminated,
                    }
                ],
            }
            await asyncio.to_thread(report_status, operator, "v1", "Pod", str(replica.pod), status)
        finished = {
            "conditions": [condition, {**condition, "type": "Succeeded", "reason": "JobSucceeded"}],
            "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"succeeded": 2}},
            "completionTime": "2030-01-01T00:00:00Z",
        }
        await asyncio.to_thread(
            report_status, operator, "kubeflow.org/v1", "PyTorchJob", "mnist-ddp", finished
        )
        done = await until_job(backend, "mnist-ddp", lambda j: j.finished)
        assert done.phase == "Succeeded" and done.completed is not None
        assert {r.state for r in done.replicas} == {"Succeeded"} and {r.exit_code for r in done.replicas} == {
            0
        }
        assert backend.list(BOB) == [] and backend.get(BOB, "mnist-ddp") is None
        await backend.delete(ALICE, "mnist-ddp")  # foreground: it reads Deleting until the GC is done
        await gone(backend, "mnist-ddp")

        # A failed job whose pods are gone: the operator's counts stand for its replicas.
        await backend.submit("training", TrainingSpec.from_dict({**DDP, "name": "failing"}, user=ALICE))
        why = "PyTorchJob failing is failed because 1 Worker replica(s) failed."
        failed = {
            "conditions": [{"type": "Failed", "status": "True", "reason": "JobFailed", "message": why}],
            "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"succeeded": 1, "failed": 1}},
        }
        await asyncio.to_thread(report_status, operator, "kubeflow.org/v1", "PyTorchJob", "failing", failed)
        job = await until_job(backend, "failing", lambda j: j.phase == "Failed")
        assert why in str(job.message)
        assert [(r.name, r.state) for r in job.replicas] == [
            ("master-0", "Succeeded"),
            ("worker-0", "Succeeded"),
            ("worker-1", "Failed"),
        ]
        await backend.delete(ALICE, "failing")
        await gone(backend, "failing")

    run_jobs(workbench_kubeconfig, settings, scenario)
    with pytest.raises(NotFound):
        operator.get("kubeflow.org/v1", "PyTorchJob", NAMESPACE, "mnist-ddp")
    pods = operator.list("v1", "Pod", NAMESPACE, label_selector=f"{JOB_NAME_LABEL}=mnist-ddp")
    assert [metadata_of(p)["name"] for p in pods.items if not is_deleting(p)] == []  # collected with it


def rendezvous(pods: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(WORLD_SIZE, RANK) of each node as the job entrypoint derives them (`operator_env`) from the
    env Trainer set on its pod, references to the pod's own fields resolved as the kubelet would."""
    seen = set()
    for pod in pods:
        environ = {}
        for var in pod["spec"]["containers"][0].get("env", []):
            path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            if "value" in var:
                environ[var["name"]] = var["value"]
            elif path.startswith(("metadata.annotations['", "metadata.labels['")):
                where, key = path[len("metadata.") :].split("['", 1)
                environ[var["name"]] = pod["metadata"][where][key.rstrip("']")]
        derived = operator_env(environ)
        assert {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"} <= set(derived), sorted(environ)
        seen.add((derived["WORLD_SIZE"], derived["RANK"]))
    return seen


def test_a_trainjob_is_run_by_kubeflow_trainer_and_jobset_to_success(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    """Trainer v2's own controller makes the TrainJob's JobSet from the preset runtime and the
    workbench's overrides (its webhook validating the TrainJob first), JobSet's controller makes the
    Job, the Job controller the node pods, kube-scheduler places them on the GPU node, kwok completes
    them; the workbench follows it all to Succeeded from its watches. Then a Katib Experiment and a
    KServe InferenceService: created, listed, deleted."""
    settings = settings_for("trainer-v2")
    trainjob = {**DDP, "name": "mnist-v2", "replicas": {"worker": {"replicas": 2, "resources": {"gpu": 1}}}}
    kube = KubeClient(admin)

    async def scenario(backend: KubernetesJobBackend) -> None:
        await backend.submit("training", TrainingSpec.from_dict(trainjob, user=ALICE))
        done = await until_job(backend, "mnist-v2", lambda j: j.finished)
        assert done.phase == "Succeeded", done
        assert [r.name for r in done.replicas] == ["node-0", "node-1"]
        assert all(
            r.state == "Succeeded" and str(r.pod).startswith("mnist-v2-node-0-") for r in done.replicas
        )
        pods = [kube.get("v1", "Pod", NAMESPACE, str(r.pod)) for r in done.replicas]
        for pod in pods:  # what Trainer rendered from the runtime and the workbench's TrainJob
            assert pod["spec"]["nodeName"] == "gpu-node-1"  # one GPU each: kube-scheduler's choice
            assert pod["metadata"]["labels"]["cube-jupyter/job"] == "mnist-v2"
        # The job entrypoint's reading of the env Trainer's torch runtime really sets.
        assert rendezvous(pods) == {("2", "0"), ("2", "1")}

        xgboost = {
            "name": "xgb",
            "framework": "xgboost",
            "replicas": {"worker": 2},
            "command": ["python", "x.py"],
        }
        await backend.submit("training", TrainingSpec.from_dict(xgboost, user=ALICE))
        finished = await until_job(backend, "xgb", lambda j: j.finished)
        assert finished.phase == "Succeeded", finished
        nodes = [kube.get("v1", "Pod", NAMESPACE, str(r.pod)) for r in finished.replicas]
        assert rendezvous(nodes) == {("3", "0"), ("3", "1"), ("3", "2")}  # the tracker and two workers
        assert kube.get("jobset.x-k8s.io/v1alpha2", "JobSet", NAMESPACE, "mnist-v2")["status"][
            "terminalState"
        ] == ("Completed")

        await backend.submit("tuning", TuningSpec.from_dict(TUNE, user=ALICE))
        await backend.submit("serving", ServingSpec.from_dict(SERVE, user=ALICE))
        listed = {(j.name, j.kind) for j in backend.list(ALICE)}
        assert {("mnist-v2", "training"), ("lr-search", "tuning"), ("iris", "serving")} <= listed
        for name in ("mnist-v2", "xgb", "lr-search", "iris"):
            await backend.delete(ALICE, name)
            await gone(backend, name)

    run_jobs(workbench_kubeconfig, settings, scenario)
    with pytest.raises(NotFound):  # the garbage collector took the JobSet with its TrainJob
        kube.get("jobset.x-k8s.io/v1alpha2", "JobSet", NAMESPACE, "mnist-v2")


def test_duplicates_refusals_and_reads_from_the_caches(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, request: pytest.FixtureRequest
) -> None:
    """The API server's 409 on a job's name; a create its ResourceQuota admission refuses (an admin's
    object-count quota on TFJobs) leaves nothing; a user without a namespace is told so; and the
    panel's polling is served by the informers, not by the API."""
    operator = KubeClient(admin)
    made = partial(requests_of, installed, request.node.nodeid)
    tensorflow = {**DDP, "name": "tf-two", "framework": "tensorflow", "replicas": {"worker": 1}}

    async def scenario(backend: KubernetesJobBackend) -> None:
        await backend.submit("training", TrainingSpec.from_dict({**DDP, "name": "twice"}, user=ALICE))
        with pytest.raises(Conflict) as duplicate:
            await backend.submit("training", TrainingSpec.from_dict({**DDP, "name": "twice"}, user=ALICE))
        assert duplicate.value.field == "name"

        with pytest.raises(QuotaExceeded, match="exceeded quota: no-tfjobs"):
            await backend.submit("training", TrainingSpec.from_dict(tensorflow, user=ALICE))
        assert backend.get(ALICE, "tf-two") is None
        with pytest.raises(NotFound):
            operator.get("kubeflow.org/v1", "TFJob", NAMESPACE, "tf-two")

        with pytest.raises(NotFound) as nobody:
            await backend.submit("training", TrainingSpec.from_dict(DDP, user="carol@example.com"))
        assert nobody.value.field == "user"

        before = [r for r in made() if r.verb != "watch"]
        for _ in range(50):
            assert backend.get(ALICE, "twice") is not None
            assert "twice" in {j.name for j in backend.list(ALICE)}
        assert [r for r in made() if r.verb != "watch"] == before
        await backend.delete(ALICE, "twice")
        await gone(backend, "twice")

    with resource_quota(admin, NAMESPACE, "no-tfjobs", {"count/tfjobs.kubeflow.org": "0"}):
        run_jobs(workbench_kubeconfig, settings_for("training-operator-v1"), scenario)
    creates = [(r.resource, r.code) for r in made() if r.verb == "create"]
    assert creates == [("pytorchjobs", 201), ("pytorchjobs", 409), ("tfjobs", 403)], creates


def operator_condition(kind: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": kind, "message": kind.lower()}


def test_a_tuning_experiments_trials_make_the_table(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    """Katib's part played by the test: its Trials (their parameters and observed metric), their
    workers' pods, the Experiment's conditions and best trial; the table comes from the watches."""
    katib = KubeClient(admin)
    api = "kubeflow.org/v1beta1"

    async def scenario(backend: KubernetesJobBackend) -> None:
        job = await backend.submit("tuning", TuningSpec.from_dict(TUNE, user=ALICE))
        assert job.kind == "tuning" and job.trials == ()
        experiment = katib.get(api, "Experiment", NAMESPACE, "lr-search")
        for index, (lr, accuracy) in enumerate(((0.01, 0.91), (0.05, 0.95))):
            name = f"lr-search-trial{index}"
            trial = {
                "apiVersion": api,
                "kind": "Trial",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": {EXPERIMENT_LABEL: "lr-search"}},
                "spec": {"parameterAssignments": [{"name": "lr", "value": str(lr)}]},
            }
            trial = katib.create(trial) or trial
            metric = {"name": "accuracy", "latest": str(accuracy), "min": "0.5", "max": str(accuracy)}
            status = {
                "conditions": [operator_condition("Created"), operator_condition("Succeeded")],
                "observation": {"metrics": [metric]},
            }
            report_status(katib, api, "Trial", name, status)
            pod = operator_pod(experiment, "worker", 0, 0, job=f"{name}-job")
            pod["metadata"]["labels"][TRIAL_LABEL] = name
            katib.create(pod)
        status = {
            "conditions": [operator_condition("Created"), operator_condition("Succeeded")],
            "currentOptimalTrial": {"bestTrialName": "lr-search-trial1"},
        }
        report_status(katib, api, "Experiment", "lr-search", status)
        done = await until_job(backend, "lr-search", lambda j: j.phase == "Succeeded" and len(j.trials) == 2)
        assert [(t.parameters, t.objective, t.state) for t in done.trials] == [
            ({"lr": "0.01"}, 0.91, "Succeeded"),
            ({"lr": "0.05"}, 0.95, "Succeeded"),
        ]
        assert done.best_trial == "lr-search-trial1"
        assert [r.name for r in done.replicas] == ["trial-0", "trial-1"]
        await backend.delete(ALICE, "lr-search")
        await gone(backend, "lr-search")

    run_jobs(workbench_kubeconfig, settings_for("training-operator-v1"), scenario)


def test_a_served_model_is_ready_and_a_second_spec_rolls_out_a_canary_in_place(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    kserve = KubeClient(admin)
    api = "serving.kserve.io/v1beta1"
    settings = settings_for("training-operator-v1")

    def predictor() -> dict[str, Any]:
        return dict(kserve.get(api, "InferenceService", NAMESPACE, "iris")["spec"]["predictor"])

    async def scenario(backend: KubernetesJobBackend) -> None:
        service = JobService(settings.jobs, backend)
        job = await service.submit(ALICE, {"kind": "serving", "spec": SERVE})
        assert (job.kind, job.phase, job.endpoint) == ("serving", "Created", None)
        assert "canaryTrafficPercent" not in predictor()
        url = f"http://iris.{NAMESPACE}.example.com"
        status = {
            "url": url,
            "conditions": [operator_condition("PredictorReady"), operator_condition("Ready")],
        }
        report_status(kserve, api, "InferenceService", "iris", status)
        ready = await until_job(backend, "iris", lambda j: j.phase == "Ready")
        assert ready.endpoint == url and ready.framework == "sklearn"

        canary = {**SERVE, "storage_uri": "s3://models/iris-v2", "canary_traffic_percent": 20}
        await service.submit(ALICE, {"kind": "serving", "spec": canary})
        assert (predictor()["canaryTrafficPercent"], predictor()["model"]["storageUri"]) == (
            20,
            "s3://models/iris-v2",
        )
        await service.submit(ALICE, {"kind": "serving", "spec": {**canary, "canary_traffic_percent": 0}})
        assert predictor().get("canaryTrafficPercent") in (None, 0)
        with pytest.raises(Conflict):  # a training spec under a served model's name is still a conflict
            await service.submit(ALICE, {"kind": "training", "spec": {**DDP, "name": "iris"}})
        await backend.delete(ALICE, "iris")
        await gone(backend, "iris")

    run_jobs(workbench_kubeconfig, settings, scenario)


def test_the_one_gpu_ledger_counts_running_servers_and_unfinished_jobs(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path
) -> None:
    """The composition root's services on one connection as the workbench: a GPU server that runs
    (placed by kube-scheduler, run by kwok) and cluster jobs count against one quota, whichever
    asks; jobs on a GPU resource other than NVIDIA's count under the configured name."""
    settings = make_settings(
        {"namespace_source": "kubeflow-profile", "gpu_quota_per_user": 2},
        jobs={"training_api": "training-operator-v1"},  # objects nobody runs: the ledger is the point
        resource_kind="StatefulSet",
        workspace_size="1Gi",
    )
    one_gpu = {**DDP, "name": "one-gpu", "replicas": {"worker": {"replicas": 1, "resources": {"gpu": 1}}}}

    async def scenario() -> None:
        workbench = Workbench(settings, cluster=Cluster(settings, api_client(workbench_kubeconfig)))
        try:
            notebooks = await workbench.started_notebooks()
            jobs = await workbench.started_jobs()
            await notebooks.create(ALICE, {"name": "gpu-nb", "profile": "gpu"})  # holds 1 GPU
            await until(notebooks.backend, ALICE, "gpu-nb", lambda s: s.status == ServerStatus.RUNNING)
            with pytest.raises(QuotaExceeded) as refused:
                await jobs.submit(ALICE, {"kind": "training", "spec": DDP})  # 2 more
            assert refused.value.field == "resources.gpu"
            assert "1 in running servers" in refused.value.message
            job = await jobs.submit(ALICE, {"kind": "training", "spec": one_gpu})
            assert job.gpus == 1
            assert sorted(h.to_dict()["kind"] for h in workbench.ledger.holders(ALICE)) == ["job", "notebook"]
            await notebooks.set_stopped(ALICE, "gpu-nb", True)
            # Its GPU is held until the StatefulSet controller has taken its pod away.
            await until(notebooks.backend, ALICE, "gpu-nb", lambda s: s.status == ServerStatus.STOPPED)
            with pytest.raises(QuotaExceeded) as refused:  # the job's one and the next one's two
                await jobs.submit(ALICE, {"kind": "training", "spec": {**DDP, "name": "more"}})
            assert "1 in unfinished jobs" in refused.value.message
            await notebooks.create(ALICE, {"name": "gpu-two", "profile": "gpu"})
            with pytest.raises(QuotaExceeded) as refused:  # a server's create meets the jobs' GPUs too
                await notebooks.create(ALICE, {"name": "gpu-three", "profile": "gpu"})
            assert refused.value.field == "profile"
            for name in ("gpu-nb", "gpu-two"):
                await notebooks.delete(ALICE, name)
            await jobs.delete(ALICE, "one-gpu")
            await gone(jobs.backend, "one-gpu")  # deleted in the foreground: it holds its GPU till then
        finally:
            await workbench.close()

    asyncio.run(scenario())

    # `CubeJobs.gpu_resource = "gpu.intel.com/i915"`: the replicas' GPUs are the configured name's,
    # counted by the one rule (`kube.objects.gpu_request`), so the quota holds and the report shows them.
    intel = make_settings(
        {"namespace_source": "kubeflow-profile", "gpu_quota_per_user": 2},
        jobs={"gpu_resource": "gpu.intel.com/i915", "training_api": "training-operator-v1"},
    )

    async def on_intel() -> None:
        workbench = Workbench(intel, cluster=Cluster(intel, api_client(workbench_kubeconfig)))
        try:
            jobs = await workbench.started_jobs()
            job = await jobs.submit(ALICE, {"kind": "training", "spec": DDP})
            assert job.gpus == 2 and [r.gpus for r in job.replicas] == [0, 1, 1]
            with pytest.raises(QuotaExceeded) as refused:
                await jobs.submit(ALICE, {"kind": "training", "spec": {**DDP, "name": "more"}})
            assert "2 in unfinished jobs" in refused.value.message
            quota = workbench.gpu.quota(ALICE)
            assert quota is not None and (quota.used, quota.limit) == (2, 2)
            await jobs.delete(ALICE, "mnist-ddp")
            await gone(jobs.backend, "mnist-ddp")
        finally:
            await workbench.close()

    asyncio.run(on_intel())
    KubeClient(admin).delete("v1", "ResourceQuota", NAMESPACE, "cube-gpu-quota")


def test_a_local_script_is_shipped_to_s3_and_the_job_runs_it_from_there(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, tmp_path: Path
) -> None:
    """`train run` of a spec naming a local script: the script and the local modules it imports go to
    the S3 store the pods read (moto on loopback), the job created runs it from there, credentials
    only as references to their Secret; with no S3 store the submit is refused naming the field."""
    (tmp_path / "helpers.py").write_text("def greet():\n    return 'hello from a shipped module'\n")
    (tmp_path / "train.py").write_text("from helpers import greet\nprint(greet())\n")
    spec = {
        "name": "shipped",
        "framework": "pytorch",
        "replicas": {"master": 1, "worker": 1},
        "script": "train.py",
    }
    with s3_server() as s3:
        bucket = s3.new_bucket()
        storage = {
            "url": f"s3://{bucket}/jobs",
            "endpoint": s3.endpoint,
            "access_key": ACCESS_KEY,
            "secret_key": SECRET_KEY,
            "credentials_secret": "minio-creds",
        }
        # The Training Operator's kind: a TrainJob ships the same argv (tests/jobs/test_render_trainjob.py).
        settings = make_settings(
            {"namespace_source": "kubeflow-profile"},
            jobs={"training_api": "training-operator-v1"},
            storage=storage,
        )

        async def shipped(backend: KubernetesJobBackend) -> None:
            await backend.submit("training", TrainingSpec.from_dict(spec, user=ALICE))
            job = KubeClient(admin).get("kubeflow.org/v1", "PyTorchJob", NAMESPACE, "shipped")
            container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
            argv = [*container.get("command", []), *container.get("args", [])]
            package = argv[argv.index("--package") + 1]
            assert (
                package.startswith(f"s3://{bucket}/jobs/") and argv[argv.index("--target") + 1] == "train.py"
            )
            assert SECRET_KEY not in str(job)  # credentials only as references to the Secret
            unpacked = tmp_path / "unpacked"
            fetch_package(package, unpacked, settings.storage)
            assert sorted(p.name for p in unpacked.iterdir()) == ["helpers.py", "train.py"]
            await backend.delete(ALICE, "shipped")
            await gone(backend, "shipped")

        run_jobs(workbench_kubeconfig, settings, shipped, root_dir=str(tmp_path))

    nowhere = make_settings(
        {"namespace_source": "kubeflow-profile"}, jobs={"training_api": "training-operator-v1"}
    )

    async def refused(backend: KubernetesJobBackend) -> None:
        with pytest.raises(InvalidInput) as refusal:
            await backend.submit("training", TrainingSpec.from_dict(spec, user=ALICE))
        assert refusal.value.field == "script" and "CubeStorage.url" in refusal.value.message
        assert backend.get(ALICE, "shipped") is None

    run_jobs(workbench_kubeconfig, nowhere, refused, root_dir=str(tmp_path))

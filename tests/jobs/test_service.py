"""JobService over the real local backend: who may see and act on a job, names, the GPU quota, parsing
at the edge, logs and the tuning history. Jobs are real processes."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import Conflict, Forbidden, InvalidInput, NotFound, QuotaExceeded
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.local.backend import LocalJobBackend
from cube_jupyter.jobs.model import Job, Trial
from cube_jupyter.jobs.service import JobService, optimization_history
from tests.k8s_schemas import validate_object

pytestmark = pytest.mark.timeout(120)


def sleeper(name: str = "sleepy", seconds: int = 60) -> dict[str, Any]:
    return {
        "name": name,
        "framework": "pytorch",
        "replicas": {"master": 1},
        "command": [
            sys.executable,
            "-c",
            f"print('started', flush=True); import time; time.sleep({seconds})",
        ],
    }


@pytest.fixture
def settings(tmp_path: Path) -> JobSettings:
    config = Config()
    config.CubeWorkbench.state_dir = str(tmp_path / "state")
    config.CubeWorkbench.admin_users = ["admin"]
    config.CubeWorkbench.gpu_quota_per_user = 2
    config.CubeStorage.url = str(tmp_path / "artifacts")
    return load_settings(config).jobs


@pytest.fixture
def service(
    settings: JobSettings, tmp_path: Path, jp_asyncio_loop: asyncio.AbstractEventLoop
) -> Iterator[JobService]:
    backend = LocalJobBackend(settings, root_dir=tmp_path, poll=0.1)
    jobs = JobService(settings, backend, root_dir=str(tmp_path))
    jp_asyncio_loop.run_until_complete(jobs.start())
    yield jobs
    for job in backend.list(None):
        jp_asyncio_loop.run_until_complete(backend.delete(job.user, job.name))
    jp_asyncio_loop.run_until_complete(jobs.close())


async def test_a_user_sees_and_acts_on_only_their_own_jobs(service: JobService) -> None:
    job = await service.submit("alice", {"kind": "training", "spec": sleeper()})
    assert (job.user, job.kind, job.backend) == ("alice", "training", "local")
    assert [j.name for j in service.list_jobs("alice")] == ["sleepy"]
    assert service.list_jobs("bob") == []
    with pytest.raises(NotFound):
        service.get("bob", "sleepy")
    with pytest.raises(Forbidden) as refused:
        service.get("bob", "sleepy", user="alice")
    assert refused.value.field == "user"
    with pytest.raises(Forbidden):
        await service.delete("bob", "sleepy", user="alice")
    with pytest.raises(Forbidden):
        service.list_jobs("bob", all_users=True)
    assert service.get("admin", "sleepy", user="alice").user == "alice"
    assert [j.user for j in service.list_jobs("admin", all_users=True)] == ["alice"]
    await service.delete("admin", "sleepy", user="alice")
    assert service.list_jobs("alice") == []


async def test_a_name_is_taken_once_per_user_across_kinds(service: JobService, tmp_path: Path) -> None:
    import joblib
    from sklearn.dummy import DummyClassifier

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    joblib.dump(DummyClassifier().fit([[0], [1]], [0, 1]), model_dir / "model.joblib")
    await service.submit("alice", {"kind": "training", "spec": sleeper("shared")})
    serving = {"name": "shared", "model_format": "sklearn", "storage_uri": str(model_dir)}
    with pytest.raises(Conflict) as taken:
        await service.submit("alice", {"kind": "serving", "spec": serving})
    assert taken.value.field == "name"
    other = await service.submit("bob", {"kind": "training", "spec": sleeper("shared")})
    assert other.user == "bob"


async def test_gpus_no_wait_could_give_are_refused_before_anything_starts(service: JobService) -> None:
    spec = {
        **sleeper("greedy"),
        "replicas": {"master": 1, "worker": {"replicas": 3, "resources": {"gpu": 1}}},
    }
    with pytest.raises(QuotaExceeded) as refused:
        await service.submit("alice", {"kind": "training", "spec": spec})
    assert refused.value.field == "resources.gpu"
    assert "asks for 3 GPUs and the limit per user is 2" in refused.value.message
    assert service.list_jobs("alice") == []


async def test_bad_requests_name_the_field(service: JobService) -> None:
    cases: list[tuple[Any, str]] = [
        ([], "body"),
        ({"kind": "training"}, "spec"),
        ({"kind": "training", "spec": "x" * 100_000}, "spec"),
        ({"kind": "cooking", "spec": {}}, "kind"),
        ({"kind": "training", "spec": {**sleeper(), "framework": "caffe"}}, "framework"),
        ({"kind": "training", "spec": {**sleeper(), "replicas": {"worker": 0}}}, "replicas.worker"),
        ({"kind": "training", "spec": sleeper(), "priority": 1}, "priority"),
    ]
    for body, field in cases:
        with pytest.raises(InvalidInput) as bad:
            await service.submit("alice", body)
        assert bad.value.field == field, (body, bad.value)
        assert len(bad.value.message) < 400, "the message quotes a short prefix of the input"
    with pytest.raises(InvalidInput) as bad_kind:
        service.list_jobs("alice", kind="baking")
    assert bad_kind.value.field == "kind"


async def test_logs_of_a_running_job_and_their_errors(service: JobService) -> None:
    await service.submit("alice", {"kind": "training", "spec": sleeper(seconds=1)})
    text = ""
    async for chunk in service.logs("alice", "sleepy", "master-0", follow=True):
        text += chunk
    assert "started\n" in text
    assert service.get("alice", "sleepy").finished  # follow ended with the replica
    with pytest.raises(NotFound) as no_replica:
        service.logs("alice", "sleepy", "worker-3")
    assert no_replica.value.field == "replica"
    with pytest.raises(InvalidInput):
        service.logs("alice", "sleepy", tail=-1)
    with pytest.raises(InvalidInput) as not_tuning:
        service.history("alice", "sleepy")
    assert not_tuning.value.field == "name"


def test_render_gives_the_objects_the_cluster_would_get(service: JobService) -> None:
    objects = service.render("training", {**sleeper(), "image": "docker.io/pytorch/pytorch:2.5.1"}, "alice")
    # Its own command needs nothing of cube-jupyter, so an image without it still fits a TrainJob.
    assert [o["kind"] for o in objects] == ["TrainJob"]
    for obj in objects:
        validate_object(obj, strict=True)


def test_the_history_tracks_the_best_objective_in_trial_order() -> None:
    trials = tuple(
        Trial(name=f"t{i}", parameters={"lr": lr}, state=state, objective=objective)
        for i, (lr, state, objective) in enumerate(
            [
                (0.1, "Succeeded", 0.7),
                (0.2, "Failed", None),
                (0.3, "Succeeded", 0.9),
                (0.4, "Pruned", 0.95),
                (0.5, "Succeeded", 0.8),
            ]
        )
    )
    job = Job(
        name="search",
        kind="tuning",
        user="alice",
        phase="Succeeded",
        created=0.0,
        spec={"objective": {"metric": "accuracy", "type": "maximize"}},
        trials=trials,
        best_trial="t2",
    )
    history = optimization_history(job)
    assert history["goal"] == "maximize" and history["best_trial"] == "t2"
    assert [(p["number"], p["objective"], p["best"]) for p in history["points"]] == [
        (0, 0.7, 0.7),
        (2, 0.9, 0.9),
        (4, 0.8, 0.9),
    ]
    minimized = optimization_history(Job(**{**job.__dict__, "spec": {"objective": {"type": "minimize"}}}))
    assert [p["best"] for p in minimized["points"]] == [0.7, 0.7, 0.7]

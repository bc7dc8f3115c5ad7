"""REST API of training and serving jobs on a real Jupyter server (local backend), checked against
openapi.yaml. Jobs run for real: one process per replica, a real model server answering predictions."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from cube_jupyter.jobs.serving_spec import MODEL_FORMATS, PERCENT_METRICS, PROTOCOL_VERSIONS
from cube_jupyter.jobs.training_spec import CODE_KINDS, FRAMEWORK_ROLES, RESTART_POLICIES, TrainingSpec
from cube_jupyter.jobs.tuning_spec import ALGORITHMS, OBJECTIVE_TYPES, PARAMETER_TYPES
from tests.server.openapi import assert_response_matches
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)

# Each replica prints the env the operator would set, then a line per step.
TRAIN_SCRIPT = """
import os, pathlib, sys, time
env = os.environ
print(f"rank {env['RANK']} of {env['WORLD_SIZE']} master {env['MASTER_ADDR']}", flush=True)
gate = env.get("GATE")  # the test opens it: until then the job runs, whatever the machine's speed
for _ in range(1200):
    if not gate or pathlib.Path(gate).exists():
        break
    time.sleep(0.05)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1
for step in range(steps):
    print(f"step {step}", flush=True)
"""
BOOM_SCRIPT = """
import os, sys, time
print("about to fail", flush=True)
if os.environ["RANK"] == "1":
    raise RuntimeError("the data is bad")
time.sleep(60)
"""
DDP = {"name": "ddp", "framework": "pytorch", "replicas": {"master": 1, "worker": 1}, "script": "train.py"}


@pytest.fixture
def cube_config(cube_config: dict[str, Any]) -> dict[str, Any]:
    """The shared server config with a GPU quota of one per user."""
    cube_config["CubeWorkbench"]["gpu_quota_per_user"] = 1
    return cube_config


@pytest.fixture(autouse=True)
def delete_leftover_jobs(cube_app: Any, jp_asyncio_loop: Any) -> Iterator[None]:
    """Model servers and tuning drivers outlive the server by design: a failed test must not leave any."""
    yield
    backend = cube_app.web_app.settings["cube_jobs"].backend
    for job in backend.list(None):
        jp_asyncio_loop.run_until_complete(backend.delete(job.user, job.name))


@pytest.fixture
def root(user_files: Any) -> Path:
    """Alice's own files: on this shared server her job specs name paths among them."""
    area: Path = user_files("alice")
    (area / "train.py").write_text(TRAIN_SCRIPT)
    return area


async def call(api: Any, method: str, path: str, spec_path: str, **kwargs: Any) -> tuple[int, Any]:
    """One API call whose answer must match the published contract."""
    status, body = await api(method, path, **kwargs)
    assert_response_matches(spec_path, method, status, body)
    return status, body


async def submit(api: Any, kind: str, spec: dict[str, Any], as_user: str = "alice") -> tuple[int, Any]:
    return await call(api, "POST", "jobs", "/jobs", body={"kind": kind, "spec": spec}, as_user=as_user)


async def wait_for(
    api: Any, name: str, phases: set[str], timeout: float = 120.0, **kwargs: Any
) -> dict[str, Any]:
    async def job() -> dict[str, Any]:
        status, body = await call(api, "GET", f"jobs/{name}", "/jobs/{name}", **kwargs)
        assert status == 200, body
        return dict(body)

    return await wait_until_async(
        job, timeout, f"job {name} to reach {phases}", until=lambda j: j["phase"] in phases
    )


async def _running_pid(api: Any, name: str, replica: str) -> int:
    async def pid() -> int:
        _, job = await api("GET", f"jobs/{name}")
        return int(next(r for r in job["replicas"] if r["name"] == replica)["pid"] or 0)

    return await wait_until_async(pid, 30, f"{replica} of {name} to start")


def logs_url(server: Any, name: str, **query: str) -> str:
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return f"{server.connection_url.rstrip('/')}/cube/api/v1/jobs/{name}/logs?{params}"


async def test_a_two_replica_pytorch_job_runs_streams_its_logs_and_is_deleted(
    api: Any, root: Path, cube_app: Any
) -> None:
    gate = root / "gate"
    status, job = await submit(api, "training", {**DDP, "args": ["4"], "env": {"GATE": str(gate)}})
    assert status == 201, job
    assert (job["kind"], job["framework"], job["backend"]) == ("training", "pytorch", "local")
    assert [r["name"] for r in job["replicas"]] == ["master-0", "worker-0"]

    # Follow worker-1's log as it is written: chunks arrive before the job ends, the stream ends with it.
    chunks: list[tuple[str, bool]] = []

    def received(data: bytes) -> None:
        chunks.append((data.decode(), False))

    request = HTTPRequest(
        logs_url(cube_app, "ddp", replica="worker-0", follow="1"),
        headers={"kubeflow-userid": "alice"},
        streaming_callback=received,
        request_timeout=120,
    )
    fetch = asyncio.ensure_future(AsyncHTTPClient().fetch(request, raise_error=False))
    await wait_until_async(lambda: chunks or fetch.done(), 60, "the first chunk of worker-0's log")
    _, first_seen = await call(api, "GET", "jobs/ddp", "/jobs/{name}")
    assert chunks and not first_seen["finished"]  # the first lines came while the job still ran
    gate.touch()
    response = await fetch
    assert response.code == 200 and response.headers["Content-Type"].startswith("text/plain")
    text = "".join(chunk for chunk, _ in chunks)
    assert "rank 1 of 2 master 127.0.0.1\n" in text and text.count("step") == 4, text

    done = await wait_for(api, "ddp", {"Succeeded", "Failed"})
    assert done["phase"] == "Succeeded", done
    assert [(r["state"], r["exit_code"]) for r in done["replicas"]] == [("Succeeded", 0), ("Succeeded", 0)]

    raw = await AsyncHTTPClient().fetch(
        logs_url(cube_app, "ddp", replica="master-0", tail="1"), headers={"kubeflow-userid": "alice"}
    )
    assert raw.body.decode() == "step 3\n"

    status, listing = await call(api, "GET", "jobs", "/jobs", kind="training")
    assert [j["name"] for j in listing["jobs"]] == ["ddp"]
    status, listing = await call(api, "GET", "jobs", "/jobs", kind="serving")
    assert listing["jobs"] == []

    status, _ = await call(api, "DELETE", "jobs/ddp", "/jobs/{name}")
    assert status == 204
    status, body = await call(api, "GET", "jobs/ddp", "/jobs/{name}")
    assert status == 404 and body["field"] == "name"


async def test_a_failing_replica_fails_the_job_with_its_cause_first(api: Any, root: Path) -> None:
    # The worker (rank 1) raises at once; the master would run for a minute.
    (root / "boom.py").write_text(BOOM_SCRIPT)
    await submit(api, "training", {**DDP, "name": "boom", "script": "boom.py"})
    master_pid = await _running_pid(api, "boom", "master-0")
    job = await wait_for(api, "boom", {"Succeeded", "Failed"})
    assert job["phase"] == "Failed"
    error = job["error"]  # the contract's JobError, checked by `call`
    assert error["cause"] == "RuntimeError: the data is bad" and error["replica"] == "worker-0", error
    assert job["message"].startswith(error["cause"]) and "worker-0" in job["message"], job["message"]
    assert [frame.splitlines()[0].rpartition("/")[2] for frame in error["frames"]] == [
        'boom.py", line 5, in <module>'
    ]
    assert "entry.py" in error["traceback"] and job["conditions"][-1]["message"].endswith(error["cause"])
    # The other replica is stopped and cleaned up (cleanPodPolicy Running).
    await wait_until_async(
        lambda: (
            not psutil.pid_exists(master_pid) or psutil.Process(master_pid).status() == psutil.STATUS_ZOMBIE
        ),
        30,
        "the master replica to be stopped",
        ignoring=(psutil.NoSuchProcess,),
    )


async def test_a_served_model_answers_predictions_through_the_api(api: Any, root: Path) -> None:
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    features, labels = load_iris(return_X_y=True)
    model = LogisticRegression(max_iter=500).fit(features, labels)
    model_dir = root / "iris-model"
    model_dir.mkdir()
    joblib.dump(model, model_dir / "model.joblib")

    status, job = await submit(
        api, "serving", {"name": "iris", "model_format": "sklearn", "storage_uri": str(model_dir)}
    )
    assert status == 201, job
    ready = await wait_for(api, "iris", {"Ready", "Failed"})
    assert ready["phase"] == "Ready" and ready["endpoint"], ready

    rows = features[[0, 60, 120]].tolist()
    status, answer = await call(
        api, "POST", "jobs/iris/predict", "/jobs/{name}/predict", body={"inputs": rows}
    )
    assert status == 200, answer
    assert answer["predictions"] == model.predict(rows).tolist()

    status, body = await call(
        api, "POST", "jobs/iris/predict", "/jobs/{name}/predict", body={"inputs": rows, "protocol": "v3"}
    )
    assert status == 400 and body["field"] == "protocol"
    status, body = await call(
        api, "POST", "jobs/iris/predict", "/jobs/{name}/predict", as_user="bob", body={"inputs": rows}
    )
    assert status == 404

    # Submitting a served model's name again rolls out a new revision (as `kubectl apply` would):
    # promoted straight away without a canary, so every prediction comes from the new model.
    flipped = LogisticRegression(max_iter=500).fit(features, 2 - labels)
    joblib.dump(flipped, model_dir / "model.joblib")
    status, job = await submit(
        api, "serving", {"name": "iris", "model_format": "sklearn", "storage_uri": str(model_dir)}
    )
    assert status == 201, job
    await wait_for(api, "iris", {"Ready", "Failed"})
    status, answer = await call(
        api, "POST", "jobs/iris/predict", "/jobs/{name}/predict", body={"inputs": rows}
    )
    assert status == 200 and answer["predictions"] == flipped.predict(rows).tolist(), answer
    status, _ = await call(api, "DELETE", "jobs/iris", "/jobs/{name}")
    assert status == 204


@pytest.mark.parametrize(
    ("path", "spec_path", "params"),
    [
        ("queue", "/queue", {"all": "banana"}),
        ("jobs", "/jobs", {"all": "2"}),
        ("jobs/ddp/logs", "/jobs/{name}/logs", {"follow": "maybe"}),
    ],
)
async def test_a_yes_no_query_parameter_that_is_neither_is_a_400_naming_it(
    api: Any, path: str, spec_path: str, params: dict[str, str]
) -> None:
    """Was a quiet no: ?all=banana listed only the caller's jobs with a 200."""
    status, error = await call(api, "GET", path, spec_path, **params)
    assert status == 400, error
    assert error["field"] == next(iter(params)), error
    status, body = await call(api, "GET", "queue", "/queue", all="No")  # any case, as schedules took it
    assert status == 200, body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "training", "spec": {**DDP, "framework": "caffe"}}, "framework"),
        ({"kind": "training", "spec": {**DDP, "replicas": {"worker": 0}}}, "replicas.worker"),
        (
            {
                "kind": "serving",
                "spec": {
                    "name": "m",
                    "model_format": "sklearn",
                    "storage_uri": "s3://models/m",
                    "min_replicas": 3,
                    "max_replicas": 1,
                },
            },
            "min_replicas",
        ),
        ({"kind": "baking", "spec": DDP}, "kind"),
        (  # was a 500: the exponent overflowed a float
            {
                "kind": "training",
                "spec": {**DDP, "replicas": {"master": {"replicas": 1, "resources": {"cpu": "1e400"}}}},
            },
            "replicas.master.resources.cpu",
        ),
        (  # was a 500: "E" (exa) read as an exponent; now too large
            {
                "kind": "training",
                "spec": {
                    **DDP,
                    "replicas": {"master": {"replicas": 1, "resources": {"memory": "9" * 300 + "E"}}},
                },
            },
            "replicas.master.resources.memory",
        ),
        ({"kind": "training"}, "spec"),
        ({"kind": "training", "spec": DDP, "extra": 1}, "extra"),
        ("not json", "body"),
    ],
)
async def test_a_bad_request_is_a_400_naming_the_field(api: Any, root: Path, body: Any, field: str) -> None:
    status, error = await call(api, "POST", "jobs", "/jobs", body=body)
    assert status == 400, error
    assert error["field"] == field, error


@pytest.mark.parametrize(
    ("user", "spec", "field", "status"),
    [
        ("alice", {"name": "m", "model_format": "sklearn", "storage_uri": "/nope/model"}, "storage_uri", 403),
        ("alice", {"name": "m", "model_format": "sklearn", "storage_uri": "file:///etc"}, "storage_uri", 403),
        ("alice", {**DDP, "script": "missing.py"}, "script", 404),
        ("alice", {**DDP, "script": ".config/train.py"}, "script", 403),
        ("bob", DDP, "script", 404),  # alice's train.py is not among bob's files
        ("bob", {**DDP, "script": "../alice/train.py"}, "script", 400),
        # A `module:function` target is imported from the server root: the admins' on a shared server.
        (
            "alice",
            {**{k: v for k, v in DDP.items() if k != "script"}, "function": "train:main"},
            "function",
            403,
        ),
    ],
)
async def test_a_job_names_only_files_of_its_caller(
    api: Any, root: Path, user: str, spec: dict[str, Any], field: str, status: int
) -> None:
    (root / ".config").mkdir()
    (root / ".config" / "train.py").write_text(TRAIN_SCRIPT)
    kind = "serving" if "storage_uri" in spec else "training"
    answer, error = await call(api, "POST", "jobs", "/jobs", as_user=user, body={"kind": kind, "spec": spec})
    assert (answer, error["field"]) == (status, field), error
    assert str(root) not in error["message"]


async def test_gpus_over_the_quota_are_refused_naming_resources_gpu(api: Any, root: Path) -> None:
    spec = {**DDP, "name": "big", "replicas": {"worker": {"replicas": 2, "resources": {"gpu": 1}}}}
    status, error = await submit(api, "training", spec)
    assert status == 403, error
    assert error["reason"] == "QuotaExceeded" and error["field"] == "resources.gpu"
    assert "gpu_quota_per_user" in error["message"]


async def test_names_are_unique_per_user_and_jobs_private(api: Any, root: Path, user_files: Any) -> None:
    (user_files("bob") / "train.py").write_text(TRAIN_SCRIPT)
    spec = {**DDP, "args": ["20"]}
    assert (await submit(api, "training", spec))[0] == 201
    status, error = await submit(api, "training", spec)
    assert status == 409 and error["field"] == "name"
    assert (await submit(api, "training", spec, as_user="bob"))[0] == 201  # bob's own "ddp"

    status, body = await call(api, "GET", "jobs", "/jobs", as_user="bob")
    assert [(j["name"], j["user"]) for j in body["jobs"]] == [("ddp", "bob")]
    status, error = await call(api, "GET", "jobs", "/jobs", as_user="bob", user="alice")
    assert status == 403 and error["field"] == "user"
    status, error = await call(api, "GET", "jobs", "/jobs", as_user="bob", all="1")
    assert status == 403
    status, body = await call(api, "GET", "jobs", "/jobs", as_user="root-admin", all="1")
    assert sorted(j["user"] for j in body["jobs"]) == ["alice", "bob"] and body["is_admin"]
    status, job = await call(api, "GET", "jobs/ddp", "/jobs/{name}", as_user="root-admin", user="alice")
    assert status == 200 and job["user"] == "alice"

    await call(api, "DELETE", "jobs/ddp", "/jobs/{name}", as_user="bob")
    status, _ = await call(api, "GET", "jobs/ddp", "/jobs/{name}")
    assert status == 200  # alice's is untouched
    status, _ = await call(api, "DELETE", "jobs/ddp", "/jobs/{name}", as_user="root-admin", user="alice")
    assert status == 204


async def test_callers_need_an_identity_and_unsafe_calls_an_xsrf_token(api: Any) -> None:
    for method, path in (("GET", "jobs"), ("POST", "jobs"), ("GET", "jobs/x"), ("DELETE", "jobs/x")):
        status, body = await api(method, path, as_user="", body={} if method == "POST" else None)
        assert status == 403 and body["reason"] == "Forbidden", (method, path, body)
    status, body = await api("POST", "jobs", body={"kind": "training", "spec": DDP}, xsrf=False)
    assert status == 403 and "xsrf" in body["message"].lower()


async def test_the_forms_vocabulary_is_what_the_spec_checks_accept(api: Any) -> None:
    status, body = await call(api, "GET", "jobs/config", "/jobs/config")
    assert status == 200
    # What runs here: on the local backend, every kind, as processes.
    here = body["availability"]
    assert (here["backend"], here["training_api"], here["served"]) == ("local", "auto", {})
    via = {framework: use["via"] for framework, use in here["training"].items()}
    assert via == dict.fromkeys(FRAMEWORK_ROLES, "processes")
    assert here["tuning"]["available"] and here["serving"]["available"]
    training, tuning, serving = body["training"], body["tuning"], body["serving"]
    roles = {fw["value"]: {r["name"]: r for r in fw["roles"]} for fw in training["frameworks"]}
    assert {fw: list(by_name) for fw, by_name in roles.items()} == {
        fw: list(names) for fw, names in FRAMEWORK_ROLES.items()
    }
    assert [c["value"] for c in training["code_kinds"]] == list(CODE_KINDS)
    assert training["restart_policies"] == list(RESTART_POLICIES)
    assert [a["value"] for a in tuning["algorithms"]] == list(ALGORITHMS)
    assert tuning["objective_types"] == list(OBJECTIVE_TYPES)
    assert tuning["parameter_types"] == list(PARAMETER_TYPES)
    assert tuning["value_types"] == {"categorical": "any", "discrete": "number"}
    assert serving["model_formats"] == list(MODEL_FORMATS)
    assert [m["value"] for m in serving["scale_metrics"] if m["percent"]] == list(PERCENT_METRICS)
    assert [p["value"] for p in serving["protocols"]] == list(PROTOCOL_VERSIONS)
    assert training["defaults"]["framework"] in roles
    assert tuning["defaults"]["parameter_type"] in PARAMETER_TYPES
    assert serving["defaults"]["model_format"] in MODEL_FORMATS

    # The operators' count rules, as the spec check enforces them.
    assert roles["pytorch"]["Master"] == {
        "name": "Master",
        "key": "master",
        "default": 1,
        "min": 0,
        "max": 1,
        "required": False,
    }
    assert roles["pytorch"]["Worker"]["max"] is None
    assert roles["xgboost"]["Master"]["required"] and roles["xgboost"]["Master"]["max"] == 1
    assert roles["mpi"]["Launcher"]["required"] and roles["mpi"]["Worker"]["required"]
    assert roles["mpi"]["Worker"]["default"] == 2 and roles["tensorflow"]["PS"]["default"] == 0
    # A form's starting counts are accepted; a required role left at 0 is refused, naming it.
    for framework, by_name in roles.items():
        replicas = {r["key"]: r["default"] for r in by_name.values()}
        TrainingSpec.from_dict(
            {"name": "t", "framework": framework, "replicas": replicas, "command": ["true"]}, "a"
        )
    spec = {"name": "m", "framework": "mpi", "replicas": {"launcher": 1, "worker": 0}, "command": ["true"]}
    status, error = await submit(api, "training", spec)
    assert status == 400 and error["field"] == "replicas.worker", error

    # `config` names the vocabulary, so no job may take it; and the vocabulary needs an identity.
    status, error = await submit(api, "training", {**DDP, "name": "config"})
    assert status == 400 and error["field"] == "name", error
    status, error = await call(api, "GET", "jobs/config", "/jobs/config", as_user="")
    assert status == 403 and error["reason"] == "Forbidden"


async def test_logs_and_history_errors(api: Any, root: Path) -> None:
    await submit(api, "training", DDP)
    status, body = await api("GET", "jobs/ddp/logs", replica="chief-0")
    assert status == 404 and body["field"] == "replica"
    status, body = await api("GET", "jobs/ddp/logs", tail="many")
    assert status == 400 and body["field"] == "tail"
    status, body = await call(api, "GET", "jobs/ddp/history", "/jobs/{name}/history")
    assert status == 400 and body["field"] == "name"
    status, body = await call(api, "GET", "jobs/nope/history", "/jobs/{name}/history")
    assert status == 404


# Each trial prints its objective in Katib's StdOut format; the best learning rate is 0.05.
TRIAL = "import sys; lr = float(sys.argv[1].split('=')[1]); print(f'accuracy={1 - abs(lr - 0.05):.4f}')"


async def test_a_tuning_job_runs_its_trials_and_serves_the_history(api: Any, root: Path) -> None:
    spec = {
        "name": "lr-search",
        "objective": {"metric": "accuracy", "type": "maximize"},
        "algorithm": "grid",
        "parameters": {"lr": {"type": "discrete", "values": [0.01, 0.05, 0.09]}},
        "max_trials": 3,
        "parallel_trials": 2,
        "trial": {
            "training": {
                "framework": "pytorch",
                "replicas": {"master": 1},
                "command": [sys.executable, "-c", TRIAL],
            }
        },
    }
    status, job = await submit(api, "tuning", spec)
    assert status == 201, job
    done = await wait_for(api, "lr-search", {"Succeeded", "Failed"})
    assert done["phase"] == "Succeeded", done
    assert sorted(t["parameters"]["lr"] for t in done["trials"]) == [0.01, 0.05, 0.09]
    best = next(t for t in done["trials"] if t["name"] == done["best_trial"])
    assert best["parameters"]["lr"] == 0.05 and best["objective"] == 1.0

    status, history = await call(api, "GET", "jobs/lr-search/history", "/jobs/{name}/history")
    assert status == 200 and history["goal"] == "maximize"
    assert len(history["points"]) == 3 and history["points"][-1]["best"] == 1.0
    assert all(p["best"] >= p["objective"] for p in history["points"])
    status, _ = await call(api, "DELETE", "jobs/lr-search", "/jobs/{name}")
    assert status == 204

"""Local serving runs a real model server process speaking KServe's V1 and V2 REST protocols; the
predictions that come back over HTTP equal the trained model's own."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import psutil
import pytest
from sklearn.datasets import load_iris
from sklearn.dummy import DummyClassifier
from sklearn.linear_model import LogisticRegression

from cube_jupyter.errors import BackendUnavailable, InvalidInput, NotFound
from cube_jupyter.jobs.local.serving import LocalModelServing
from cube_jupyter.jobs.model import Job
from cube_jupyter.jobs.predict import model_url, predict
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.storage import CubeStorage
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, s3_server

USER = "alice"
X, Y = load_iris(return_X_y=True)
SAMPLE = X[::15]  # ten rows of all three classes


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[LocalModelServing]:
    serving = LocalModelServing(tmp_path / "state", ready_timeout=120)
    yield serving
    for job in serving.list(USER):  # leave no server running
        asyncio.run(serving.delete(USER, job.name))


def spec(name: str, storage_uri: str | Path, model_format: str = "sklearn", **extra: Any) -> ServingSpec:
    return ServingSpec.from_dict(
        {"name": name, "model_format": model_format, "storage_uri": str(storage_uri), **extra}, user=USER
    )


def deploy(serving: LocalModelServing, served: ServingSpec) -> Job:
    return asyncio.run(serving.deploy(served))


def get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def save_sklearn(directory: Path, model: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, directory / "model.joblib")
    return directory


def test_a_trained_sklearn_model_answers_v1_and_v2(serving: LocalModelServing, tmp_path: Path) -> None:
    model = LogisticRegression(max_iter=1000).fit(X, Y)
    job = deploy(serving, spec("iris", save_sklearn(tmp_path / "iris", model)))

    assert job.phase == "Ready", job.message
    assert job.kind == "serving" and job.framework == "sklearn" and job.message is None
    assert [c.type for c in job.conditions] == ["Created", "Ready"]
    assert job.endpoint is not None and job.endpoint.endswith("/v1/models/iris")
    expected = model.predict(SAMPLE).tolist()
    assert len(set(expected)) == 3

    assert predict(job.endpoint, SAMPLE.tolist()) == expected
    assert predict(job.endpoint, SAMPLE.tolist(), protocol="v2") == expected

    base, name = model_url(job.endpoint)
    assert name == "iris"
    assert get_json(f"{base}/v1/models/iris") == (200, {"name": "iris", "ready": True})
    assert get_json(f"{base}/v2/health/ready") == (200, {"ready": True})
    assert get_json(f"{base}/v2/models/iris/ready") == (200, {"name": "iris", "ready": True})
    status, metadata = get_json(f"{base}/v2/models/iris")
    assert status == 200 and metadata["name"] == "iris" and metadata["platform"] == "sklearn"
    assert get_json(f"{base}/v1/models/other")[0] == 404

    # a V2 request as the protocol spells it, with the response's tensor fields
    body = {
        "id": "r1",
        "inputs": [
            {"name": "x", "shape": list(SAMPLE.shape), "datatype": "FP64", "data": SAMPLE.ravel().tolist()}
        ],
    }
    request = urllib.request.Request(
        f"{base}/v2/models/iris/infer", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        reply = json.loads(response.read())
    assert reply["id"] == "r1" and reply["model_name"] == "iris"
    assert reply["outputs"][0]["shape"] == [len(SAMPLE)] and reply["outputs"][0]["data"] == expected

    with pytest.raises(InvalidInput) as error:  # two features instead of four: the model's own message
        predict(job.endpoint, [[1.0, 2.0]])
    assert "4 features" in error.value.message
    with pytest.raises(NotFound):
        predict(job.endpoint, SAMPLE.tolist(), model="other")

    assert serving.status(USER, "iris") == job
    assert "ready on http://127.0.0.1" in serving.logs(USER, "iris")
    assert "POST /v1/models/iris:predict" in serving.logs(USER, "iris")


def test_delete_stops_the_server(serving: LocalModelServing, tmp_path: Path) -> None:
    job = deploy(serving, spec("gone", save_sklearn(tmp_path / "m", DummyClassifier().fit(X, Y))))
    pid = job.replicas[0].pid
    assert pid is not None and psutil.pid_exists(pid)
    server = psutil.Process(pid)

    asyncio.run(serving.delete(USER, "gone"))

    assert not server.is_running(), "delete returned while the model server still runs"
    assert serving.status(USER, "gone") is None and not serving.job_dir(USER, "gone").exists()
    with pytest.raises(BackendUnavailable):
        predict(job.endpoint or "", SAMPLE.tolist(), timeout=5)
    with pytest.raises(NotFound):
        asyncio.run(serving.delete(USER, "gone"))


def test_xgboost_booster_and_sklearn_api_models(serving: LocalModelServing, tmp_path: Path) -> None:
    import xgboost

    regressor = xgboost.XGBRegressor(n_estimators=8, max_depth=3, n_jobs=1).fit(X[:, :3], X[:, 3])
    native = tmp_path / "xgb" / "model.json"
    native.parent.mkdir()
    regressor.save_model(native)
    job = deploy(serving, spec("xgb", native, "xgboost"))
    assert job.phase == "Ready", job.message
    expected = regressor.predict(SAMPLE[:, :3])
    np.testing.assert_allclose(predict(job.endpoint or "", SAMPLE[:, :3].tolist()), expected, rtol=1e-6)
    np.testing.assert_allclose(predict(job.endpoint or "", SAMPLE[:, :3].tolist(), "v2"), expected, rtol=1e-6)

    classifier = xgboost.XGBClassifier(n_estimators=4, max_depth=2, n_jobs=1).fit(X, Y)
    pickled = tmp_path / "xgbc"
    pickled.mkdir()
    joblib.dump(classifier, pickled / "model.joblib")
    job = deploy(serving, spec("xgbc", pickled, "xgboost"))
    assert predict(job.endpoint or "", SAMPLE.tolist()) == classifier.predict(SAMPLE).tolist()


def test_a_torchscript_model(serving: LocalModelServing, tmp_path: Path) -> None:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    scripted = torch.jit.script(net)
    path = tmp_path / "net.pt"
    scripted.save(str(path))
    with torch.no_grad():
        expected = net(torch.as_tensor(SAMPLE, dtype=torch.float32)).numpy()

    job = deploy(serving, spec("net", path, "pytorch"))

    assert job.phase == "Ready", job.message
    np.testing.assert_allclose(predict(job.endpoint or "", SAMPLE.tolist()), expected, rtol=1e-5, atol=1e-6)
    v2 = predict(job.endpoint or "", SAMPLE.tolist(), protocol="v2")
    assert np.asarray(v2).shape == (len(SAMPLE), 3)
    np.testing.assert_allclose(v2, expected, rtol=1e-5, atol=1e-6)


def test_an_onnx_model(serving: LocalModelServing, tmp_path: Path) -> None:
    pytest.importorskip("onnx")  # only to write the test model; serving needs onnxruntime alone
    import torch

    net = torch.nn.Linear(4, 2)
    path = tmp_path / "onnx" / "model.onnx"
    path.parent.mkdir()
    torch.onnx.export(
        net,
        (torch.zeros(1, 4),),
        str(path),
        dynamo=False,
        input_names=["features"],
        output_names=["scores"],
        dynamic_axes={"features": {0: "batch"}, "scores": {0: "batch"}},
    )
    with torch.no_grad():
        expected = net(torch.as_tensor(SAMPLE, dtype=torch.float32)).numpy()

    job = deploy(serving, spec("onnx", path.parent, "onnx"))

    assert job.phase == "Ready", job.message
    tensor = {
        "name": "features",
        "shape": list(SAMPLE.shape),
        "datatype": "FP32",
        "data": SAMPLE.ravel().tolist(),
    }
    outputs = predict(job.endpoint or "", [tensor], protocol="v2", all_outputs=True)
    np.testing.assert_allclose(outputs["scores"], expected, rtol=1e-5, atol=1e-6)


def test_canary_splits_traffic_then_promotion_takes_it_all(
    serving: LocalModelServing, tmp_path: Path
) -> None:
    zeros = save_sklearn(tmp_path / "v1", DummyClassifier(strategy="constant", constant=0).fit(X, Y))
    twos = save_sklearn(tmp_path / "v2", DummyClassifier(strategy="constant", constant=2).fit(X, Y))
    first = deploy(serving, spec("canary", zeros))
    old_server = psutil.Process(first.replicas[0].pid or 0)

    second = deploy(serving, spec("canary", twos, canary_traffic_percent=50))

    assert second.phase == "Ready" and second.endpoint != first.endpoint
    assert not old_server.is_running(), "the replaced revision's server still runs"
    seen = {predict(second.endpoint or "", [X[0].tolist()])[0] for _ in range(60)}
    assert seen == {0, 2}  # both revisions answer (each with probability 1/2 per request)
    assert "revision 2 50%, revision 1 50%" in second.conditions[-1].message

    promoted = deploy(serving, spec("canary", twos))
    assert {predict(promoted.endpoint or "", [X[0].tolist()])[0] for _ in range(20)} == {2}
    assert len(serving.list(USER)) == 1


def test_a_failed_new_revision_leaves_the_old_one_serving(serving: LocalModelServing, tmp_path: Path) -> None:
    good = save_sklearn(tmp_path / "good", DummyClassifier(strategy="constant", constant=1).fit(X, Y))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.joblib").write_bytes(b"this is not a pickle")
    first = deploy(serving, spec("keep", good))

    again = deploy(serving, spec("keep", broken))

    assert again.phase == "Ready" and again.endpoint == first.endpoint
    assert "revision 2 failed" in (again.message or "")
    assert predict(again.endpoint or "", [X[0].tolist()]) == [1]


def test_a_model_that_does_not_load_fails_with_the_log_tail(
    serving: LocalModelServing, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.joblib").write_bytes(b"this is not a pickle")

    job = deploy(serving, spec("broken", broken))

    assert job.phase == "Failed" and job.endpoint is None
    assert "exited with code 1 before it was ready" in (job.message or "")
    assert "could not start" in (job.message or "")  # the server's own last words
    assert job.conditions[-1].type == "Ready" and job.conditions[-1].status == "False"
    assert serving.status(USER, "broken") == job


def test_a_crashed_server_marks_the_model_failed(serving: LocalModelServing, tmp_path: Path) -> None:
    job = deploy(serving, spec("crash", save_sklearn(tmp_path / "m", DummyClassifier().fit(X, Y))))
    server = psutil.Process(job.replicas[0].pid or 0)
    server.kill()
    server.wait(10)

    after = serving.status(USER, "crash")

    assert after is not None and after.phase == "Failed" and after.endpoint is None
    assert "the model server exited" in (after.message or "")
    assert "ready on http://127.0.0.1" in (after.message or "")  # the log tail


def test_missing_model_file_names_storage_uri(serving: LocalModelServing, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no model here")

    with pytest.raises(InvalidInput) as error:
        deploy(serving, spec("missing", empty))

    assert error.value.field == "storage_uri" and str(empty) in error.value.message
    assert "model.joblib" in error.value.message
    assert serving.status(USER, "missing") is None and not serving.job_dir(USER, "missing").exists()
    with pytest.raises(InvalidInput) as wrong:
        deploy(serving, spec("wrong", tmp_path / "empty" / "notes.txt"))
    assert wrong.value.field == "storage_uri"
    with pytest.raises(InvalidInput) as custom:
        deploy(
            serving,
            ServingSpec.from_dict({"name": "c", "model_format": "custom", "image": "x/y:1"}, user=USER),
        )
    assert custom.value.field == "model_format"


def test_replicas_are_one_process_locally(serving: LocalModelServing, tmp_path: Path) -> None:
    job = deploy(
        serving, spec("scaled", save_sklearn(tmp_path / "m", DummyClassifier().fit(X, Y)), max_replicas=3)
    )
    assert job.phase == "Ready" and len(job.replicas) == 1
    assert "one model server process" in (job.message or "") and "max_replicas=3" in (job.message or "")


def test_a_model_from_s3(serving: LocalModelServing, tmp_path: Path) -> None:
    model = LogisticRegression(max_iter=1000).fit(X, Y)
    local = save_sklearn(tmp_path / "upload", model) / "model.joblib"
    with s3_server() as s3:
        bucket = s3.new_bucket()
        s3.client().fput_object(bucket, "models/iris/model.joblib", str(local))
        storage = CubeStorage(endpoint=s3.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)
        from_s3 = LocalModelServing(serving.records.root.parent, storage=storage)
        job = deploy(from_s3, spec("s3iris", f"s3://{bucket}/models/iris"))
        with pytest.raises(InvalidInput) as error:
            deploy(from_s3, spec("nothing", f"s3://{bucket}/models/none"))
    assert error.value.field == "storage_uri" and f"s3://{bucket}/models/none" in error.value.message
    assert job.phase == "Ready", job.message
    assert predict(job.endpoint or "", SAMPLE.tolist()) == model.predict(SAMPLE).tolist()
    assert (from_s3.job_dir(USER, "s3iris") / "revisions" / "1" / "model.joblib").is_file()


def test_predict_client_finds_the_model_name() -> None:
    assert model_url("http://127.0.0.1:9/v1/models/iris") == ("http://127.0.0.1:9", "iris")
    assert model_url("http://127.0.0.1:9/v2/models/iris/infer") == ("http://127.0.0.1:9", "iris")
    assert model_url("http://iris.team-a.example.com") == ("http://iris.team-a.example.com", "iris")
    assert model_url("http://127.0.0.1:9", model="m") == ("http://127.0.0.1:9", "m")
    with pytest.raises(InvalidInput):
        model_url("http://127.0.0.1:9")
    with pytest.raises(InvalidInput):
        predict("ftp://x/v1/models/m", [[1]])
    with pytest.raises(InvalidInput):
        predict("http://127.0.0.1:9/v1/models/m", [[1]], protocol="v3")

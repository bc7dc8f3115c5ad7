"""The KFP v2beta1 client against a stand-in KFP API server whose answers are KFP's own models'
(`kfp_server.py`): pipelines, versions, runs and recurring runs as one user in their namespace, both
ways of naming the user, KFP's refusals and an unreachable server as CubeErrors, and the config."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from kfp import compiler, dsl
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import BackendUnavailable, ConfigError, Conflict, Forbidden, InvalidInput, NotFound
from cube_jupyter.pipelines.kubernetes.kfp_api import (
    KfpApi,
    ServiceAccountToken,
    UseridHeader,
    auth_for,
    run_spec,
)
from tests.pipelines.kfp_server import KfpServer, serve


# KFP's SDK reads these annotations as types: this module has no `from __future__ import annotations`.
@dsl.container_component
def say(text: str) -> dsl.ContainerSpec:
    return dsl.ContainerSpec(image="alpine", command=["echo"], args=[text])


@dsl.pipeline(name="hello")
def hello(text: str = "hi") -> None:
    say(text=text)


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> str:
    """IR YAML from KFP's own compiler."""
    path = tmp_path_factory.mktemp("ir") / "hello.yaml"
    compiler.Compiler().compile(hello, str(path))
    return path.read_text()


@pytest.fixture
def kfp() -> Iterator[tuple[KfpServer, str]]:
    state = KfpServer(access={"alice": {"team-a"}, "bob": {"team-b"}}, tokens={"alice-token": "alice"})
    server, url = serve(state)
    yield state, url
    server.shutdown()
    server.server_close()


@pytest.fixture
def api(kfp: tuple[KfpServer, str]) -> Iterator[KfpApi]:
    client = KfpApi(kfp[1], UseridHeader("kubeflow-userid"))
    yield client
    client.close()


def test_pipeline_version_run_and_terminate(kfp: tuple[KfpServer, str], api: KfpApi, package: str) -> None:
    state, _ = kfp
    assert api.find_pipeline("alice", "team-a", "hello") is None
    pipeline = api.upload_pipeline("alice", "team-a", "hello", package)
    assert api.find_pipeline("alice", "team-a", "hello") == pipeline
    version = api.upload_version("alice", pipeline["pipeline_id"], "hello-v2", package)
    assert api.find_version("alice", pipeline["pipeline_id"], "hello-v2") == version
    assert api.find_version("alice", pipeline["pipeline_id"], "hello-v3") is None
    with pytest.raises(Conflict, match="Already exist"):
        api.upload_version("alice", pipeline["pipeline_id"], "hello-v2", package)

    experiment = api.create_experiment("alice", "team-a", "Default")
    assert api.find_experiment("alice", "team-a", "Default") == experiment
    spec = run_spec(
        version, {"text": "yo"}, pipeline_root="s3://b/p", experiment_id=experiment["experiment_id"]
    )
    run = api.create_run("alice", "r1", spec)
    assert run["state"] == "PENDING"
    sent = state.runs[run["run_id"]]
    assert sent["runtime_config"] == {"parameters": {"text": "yo"}, "pipeline_root": "s3://b/p"}
    assert sent["pipeline_version_reference"]["pipeline_version_id"] == version["pipeline_version_id"]

    state.set_run(run["run_id"], "RUNNING", [{"display_name": "say", "state": "RUNNING"}])
    read = api.get_run("alice", run["run_id"])
    assert read["state"] == "RUNNING"
    assert read["run_details"]["task_details"][0]["display_name"] == "say"
    api.terminate_run("alice", run["run_id"])
    assert state.runs[run["run_id"]]["state"] == "CANCELING"
    assert ("POST", f"/apis/v2beta1/runs/{run['run_id']}:terminate") in state.calls


def test_recurring_runs(kfp: tuple[KfpServer, str], api: KfpApi, package: str) -> None:
    pipeline = api.upload_pipeline("alice", "team-a", "hello", package)
    version = api.find_version("alice", pipeline["pipeline_id"], "hello")
    assert version is not None
    body = {
        "display_name": "nightly",
        "namespace": "team-a",
        "pipeline_version_reference": {
            "pipeline_id": version["pipeline_id"],
            "pipeline_version_id": version["pipeline_version_id"],
        },
        "runtime_config": {"parameters": {"text": "night"}},
        "trigger": {"cron_schedule": {"cron": "0 0 2 * * *"}},
        "max_concurrency": "1",
        "mode": "ENABLE",
    }
    made = api.create_recurring_run("alice", body)
    assert made["status"] == "ENABLED"
    assert [r["recurring_run_id"] for r in api.list_recurring_runs("alice", "team-a")] == [
        made["recurring_run_id"]
    ]
    api.enable_recurring_run("alice", made["recurring_run_id"], enabled=False)
    assert api.get_recurring_run("alice", made["recurring_run_id"])["status"] == "DISABLED"
    api.enable_recurring_run("alice", made["recurring_run_id"])
    assert api.get_recurring_run("alice", made["recurring_run_id"])["status"] == "ENABLED"
    api.delete_recurring_run("alice", made["recurring_run_id"])
    assert api.list_recurring_runs("alice", "team-a") == []
    with pytest.raises(NotFound):
        api.get_recurring_run("alice", made["recurring_run_id"])


def test_another_namespace_is_forbidden_with_kfps_message(
    kfp: tuple[KfpServer, str], api: KfpApi, package: str
) -> None:
    with pytest.raises(Forbidden, match="User 'bob' is not authorized") as refused:
        api.upload_pipeline("bob", "team-a", "hello", package)
    assert "HTTP 403" in refused.value.message
    run = _run(api, package)
    with pytest.raises(Forbidden):
        api.get_run("bob", run["run_id"])
    with pytest.raises(NotFound, match="run-9999 not found"):
        api.get_run("alice", "run-9999")


def test_userid_header_name_and_prefix(kfp: tuple[KfpServer, str], package: str) -> None:
    state, url = kfp
    state.userid_header, state.userid_prefix = "x-user", "accounts.google.com:"
    prefixed = KfpApi(url, UseridHeader("x-user", "accounts.google.com:"))
    assert prefixed.upload_pipeline("alice", "team-a", "hello", package)["namespace"] == "team-a"
    bare = KfpApi(url, UseridHeader("kubeflow-userid"))
    with pytest.raises(Forbidden, match="no user identity header"):
        bare.find_pipeline("alice", "team-a", "hello")


def test_service_account_token_read_on_each_call(
    kfp: tuple[KfpServer, str], tmp_path: Path, package: str
) -> None:
    url = kfp[1]
    token = tmp_path / "token"
    token.write_text("stale-token\n")
    api = KfpApi(url, ServiceAccountToken(token))
    with pytest.raises(Forbidden, match="Unauthenticated"):
        api.find_pipeline("alice", "team-a", "hello")
    token.write_text("alice-token\n")  # rotated by the kubelet
    assert api.upload_pipeline("anyone", "team-a", "hello", package)["namespace"] == "team-a"
    token.unlink()
    with pytest.raises(BackendUnavailable, match="kfp_token_file"):
        api.find_pipeline("alice", "team-a", "hello")


def test_bad_request_is_invalid_input(kfp: tuple[KfpServer, str], api: KfpApi, package: str) -> None:
    pipeline = api.upload_pipeline("alice", "team-a", "hello", package)
    version = api.find_version("alice", pipeline["pipeline_id"], "hello")
    assert version is not None
    experiment = api.create_experiment("alice", "team-a", "Default")
    with pytest.raises(InvalidInput, match="unrecognized input parameter 'nope'"):
        api.create_run(
            "alice", "r", run_spec(version, {"nope": 1}, experiment_id=experiment["experiment_id"])
        )


def test_unreachable_server_names_kfp_url(refused_port: int) -> None:
    api = KfpApi(f"http://127.0.0.1:{refused_port}", UseridHeader("kubeflow-userid"))
    with pytest.raises(
        BackendUnavailable, match=r"CubePipelines\.kfp_url 'http://127\.0\.0\.1:\d+' cannot be reached"
    ):
        api.get_run("alice", "run-1")


def test_auth_from_config(tmp_path: Path) -> None:
    header = auth_for(load_settings(Config()).pipelines.pipelines)
    assert header.headers("alice") == {"kubeflow-userid": "alice"}
    token = tmp_path / "token"
    token.write_text("t0k3n")
    config = Config({"CubePipelines": {"kfp_auth": "service-account-token", "kfp_token_file": str(token)}})
    assert auth_for(load_settings(config).pipelines.pipelines).headers("alice") == {
        "Authorization": "Bearer t0k3n"
    }


@pytest.mark.parametrize(
    ("trait", "value"),
    [
        ("cluster_target", "airflow"),
        ("kfp_url", "ml-pipeline:8888"),
        ("kfp_url", "http://ml-pipeline:8888/?x=1"),
        ("kfp_auth", "basic"),
        ("kfp_userid_header", "kubeflow userid"),
        ("kfp_userid_prefix", "a\r\nX-Evil: 1"),
        ("kfp_token_file", "token"),
        ("pipeline_root", "/data/artifacts"),
        ("pipeline_root", "s3://"),
        ("kfp_ui_url", "kubeflow.example.com"),
    ],
)
def test_bad_config_names_the_trait(trait: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(Config({"CubePipelines": {trait: value}}))
    assert refused.value.field == f"CubePipelines.{trait}"


def test_config_is_normalized() -> None:
    config = Config(
        {
            "CubePipelines": {
                "kfp_url": "http://ml-pipeline.kubeflow:8888/",
                "pipeline_root": "s3://ml/pipelines/",
                "kfp_ui_url": " ",
            }
        }
    )
    pipelines = load_settings(config).pipelines.pipelines
    assert (pipelines.kfp_url, pipelines.pipeline_root, pipelines.kfp_ui_url) == (
        "http://ml-pipeline.kubeflow:8888",
        "s3://ml/pipelines",
        "",
    )
    assert pipelines.cluster_target == "auto"


def _run(api: KfpApi, package: str) -> dict[str, object]:
    pipeline = api.upload_pipeline("alice", "team-a", "hello", package)
    version = api.find_version("alice", pipeline["pipeline_id"], "hello")
    assert version is not None
    experiment = api.create_experiment("alice", "team-a", "Default")
    return api.create_run("alice", "r", run_spec(version, {}, experiment_id=experiment["experiment_id"]))

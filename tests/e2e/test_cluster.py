"""End to end on a real Kubeflow cluster (Istio, oauth2-proxy and Dex, Profiles, Argo, Trainer v2,
KServe): install the workbench from `deploy/`, reach it through the ingress gateway as a Kubeflow
user, create a notebook server and reach that too, then from the server run a pipeline on Argo (which
trains a model and publishes it to the S3 store), a TrainJob, and serve the published model; finally
remove everything again. Opt-in, and skipped otherwise: see tests/e2e/README.md.

The tests run in file order and share the install, the login and the notebook server (module-scoped
fixtures); each cleans up what it made even when it fails.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import requests

from cube_jupyter.images import image
from cube_jupyter.notebooks.render import workspace_claim_name
from cube_jupyter.pipelines.kubernetes.argo import RUN_ID_LABEL
from tests.deploy.rendered import render, the
from tests.e2e.cluster import Kubectl, copy_s3_credentials, port_forward, store_settings, write_overlay
from tests.e2e.gateway import Gateway
from tests.waiting import wait_until

NO_CLUSTER = "no cluster: set CUBE_E2E=1 and KUBECONFIG to run the end-to-end tests against a real cluster"
KUBECONFIG = os.environ.get("CUBE_E2E_KUBECONFIG") or os.environ.get("KUBECONFIG", "")
pytestmark = pytest.mark.skipif(os.environ.get("CUBE_E2E") != "1" or not KUBECONFIG, reason=NO_CLUSTER)

# Where and as whom (README.md lists them all); the defaults are those of Kubeflow's example install.
NAMESPACE = os.environ.get("CUBE_E2E_NAMESPACE", "kubeflow-user-example-com")
STORE_URL = os.environ.get("CUBE_E2E_STORE_URL", f"s3://mlpipeline/private-artifacts/{NAMESPACE}/cube-e2e")
STORE_ENDPOINT = os.environ.get("CUBE_E2E_STORE_ENDPOINT", "http://seaweedfs.kubeflow:8333")
TIMEOUT = float(os.environ.get("CUBE_E2E_TIMEOUT", "900"))  # deadline of each wait (image pulls)
POLL = 5.0  # seconds between two looks at something that takes minutes
RUN = secrets.token_hex(3)  # in every name this run makes, so a rerun never meets a leftover
S3_SECRET = "cube-e2e-s3"
SERVING_ACCOUNT = "cube-e2e-serving"
IRIS = [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]


@dataclass(frozen=True)
class Install:
    prefix: str  # the workbench's route on the gateway: its base_url


@pytest.fixture(scope="module")
def kubectl() -> Kubectl:
    return Kubectl(KUBECONFIG)


@pytest.fixture(scope="module")
def s3_access(kubectl: Kubectl) -> Iterator[None]:
    """The store's credentials in the user's namespace, for step and replica pods (a Secret with
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and for KServe's storage initializer (the same Secret,
    annotated with the endpoint, on the predictor's ServiceAccount)."""
    scheme, _, endpoint = STORE_ENDPOINT.partition("://")
    kserve = {
        "serving.kserve.io/s3-endpoint": endpoint,
        "serving.kserve.io/s3-usehttps": str(int(scheme == "https")),
    }
    copy_s3_credentials(kubectl, NAMESPACE, "mlpipeline-minio-artifact", S3_SECRET, annotations=kserve)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "secrets": [{"name": S3_SECRET}]}
    kubectl.apply({**account, "metadata": {"name": SERVING_ACCOUNT, "namespace": NAMESPACE}})
    yield
    kubectl("delete", "serviceaccount", SERVING_ACCOUNT, "-n", NAMESPACE, "--ignore-not-found")
    kubectl("delete", "secret", S3_SECRET, "-n", NAMESPACE, "--ignore-not-found")


@pytest.fixture(scope="module")
def install(kubectl: Kubectl, s3_access: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    """`kubectl apply -k` of the kubeflow overlay plus the test's store settings; `delete -k` after."""
    settings = store_settings(STORE_URL, STORE_ENDPOINT, S3_SECRET)
    settings += f"c.CubeJobs.serving_service_account = {SERVING_ACCOUNT!r}\n"
    overlay = write_overlay(tmp_path_factory.mktemp("overlay"), settings)
    objects = render(overlay)
    namespace = the(objects, "Deployment", "cube-jupyter")["metadata"]["namespace"]
    [route] = the(objects, "VirtualService", "cube-jupyter")["spec"]["http"]
    kubectl("apply", "-k", str(overlay))
    try:
        wait = f"--timeout={int(TIMEOUT)}s"
        kubectl("rollout", "status", "deployment/cube-jupyter", "-n", namespace, wait, timeout=TIMEOUT + 60)
        yield Install(prefix=route["match"][0]["uri"]["prefix"])
    finally:
        kubectl("delete", "-k", str(overlay), "--ignore-not-found", "--wait=true")


@pytest.fixture(scope="module")
def gateway(
    kubectl: Kubectl, install: Install, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """A logged-in session on the gateway: CUBE_E2E_URL, else a port-forward to Istio's ingress."""
    url = os.environ.get("CUBE_E2E_URL")
    if url:
        yield log_in(Gateway(url), install)
        return
    log = tmp_path_factory.mktemp("port-forward") / "kubectl.log"
    with port_forward(kubectl, "istio-system", "istio-ingressgateway", 80, log) as forwarded:
        yield log_in(Gateway(forwarded), install)


def log_in(gateway: Gateway, install: Install) -> Gateway:
    if os.environ.get("CUBE_E2E_COOKIE"):
        gateway.use_cookies(os.environ["CUBE_E2E_COOKIE"])
    elif os.environ.get("CUBE_E2E_TOKEN"):
        gateway.use_token(os.environ["CUBE_E2E_TOKEN"])
    else:
        password = os.environ.get("CUBE_E2E_PASSWORD")
        assert password, "set CUBE_E2E_PASSWORD (the Dex user's), CUBE_E2E_TOKEN or CUBE_E2E_COOKIE to log in"
        gateway.log_in_with_dex(f"{install.prefix}lab", user(), password)
    return gateway


def user() -> str:
    return os.environ.get("CUBE_E2E_USER", "user@example.com")


@pytest.fixture(scope="module")
def server(gateway: Gateway, install: Install, kubectl: Kubectl) -> Iterator[dict[str, Any]]:
    """A notebook server of the default profile, made through the workbench's REST API; deleted after."""
    notebooks = f"{install.prefix}cube/api/v1/notebooks"
    name = f"e2e-{RUN}"
    gateway.call("POST", notebooks, {"name": name}, expect=(201,))
    try:
        started = wait_until(
            lambda: gateway.call("GET", f"{notebooks}/{name}"),
            TIMEOUT,
            f"notebook server {name} to run",
            until=lambda s: s["status"] in ("running", "failed"),
            interval=POLL,
        )
        assert started["status"] == "running", started["reason"]
        # The route is the controller's: it may answer a moment after the pod is ready.
        wait_until(
            lambda: http_status(gateway, f"{started['url']}api/status"),
            TIMEOUT,
            f"notebook server {name} to answer through the gateway",
            until=lambda status: status == 200,
            ignoring=(requests.RequestException,),
            interval=POLL,
        )
        yield started
    finally:
        gateway.call("DELETE", f"{notebooks}/{name}", expect=(204, 404))
        wait_until(
            lambda: http_status(gateway, f"{notebooks}/{name}"),
            TIMEOUT,
            f"notebook server {name} to be deleted",
            until=lambda status: status == 404,
            interval=POLL,
        )
        # Deleting a server keeps its workspace, as Kubeflow does; this one was the test's.
        kubectl("delete", "pvc", workspace_claim_name(name), "-n", NAMESPACE, "--ignore-not-found")


def http_status(gateway: Gateway, path: str) -> int:
    return gateway.session.get(gateway.base + path, timeout=60).status_code


def wait_for_job(gateway: Gateway, jobs: str, name: str, done: tuple[str, ...]) -> dict[str, Any]:
    job: dict[str, Any] = wait_until(
        lambda: gateway.call("GET", f"{jobs}/{name}"),
        TIMEOUT,
        f"job {name} to reach one of {done}",
        until=lambda j: j["phase"] in (*done, "Failed"),
        interval=POLL,
    )
    return job


# -- the workbench ---------------------------------------------------------------------------------------


def test_the_workbench_answers_through_the_gateway_as_the_logged_in_user(
    gateway: Gateway, install: Install
) -> None:
    info = gateway.call("GET", f"{install.prefix}cube/api/v1/info")
    assert (info["role"], info["backend"]) == ("workbench", "kubernetes"), info
    assert "notebooks" in info["features"]
    if not (os.environ.get("CUBE_E2E_TOKEN") or os.environ.get("CUBE_E2E_COOKIE")):
        assert info["user"] == user()
    if not info["is_admin"]:  # users get the workbench's API, not this server's files or kernels
        gateway.call("GET", f"{install.prefix}api/contents", expect=(403,))


def test_a_notebook_server_runs_in_the_users_profile_namespace(
    gateway: Gateway, server: dict[str, Any]
) -> None:
    assert server["namespace"] == NAMESPACE
    info = gateway.call("GET", f"{server['url']}cube/api/v1/info")
    assert info["role"] == "user" and {"pipelines", "jobs"} <= set(info["features"]), info


# -- from the notebook server -----------------------------------------------------------------------------


def pipeline_notebook(step_image: str) -> dict[str, Any]:
    """Two steps: `train` fits a model, which flows to `publish` through the artifact store; `publish`
    puts it where KServe will read it (`{store_url}/{model_key}/model.joblib`)."""
    cells = [
        (["parameters"], 'store_url = ""\nmodel_key = ""'),
        (
            ["step:train", f"image:{step_image}"],
            "from sklearn.datasets import load_iris\n"
            "from sklearn.linear_model import LogisticRegression\n"
            "features, labels = load_iris(return_X_y=True)\n"
            "model = LogisticRegression(max_iter=500).fit(features, labels)",
        ),
        (
            ["step:publish", f"image:{step_image}"],
            "import os, tempfile\n"
            "import joblib\n"
            "from cube_jupyter.storage import open_store\n"
            "path = os.path.join(tempfile.mkdtemp(), 'model.joblib')\n"
            "joblib.dump(model, path)\n"
            "open_store(store_url).put_file(f'{model_key}/model.joblib', path)",
        ),
    ]
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [
            {
                "id": f"cell-{i}",
                "cell_type": "code",
                "metadata": {"tags": tags},
                "source": source,
                "outputs": [],
                "execution_count": None,
            }
            for i, (tags, source) in enumerate(cells)
        ],
    }


MODEL_KEY = f"models/e2e-iris-{RUN}"


def test_a_pipeline_runs_on_argo_and_publishes_a_model(
    gateway: Gateway, server: dict[str, Any], kubectl: Kubectl
) -> None:
    url = server["url"]
    path = f"e2e-pipeline-{RUN}.ipynb"
    notebook = {"type": "notebook", "format": "json", "content": pipeline_notebook(image("notebook"))}
    gateway.call("PUT", f"{url}api/contents/{path}", notebook, expect=(200, 201))
    parameters = {"store_url": STORE_URL, "model_key": MODEL_KEY}
    run = gateway.call(
        "POST",
        f"{url}cube/api/v1/pipelines/runs",
        {"path": path, "target": "cluster", "parameters": parameters},
        expect=(201,),
    )
    finished = wait_until(
        lambda: gateway.call("GET", f"{url}cube/api/v1/pipelines/runs/{run['id']}"),
        TIMEOUT,
        f"pipeline run {run['id']} to finish",
        until=lambda r: r["status"] in ("succeeded", "failed", "cancelled"),
        interval=POLL,
    )
    assert finished["status"] == "succeeded", finished["error"] or finished["steps"]
    assert {s["name"]: s["status"] for s in finished["steps"]} == {
        "train": "succeeded",
        "publish": "succeeded",
    }
    workflows = kubectl.get("workflows.argoproj.io", "-n", NAMESPACE, "-l", f"{RUN_ID_LABEL}={run['id']}")
    assert [w["status"]["phase"] for w in workflows["items"]] == ["Succeeded"]


def test_a_trainjob_runs_its_replicas_to_success(
    gateway: Gateway, server: dict[str, Any], kubectl: Kubectl
) -> None:
    jobs = f"{server['url']}cube/api/v1/jobs"
    name = f"e2e-train-{RUN}"
    spec = {
        "name": name,
        "framework": "pytorch",
        "replicas": {"master": 1, "worker": 1},
        "command": [
            "python",
            "-c",
            "import socket; print('cube-jupyter e2e replica on', socket.gethostname())",
        ],
    }
    gateway.call("POST", jobs, {"kind": "training", "spec": spec}, expect=(201,))
    try:
        kubectl.get(
            "trainjobs.trainer.kubeflow.org", name, "-n", NAMESPACE
        )  # Trainer v2 is served: a TrainJob
        job = wait_for_job(gateway, jobs, name, ("Succeeded",))
        assert job["phase"] == "Succeeded", job["message"]
        log = gateway.call("GET", f"{jobs}/{name}/logs")
        assert "cube-jupyter e2e replica on" in log
    finally:
        gateway.call("DELETE", f"{jobs}/{name}", expect=(204, 404))


def test_the_published_model_is_served_and_predicts(
    gateway: Gateway, server: dict[str, Any], kubectl: Kubectl
) -> None:
    """Serves what the pipeline test published: it needs that test to have passed."""
    jobs = f"{server['url']}cube/api/v1/jobs"
    name = f"e2e-iris-{RUN}"
    spec = {"name": name, "model_format": "sklearn", "storage_uri": f"{STORE_URL.rstrip('/')}/{MODEL_KEY}"}
    gateway.call("POST", jobs, {"kind": "serving", "spec": spec}, expect=(201,))
    try:
        kubectl.get("inferenceservices.serving.kserve.io", name, "-n", NAMESPACE)
        job = wait_for_job(gateway, jobs, name, ("Ready",))
        assert job["phase"] == "Ready", job["message"]
        answer = gateway.call("POST", f"{jobs}/{name}/predict", {"inputs": IRIS})
        assert len(answer["predictions"]) == len(IRIS), answer
    finally:
        gateway.call("DELETE", f"{jobs}/{name}", expect=(204, 404))


def names_of_this_run(kubectl: Kubectl, kind: str) -> list[str]:
    return [
        item["metadata"]["name"]
        for item in kubectl.get(kind, "-n", NAMESPACE)["items"]
        if RUN in item["metadata"]["name"]
    ]


def test_nothing_of_the_run_is_left_in_the_users_namespace(kubectl: Kubectl, server: dict[str, Any]) -> None:
    """The jobs' own deletes went through: no TrainJob or InferenceService of this run remains
    (the notebook server and the install go with their fixtures, after this)."""
    for kind in ("trainjobs.trainer.kubeflow.org", "inferenceservices.serving.kserve.io"):
        wait_until(
            partial(names_of_this_run, kubectl, kind),
            TIMEOUT,
            f"{kind} of run {RUN} to be deleted",
            until=lambda names: not names,
            interval=POLL,
        )

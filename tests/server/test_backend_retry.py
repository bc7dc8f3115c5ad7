"""A cluster API that is down when the workbench starts: the server keeps running, answers 503 naming
the failure (not empty lists), retries in the background, serves once the API is back, and stops
cleanly either way. Real HTTP: the kubernetes backend, a kubeconfig, and KMock coming up late."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest
import yaml
from tornado.httpclient import HTTPClientError

from cube_jupyter.local.processes import free_port
from tests.kubernetes.conftest import make_emulator
from tests.server.conftest import Fetch, cut_first_sync_waits
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def api_port() -> int:
    return free_port()


@pytest.fixture
def cube_config(
    cube_config: dict[str, Any], tmp_path: Path, api_port: int, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The kubernetes backend, its kubeconfig naming a port where nothing listens yet."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{api_port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    cube_config["CubeWorkbench"]["backend"] = "kubernetes"
    return cube_config


@pytest.fixture
def cube_app(jp_serverapp: Any, jp_asyncio_loop: asyncio.AbstractEventLoop) -> Any:
    """Started as the conftest does, with the first-sync waits cut from 30 s to 1 s."""
    (app,) = jp_serverapp.extension_manager.extension_apps["cube_jupyter_server"]
    cut_first_sync_waits(app.workbench)  # the composition root's
    jp_asyncio_loop.run_until_complete(jp_serverapp.extension_manager.start_all_extensions())
    return jp_serverapp


async def test_unreachable_api_is_503_until_it_answers(
    cube_app: Any, api: Any, api_port: int, jp_fetch: Fetch
) -> None:
    status, body = await api("GET", "notebooks")
    assert status == 503, body
    assert body["reason"] == "BackendUnavailable" and f"127.0.0.1:{api_port}" in body["message"], body
    status, body = await api("GET", "notebooks", as_user="root-admin", all="1")
    assert status == 503, body
    status, body = await api("GET", "profiles")  # the offer does not need the cluster
    assert status == 200
    small = body["profiles"][0]
    assert set(small["enforced"].values()) == {True}  # a pod gets all of it
    assert small["enforcement"][0] == "Runs the image jupyter/base."

    emulator = make_emulator()
    server = kmock_lib.Server(emulator, port=api_port)
    await emulator.__aenter__()
    await server.__aenter__()
    try:
        status, body = await wait_until_async(
            lambda: api("GET", "notebooks"),
            60,
            "the notebooks API to answer once the cluster API is up",
            until=lambda answer: answer[0] == 200,
            interval=0.5,
        )
        assert body["notebooks"] == []
        # Cluster servers are reached through Istio: the local path router has nothing to offer.
        try:
            routed = await jp_fetch(
                "cube", "notebook", "alice", "nb1", "api", headers={"kubeflow-userid": "alice"}
            )
        except HTTPClientError as exc:
            routed = exc.response
        assert routed is not None and routed.code == 404
        assert "local backend only" in json.loads(routed.body)["message"]
    finally:
        # The informers' watches hold connections open: stop them before the API server.
        await asyncio.wait_for(cube_app.extension_manager.stop_all_extensions(), 30)
        await server.__aexit__(None, None, None)
        await emulator.__aexit__(None, None, None)


async def test_stopping_while_retrying_completes(cube_app: Any, api: Any) -> None:
    status, _ = await api("GET", "notebooks")
    assert status == 503
    (app,) = cube_app.extension_manager.extension_apps["cube_jupyter_server"]
    await asyncio.wait_for(cube_app.extension_manager.stop_all_extensions(), 30)
    assert app.backend_starter._retrying is None and not app.backend_starter.ready

"""`GET /cube/api/v1/gpu` through a real Jupyter server, checked against openapi.yaml.

- On this GPU-less machine: the "No GPU visible" state, auth, XSRF and bad input.
- The local backend with a REPLAY of recorded NVML readings installed in the server's process (this
  machine has no GPU; tests/gpu/nvml_replay.py feeds the recording to the real NvmlSource): real
  kernels, started through the server and in a real child notebook server, take the place of the
  recorded PIDs, and the report attributes that GPU memory to them and their notebooks.
- The kubernetes backend against the KMock API emulator, with GPU metrics from a real Prometheus
  scraping the DCGM exporter sample page.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import psutil
import pytest
import yaml
from tornado.httpclient import AsyncHTTPClient

from cube_jupyter.gpu.attribution import kernel_pids
from cube_jupyter.gpu.service import OTHER_USERS_KERNEL
from cube_jupyter.local import gpus
from cube_jupyter.local.processes import free_port
from tests.gpu import nvml_replay
from tests.gpu.prometheus_server import dcgm_prometheus, prometheus_url  # noqa: F401  (fixtures)
from tests.kubernetes.conftest import make_emulator
from tests.server.conftest import XSRF, Fetch, cut_first_sync_waits
from tests.server.openapi import assert_response_matches
from tests.waiting import wait_until_async

pytestmark = pytest.mark.timeout(180)

RECORDING = Path(__file__).resolve().parents[1] / "data" / "nvml" / "a100x2-processes.json"
GPU0 = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
GPU1 = "GPU-1b2c3d4e-0000-1111-2222-333344445555"
MIB = 1024 * 1024


async def get_gpu(api: Any, as_user: str = "alice", **params: str) -> tuple[int, Any]:
    code, body = await api("GET", "gpu", as_user=as_user, **params)
    assert_response_matches("/gpu", "get", code, body)
    return code, body


# -- this machine: no GPU ---------------------------------------------------------------------------


async def test_no_gpu_visible_is_a_report_not_an_error(api: Any) -> None:
    code, body = await get_gpu(api)
    assert code == 200
    assert body["available"] is False and body["source"] == "nvml"
    assert body["message"].startswith("No GPU visible")
    assert body["user"] == "alice" and body["is_admin"] is False
    assert body["quota"] == {"used": 0, "limit": None, "holders": [], "queued": 0, "queued_jobs": []}
    code, admin = await get_gpu(api, as_user="root-admin", all="1")
    assert code == 200 and admin["is_admin"] is True


async def test_auth_and_bad_input(api: Any, jp_fetch: Fetch) -> None:
    code, body = await get_gpu(api, as_user="")
    assert code == 403 and body["reason"] == "Forbidden"
    code, body = await get_gpu(api, as_user="bob", all="1")
    assert code == 403 and body["field"] == "all"
    for bad in ("soon", "-5", "86401", "nan", "inf"):
        code, body = await get_gpu(api, history=bad)
        assert code == 400 and body["field"] == "history", bad
    # Unsafe methods are refused by Jupyter's XSRF check first, then as not allowed.
    code, body = await api("POST", "gpu", xsrf=False)
    assert code == 403 and "xsrf" in body["message"].lower()
    code, body = await api("POST", "gpu")
    assert code == 405


class TestUnreachablePrometheus:
    @pytest.fixture
    def cube_config(self, cube_config: dict[str, Any], refused_port: int) -> dict[str, Any]:
        cube_config["CubeGPU"] = {"prometheus_url": f"http://127.0.0.1:{refused_port}"}
        return cube_config

    async def test_is_503_naming_the_field(self, api: Any) -> None:
        code, body = await get_gpu(api)
        assert code == 503
        assert body["field"] == "prometheus_url" and "unreachable" in body["message"]


# -- the local backend, NVML replayed -----------------------------------------------------------------


class TestLocalKernels:
    @pytest.fixture
    def replay(self) -> Iterator[nvml_replay.NvmlReplay]:
        """A REPLAY of two A100s, installed in this process (the server's) before it starts."""
        replay = nvml_replay.install(RECORDING)
        yield replay
        nvml_replay.uninstall()

    @pytest.fixture
    def cube_config(
        self, cube_config: dict[str, Any], replay: nvml_replay.NvmlReplay, monkeypatch: pytest.MonkeyPatch
    ) -> dict[str, Any]:
        cube_config["CubeWorkbench"]["default_user"] = "alice"  # owns the workbench's own kernels
        cube_config["CubeWorkbench"]["gpu_quota_per_user"] = 2
        cube_config["CubeGPU"] = {"cache_seconds": 0, "sample_seconds": 0.3}
        # The local backend hands out the GPUs NVML counts; the replay has two.
        monkeypatch.setattr(gpus, "nvml_device_count", lambda: 2)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        return cube_config

    async def test_gpu_memory_of_real_kernels_is_attributed_to_their_notebooks(
        self, api: Any, cube_app: Any, jp_fetch: Fetch, replay: nvml_replay.NvmlReplay
    ) -> None:
        # A kernel of the workbench server itself (admins may start kernels there).
        response = await jp_fetch(
            "api",
            "sessions",
            method="POST",
            headers={"kubeflow-userid": "root-admin", **XSRF},
            body=json.dumps({"path": "work/train.ipynb", "type": "notebook", "kernel": {"name": "python3"}}),
        )
        central_id = json.loads(response.body)["kernel"]["id"]
        central_pid = cube_app.kernel_manager.get_kernel(central_id).provisioner.pid

        # A kernel in alice's child notebook server, started through that server's own API.
        code, created = await api("POST", "notebooks", body={"name": "nb1", "profile": "gpu"})
        assert code == 201, created
        backend = cube_app.web_app.settings["cube_notebooks"].backend
        await backend.wait_until_ready("alice", "nb1", timeout=90)
        upstream = backend.upstream("alice", "nb1")
        child = await AsyncHTTPClient().fetch(
            f"http://{upstream.host}:{upstream.port}{upstream.base_url}api/sessions",
            method="POST",
            headers={"Authorization": f"token {upstream.token}"},
            body=json.dumps({"path": "analysis.ipynb", "type": "notebook", "kernel": {"name": "python3"}}),
            request_timeout=60,
        )
        child_id = json.loads(child.body)["kernel"]["id"]
        server_pid = backend.state.get("alice", "nb1").pid
        found = await wait_until_async(
            lambda: kernel_pids(psutil.Process(server_pid).children(recursive=True)),
            60,
            "the child's kernel process",
            until=lambda pids: child_id in pids,
            interval=0.2,
        )
        child_pid = found[child_id]

        # Recorded PID 41234 holds memory on both GPUs, 52001 on GPU 1: now they are these kernels.
        replay.pid_map.update({41234: central_pid, 52001: child_pid})

        code, body = await get_gpu(api)
        assert code == 200 and body["available"] is True and body["source"] == "nvml"
        assert [d["uuid"] for d in body["devices"]] == [GPU0, GPU1]
        kernels = {k["kernel_id"]: k for k in body["kernels"]}
        assert set(kernels) == {central_id, child_id}
        assert kernels[central_id]["notebook_path"] == "work/train.ipynb"
        assert kernels[central_id]["server"] == "workbench"
        assert kernels[central_id]["gpus"] == [GPU0, GPU1]
        assert kernels[central_id]["memory_used_mib"] == (19864223744 + 536870912) / MIB
        assert kernels[child_id]["notebook_path"] == "analysis.ipynb"
        assert kernels[child_id]["server"] == "alice/nb1"
        assert kernels[child_id]["pids"] == [child_pid] and kernels[child_id]["gpus"] == [GPU1]
        assert kernels[child_id]["memory_used_mib"] == 74088185856 / MIB
        on_gpu1 = {p["pid"]: p for p in body["devices"][1]["processes"]}
        assert on_gpu1[child_pid]["kernel_id"] == child_id and on_gpu1[child_pid]["note"] is None
        assert body["quota"] == {
            "used": 1,
            "limit": 2,
            "holders": [{"kind": "notebook", "name": "nb1", "gpus": 1}],
            "queued": 0,
            "queued_jobs": [],
        }

        # bob sees the GPUs, not alice's notebooks; an admin may ask for everyone's.
        code, bob = await get_gpu(api, as_user="bob")
        assert code == 200 and bob["kernels"] == []
        hidden = [p for d in bob["devices"] for p in d["processes"] if p["pid"] in (central_pid, child_pid)]
        assert len(hidden) == 3
        assert all(p["kernel_id"] is None and p["note"] == OTHER_USERS_KERNEL for p in hidden)
        assert bob["quota"]["used"] == 0
        code, admin = await get_gpu(api, as_user="root-admin", all="1")
        assert {k["kernel_id"] for k in admin["kernels"]} == {central_id, child_id}

        # The server's sampler keeps history per GPU and per kernel.

        async def history() -> dict[tuple[str, str], list[Any]]:
            code, body = await get_gpu(api, history="600")
            assert code == 200, body
            return {(s["key"], s["metric"]): s["points"] for s in body["history"]}

        series = await wait_until_async(
            history,
            30,
            "two samples of the kernel's history",
            until=lambda found: len(found.get((f"kernel:{child_id}", "memory_used_mib"), [])) >= 2,
            interval=0.3,
        )
        points = series[(f"kernel:{child_id}", "memory_used_mib")]
        assert all(value == 74088185856 / MIB for _, value in points)
        assert len(series[(f"gpu:{GPU0}", "utilization_pct")]) >= 2
        code, short = await get_gpu(api, history="0")
        assert short["history"] == []

        assert (await api("DELETE", "notebooks/nb1"))[0] == 204


class TestQueuedGpuDemand:
    """The caller's queued GPU jobs beside what they hold, from the local training queue (this machine
    has no GPU: the job backend is told it has two; the report itself says "No GPU visible")."""

    @pytest.fixture
    def cube_config(self, cube_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
        cube_config["CubeWorkbench"]["gpu_quota_per_user"] = 1
        cube_config["CubeGPU"] = {"cache_seconds": 0}
        monkeypatch.setattr(gpus, "nvml_device_count", lambda: 2)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        return cube_config

    async def test_queued_jobs_and_the_gpus_they_ask_for_show_beside_those_held(
        self, api: Any, cube_app: Any
    ) -> None:
        def job(name: str) -> dict[str, Any]:
            return {
                "kind": "training",
                "spec": {
                    "name": name,
                    "framework": "pytorch",
                    "replicas": {"master": {"replicas": 1, "resources": {"gpu": 1}}},
                    "command": [sys.executable, "-c", "import time; time.sleep(60)"],
                },
            }

        try:
            code, held = await api("POST", "jobs", body=job("holder"))
            assert code == 201 and held["phase"] != "Queued", held
            for name in ("next", "after"):  # past alice's quota of 1: they wait their turn
                code, queued = await api("POST", "jobs", body=job(name))
                assert code == 201 and queued["phase"] == "Queued", queued

            code, body = await get_gpu(api)
            assert code == 200
            quota = body["quota"]
            assert (quota["used"], quota["limit"], quota["queued"]) == (1, 1, 2)
            assert quota["holders"] == [{"kind": "job", "name": "holder", "gpus": 1}]
            assert [(j["name"], j["gpus"], j["position"]) for j in quota["queued_jobs"]] == [
                ("next", 1, 1),
                ("after", 1, 2),
            ]
            assert "gpu_quota_per_user" in quota["queued_jobs"][0]["reason"]
            code, bob = await get_gpu(api, as_user="bob")  # only the caller's own queue
            assert (bob["quota"]["queued"], bob["quota"]["queued_jobs"]) == (0, [])

            assert (await api("DELETE", "jobs/next"))[0] == 204  # deleted while queued: demand gone
            code, body = await get_gpu(api)
            assert body["quota"]["queued"] == 1
            assert [j["name"] for j in body["quota"]["queued_jobs"]] == ["after"]
        finally:
            backend = cube_app.web_app.settings["cube_jobs"].backend
            for leftover in backend.list(None):
                await backend.delete(leftover.user, leftover.name)


# -- the kubernetes backend, KMock + a real Prometheus -------------------------------------------------


class TestClusterPods:
    @pytest.fixture
    def cluster(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jp_asyncio_loop: asyncio.AbstractEventLoop
    ) -> Iterator[str]:
        """KMock serving the Kubernetes API (on the server's loop) on a port a kubeconfig names."""
        port = free_port()
        emulator = make_emulator()
        server = kmock_lib.Server(emulator, port=port)
        jp_asyncio_loop.run_until_complete(emulator.__aenter__())
        jp_asyncio_loop.run_until_complete(server.__aenter__())
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        yield f"http://127.0.0.1:{port}"
        jp_asyncio_loop.run_until_complete(server.__aexit__(None, None, None))
        jp_asyncio_loop.run_until_complete(emulator.__aexit__(None, None, None))

    @pytest.fixture
    def cube_config(self, cube_config: dict[str, Any], cluster: str, prometheus_url: str) -> dict[str, Any]:  # noqa: F811
        cube_config["CubeWorkbench"]["backend"] = "kubernetes"
        cube_config["CubeWorkbench"]["gpu_quota_per_user"] = 2
        cube_config["CubeGPU"] = {"prometheus_url": prometheus_url, "idle_warning_seconds": 0}
        return cube_config

    @pytest.fixture
    def cube_app(self, jp_serverapp: Any, jp_asyncio_loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
        """Started as the conftest does. The emulator serves no Argo, training-operator, Katib or
        KServe resources: their informers' first-sync waits are cut to 1 s. The informers stop
        before the emulator goes."""
        (app,) = jp_serverapp.extension_manager.extension_apps["cube_jupyter_server"]
        cut_first_sync_waits(app.workbench)  # the composition root's
        jp_asyncio_loop.run_until_complete(jp_serverapp.extension_manager.start_all_extensions())
        yield jp_serverapp
        jp_asyncio_loop.run_until_complete(
            asyncio.wait_for(jp_serverapp.extension_manager.stop_all_extensions(), 30)
        )

    async def test_users_see_their_own_pods_and_admins_all(self, api: Any) -> None:
        await wait_until_async(
            lambda: api("GET", "notebooks"),
            30,
            "the notebooks API to answer",
            until=lambda answer: answer[0] == 200,
            interval=0.3,
        )
        # alice's notebook server `alice-nb` runs as pod alice-nb-0, which DCGM reports on GPU 0.
        code, created = await api("POST", "notebooks", body={"name": "alice-nb", "profile": "gpu"})
        assert code == 201, created

        code, alice = await get_gpu(api, history="60")
        assert code == 200 and alice["source"] == "prometheus" and alice["available"] is True
        assert {d["namespace"] for d in alice["devices"]} == {"cube-alice"}
        pods = {p["pod"]: p for p in alice["pods"]}
        assert set(pods) == {"alice-nb-0", "resnet-ddp-worker-0"}
        assert pods["alice-nb-0"]["kind"] == "notebook" and pods["alice-nb-0"]["owner"] == "alice"
        assert pods["alice-nb-0"]["utilization_pct"] == 37 and pods["alice-nb-0"]["memory_used_mib"] == 20112
        assert pods["resnet-ddp-worker-0"]["kind"] == "job"
        assert {s["key"] for s in alice["history"]} <= {
            "gpu:GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",
            "gpu:GPU-1b2c3d4e-0000-1111-2222-333344445555",
            "pod:cube-alice/alice-nb-0",
            "pod:cube-alice/resnet-ddp-worker-0",
        }
        assert alice["quota"] == {
            "used": 1,
            "limit": 2,
            "holders": [{"kind": "notebook", "name": "alice-nb", "gpus": 1}],
            "queued": 0,
            "queued_jobs": [],
        }

        code, bob = await get_gpu(api, as_user="bob")
        assert [(p["pod"], p["kind"]) for p in bob["pods"]] == [("bob-lab-0", "other")]
        assert bob["quota"]["used"] == 0
        code, error = await get_gpu(api, as_user="bob", all="1")
        assert code == 403 and error["field"] == "all"
        code, carol = await get_gpu(api, as_user="carol")
        assert code == 200 and carol["available"] is False and "cube-carol" in carol["message"]

        code, admin = await get_gpu(api, as_user="root-admin", all="1", history="0")
        assert code == 200 and len(admin["devices"]) == 4
        kinds = {p["pod"]: (p["kind"], p["owner"]) for p in admin["pods"]}
        assert kinds == {
            "alice-nb-0": ("notebook", "alice"),
            "resnet-ddp-worker-0": ("job", "alice"),  # in alice's namespace
            "bob-lab-0": ("other", None),
        }

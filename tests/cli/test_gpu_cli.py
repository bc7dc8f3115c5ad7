"""`cube-jupyter gpu`, run as a user runs it: a subprocess, on this GPU-less machine and against a real
Prometheus scraping the DCGM exporter sample page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cube_jupyter.cli import main
from tests.gpu import nvml_replay
from tests.gpu.prometheus_server import dcgm_prometheus, prometheus_url  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(120)
RECORDING = Path(__file__).resolve().parents[1] / "data" / "nvml" / "a100x2-processes.json"


def cube_gpu(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cube_jupyter.cli", "gpu", *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=cwd, check=False)


def test_no_gpu_visible_here(tmp_path: Path) -> None:
    table = cube_gpu(cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("No GPU visible") and table.stderr == ""
    as_json = cube_gpu("--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert body["available"] is False and body["source"] == "nvml"
    assert body["message"].startswith("No GPU visible") and body["devices"] == []


def test_cluster_gpus_as_json(tmp_path: Path, prometheus_url: str) -> None:  # noqa: F811
    result = cube_gpu("--json", "--prometheus", prometheus_url, "--history", "30", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["source"] == "prometheus" and body["available"] is True
    devices = {d["uuid"]: d for d in body["devices"]}
    assert len(devices) == 4
    gpu0 = devices["GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"]
    assert (gpu0["utilization_pct"], gpu0["memory_used_mib"], gpu0["temperature_c"]) == (37, 20112, 61)
    assert (gpu0["namespace"], gpu0["pod"], gpu0["host"]) == ("cube-alice", "alice-nb-0", "gpu-node-1")
    assert {(p["namespace"], p["pod"], p["kind"]) for p in body["pods"]} == {
        ("cube-alice", "alice-nb-0", "other"),
        ("cube-alice", "resnet-ddp-worker-0", "job"),
        ("cube-bob", "bob-lab-0", "other"),
    }
    keys = {s["key"] for s in body["history"]}
    assert "gpu:GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52" in keys and "pod:cube-bob/bob-lab-0" in keys


def test_cluster_gpus_as_a_table_from_the_config_file(tmp_path: Path, prometheus_url: str) -> None:  # noqa: F811
    config = tmp_path / "jupyter_server_config.py"
    config.write_text(f"c.CubeGPU.prometheus_url = {prometheus_url!r}\n")
    result = cube_gpu("--config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "HELD", "BY"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {f"gpu-node-1:{i}" for i in range(4)}
    assert "NVIDIA A100-SXM4-80GB" in rows["gpu-node-1:0"]
    assert "[####------]  37 %" in rows["gpu-node-1:0"] and "19.6 GiB / 79.1 GiB" in rows["gpu-node-1:0"]
    assert rows["gpu-node-1:0"].rstrip().endswith("cube-alice/alice-nb-0")
    assert "[##########]  96 %" in rows["gpu-node-1:1"]
    assert rows["gpu-node-1:3"].rstrip().endswith("(not allocated)")


def test_unreachable_prometheus_exits_nonzero_without_a_traceback(tmp_path: Path, refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"
    result = cube_gpu("--prometheus", url, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: Prometheus at {url} is unreachable")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--prometheus", "prometheus:9090"), "error: --prometheus 'prometheus:9090' must be an http(s) URL"),
        (("--history", "-1"), "error: --history must be between 0 and 86400 seconds"),
    ],
)
def test_bad_arguments_name_the_flag(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = cube_gpu(*args, cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def kernel_process() -> Iterator[tuple[int, str]]:
    """A real process launched as Jupyter launches a kernel (its connection file in argv)."""
    kernel_id = str(uuid.uuid4())
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "-f", f"/tmp/kernel-{kernel_id}.json"]
    )
    yield proc.pid, kernel_id
    proc.kill()
    proc.wait()


def test_local_table_names_the_kernels_holding_memory(
    kernel_process: tuple[int, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process, with a REPLAY of two A100s' NVML readings (no GPU here): recorded PID 41234 is
    mapped onto a live kernel process, which the table names."""
    pid, kernel_id = kernel_process
    nvml_replay.install(RECORDING, pid_map={41234: pid})
    try:
        assert main(["gpu"]) == 0
    finally:
        nvml_replay.uninstall()
    out = capsys.readouterr().out
    rows = out.splitlines()
    assert rows[1].split()[:2] == ["0", "NVIDIA"] and "[####------]  37 %" in rows[1]
    assert f"  GPU 0  pid {pid}  18.5 GiB  kernel {kernel_id}" in rows
    assert f"  GPU 1  pid {pid}  512 MiB  kernel {kernel_id}" in rows
    assert f"  kernel {kernel_id[:8]}  kernel {kernel_id}: 19.0 GiB of GPU memory" in rows

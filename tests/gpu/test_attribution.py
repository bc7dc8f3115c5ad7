"""Attribution of GPU processes to kernels, over real processes and a real Jupyter server.

The GPU readings here are `GpuDevice` records naming live PIDs (this machine has no GPU); the
processes, their parent/child links, their owners and the Jupyter server's sessions are all real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cube_jupyter.gpu.attribution import (
    KernelProcess,
    attribute,
    discover_kernels,
    kernel_id_of,
    kernel_pids,
    server_kernels,
)
from cube_jupyter.gpu.model import GpuDevice, GpuProcess
from cube_jupyter.local.processes import LOOPBACK, free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

# A stand-in kernel: a process with a connection file in its argv, as Jupyter launches kernels, and
# one child (a DataLoader worker, say). It prints the child's PID and waits.
FAKE_KERNEL = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(300)\n"
)


def start_fake_kernel(tmp: Path, **popen: object) -> tuple[subprocess.Popen[str], str, int]:
    kernel_id = str(uuid.uuid4())
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_KERNEL, "-f", str(tmp / f"kernel-{kernel_id}.json")],
        stdout=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[call-overload]
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    return proc, kernel_id, child


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        for child in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
            child.kill()
        proc.kill()
        proc.wait()


def test_kernel_id_comes_from_the_connection_file() -> None:
    kid = "0d6c1f0e-3c4b-4d5e-9f8a-7b6c5d4e3f2a"
    assert kernel_id_of(["python", "-m", "ipykernel_launcher", "-f", f"/run/kernel-{kid}.json"]) == kid
    assert kernel_id_of(["python", f"--f=/tmp/kernel-{kid}.json"]) == kid
    assert kernel_id_of(["jupyter-console", "--existing", f"kernel-{kid}.json"]) is None
    assert kernel_id_of(["python", "train.py"]) is None


def test_processes_are_attributed_to_the_kernel_they_descend_from(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    kernel, kernel_id, worker = start_fake_kernel(tmp_path)
    other, other_id, _ = start_fake_kernel(tmp_path)
    processes.extend([kernel, other])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    found = kernel_pids()
    assert found[kernel_id] == kernel.pid and found[other_id] == other.pid

    # The kernel runs on both GPUs; its worker on the first.
    devices = [
        GpuDevice(
            index=0,
            uuid="GPU-0",
            utilization_pct=40.0,
            processes=(
                GpuProcess(pid=kernel.pid, used_memory_mib=1000.0),
                GpuProcess(pid=worker, used_memory_mib=500.0),
                GpuProcess(pid=os.getpid(), used_memory_mib=10.0),
                GpuProcess(pid=gone.pid, used_memory_mib=20.0),
            ),
        ),
        GpuDevice(
            index=1,
            uuid="GPU-1",
            utilization_pct=80.0,
            processes=(
                GpuProcess(pid=kernel.pid, used_memory_mib=None),  # NVML did not report its memory
                GpuProcess(pid=other.pid, used_memory_mib=30.0),
            ),
        ),
    ]
    ours = KernelProcess(kernel_id, kernel.pid, "work/train.ipynb", "alice/nb1")
    attributed, usage = attribute(devices, [ours])

    first, second = attributed
    on_kernel, on_worker, ourselves, vanished = first.processes
    for process in (on_kernel, on_worker):
        assert (process.kernel_id, process.notebook_path, process.server) == (
            kernel_id,
            "work/train.ipynb",
            "alice/nb1",
        )
        assert process.note is None
    assert ourselves.kernel_id is None
    assert ourselves.note == f"not a Jupyter kernel: {psutil.Process().name()}"
    assert vanished.note == (
        f"PID {gone.pid} is not visible in this PID namespace (the GPU is shared with another container)"
    )
    kernel_again, other_kernel = second.processes
    assert kernel_again.kernel_id == kernel_id
    assert other_kernel.note == f"a Jupyter kernel of another server (kernel {other_id})"
    # Readings themselves are untouched.
    assert [p.used_memory_mib for p in first.processes] == [1000.0, 500.0, 10.0, 20.0]

    (kernel_usage,) = usage
    assert kernel_usage.kernel_id == kernel_id
    assert kernel_usage.notebook_path == "work/train.ipynb" and kernel_usage.server == "alice/nb1"
    assert kernel_usage.pids == tuple(sorted((kernel.pid, worker)))
    assert kernel_usage.gpus == ("GPU-0", "GPU-1")
    assert kernel_usage.memory_used_mib == 1500.0
    assert kernel_usage.utilization_pct == 60.0


@pytest.mark.skipif(os.getuid() != 0, reason="starting a process as another user needs root")
def test_a_process_of_another_user_says_so(processes: list[subprocess.Popen[str]]) -> None:
    proc = subprocess.Popen(["sleep", "300"], user="nobody", cwd="/", text=True)
    processes.append(proc)
    devices = [GpuDevice(index=0, uuid="GPU-0", processes=(GpuProcess(pid=proc.pid, used_memory_mib=1.0),))]
    (device,), usage = attribute(devices, [])
    assert device.processes[0].note == "process of another user (nobody)"
    assert usage == []


@pytest.fixture
def jupyter_server(tmp_path: Path) -> Iterator[tuple[str, str, int, Path]]:
    """A real `jupyter server` with its own runtime dir, answering: (url, token, pid, runtime dir).

    It writes its runtime file before it binds its port (the bind waits for its event loop), so
    ready means answering `api/status`, not having written the file."""
    runtime = tmp_path / "runtime"
    root = tmp_path / "root"
    (root / "work").mkdir(parents=True)
    port, token = free_port(), uuid.uuid4().hex
    argv = [
        sys.executable,
        "-m",
        "jupyter",
        "server",
        "--no-browser",
        f"--ServerApp.ip={LOOPBACK}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
    ]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime)}
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{LOOPBACK}:{port}/"
    try:

        def answers() -> bool:
            assert server.poll() is None, f"jupyter server exited: {log_path.read_text()[-3000:]}"
            status = urllib.request.Request(f"{url}api/status", headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(status, timeout=10) as response:
                return response.status == 200 and bool(list(runtime.glob("jpserver-*.json")))

        wait_until(answers, 60, "the jupyter server to answer", ignoring=(OSError,), interval=0.1)
        yield url, token, server.pid, runtime
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _start_session(url: str, token: str, path: str) -> str:
    body = json.dumps({"path": path, "type": "notebook", "name": "", "kernel": {"name": "python3"}})
    request = urllib.request.Request(
        f"{url}api/sessions",
        data=body.encode(),
        method="POST",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["kernel"]["id"])


def test_kernels_of_a_real_jupyter_server_with_their_notebooks(
    jupyter_server: tuple[str, str, int, Path],
) -> None:
    url, token, server_pid, runtime = jupyter_server
    kernel_id = _start_session(url, token, "work/train.ipynb")
    pids = wait_until(
        lambda: kernel_pids(psutil.Process(server_pid).children(recursive=True)),
        30,
        f"the process of kernel {kernel_id}",
        until=lambda pids: kernel_id in pids,
        interval=0.1,
    )
    kernel_pid = pids[kernel_id]
    assert "ipykernel" in " ".join(psutil.Process(kernel_pid).cmdline())

    (found,) = server_kernels(url, token, server_pid, "alice/nb1")
    assert found == KernelProcess(kernel_id, kernel_pid, "work/train.ipynb", "alice/nb1")

    discovered = {k.kernel_id: k for k in discover_kernels(runtime)}
    (runtime_file,) = runtime.glob("jpserver-*.json")
    listed_url = json.loads(runtime_file.read_text())["url"]  # as the server names itself
    assert discovered[kernel_id] == KernelProcess(kernel_id, kernel_pid, "work/train.ipynb", listed_url)

    # A wrong token: the kernel is still found, without its notebook; nothing raises.
    (unnamed,) = server_kernels(url, "wrong-token", server_pid, "alice/nb1")
    assert unnamed.kernel_id == kernel_id and unnamed.notebook_path is None
    assert server_kernels(url, token, 2**22 + 12345, "gone") == []

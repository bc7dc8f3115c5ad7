"""Kernels forked from the pre-imported fork server behave as spawned ones do: same working
directory, environment, `sys.path` and argv; each its own process group; nothing shared between
two of them; a kernel that crashes does not take the server down, a server that dies is replaced,
and the server and its kernels go when the process that started them is killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.manager import KernelManager

from cube_jupyter.local.forked_kernels import ForkedKernelManager
from cube_jupyter.local.forks import KERNEL_MODULES, Forks, ModuleCommand, module_command
from cube_jupyter.local.kernel_sockets import kernel_transport
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

PROBE = textwrap.dedent(
    """
    import json, os, sys
    print(json.dumps({
        "cwd": os.getcwd(), "path": sys.path, "argv": sys.argv[1:2], "env": os.environ.get("PROBE"),
        "pid": os.getpid(), "pgid": os.getpgid(0), "ppid": os.getppid(),
        "parent_pid": os.environ.get("JPY_PARENT_PID"), "mine": globals().get("mine"),
        "marked": getattr(json, "marked_by_another_kernel", None),
    }))
    """
)


@pytest.fixture
def forks(tmp_path: Path) -> Iterator[Forks]:
    made = Forks(tmp_path / "forks", preload=KERNEL_MODULES)
    yield made
    made.close()


def started(km: KernelManager, cwd: Path, **env: str) -> KernelManager:
    km.start_kernel(cwd=str(cwd), env={**os.environ, **env})
    return km


def forked(forks: Forks, cwd: Path, **env: str) -> KernelManager:
    return started(ForkedKernelManager(forks, kernel_name="python3", **kernel_transport()), cwd, **env)


def execute(km: KernelManager, code: str) -> str:
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        out: list[str] = []
        reply = client.execute_interactive(
            code, timeout=60, output_hook=lambda m: out.append(m["content"].get("text", ""))
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)
    finally:
        client.stop_channels()


def probe(km: KernelManager) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(execute(km, PROBE))
    return result


def test_only_module_runs_are_forked() -> None:
    assert module_command(
        ["/v/bin/python", "-Xfrozen_modules=off", "-W", "ignore", "-m", "ipykernel_launcher", "-f", "c.json"]
    ) == ModuleCommand(
        ("/v/bin/python", "-Xfrozen_modules=off", "-W", "ignore"), "ipykernel_launcher", ["-f", "c.json"]
    )
    assert module_command(["/usr/bin/R", "--slave", "-e", "IRkernel::main()", "--args", "c.json"]) is None
    assert module_command(["python", "script.py", "-m", "ipykernel_launcher"]) is None
    assert module_command(["python", "-c", "pass", "-m", "ipykernel_launcher"]) is None
    assert module_command(["conda", "run", "python", "-m", "ipykernel_launcher"]) is None


def test_a_forked_kernel_runs_where_and_as_a_spawned_one_does(forks: Forks, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    extra = str(tmp_path / "lib")
    env = {"PROBE": "from-the-step", "PYTHONPATH": extra}
    spawned_km = started(KernelManager(kernel_name="python3", **kernel_transport()), work, **env)
    forked_km = forked(forks, work, **env)
    try:
        spawned, fork = probe(spawned_km), probe(forked_km)
        assert forked_km.provisioner is not None and forked_km.provisioner.pid == fork["pid"]
        server = forks._servers[next(iter(forks._servers))]
        assert fork["ppid"] == server.process.pid != os.getpid()  # forked, not spawned
        for key in ("cwd", "path", "argv", "env"):
            assert fork[key] == spawned[key], key
        assert fork["cwd"] == str(work) and fork["path"][0] == extra
        assert fork["pgid"] == fork["pid"]  # a group of its own, signalled as a spawned kernel's is
        assert fork["parent_pid"] == str(fork["ppid"])
        shown = psutil.Process(fork["pid"]).cmdline()  # as `ps` shows a spawned one, not its server's
        assert shown == psutil.Process(spawned["pid"]).cmdline()[:3] + shown[3:]
        assert shown[1:4] == ["-m", "ipykernel_launcher", "-f"]
    finally:
        spawned_km.shutdown_kernel(now=True)
        forked_km.shutdown_kernel(now=True)


def test_two_forked_kernels_share_nothing(forks: Forks, tmp_path: Path) -> None:
    first, second = forked(forks, tmp_path), forked(forks, tmp_path)
    try:
        execute(first, "mine = 41\nimport json\njson.marked_by_another_kernel = True")
        assert probe(first)["mine"] == 41 and probe(first)["marked"] is True
        assert probe(second)["mine"] is None and probe(second)["marked"] is None
        draws = [execute(km, "import random\nprint(random.random())") for km in (first, second)]
        assert draws[0] != draws[1]  # each fork reseeds
    finally:
        first.shutdown_kernel(now=True)
        second.shutdown_kernel(now=True)


def test_a_crashing_kernel_is_replaced_and_a_dead_server_restarted(forks: Forks, tmp_path: Path) -> None:
    crashing = forked(forks, tmp_path)
    server = next(iter(forks._servers.values()))
    client = crashing.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    client.execute("import os; os._exit(3)")
    wait_until(lambda: not crashing.is_alive(), 30, "the crashed kernel seen as dead")
    client.stop_channels()
    crashing.shutdown_kernel(now=True)
    assert server.process.poll() is None  # the server outlives its kernels

    after_crash = forked(forks, tmp_path)
    assert probe(after_crash)["mine"] is None
    after_crash.shutdown_kernel(now=True)

    server.process.kill()  # say a step killed it
    server.process.wait()
    replaced = forked(forks, tmp_path)
    try:
        new_server = next(iter(forks._servers.values()))
        assert new_server is not server and probe(replaced)["ppid"] == new_server.process.pid
    finally:
        replaced.shutdown_kernel(now=True)


def test_interrupt_and_shutdown_reach_a_forked_kernel(forks: Forks, tmp_path: Path) -> None:
    km = forked(forks, tmp_path)
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        msg_id = client.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(60)")
        while client.get_iopub_msg(timeout=30)["content"].get("text") != "sleeping\n":
            pass  # busy, the input echoed: the sleep is under way once its line is out
        km.interrupt_kernel()
        while True:
            reply = client.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        assert reply["content"]["ename"] == "KeyboardInterrupt"
    finally:
        client.stop_channels()
    pid = km.provisioner.pid
    km.shutdown_kernel(now=True)
    assert not km.is_alive()
    wait_until(lambda: not psutil.pid_exists(pid), 10, "the kernel reaped by its server")


def test_the_server_and_its_kernels_go_when_their_owner_is_killed(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import json, os, sys, time
                from pathlib import Path
                from cube_jupyter.local.forked_kernels import ForkedKernelManager
                from cube_jupyter.local.forks import Forks
                from cube_jupyter.local.kernel_sockets import kernel_transport
                forks = Forks(Path({str(tmp_path / "forks")!r}))
                km = ForkedKernelManager(forks, kernel_name="python3", **kernel_transport())
                km.start_kernel(cwd={str(tmp_path)!r})
                server = next(iter(forks._servers.values()))
                print(json.dumps([server.process.pid, km.provisioner.pid]), flush=True)
                time.sleep(600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    server_pid, kernel_pid = json.loads(owner.stdout.readline())
    owner.send_signal(signal.SIGKILL)
    owner.wait()

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(lambda: gone(server_pid) and gone(kernel_pid), 30, "the fork server and its kernel gone")


def test_a_client_that_says_nothing_does_not_stall_the_server(forks: Forks, tmp_path: Path) -> None:
    first = forked(forks, tmp_path)
    first.shutdown_kernel(now=True)
    server = next(iter(forks._servers.values()))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(str(server.path))  # and never sends its request line
        after = forked(forks, tmp_path)  # answered once the server gives up on the silent one
        try:
            assert probe(after)["mine"] is None
        finally:
            after.shutdown_kernel(now=True)
    assert server.process.poll() is None

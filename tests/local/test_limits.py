"""CPU and memory limits of local children, measured on real processes: an allocation past the memory
limit fails, a busy child is throttled or pinned, and what a child starts is held to the same limits —
by this machine's cgroups where it has them, and by the rlimit and affinity fallback everywhere."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

from cube_jupyter.errors import BackendUnavailable
from cube_jupyter.local import limits, processes
from cube_jupyter.local.limits import Controller, Limiter, Limits, Method
from cube_jupyter.notebooks import enforcement
from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
from cube_jupyter.notebooks.spec import NotebookSpec, Profile
from tests.local.support import KERNEL_V1, execute, make_settings

pytestmark = pytest.mark.timeout(60)
MIB = 1 << 20
Backends = Callable[..., LocalNotebookBackend]
FALLBACK = Limiter(memory=None, cpu=None, cores=limits.available_cores(), ram=limits.machine_ram())
# A child that takes `held` MiB, then runs a grandchild that takes `more` MiB, and reports both.
TREE = """
import json, subprocess, sys
held, more = int(sys.argv[1]), int(sys.argv[2])
kept = b"x" * (held << 20)
grandchild = subprocess.run([sys.executable, "-c", f"b = b'x' * ({more} << 20)"], capture_output=True)
print(json.dumps({"grandchild": grandchild.returncode}), flush=True)
"""


def machine_cgroups() -> Limiter:
    found = limits.limiter()
    if found.memory is None or found.cpu is None:
        pytest.skip("this machine lets this process make no memory and cpu cgroups (the fallback is tested)")
    return found


@pytest.fixture(params=["cgroup", "fallback"])
def limiter(request: pytest.FixtureRequest) -> Limiter:
    return machine_cgroups() if request.param == "cgroup" else FALLBACK


def run(limiter: Limiter, limit: Limits, tmp_path: Path, *argv: str) -> tuple[int, str]:
    """Run a Python child under `limit` as the backends do; its exit code and its log."""
    log = tmp_path / "child.log"
    child = processes.spawn(
        [sys.executable, *argv], os.environ, tmp_path, log, "limits test", preexec=limiter.preexec(limit)
    )
    try:
        code = child.wait(timeout=50)
    finally:
        limiter.release()
    return code, log.read_text()


def test_memory_past_the_limit_fails_and_the_tree_shares_it_under_a_cgroup(
    limiter: Limiter, tmp_path: Path
) -> None:
    limit = Limits(memory_bytes=200 * MIB, cpu_cores=len(limiter.cores))
    code, _ = run(limiter, limit, tmp_path, "-c", "b = b'x' * (32 << 20)")
    assert code == 0  # well within: the limit is not a broken child
    code, log = run(limiter, limit, tmp_path, "-c", "b = b'x' * (300 << 20)")
    # Killed by the cgroup's OOM killer, or refused by RLIMIT_DATA with a MemoryError.
    assert (code, "MemoryError" in log) == ((-9, False) if limiter.memory else (1, True)), log

    # 80 MiB held by the child and 140 MiB by its grandchild: past 200 MiB only together.
    code, log = run(limiter, limit, tmp_path, "-c", TREE, "80", "140")
    assert code == 0, log
    grandchild = json.loads(log.splitlines()[-1])["grandchild"]
    assert grandchild == (-9 if limiter.memory_method == Method.CGROUP else 0), log


def test_cpu_quota_throttles_a_busy_child_and_its_cgroup_goes_with_it(tmp_path: Path) -> None:
    limiter = machine_cgroups()
    assert limiter.cpu is not None
    # The child reads its own cgroup's counters once it has asked for 50 ms of CPU.
    burn = (
        "import os, sys, time\n"
        "while time.process_time() < 0.05: pass\n"
        "leaf = os.path.join(sys.argv[1], str(os.getpid()))\n"
        "print(leaf)\n"
        "print(open(os.path.join(leaf, 'cpu.stat')).read())"
    )
    code, log = run(
        limiter, Limits(memory_bytes=1 << 30, cpu_cores=0.1), tmp_path, "-c", burn, str(limiter.cpu.group)
    )
    assert code == 0, log
    lines = [line for line in log.splitlines()[1:] if line]  # after the start's separator
    stat = dict(line.split() for line in lines[1:])
    assert int(stat["nr_throttled"]) > 0, stat  # it asked for more than 10 ms per 100 ms
    assert not Path(lines[0]).exists()  # released once the child was gone


def test_affinity_pins_a_child_and_what_it_starts_to_whole_cores(tmp_path: Path) -> None:
    if len(FALLBACK.cores) < 2:
        pytest.skip("one core: nothing to pin to")
    report = (
        "import os, subprocess, sys\n"
        "mine = len(os.sched_getaffinity(0))\n"
        "theirs = subprocess.run([sys.executable, '-c', 'import os; print(len(os.sched_getaffinity(0)))'],"
        " capture_output=True, text=True).stdout.strip()\n"
        "print(mine, theirs)"
    )
    code, log = run(FALLBACK, Limits(memory_bytes=1 << 30, cpu_cores=0.5), tmp_path, "-c", report)
    assert code == 0 and log.splitlines()[-1] == "1 1", log  # 500m is one whole core


def test_limits_that_cannot_be_applied_fail_the_start_and_say_why(
    tmp_path: Path, state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    broken = Limiter(
        memory=Controller("memory", 1, tmp_path / "no-such-hierarchy" / limits.GROUP),
        cpu=None,
        cores=FALLBACK.cores,
        ram=FALLBACK.ram,
    )
    with pytest.raises(subprocess.SubprocessError):
        run(broken, Limits(memory_bytes=1 << 30, cpu_cores=1), tmp_path, "-c", "pass")
    assert "could not apply the limits" in (tmp_path / "child.log").read_text()

    settings = make_settings(state_dir)
    backend = backends(settings, limiter=broken)
    with pytest.raises(
        BackendUnavailable, match="could not start server 'nb1': cube-jupyter: could not apply"
    ):
        loop.run_until_complete(
            backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile(None)))
        )
    assert backend.list_servers(None) == []  # nothing left half-created


def test_cgroups_are_looked_for_under_our_own_v2_first_then_v1() -> None:
    mountinfo = (
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu\\040x rw - cgroup cgroup rw,cpu,cpuacct\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    membership = "4:memory:/svc\n1:cpu,cpuacct:/docker/abc/job\n0::/svc\n"
    assert limits.candidates("memory", mountinfo, membership) == [
        Controller("memory", 2, Path("/sys/fs/cgroup/unified/svc", limits.GROUP)),
        Controller("memory", 1, Path("/sys/fs/cgroup/memory/svc", limits.GROUP)),
    ]
    # The cpu hierarchy mounts /docker/abc (at a path with a space): our /docker/abc/job is `job` there.
    assert limits.candidates("cpu", mountinfo, membership)[1] == Controller(
        "cpu", 1, Path("/sys/fs/cgroup/cpu x/job", limits.GROUP)
    )
    # A cgroup outside what is mounted (another namespace's) is never used; nor is a hierarchy
    # without the controller.
    elsewhere = "4:memory:/svc\n1:cpu,cpuacct:/elsewhere\n"
    assert limits.candidates("cpu", mountinfo, elsewhere) == []
    assert limits.candidates("pids", mountinfo, membership) == [
        Controller("pids", 2, Path("/sys/fs/cgroup/unified/svc", limits.GROUP))
    ]


def test_no_cgroups_to_read_means_the_fallback(tmp_path: Path) -> None:
    assert limits.probe(tmp_path / "none", tmp_path / "none") == FALLBACK


# Run in a server's kernel: two allocations in processes it starts, and the kernel's own limits.
KERNEL_PROBE = """
import json, os, resource, subprocess, sys
def allocate(mib):
    return subprocess.run([sys.executable, "-c", f"b = b'x' * ({mib} << 20)"], capture_output=True).returncode
json.dumps({
    "within": allocate(32),
    "past": allocate(600),
    "cgroup": open("/proc/self/cgroup").read(),
    "cores": len(os.sched_getaffinity(0)),
    "data": resource.getrlimit(resource.RLIMIT_DATA)[0],
})
"""


def test_a_servers_kernels_live_under_its_profiles_limits(
    state_dir: Path, backends: Backends, loop: asyncio.AbstractEventLoop
) -> None:
    profile = {"name": "tiny", "image": "quay.io/jupyter/base-notebook", "cpu": "1", "memory": "400Mi"}
    settings = make_settings(state_dir, profiles=[profile])
    backend = backends(settings)
    limiter = backend.limiter

    async def run() -> dict[str, Any]:
        await backend.create_server(NotebookSpec("alice", "nb1", settings.notebooks.profile(None)))
        await backend.wait_until_ready("alice", "nb1", timeout=60)
        up = backend.upstream("alice", "nb1")
        assert up is not None
        base, auth = f"{up.host}:{up.port}{up.base_url}", {"Authorization": f"token {up.token}"}
        http = AsyncHTTPClient()
        created = await http.fetch(f"http://{base}api/kernels", method="POST", body="{}", headers=auth)
        kernel = json.loads(created.body)["id"]
        ws = await websocket_connect(
            HTTPRequest(f"ws://{base}api/kernels/{kernel}/channels", headers=auth), subprotocols=[KERNEL_V1]
        )
        try:
            return cast(dict[str, Any], json.loads(ast.literal_eval(await execute(ws, KERNEL_PROBE))))
        finally:
            ws.close()

    seen = loop.run_until_complete(asyncio.wait_for(run(), 90))
    assert seen["within"] == 0 and seen["past"] != 0, seen  # 600 MiB do not fit in 400 MiB
    record = backend.state.get("alice", "nb1")
    assert record is not None and record.pid
    leaves = {c.name: c.group / str(record.pid) for c in (limiter.memory, limiter.cpu) if c is not None}
    for controller, leaf in leaves.items():
        assert f":{controller}:" not in seen["cgroup"] or f"{limits.GROUP}/{record.pid}\n" in seen["cgroup"]
        assert leaf.is_dir()
    if limiter.memory is None:
        assert seen["data"] == 400 * MIB  # each process on its own
    else:
        memory = "memory.max" if limiter.memory.version == 2 else "memory.limit_in_bytes"
        assert (leaves["memory"] / memory).read_text().strip() == str(400 * MIB)
    if limiter.cpu is None:
        assert seen["cores"] == 1
    else:
        quota = "cpu.max" if limiter.cpu.version == 2 else "cpu.cfs_quota_us"
        assert (leaves["cpu"] / quota).read_text().split()[0] == "100000"  # of 100000 us: one core

    # What users are told is what was measured here.
    notes = backend.enforcement(settings.notebooks.profile(None)).notes
    assert ("shared by the server" in notes[1]) == (limiter.memory is not None), notes
    loop.run_until_complete(backend.delete_server("alice", "nb1"))
    assert not any(leaf.exists() for leaf in leaves.values())  # released with the server


def test_what_users_are_told_follows_how_the_machine_limits() -> None:
    profile = Profile.from_config({"name": "p", "image": "i", "cpu": "500m", "memory": "1536Mi", "gpu": 1}, 0)
    cgroup = Controller("cpu", 2, Path("/sys/fs/cgroup", limits.GROUP))
    two_cores = Limiter(memory=cgroup, cpu=cgroup, cores=(0, 1), ram=8 << 30)
    told = enforcement.on_this_machine(profile, two_cores)
    assert told.notes == (
        "Runs in this machine's Python environment; the image is not used.",
        "Memory: at most 1.5 GiB, shared by the server and everything it starts.",
        "CPU: at most 0.5 of this machine's 2 cores.",
        "GPU: 1, visible to this server only.",
    )
    assert (told.image, told.cpu, told.memory, told.gpu) == (False, True, True, True)

    # No cgroups: per process, and whole cores; a limit at what the machine has is none at all.
    fallback = enforcement.on_this_machine(profile, Limiter(None, None, cores=(0, 1), ram=8 << 30))
    assert fallback.notes[1:3] == (
        "Memory: at most 1.5 GiB per process.",
        "CPU: 1 of this machine's 2 cores.",
    )
    small_machine = enforcement.on_this_machine(profile, Limiter(None, None, cores=(0,), ram=1 << 30))
    assert small_machine.notes[1:3] == (
        "Memory: all of this machine's 1 GiB (the profile asks for 1.5 GiB).",
        "CPU: all of this machine's 1 core (the profile asks for 0.5).",
    )
    assert (small_machine.cpu, small_machine.memory) == (False, False)

    cluster = enforcement.on_cluster(profile)
    assert cluster.notes == (
        "Runs the image i.",
        "CPU: 0.5 core, requested and limited.",
        "Memory: 1.5 GiB, requested and limited.",
        "GPU: 1 × nvidia.com/gpu.",  # noqa: RUF001 (the panel's sign)
    )

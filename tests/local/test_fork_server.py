"""The fork server as any program's: a fork runs `python -m module args` in its own session, working
directory, environment and output, shows that command line in `ps` by the time its pid is known,
finishes its threads and has its exit code noted; a held fork runs nothing until its owner has
confined it, and nothing at all if that fails; with `keep`, forks outlive their server. The server
forks for its owner only, survives bad requests, holds no fork's files open in another, never forks
where preloading started threads or where the environment it imported under differs, and does not
outlive an owner that died while it imported."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cube_jupyter.local.fork_server import EXIT_NOTE
from cube_jupyter.local.forks import FORK_SERVER, ForkRequest, Forks
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

PREFIX = (sys.executable,)
PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    print("args", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("GREETING"), flush=True)
    print("path0", sys.path[0], flush=True)
    if sys.argv[1] == "wait":
        time.sleep(60)
    if sys.argv[1] == "thread":
        import threading
        threading.Thread(target=lambda: (time.sleep(0.3), print("worker finished", flush=True))).start()
    sys.exit(int(sys.argv[2]))
    """
)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "probe_program.py").write_text(PROGRAM)
    (lib / "threaded.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\n"
    )
    return lib


@pytest.fixture
def make_forks(tmp_path: Path) -> Iterator[list[Forks]]:
    made: list[Forks] = []
    yield made
    for forks in made:
        forks.close()


def forks_of(made: list[Forks], tmp_path: Path, **kwargs: object) -> Forks:
    forks = Forks(tmp_path / "forks", **kwargs)  # type: ignore[arg-type]
    made.append(forks)
    return forks


def fork(forks: Forks, lib: Path, cwd: Path, out: Path, *args: str, **extra: object) -> int:
    env = {**os.environ, "PYTHONPATH": str(lib), "GREETING": "hello"}
    with open(out, "ab") as log, open(os.devnull, "rb") as stdin:
        request = ForkRequest(
            "probe_program",
            args,
            str(cwd),
            env,
            title=f"{sys.executable} -m probe_program {' '.join(args)}",
            stdio=(stdin.fileno(), log.fileno(), log.fileno()),
            **extra,  # type: ignore[arg-type]
        )
        pid = forks.fork(PREFIX, env, lambda _server: request)
    assert pid is not None
    return pid


def test_a_fork_runs_its_module_where_and_as_asked(
    make_forks: list[Forks], program: Path, tmp_path: Path
) -> None:
    forks = forks_of(make_forks, tmp_path)
    out = tmp_path / "out.log"
    pid = fork(forks, program, tmp_path, out, "wait", "0")
    proc = psutil.Process(pid)
    assert proc.cmdline()[:4] == [sys.executable, "-m", "probe_program", "wait"]  # not its server's
    wait_until(lambda: "path0" in out.read_text(), 30, "the fork's first lines")
    assert os.getsid(pid) == pid
    text = out.read_text()
    assert f"args ['wait', '0'] cwd {tmp_path} env hello" in text
    assert f"path0 {tmp_path}" in text  # as `python -m` puts the working directory first
    proc.kill()
    wait_until(lambda: f"{EXIT_NOTE}-9" in out.read_text(), 10, "its exit code noted by its server")

    ended = tmp_path / "ended.log"
    fork(forks, program, tmp_path, ended, "exit", "7")
    wait_until(lambda: f"{EXIT_NOTE}7" in ended.read_text(), 10, "its exit code noted by its server")

    threaded = tmp_path / "threaded.log"
    fork(forks, program, tmp_path, threaded, "thread", "0")
    wait_until(lambda: EXIT_NOTE in threaded.read_text(), 10, "the threaded fork to end")
    assert "worker finished" in threaded.read_text()  # as a spawned one's interpreter waits for it


def test_a_held_fork_runs_only_once_confined(make_forks: list[Forks], program: Path, tmp_path: Path) -> None:
    forks = forks_of(make_forks, tmp_path)
    confined: list[int] = []
    out = tmp_path / "out.log"

    def confine(pid: int) -> None:
        assert out.read_text() == ""  # nothing of it ran yet
        confined.append(pid)

    pid = fork(forks, program, tmp_path, out, "exit", "0", confine=confine)
    assert confined == [pid]
    wait_until(lambda: f"{EXIT_NOTE}0" in out.read_text(), 10, "the confined fork to run and end")

    def refuse(pid: int) -> None:
        raise PermissionError("no cgroup for you")

    refused = tmp_path / "refused.log"
    with pytest.raises(PermissionError):
        fork(forks, program, tmp_path, refused, "exit", "0", confine=refuse)
    wait_until(lambda: EXIT_NOTE in refused.read_text(), 10, "the refused fork to end")
    assert "args" not in refused.read_text()  # it never ran its module
    assert f"{EXIT_NOTE}1" in refused.read_text()


def test_kept_forks_outlive_their_server(make_forks: list[Forks], program: Path, tmp_path: Path) -> None:
    kept = forks_of(make_forks, tmp_path, keep=True)
    pid = fork(kept, program, tmp_path, tmp_path / "kept.log", "wait", "0")
    kept.close()
    try:
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    finally:
        psutil.Process(pid).kill()

    owned = forks_of(make_forks, tmp_path)
    pid = fork(owned, program, tmp_path, tmp_path / "owned.log", "wait", "0")
    owned.close()
    wait_until(lambda: not psutil.pid_exists(pid), 10, "a fork of a server that keeps nothing, gone with it")
    assert not (tmp_path / "forks").exists()  # its sockets' folder, gone with the servers


def test_a_server_whose_preloading_starts_threads_never_forks(
    make_forks: list[Forks], program: Path, tmp_path: Path
) -> None:
    forks = forks_of(make_forks, tmp_path, preload=["threaded"])
    env = {**os.environ, "PYTHONPATH": str(program)}
    request = ForkRequest("probe_program", ["exit", "0"], str(tmp_path), env)
    assert forks.fork(PREFIX, env, lambda _server: request) is None  # to be spawned instead
    assert not forks.running(PREFIX)


def test_the_server_survives_bad_requests_and_forks_for_its_owner_only(
    make_forks: list[Forks], program: Path, tmp_path: Path
) -> None:
    forks = forks_of(make_forks, tmp_path)
    first = tmp_path / "first.log"
    fork(forks, program, tmp_path, first, "wait", "0")
    server = next(iter(forks._servers.values()))
    for line in (b'{"module": "x", "args": [], "cwd": null, "env": {}}\n', b"not json\n", b"\xff\n"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(server.path))
            client.sendall(line)
            assert "error" in json.loads(client.makefile("rb").readline())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:  # says half, then leaves
        client.connect(str(server.path))
        client.sendall(b'{"module": ')
    stranger = subprocess.run(
        [sys.executable, "-c", STRANGER, str(server.path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "only the process that started this server may ask it" in stranger.stdout, stranger

    second = fork(forks, program, tmp_path, tmp_path / "second.log", "wait", "0")
    assert server.process.poll() is None and next(iter(forks._servers.values())) is server
    held = {os.readlink(f"/proc/{second}/fd/{fd}") for fd in os.listdir(f"/proc/{second}/fd")}
    assert str(first) not in held  # the first fork's log is not the second's to keep open


STRANGER = """
import json, os, socket, sys
request = {"module": "probe_program", "args": ["exit", "0"], "cwd": sys.argv[2], "env": {}}
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
    client.connect(sys.argv[1])
    try:
        client.sendall(json.dumps(request).encode() + b"\\n")
    except BrokenPipeError:  # refused before it read a thing
        pass
    print(client.makefile("rb").readline().decode())
"""


def test_a_fork_would_not_import_under_another_start_environment(
    make_forks: list[Forks], program: Path, tmp_path: Path
) -> None:
    forks = forks_of(make_forks, tmp_path)
    fork(forks, program, tmp_path, tmp_path / "out.log", "exit", "0")  # the server starts
    env = {**os.environ, "PYTHONPATH": str(program), "PYTHONWARNINGS": "error", "LC_ALL": "C"}
    request = ForkRequest("probe_program", ["exit", "0"], str(tmp_path), env)
    assert forks.fork(PREFIX, env, lambda _server: request) is None  # to be spawned instead
    later = ForkRequest(**{**request.__dict__, "read_later": frozenset({"PYTHONWARNINGS", "LC_ALL"})})
    assert forks.fork(PREFIX, env, lambda _server: later) is not None


def test_a_server_whose_owner_died_while_it_imported_exits(tmp_path: Path) -> None:
    not_its_parent = os.getppid()
    server = subprocess.run(
        [sys.executable, "-m", FORK_SERVER, str(tmp_path / "s.sock"), str(not_its_parent)],
        capture_output=True,
        timeout=30,
    )
    assert server.returncode == 0 and server.stdout == b""  # never ready, never listening
    assert not (tmp_path / "s.sock").exists()

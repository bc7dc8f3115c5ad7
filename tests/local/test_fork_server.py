"""The fork server as any program's: a fork runs `python -m module args` in its own session, working
directory, environment and output, shows that command line in `ps`, has its exit code noted; a held
fork runs nothing until its owner has confined it, and nothing at all if that fails; with `keep`,
forks outlive their server; a server whose preloading started threads never forks."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cube_jupyter.local.fork_server import EXIT_NOTE
from cube_jupyter.local.forks import ForkRequest, Forks
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
    wait_until(lambda: "path0" in out.read_text(), 30, "the fork's first lines")
    proc = psutil.Process(pid)
    assert proc.cmdline()[:4] == [sys.executable, "-m", "probe_program", "wait"]  # not its server's
    assert os.getsid(pid) == pid
    text = out.read_text()
    assert f"args ['wait', '0'] cwd {tmp_path} env hello" in text
    assert f"path0 {tmp_path}" in text  # as `python -m` puts the working directory first
    proc.kill()
    wait_until(lambda: f"{EXIT_NOTE}-9" in out.read_text(), 10, "its exit code noted by its server")

    ended = tmp_path / "ended.log"
    fork(forks, program, tmp_path, ended, "exit", "7")
    wait_until(lambda: f"{EXIT_NOTE}7" in ended.read_text(), 10, "its exit code noted by its server")


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


def test_a_server_whose_preloading_starts_threads_never_forks(
    make_forks: list[Forks], program: Path, tmp_path: Path
) -> None:
    forks = forks_of(make_forks, tmp_path, preload=["threaded"])
    env = {**os.environ, "PYTHONPATH": str(program)}
    request = ForkRequest("probe_program", ["exit", "0"], str(tmp_path), env)
    assert forks.fork(PREFIX, env, lambda _server: request) is None  # to be spawned instead
    assert not forks.running(PREFIX)

"""The one local process supervisor: how every local child (notebook server, replica, trial driver,
model server, pipeline worker) is started, found again, stopped and read.

- a child is spawned, or forked from a server that has imported its program already (`forks`);
- a child runs in its own session and process group, so a restart of the workbench does not take it
  down and stopping it stops everything it started;
- a process is found again by (pid, create time) or by a marker in its argv, so a recycled pid is
  never mistaken for one of ours;
- its stdout and stderr go to a private log, read from an offset as it grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, TypeAlias

import psutil

from cube_jupyter.installation import IMPORT_ROOT
from cube_jupyter.local import files
from cube_jupyter.local.fork_server import EXIT_NOTE
from cube_jupyter.local.forks import ForkRequest, Forks, module_command

LOOPBACK = "127.0.0.1"
# Marks a process the workbench started (servers, trial drivers, model servers): never handed on to
# the code users run in replicas.
CHILD_MARKER_ENV = "CUBE_JUPYTER_CHILD"
# The workbench's own Jupyter token: never a child's.
TOKEN_VARIABLES = ("JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE")
# What never reaches the code users run (replicas, trials, step kernels): the workbench's secrets, and
# the marker of the processes it supervises itself.
NOT_FOR_USER_CODE = (*TOKEN_VARIABLES, CHILD_MARKER_ENV)


def user_code_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment user code starts from: this process's (or `environ`), less NOT_FOR_USER_CODE."""
    source = os.environ if environ is None else environ
    return {key: value for key, value in source.items() if key not in NOT_FOR_USER_CODE}


def python_child_environ(extra: Mapping[str, str] = {}, *, supervised: bool = False) -> dict[str, str]:
    """The environment of a Python process the workbench starts from its own modules (pipeline workers,
    trial drivers, model servers): user_code_environ() plus `extra`, this installation first on
    PYTHONPATH (a source checkout imports the same cube_jupyter), unbuffered output; `supervised` marks
    it as one of the workbench's own children (CHILD_MARKER_ENV)."""
    env = user_code_environ()
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(IMPORT_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if supervised:
        env[CHILD_MARKER_ENV] = "1"
    return env


LOG_SEPARATOR = "==== cube-jupyter: starting "
# A process group's leader: our child, or a process found again (one a previous supervisor started).
Leader: TypeAlias = subprocess.Popen[bytes] | psutil.Process


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody listens on right now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# -- start -----------------------------------------------------------------------------------------


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    log_path: Path,
    header: str,
    preexec: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session with stdout and stderr appended to `log_path` (made 0600),
    after a separator line naming this start (`log_tail` reads from the latest one). `preexec` runs
    in the child before exec: `limits.Limiter.preexec`, which puts it under its CPU and memory limits.

    Raises OSError when the log cannot be opened or the executable cannot be started, and
    SubprocessError when `preexec` fails (it says why in the log).
    """
    with _start_log(log_path, header) as log:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=preexec,
        )


def fork(
    forks: Forks,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    log_path: Path,
    header: str,
    confine: Callable[[int], None] | None = None,
    read_later: frozenset[str] = frozenset(),
) -> psutil.Process | None:
    """`spawn`, but as a fork of the running fork server of `forks` for argv's interpreter
    (`python [flags] -m module ...`): the same session, log, working directory, environment, and
    command line in `ps`, without the interpreter's start and imports. `confine(pid)` puts it under
    its limits before it runs (`limits.Limiter.confine`); `read_later`: see `ForkRequest`. None,
    having started nothing, when no such server is up (it is never waited for) or the fork would
    not be what a spawn is (`forks.start_differences`): the caller spawns.

    Raises OSError when the log cannot be opened, the server refuses or the fork cannot be confined
    (it then exits without running anything).
    """
    command = module_command(argv)
    if command is None or not forks.running(command.prefix):
        return None
    with _start_log(log_path, header) as log, open(os.devnull, "rb") as stdin:
        request = ForkRequest(
            command.module,
            command.args,
            str(cwd),
            env,
            title=" ".join(argv),
            stdio=(stdin.fileno(), log.fileno(), log.fileno()),
            confine=confine,
            read_later=read_later,
        )
        pid = forks.fork(command.prefix, env, lambda _server: request, start=False)
    return None if pid is None else psutil.Process(pid)


@contextlib.contextmanager
def _start_log(log_path: Path, header: str) -> Iterator[BinaryIO]:
    """The child's log, open for appending, after a separator line naming this start."""
    with files.open_private_append(log_path) as log:
        log.write(f"{LOG_SEPARATOR}{header} ====\n".encode())
        log.flush()
        yield log


# -- find ------------------------------------------------------------------------------------------


def this_process_id() -> str:
    """This process, so a recycled pid is never mistaken for it: 'pid:create_time'."""
    return f"{os.getpid()}:{psutil.Process().create_time():.3f}"


def owner_alive(owner: str) -> bool:
    """Whether the process `this_process_id()` named is still running."""
    pid_text, _, created = owner.partition(":")
    try:
        proc = psutil.Process(int(pid_text))
        return f"{proc.create_time():.3f}" == created and proc.status() != psutil.STATUS_ZOMBIE
    except (ValueError, psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def live_process(pid: int | None, started: float | None) -> psutil.Process | None:
    """The process `pid` if it is still the one that was started at `started` (its create time)."""
    if not pid or started is None:
        return None
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) > 0.01 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def find_marked(pid: int | None, marker: str) -> psutil.Process | None:
    """The live (non-zombie) process `pid` if its command line carries `marker`, else None."""
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc if marker in proc.cmdline() else None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def exited(proc: subprocess.Popen[bytes]) -> bool:
    """True once our child has exited, without reaping it (its pid and group id stay reserved)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def logged_exit_code(pid: int, log_path: Path, wait: float = 0.0) -> int | None:
    """The exit code a forked child's server noted in its log before reaping it (since the child's
    latest start); `wait` s for an exiting one to be reaped (its server does within a fraction of
    a second). None when nothing was noted (its server was gone first)."""
    deadline = time.monotonic() + wait
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    for line in reversed(_since_start(log_path).splitlines()):
        if line.startswith(EXIT_NOTE):
            with contextlib.suppress(ValueError):
                return int(line.removeprefix(EXIT_NOTE))
    return None


def finished(proc: psutil.Process) -> bool:
    """True once a process that is not our child has exited (a zombie has, and so has one whose pid
    now names another process)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return True


def leader_exited(leader: Leader) -> bool:
    """Whether a process group's leader has exited: our child (`exited`) or another's (`finished`)."""
    return exited(leader) if isinstance(leader, subprocess.Popen) else finished(leader)


def holds_pid(leader: Leader) -> bool:
    """Whether the leader's pid (and so its group id) is still its own: our child until we reap it,
    another's while it runs or is a zombie. Only then may its group be signalled."""
    return isinstance(leader, subprocess.Popen) or leader.is_running()


def unrunnable(program: str, cwd: Path, search_path: str) -> str | None:
    """Why `program` (argv[0]) cannot be started in `cwd` with PATH `search_path`; None when it can.
    A name with a '/' is a path (relative to `cwd`); a bare name is looked up on the PATH."""
    try:
        if "/" not in program:
            return None if shutil.which(program, path=search_path) else "not found on the PATH"
        path = cwd / program
        if not path.exists():
            return "no such file"
        return None if path.is_file() and os.access(path, os.X_OK) else "not an executable file"
    except (ValueError, OSError) as exc:  # a NUL in the name, a name too long
        return str(exc)


# -- stop ------------------------------------------------------------------------------------------


def kill_group(pgid: int) -> None:
    """SIGKILL a process group at once (sync): a replica group whose job is over."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def stop_groups(leaders: Sequence[Leader], grace: float) -> None:
    """SIGTERM each leader's process group, wait up to `grace` s for all of them together, then
    SIGKILL every group (what a leader started goes with it: data loaders, ranks). Our own children
    are reaped by the caller, after the kill, so their group id cannot be reused meanwhile."""
    leaders = [leader for leader in leaders if holds_pid(leader)]
    for leader in leaders:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for leader in leaders:
        while time.monotonic() < deadline:
            if leader_exited(leader):
                break
            time.sleep(0.02)
        if holds_pid(leader):
            kill_group(leader.pid)


def stop_tree_sync(proc: psutil.Process | int, grace: float) -> None:
    """SIGTERM a process, its process group and every descendant (kernels and trials live in
    sessions of their own), wait up to `grace` s, then SIGKILL whatever is left."""
    try:
        root = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        family = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError, psutil.NoSuchProcess):
        if os.getpgid(root.pid) == root.pid:
            os.killpg(root.pid, signal.SIGTERM)
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(family, grace)
    for leftover in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            leftover.kill()
    if alive:
        psutil.wait_procs(alive, 5)


async def stop_tree(proc: psutil.Process, grace: float) -> None:
    """`stop_tree_sync` without blocking the event loop."""
    await asyncio.to_thread(stop_tree_sync, proc, grace)


# -- logs ------------------------------------------------------------------------------------------


def read_log(path: Path, offset: int = 0) -> bytes:
    """The log from byte `offset` on; nothing when it does not exist yet."""
    try:
        with open(path, "rb") as stream:
            stream.seek(offset)
            return stream.read()
    except FileNotFoundError:
        return b""


def log_tail(path: Path, lines: int = 20, max_chars: int = 2000) -> str:
    """The last lines of a log since its latest start, for a failed child's reason."""
    tail = "\n".join(_since_start(path).rstrip().splitlines()[-lines:])
    return tail[-max_chars:]


def _since_start(path: Path) -> str:
    """A log's last 64 KiB from the line after its latest start's separator on."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - 64 * 1024))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return ""
    start = text.rfind(LOG_SEPARATOR)
    if start >= 0:
        text = text[start:].split("\n", 1)[1] if "\n" in text[start:] else ""
    return text


def select_lines(data: bytes, tags: tuple[bytes, ...], tail: int | None) -> bytes:
    """The lines of `data` that start with one of `tags` (all when none), the last `tail` of them."""
    lines = data.splitlines(keepends=True)
    if tags:
        lines = [line for line in lines if line.startswith(tags)]
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    return b"".join(lines)

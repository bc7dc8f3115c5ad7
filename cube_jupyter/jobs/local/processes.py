"""The processes behind local replicas: who they are, whether they are done, how their group dies,
and how their logs are read. Identity is (pid, create time), so a recycled pid is never mistaken
for a replica or for the workbench that supervises it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import psutil


def this_process_id() -> str:
    """This process, so a recycled pid is never mistaken for it: 'pid:create_time'."""
    return f"{os.getpid()}:{psutil.Process().create_time():.3f}"


def owner_alive(owner: str) -> bool:
    pid_text, _, created = owner.partition(":")
    try:
        proc = psutil.Process(int(pid_text))
        return f"{proc.create_time():.3f}" == created and proc.status() != psutil.STATUS_ZOMBIE
    except (ValueError, psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def live_process(pid: int | None, started: float | None) -> psutil.Process | None:
    """The process `pid` if it is still the one that was started at `started`."""
    if not pid or started is None:
        return None
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) > 0.01 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
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


def finished(proc: psutil.Process) -> bool:
    """True once a process that is not our child has exited (a zombie has)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return True


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def read_log(path: Path, offset: int = 0) -> bytes:
    try:
        with open(path, "rb") as stream:
            stream.seek(offset)
            return stream.read()
    except FileNotFoundError:
        return b""


def select_lines(data: bytes, tags: tuple[bytes, ...], tail: int | None) -> bytes:
    """The lines of `data` that start with one of `tags` (all when none), the last `tail` of them."""
    lines = data.splitlines(keepends=True)
    if tags:
        lines = [line for line in lines if line.startswith(tags)]
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    return b"".join(lines)

"""A replica's monitor, as conmon is a container's: it starts the replica's command as its child and
writes the child's exit code to a file when it ends, so a supervisor that is not its parent (a
workbench restarted while the replica ran) still learns how it ended.

    python -P -m cube_jupyter.local.monitor EXIT_FILE -- ARGV...

The monitor leads the replica's process group (the supervisor starts it in a new session); the child
runs in that group with the monitor's env, cwd and file descriptors. The monitor ignores SIGTERM and
SIGINT (the group's signal reaches the child; a SIGKILL of the group ends both), waits for the child,
writes its returncode ("1", or "-15" for killed by SIGTERM) atomically to EXIT_FILE, and exits the same
way: the same code, or killed by the same signal, so its parent sees what it would have seen of the
child itself. A command that cannot be run is reported in one line and recorded as 127 (not found) or
126 (not executable), as a shell does.

Imports only `os`, `signal` and `sys`: this is one more Python process per replica.
"""

from __future__ import annotations

import os
import signal
import sys

MODULE = "cube_jupyter.local.monitor"
NOT_FOUND = 127
NOT_EXECUTABLE = 126
# Python ignores these at startup; a child started with Popen gets them back at their defaults.
RESTORED_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)
PASSED_ON_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def command(exit_file: str | os.PathLike[str], argv: list[str]) -> list[str]:
    """The argv that runs `argv` under a monitor recording its exit code in `exit_file`."""
    return [sys.executable, "-P", "-m", MODULE, os.fspath(exit_file), "--", *argv]


def read_exit_code(exit_file: str | os.PathLike[str]) -> int | None:
    """The returncode a monitor recorded (Popen's convention: -N for killed by signal N); None when
    there is none: the command still runs, or its monitor was killed before it could write one."""
    try:
        with open(exit_file, encoding="ascii") as stream:
            return int(stream.read())
    except (OSError, ValueError):
        return None


def _write_exit_code(exit_file: str, code: int) -> None:
    partial = f"{exit_file}.partial"
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, str(code).encode())
        finally:
            os.close(fd)
        os.replace(partial, exit_file)
    except OSError:
        pass  # the job's directory is gone (deleted): nobody will ask


def _run(argv: list[str]) -> int:
    """Start `argv` as a child in this process group and wait for it: its returncode."""
    reset = [s for s in PASSED_ON_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
    for signum in PASSED_ON_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ, setsigdef=[*reset, *RESTORED_SIGNALS])
    except OSError as exc:
        print(f"cube-jupyter: cannot run {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return NOT_FOUND if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _exit_like(code: int) -> None:
    """Exit as the child did: with its code, or killed by its signal."""
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code  # a signal whose default is not to terminate: exit as a shell reports it
    os._exit(code)


def main(args: list[str]) -> None:
    if len(args) < 3 or args[1] != "--":
        print(f"usage: python -m {MODULE} EXIT_FILE -- ARGV...", file=sys.stderr)
        os._exit(2)
    exit_file, argv = args[0], args[2:]
    code = _run(argv)
    _write_exit_code(exit_file, code)
    _exit_like(code)


if __name__ == "__main__":
    main(sys.argv[1:])

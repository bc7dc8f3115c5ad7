"""A process that has imported a Python program's modules once and forks ready-to-run copies of it.

A Python program spends much of its start importing: a kernel about half a second of CPU (ipykernel,
IPython, zmq, debugpy), a notebook server more than a second (jupyter_server, jupyterlab, jsonschema's
format libraries). A fork of this process has them already and only runs the program's own start.
It is started with the interpreter and flags the program would have been, so a fork runs where a
spawned program would:

    python [-X...] -m cube_jupyter.local.fork_server SOCKET [--keep] [MODULE...]

One request per connection: a JSON line {"module", "args", "cwd", "env", "title", "hold"}, with up
to three file descriptors passed alongside (SCM_RIGHTS) for the fork's stdin, stdout and stderr
(else it shares ours), is answered with {"pid": N} (or {"error": "..."}). The fork leads a session
of its own (so its group can be signalled like a spawned program's), takes the request's environment
and working directory and the `sys.path` `python -m MODULE` would build there, names itself `title`
in `ps`, and runs MODULE as `__main__` with `args`. With "hold" it first waits for a line on the
connection: meanwhile its owner puts it under its CPU and memory limits, so none of its code runs
outside them.

This process stays single-threaded (forking a threaded process can leave a lock held in the fork)
and reaps its forks, writing each one's exit code to its stdout when it was given one. When its
parent dies it exits, killing its forks unless started with `--keep` (kernels die with their
manager; notebook servers outlive the workbench that started them, as spawned ones do).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

READY = b"ready\n"
KEEP = "--keep"
REQUEST_TIMEOUT = 5.0  # seconds a client gets to send its request line
HOLD_TIMEOUT = 30.0  # seconds a held fork waits for its owner to confine it
REAP_EVERY = 0.2  # seconds between checks for ended forks and for the parent's death
MAX_REQUEST = 1 << 20
STDIO = 3  # stdin, stdout, stderr
FIELDS = {"module", "args", "cwd", "env"}
EXIT_NOTE = "cube-jupyter: exited with code "


@dataclass(frozen=True)
class Origin:
    """What every fork starts from: the interpreter's own `sys.path` and how to retitle itself."""

    path: list[str]
    retitle: Callable[[str], None] | None


def _preload(names: list[str]) -> None:
    """Import the modules every fork will import; one that fails is left to the forks, which will
    say why."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            print(f"fork server: {name} not preloaded: {exc!r}", file=sys.stderr)


def _interpreter_path() -> list[str]:
    """`sys.path` as the interpreter built it, less the script folder and $PYTHONPATH's entries:
    what a program's own path is made of after those two."""
    ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in sys.path[1:] if p not in ours]


def _become(request: dict[str, Any], stdio: list[int], connection: socket.socket, origin: Origin) -> None:
    """In the fork: take the request's place and run its module; never returns."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        if request.get("hold") and connection.makefile("rb").readline() != b"go\n":
            raise SystemExit(1)  # its owner could not confine it: it must not run
        connection.close()
        for fd in stdio:
            if fd >= STDIO:
                os.close(fd)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [cwd, *extra, *origin.path]  # as `python -m` builds it in `cwd`
        if request.get("title") and origin.retitle is not None:
            origin.retitle(request["title"])
        import runpy

        sys.argv = [request["module"], *request["args"]]  # runpy puts the module's file first
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:  # as the interpreter reads it: None is 0, anything else is said
        code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
        if code and not isinstance(exit_.code, int):
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # a spawned program runs these as its interpreter exits
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _title_setter() -> Callable[[str], None] | None:
    """How a fork shows its own command line: setproctitle, made ready here, as it makes room for a
    longer title by moving the environment and can no longer find it once a fork has replaced it.
    None where it is not installed (the workbench installs it: it finds its notebook servers by
    their command line; a kernel's interpreter may lack it, and its kernels then show ours).

    A title is padded with spaces to at least this process's own command line: Linux reads a
    shorter one with the NULs after it, as one argument followed by empty ones."""
    try:
        import setproctitle
    except ImportError:
        return None
    try:
        with open("/proc/self/cmdline", "rb") as own:
            width = len(own.read())
    except OSError:  # no /proc: nothing to pad against
        width = 0
    setproctitle.setproctitle(setproctitle.getproctitle())
    return lambda title: setproctitle.setproctitle(title.ljust(width))


def _read_request(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The request line and the descriptors sent with it (closed here if the request is refused)."""
    data, fds, _, _ = socket.recv_fds(connection, MAX_REQUEST, STDIO)
    try:
        while data and not data.endswith(b"\n") and len(data) < MAX_REQUEST:
            more = connection.recv(MAX_REQUEST)
            if not more:
                break
            data += more
        request = json.loads(data)
        if not isinstance(request, dict) or not request.keys() >= FIELDS:
            raise ValueError(f"a request needs {', '.join(sorted(FIELDS))}")
        if not os.path.isdir(request["cwd"]):
            raise ValueError(f"no such working directory: {request['cwd']}")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds


def _serve_one(listener: socket.socket, origin: Origin, forks: dict[int, int | None]) -> None:
    connection, _ = listener.accept()
    connection.settimeout(REQUEST_TIMEOUT)  # a client that connects and says nothing cannot stall us
    with connection:
        try:
            request, stdio = _read_request(connection)
        except ValueError as exc:
            connection.sendall(json.dumps({"error": str(exc)}).encode() + b"\n")
            return
        except OSError:  # it went away, or said nothing in time: nothing to fork
            return
        try:
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.settimeout(HOLD_TIMEOUT)
                _become(request, stdio, connection, origin)
            forks[pid] = os.dup(stdio[1]) if len(stdio) > 1 else None
        except OSError as exc:  # no more processes or memory: said, and we serve on
            connection.sendall(json.dumps({"error": f"could not fork: {exc}"}).encode() + b"\n")
            return
        finally:
            for fd in stdio:
                os.close(fd)
        connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _reap(forks: dict[int, int | None]) -> None:
    for pid in list(forks):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours to read after all
            done, status = pid, None
        if not done:
            continue
        output = forks.pop(pid)
        if output is None:
            continue
        if status is not None:  # said where a spawned program's exit code would be read
            with contextlib.suppress(OSError):
                os.write(output, f"{EXIT_NOTE}{os.waitstatus_to_exitcode(status)}\n".encode())
        os.close(output)


def serve(path: str, keep: bool) -> None:
    parent = os.getppid()
    origin = Origin(_interpreter_path(), _title_setter())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    os.write(1, READY)
    os.dup2(2, 1)  # forks inherit fd 1: nobody reads the pipe the ready line went out on
    forks: dict[int, int | None] = {}  # pid -> a copy of its stdout, for its exit code
    try:
        while os.getppid() == parent:
            readable, _, _ = select.select([listener], [], [], REAP_EVERY)
            if readable:
                _serve_one(listener, origin, forks)
            _reap(forks)
    finally:
        if not keep:  # our parent is gone or stopped us: so are its kernels
            for pid in forks:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        listener.close()
        os.unlink(path)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us; a terminal's Ctrl-C must not
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run `serve`'s cleanup, then exit
    path, *rest = sys.argv[1:]
    keep = KEEP in rest
    _preload([name for name in rest if name != KEEP])
    if threading.active_count() > 1:  # a fork would hold a copy of their locks, maybe taken
        names = ", ".join(thread.name for thread in threading.enumerate())
        print(f"fork server: preloading started threads ({names}): not forking", file=sys.stderr)
        os._exit(2)
    code = 0
    try:
        serve(path, keep)
    except SystemExit:  # stopped (SIGTERM)
        pass
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)  # no need to tear down all it imported


if __name__ == "__main__":
    main()

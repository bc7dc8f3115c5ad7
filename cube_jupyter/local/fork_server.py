"""A process that has imported a Python program's modules once and forks ready-to-run copies of it.

A Python program spends much of its start importing: a kernel about half a second of CPU (ipykernel,
IPython, zmq, debugpy), a notebook server more than a second (jupyter_server, jupyterlab, jsonschema's
format libraries). A fork of this process has them already and only runs the program's own start.
It is started with the interpreter and flags the program would have been, by its owner, which alone
may ask it for forks:

    python [-X...] -m cube_jupyter.local.fork_server SOCKET OWNER_PID [--keep] [MODULE...]

One request per connection: a JSON line {"module", "args", "cwd", "env", "title", "hold"}, with up
to three file descriptors passed alongside (SCM_RIGHTS) for the fork's stdin, stdout and stderr
(else it shares ours). The fork leads a session of its own (so its group can be signalled like a
spawned program's), takes the request's environment and working directory and the `sys.path`
`python -m MODULE` would build there, names itself `title` in `ps`, and only then answers
{"pid": N} (a refused request is answered {"error": "..."}), so its owner finds it as it will stay.
With "hold" it then waits for a line "go" on the connection: meanwhile its owner puts it under its
CPU and memory limits, so none of the program's code runs outside them. Then it runs MODULE as
`__main__` with `args`.

This process stays single-threaded (forking a threaded process can leave a lock held in the fork),
serves on whatever a request does wrong, and reaps its forks, writing each one's exit code to its
stdout when it was given one. When its owner dies it exits, killing its forks unless started with
`--keep` (kernels die with their manager; notebook servers outlive the workbench that started them,
as spawned ones do).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

READY = b"ready\n"
KEEP = "--keep"
EXIT_NOTE = "cube-jupyter: exited with code "
CLIENT_TIMEOUT = 5.0  # seconds a client gets to send its request line
HOLD_TIMEOUT = 30.0  # seconds a held fork waits for its owner to confine it
REAP_EVERY = 0.2  # seconds between checks for ended forks and for the owner's death
MAX_REQUEST = 1 << 20
STDIO = 3  # stdin, stdout, stderr
STRINGS = ("module", "cwd", "title")


@dataclass(frozen=True)
class Origin:
    """What every fork starts from: the interpreter's own `sys.path` and how to retitle itself."""

    path: list[str]
    retitle: Callable[[str], None] | None


@dataclass
class Children:
    """The forks this server has made and not reaped: pid -> a copy of its stdout (for its exit
    code), or None when it shares ours."""

    outputs: dict[int, int | None]

    def close_outputs(self) -> None:
        """In a new fork: the other forks' outputs are not its to hold open."""
        for fd in self.outputs.values():
            if fd is not None:
                os.close(fd)


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


def _title_setter() -> Callable[[str], None] | None:
    """How a fork shows its own command line: setproctitle, made ready here, as it makes room for a
    longer title by moving the environment and can no longer find it once a fork has replaced it.
    None where it is not installed (the workbench installs it: it finds its notebook servers by
    their command line; a kernel's interpreter may lack it, and its kernels then show ours).

    A title is padded with spaces to at least this process's own command line: Linux shows a
    shorter one with the NULs after it, which tools read as one argument and empty ones; padded,
    they split it at its spaces (so an argument holding a space reads as two)."""
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


def _become(request: dict[str, Any], stdio: list[int], connection: socket.socket, origin: Origin) -> None:
    """In the fork: take the request's place, say so, and run its module; never returns."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        for fd in stdio:
            if fd >= STDIO:
                os.close(fd)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
        # as `python -m` builds it in `cwd`, under this interpreter's flags (-P, -E, -I)
        head = [] if sys.flags.safe_path else [cwd]
        extra = [] if sys.flags.ignore_environment else os.environ.get("PYTHONPATH", "").split(os.pathsep)
        sys.path[:] = [*head, *(p for p in extra if p), *origin.path]
        if request.get("title") and origin.retitle is not None:
            origin.retitle(request["title"])
        connection.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        if request.get("hold"):
            try:
                go = connection.makefile("rb").readline()
            except OSError:
                go = b""
            if go != b"go\n":
                print("cube-jupyter: not started: its limits could not be applied", file=sys.stderr)
                raise SystemExit(1)
        connection.close()
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
        try:  # as a spawned program's interpreter shuts down: its threads joined, then atexit
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _read_request(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The request line and the descriptors sent with it (closed here if the request is refused:
    ValueError says why)."""
    data, fds, _, _ = socket.recv_fds(connection, MAX_REQUEST, STDIO)
    try:
        while data and not data.endswith(b"\n") and len(data) < MAX_REQUEST:
            more = connection.recv(MAX_REQUEST)
            if not more:
                break
            data += more
        request = json.loads(data)
        _check(request)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds


def _check(request: object) -> None:
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    if not all(isinstance(request.get(key, ""), str) for key in STRINGS) or not request.get("module"):
        raise ValueError(f"a request's {', '.join(STRINGS)} are strings, and it names a module")
    args, env = request.get("args"), request.get("env")
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ValueError("a request's args are a list of strings")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ValueError("a request's env maps strings to strings")
    if not os.path.isdir(request["cwd"]):
        raise ValueError(f"no such working directory: {request['cwd']}")


def _peer_pid(connection: socket.socket) -> int | None:
    """The pid of the process at the other end (Linux); None where the platform does not say."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    pid, _, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return int(pid)


def _serve_one(listener: socket.socket, owner: int, origin: Origin, forks: Children) -> None:
    connection, _ = listener.accept()
    connection.settimeout(CLIENT_TIMEOUT)  # a client that connects and says nothing cannot stall us
    with connection:
        if _peer_pid(connection) not in (owner, None):  # our owner's users' code must not get forks
            _refuse(connection, "only the process that started this server may ask it")
            return
        try:
            request, stdio = _read_request(connection)
        except ValueError as exc:  # a JSON or UTF-8 error too
            _refuse(connection, str(exc))
            return
        try:
            pid = os.fork()
            if pid == 0:
                listener.close()
                forks.close_outputs()
                connection.settimeout(HOLD_TIMEOUT)
                _become(request, stdio, connection, origin)
            forks.outputs[pid] = None
            if len(stdio) > 1:
                forks.outputs[pid] = os.dup(stdio[1])
        except OSError as exc:  # no more processes, memory or descriptors: said, and we serve on
            _refuse(connection, f"could not fork: {exc}")
        finally:
            for fd in stdio:
                os.close(fd)


def _refuse(connection: socket.socket, why: str) -> None:
    connection.sendall(json.dumps({"error": why}).encode() + b"\n")


def _reap(forks: Children) -> None:
    """Note each ended fork's exit code where it was given an output, then reap it: whoever sees
    its pid gone finds the note already there."""
    for pid in list(forks.outputs):
        try:
            ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped already: nothing to note
            ended = None
        else:
            if ended is None:  # still running
                continue
        output = forks.outputs.pop(pid)
        if output is not None:
            if ended is not None:  # where a spawned program's exit code would be read
                code = ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status
                with contextlib.suppress(OSError):
                    os.write(output, f"{EXIT_NOTE}{code}\n".encode())
            os.close(output)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def serve(path: str, owner: int, keep: bool) -> None:
    origin = Origin(_interpreter_path(), _title_setter())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    os.write(1, READY)
    os.dup2(2, 1)  # forks inherit fd 1: nobody reads the pipe the ready line went out on
    forks = Children({})
    try:
        while os.getppid() == owner:
            readable, _, _ = select.select([listener], [], [], REAP_EVERY)
            if readable:
                try:
                    _serve_one(listener, owner, origin, forks)
                except OSError as exc:  # a client gone mid-answer: its loss, we serve on
                    print(f"fork server: a request failed: {exc!r}", file=sys.stderr)
            _reap(forks)
    finally:
        if not keep:  # our owner is gone or stopped us: so are its kernels
            for pid in forks.outputs:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        listener.close()
        os.unlink(path)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner stops us; a terminal's Ctrl-C must not
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run `serve`'s cleanup, then exit
    path, owner_text, *rest = sys.argv[1:]
    owner = int(owner_text)
    keep = KEEP in rest
    _preload([name for name in rest if name != KEEP])
    if os.getppid() != owner:  # it died while we imported: nobody will ask, or stop us
        os._exit(0)
    if threading.active_count() > 1:  # a fork would hold a copy of their locks, maybe taken
        names = ", ".join(thread.name for thread in threading.enumerate())
        print(f"fork server: preloading started threads ({names}): not forking", file=sys.stderr)
        os._exit(2)
    gc.freeze()  # what was imported stays shared with the forks: their collections never touch it
    code = 0
    try:
        serve(path, owner, keep)
    except SystemExit:  # stopped (SIGTERM)
        pass
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)  # no need to tear down all it imported


if __name__ == "__main__":
    main()

"""A process that has imported ipykernel once and forks ready-to-initialise kernels on request.

A spawned Python kernel spends most of its start importing ipykernel, IPython, zmq and debugpy
(about half a second of CPU); a fork of this process has them already and only runs
IPKernelApp's initialisation (tens of milliseconds). It is started with the kernel spec's own
interpreter and flags, so a forked kernel runs where a spawned one would, and `forked_kernels`
asks it for kernels over a Unix socket:

    python [-X...] -m cube_jupyter.local.kernel_fork_server SOCKET [MODULE...]

One request per connection: a JSON line {"connection_file", "cwd", "env"} is answered with
{"pid": N} (or {"error": "..."}). The child leads a session of its own (so its group can be
signalled like a spawned kernel's), takes the request's environment, working directory and
`sys.path` as a fresh interpreter would compute them, and runs `ipykernel_launcher`'s code.

This process stays single-threaded (forking a threaded process can leave a lock held in the
child), reaps its kernels, and when its parent dies it kills them and exits.
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
import traceback
from typing import Any

READY = b"ready\n"
REQUEST_TIMEOUT = 5.0  # seconds a client gets to send its request line
REAP_EVERY = 0.2  # seconds between checks for ended kernels and for the parent's death
PRELOADED = (  # what a kernel imports while it initialises, so a fork need not
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "ipykernel.debugger",
    "ipykernel.comm",
    "ipykernel.eventloops",
    "ipykernel.heartbeat",
    "ipykernel.iostream",
    "ipykernel.parentpoller",
    "IPython.core.completer",
    "IPython.core.interactiveshell",
)


def _preload(extra: list[str]) -> None:
    """Import what every kernel imports, and the `extra` modules its owner says every kernel it
    asks for will import (a pipeline step's runtime helpers); an extra that fails to import is
    left to the kernels, which will say why."""
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    for name in extra:
        try:
            importlib.import_module(name)
        except Exception as exc:
            print(f"kernel fork server: {name} not preloaded: {exc!r}", file=sys.stderr)


def _interpreter_path() -> list[str]:
    """`sys.path` as the interpreter built it, less the script folder and $PYTHONPATH's entries:
    what a kernel's own path is made of after those two."""
    ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in sys.path[1:] if p not in ours]


def _become_kernel(request: dict[str, Any], base_path: list[str]) -> None:
    """In the forked child: take the request's place and run the kernel; never returns."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ["JPY_PARENT_PID"] = str(os.getppid())  # as a spawned kernel's names its manager
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        # as `python -m ipykernel_launcher` has it: the launcher drops the working directory, and
        # IPython adds "" back where it belongs as the kernel initialises
        sys.path[:] = [*extra, *base_path]

        import ipykernel_launcher  # only its file name, for sys.argv[0]
        from ipykernel import kernelapp

        sys.argv = [ipykernel_launcher.__file__, "-f", request["connection_file"]]
        # IPKernelApp read $JPY_PARENT_PID for its default when this server imported it
        kernelapp.launch_new_instance(argv=[*sys.argv[1:], f"--IPKernelApp.parent_handle={os.getppid()}"])
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # a spawned kernel runs these as its interpreter exits
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve_one(listener: socket.socket, base_path: list[str], kernels: set[int]) -> None:
    connection, _ = listener.accept()
    connection.settimeout(REQUEST_TIMEOUT)  # a client that connects and says nothing cannot stall us
    with connection:
        try:
            request = json.loads(connection.makefile("rb").readline())
            if not isinstance(request, dict) or not {"connection_file", "cwd", "env"} <= request.keys():
                raise ValueError("a request needs connection_file, cwd and env")
            if not os.path.isdir(request["cwd"]):
                raise ValueError(f"no such working directory: {request['cwd']}")
        except ValueError as exc:
            connection.sendall(json.dumps({"error": str(exc)}).encode() + b"\n")
            return
        except OSError:  # it went away, or said nothing in time: no kernel for it
            return
        pid = os.fork()
        if pid == 0:
            listener.close()
            connection.close()
            _become_kernel(request, base_path)
        kernels.add(pid)
        connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _reap(kernels: set[int]) -> None:
    for pid in list(kernels):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            kernels.discard(pid)


def serve(path: str) -> None:
    parent = os.getppid()
    base_path = _interpreter_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    os.write(1, READY)
    os.dup2(2, 1)  # kernels inherit fd 1: nobody reads the pipe the ready line went out on
    kernels: set[int] = set()
    try:
        while os.getppid() == parent:
            readable, _, _ = select.select([listener], [], [], REAP_EVERY)
            if readable:
                _serve_one(listener, base_path, kernels)
            _reap(kernels)
    finally:
        for pid in kernels:  # our parent is gone or stopped us: so are its kernels
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        listener.close()
        os.unlink(path)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us; a terminal's Ctrl-C must not
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run `serve`'s cleanup, then exit
    _preload(sys.argv[2:])
    code = 0
    try:
        serve(sys.argv[1])
    except SystemExit:  # stopped (SIGTERM)
        pass
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)  # its kernels are gone: no need to tear down all it imported


if __name__ == "__main__":
    main()

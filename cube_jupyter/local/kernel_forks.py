"""The fork servers of a process: `kernel_fork_server` processes it starts, one per interpreter
command line, and asks for kernels over their Unix sockets.

Only the standard library, so a worker can start its server before it imports jupyter_client: the
server's imports then run beside the worker's own. `forked_kernels` makes KernelManagers of them.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from cube_jupyter.local.kernel_fork_server import READY

LOG = logging.getLogger(__name__)
START_TIMEOUT = 60.0  # seconds a fork server gets to import ipykernel
REQUEST_TIMEOUT = 30.0  # seconds a fork may take to be answered
STOP_GRACE = 5.0


class ForkServer:
    """One running `kernel_fork_server`; `fork()` may be called from any thread."""

    def __init__(
        self, prefix: Sequence[str], path: Path, env: Mapping[str, str], preload: Sequence[str] = ()
    ) -> None:
        self.path = path
        self.process = subprocess.Popen(
            [*prefix, "-m", "cube_jupyter.local.kernel_fork_server", str(path), *preload],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=dict(env),
        )
        assert self.process.stdout is not None
        timer = threading.Timer(START_TIMEOUT, self.process.kill)
        timer.start()
        try:
            ready = self.process.stdout.readline()
        finally:
            timer.cancel()
            self.process.stdout.close()
        if ready != READY:
            self.process.kill()
            raise RuntimeError(f"the kernel fork server exited with code {self.process.wait()}")

    def fork(self, connection_file: str, cwd: str, env: Mapping[str, str]) -> int:
        """The pid of a new kernel for `connection_file`, running in `cwd` with `env`."""
        request = {"connection_file": connection_file, "cwd": cwd, "env": dict(env)}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(REQUEST_TIMEOUT)
            conn.connect(str(self.path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = json.loads(conn.makefile("rb").readline() or b"{}")
        if "pid" not in reply:
            raise RuntimeError(f"the kernel fork server refused a kernel: {reply.get('error', 'no answer')}")
        return int(reply["pid"])

    def close(self) -> None:
        """Stop the server; it kills the kernels it forked."""
        self.process.terminate()
        try:
            self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class KernelForks:
    """This process's fork servers, one per interpreter command line, their sockets in `folder`;
    `preload`: modules every kernel asked of them imports, imported once by each server."""

    def __init__(self, folder: Path, preload: Sequence[str] = ()) -> None:
        self.folder = folder
        self.preload = tuple(preload)
        self._servers: dict[tuple[str, ...], ForkServer] = {}
        self._unavailable: set[tuple[str, ...]] = set()  # prefixes whose server could not start
        self._lock = threading.Lock()

    def fork(
        self, prefix: tuple[str, ...], connection_file: str, cwd: str, env: Mapping[str, str]
    ) -> int | None:
        """A kernel forked by the server for `prefix` (started on first use, started again if it
        died); None when no server can start, and the kernel is to be spawned."""
        server = self._server(prefix, env)
        if server is None:
            return None
        try:
            return server.fork(connection_file, cwd, env)
        except OSError:
            if server.process.poll() is None:
                raise
            server = self._server(prefix, env)  # it died (killed by a step, say): once more, anew
            return None if server is None else server.fork(connection_file, cwd, env)

    def start(self, prefix: tuple[str, ...], env: Mapping[str, str]) -> None:
        """Have the server for `prefix` started (ahead of a first kernel that will need it)."""
        self._server(prefix, env)

    def _server(self, prefix: tuple[str, ...], env: Mapping[str, str]) -> ForkServer | None:
        with self._lock:
            if prefix in self._unavailable:
                return None
            known = self._servers.get(prefix)
            if known is not None and known.process.poll() is None:
                return known
            if known is not None:
                LOG.warning("the kernel fork server of %s exited; starting another", prefix[0])
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = self.folder / f"forks-{len(self._servers)}.sock"
            path.unlink(missing_ok=True)
            try:
                self._servers[prefix] = ForkServer(prefix, path, env, self.preload)
            except (OSError, RuntimeError) as exc:
                LOG.warning("kernels of %s are spawned: no fork server (%s)", prefix[0], exc)
                self._unavailable.add(prefix)
                return None
            return self._servers[prefix]

    def close(self) -> None:
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()

"""The fork servers of a process: `fork_server` processes it starts, one per interpreter command
line, and asks for forks over their Unix sockets.

Only the standard library, so a worker can start its server before it imports jupyter_client: the
server's imports then run beside the worker's own. `forked_kernels` makes KernelManagers of them;
the local notebook backend starts notebook servers with them.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import itertools
import json
import logging
import os
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cube_jupyter.local.fork_server import KEEP, READY

FORK_SERVER = "cube_jupyter.local.fork_server"

LOG = logging.getLogger(__name__)
START_TIMEOUT = 60.0  # seconds a fork server gets to import what it preloads
FORK_TIMEOUT = 30.0  # seconds a fork may take to be answered
STOP_GRACE = 5.0
# What a Python kernel imports while it initialises: what a fork server for kernels preloads.
KERNEL_MODULES = (
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
# Modules whose import costs a kernel seconds, worth a fork server of their own for the programs that
# import them: their forks start with them imported. Each is safe to fork once imported (torch: as
# long as nothing initialises CUDA, which `import torch` does not; a fork of a process that did
# cannot use CUDA).
PRELOADABLE = ("torch",)


# What an interpreter and the modules it imports read from the environment as they start: a fork has
# the values its server started with, so it runs as a spawn would only where its own agree. ($PYTHONPATH
# is not one: a fork builds its `sys.path` from its own.)
READ_AT_START_PREFIXES = ("PYTHON", "LC_", "JUPYTER", "IPYTHON")
READ_AT_START = frozenset({"LANG", "LANGUAGE", "HOME", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"})
# What the native libraries of a `PRELOADABLE` module read as they load (OpenMP's and the BLAS
# libraries' thread counts: torch's `get_num_threads()`): read at start by the forks of its server.
READ_AT_LOAD_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_")


def _read_at_start(name: str, prefixes: tuple[str, ...]) -> bool:
    upper = name.upper()
    return upper != "PYTHONPATH" and (upper.startswith(prefixes) or upper in READ_AT_START)


def start_differences(
    server_env: Mapping[str, str],
    env: Mapping[str, str],
    read_later: frozenset[str],
    preloaded: Sequence[str] = (),
) -> list[str]:
    """The variables read at start (but for `read_later`, which the program reads after its imports)
    whose values in `env` differ from those the fork server, which imported `preloaded`, started with."""
    native = bool(set(preloaded) & set(PRELOADABLE))
    prefixes = READ_AT_START_PREFIXES + (READ_AT_LOAD_PREFIXES if native else ())
    names = {
        name for name in (*server_env, *env) if _read_at_start(name, prefixes) and name not in read_later
    }
    return sorted(name for name in names if server_env.get(name) != env.get(name))


def preloadable_imports(sources: Iterable[str]) -> tuple[str, ...]:
    """The `PRELOADABLE` modules that code of `sources` imports (`import torch.nn as nn`, `from torch
    import nn`) and this interpreter has installed. IPython's `%magic` and `!shell` lines are
    skipped; a source that still does not parse is not Python, and imports nothing."""
    imported: set[str] = set()
    for source in sources:
        python = "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
        )
        try:
            tree = ast.parse(python)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.partition(".")[0])
    return tuple(
        name for name in PRELOADABLE if name in imported and importlib.util.find_spec(name) is not None
    )


@dataclass(frozen=True)
class ModuleCommand:
    """`prefix -m module *args`: what a fork server started with `prefix` can fork."""

    prefix: tuple[str, ...]  # the interpreter and its flags
    module: str
    args: list[str]


def module_command(cmd: Sequence[str]) -> ModuleCommand | None:
    """`cmd` as a module run, when it is `python [flags] -m module [args]`; else None (a script,
    code, a wrapper command)."""
    i = 1
    while i < len(cmd) - 1:
        if cmd[i] == "-m":
            return ModuleCommand(tuple(cmd[:i]), cmd[i + 1], list(cmd[i + 2 :]))
        if not cmd[i].startswith("-") or cmd[i] == "-c":
            return None
        i += 2 if cmd[i] in ("-X", "-W") else 1  # flags whose value is the next argument
    return None


@dataclass(frozen=True)
class ForkRequest:
    """`python -m module *args` in `cwd` with `env`, as a fork. `title` is what `ps` shows of it (its
    would-be command line); `stdio` are descriptors for its stdin, stdout and stderr (else it shares
    the server's); `confine(pid)` puts it under its limits before any of its code runs."""

    module: str
    args: Sequence[str]
    cwd: str
    env: Mapping[str, str]
    title: str = ""
    stdio: Sequence[int] = ()
    confine: Callable[[int], None] | None = None
    read_later: frozenset[str] = frozenset()

    def line(self) -> bytes:
        fields = {"module": self.module, "args": list(self.args), "cwd": self.cwd, "env": dict(self.env)}
        return json.dumps({**fields, "title": self.title, "hold": self.confine is not None}).encode() + b"\n"


class ForkServer:
    """One running `fork_server`; `fork()` may be called from any thread. With `keep`, its forks
    outlive it (and this process)."""

    def __init__(
        self,
        prefix: Sequence[str],
        path: Path,
        env: Mapping[str, str],
        preload: Sequence[str] = (),
        keep: bool = False,
    ) -> None:
        self.path = path
        self.process = subprocess.Popen(
            [*prefix, "-m", FORK_SERVER, str(path), str(os.getpid()), *([KEEP] if keep else []), *preload],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=dict(env),
            cwd=path.parent,  # private: its imports are found where a spawned program finds them
        )
        self.env = dict(env)
        self.preload = tuple(preload)
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
            raise RuntimeError(f"the fork server exited with code {self.process.wait()}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def fork(self, request: ForkRequest) -> int:
        """The pid of a new fork running `request`; OSError when the server refuses or cannot be
        reached. If `request.confine` fails, the fork exits without running anything and its error
        is raised."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(FORK_TIMEOUT)
            conn.connect(str(self.path))
            if request.stdio:
                socket.send_fds(conn, [request.line()], list(request.stdio))
            else:
                conn.sendall(request.line())
            # answered by the fork once it has taken the request's place (its title shows), or
            # by the server that refuses
            reply = json.loads(conn.makefile("rb").readline() or b"{}")
            if "pid" not in reply:
                raise OSError(f"no fork: {reply.get('error', 'no answer (see the fork server log)')}")
            pid = int(reply["pid"])
            if request.confine is not None:
                request.confine(pid)  # on failure the connection closes unanswered: the fork exits
                conn.sendall(b"go\n")
        return pid

    def close(self) -> None:
        """Stop the server; it kills its forks unless it keeps them."""
        self.process.terminate()
        try:
            self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


ServerKey = tuple[tuple[str, ...], tuple[str, ...]]  # an interpreter command line, what it preloads extra


class Forks:
    """This process's fork servers, one per interpreter command line and set of `extra` modules
    (`PRELOADABLE` ones its forks would import), their sockets in a private folder made in `parent`;
    `preload`: modules every fork asked of them imports, imported once by each server; `keep`:
    forks outlive their server."""

    def __init__(self, parent: Path, preload: Sequence[str] = (), keep: bool = False) -> None:
        self.parent = parent
        self.preload = tuple(preload)
        self.keep = keep
        self._folder: Path | None = None
        self._servers: dict[ServerKey, ForkServer] = {}
        self._unavailable: set[ServerKey] = set()  # servers that could not start
        self._socket_numbers = itertools.count()  # a restarted server's socket must not be a live one's
        self._lock = threading.Lock()  # over the maps and the folder; each server's start has its own
        self._starting: dict[ServerKey, threading.Lock] = {}
        self._closed = False

    def fork(
        self,
        prefix: tuple[str, ...],
        env: Mapping[str, str],
        request: Callable[[int], ForkRequest],
        *,
        start: bool = True,
        extra: tuple[str, ...] = (),
    ) -> int | None:
        """A fork of `request(server pid)` by the server for `prefix` that has also imported `extra`,
        which is started with `env` on first use and again if it died (with `start`), else only used
        when it is up; without it (it could not start), by the server without `extra`. None when
        there is no server to ask: the program is to be spawned."""
        key = (prefix, extra)
        server = self._server(key, env) if start else self._running(key)
        if server is None:  # the plain server's forks import `extra` themselves
            return self.fork(prefix, env, request, start=start) if extra else None
        try:
            return self._fork(server, request(server.pid))
        except OSError:
            if server.process.poll() is None:
                raise
            server = self._server(key, env) if start else None  # it died: once more, anew
            return None if server is None else self._fork(server, request(server.pid))

    @staticmethod
    def _fork(server: ForkServer, request: ForkRequest) -> int | None:
        differences = start_differences(server.env, request.env, request.read_later, server.preload)
        if differences:  # what it imported would not be what this program imports: a spawn is
            LOG.info(
                "%s is spawned: its %s differ from its fork server's", request.module, ", ".join(differences)
            )
            return None
        return server.fork(request)

    def start(self, prefix: tuple[str, ...], env: Mapping[str, str], extra: tuple[str, ...] = ()) -> None:
        """Have the server for `prefix` and `extra` started (ahead of a first fork that will need it)."""
        self._server((prefix, extra), env)

    def running(self, prefix: tuple[str, ...]) -> bool:
        """Whether the server for `prefix` (no `extra`) is up now."""
        return self._running((prefix, ())) is not None

    def _running(self, key: ServerKey) -> ForkServer | None:
        """The server for `key` if it is up now (never waits for one that is starting)."""
        server = self._servers.get(key)
        return server if server is not None and server.process.poll() is None else None

    def _server(self, key: ServerKey, env: Mapping[str, str]) -> ForkServer | None:
        """The server for `key`, started if it is not up. Each server starts under a lock of its own:
        a server importing torch for seconds does not hold back another's start."""
        prefix, extra = key
        with self._lock:
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:
            with self._lock:
                if key in self._unavailable or self._closed:
                    return None
                known = self._servers.get(key)
                if known is not None and known.process.poll() is None:
                    return known
                if known is not None:
                    LOG.warning("the fork server of %s exited; starting another", prefix[0])
                path = self._socket_path()
            try:
                server = ForkServer(prefix, path, env, [*self.preload, *extra], self.keep)
            except (OSError, RuntimeError) as exc:
                LOG.warning("%s is spawned: no fork server (%s)", prefix[0], exc)
                with self._lock:
                    self._unavailable.add(key)
                return None
            with self._lock:
                self._servers[key] = server
            return server

    def _socket_path(self) -> Path:
        """A new socket path in the private folder (made on first use); under `_lock`."""
        if self._folder is None:
            self.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._folder = Path(tempfile.mkdtemp(prefix="f", dir=self.parent))  # short: a socket's path
        path = self._folder / f"{next(self._socket_numbers)}.sock"
        path.unlink(missing_ok=True)
        return path

    def close(self) -> None:
        """Stop the servers, and remove their folder and `parent` when nothing else is left in it
        (made for sockets: a notebook backend's holds only this folder)."""
        with self._lock:
            self._closed = True  # no start begins from now on
            starts = list(self._starting.values())
        for starting in starts:  # the starts under way end
            with starting:
                pass
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()
        if self._folder is not None:
            for folder in (self._folder, self.parent):
                with contextlib.suppress(OSError):  # not empty: another's sockets are in it
                    folder.rmdir()

"""Kernel managers whose Python kernels are forked from a pre-imported fork server.

`ForkedKernelManager` is a `jupyter_client.KernelManager` in every way its callers see (papermill,
nbclient, interrupts, shutdown): only the launch differs. When the kernel spec's command is
`<interpreter> [flags] -m ipykernel_launcher -f {connection_file}`, its provisioner asks a
`kernel_fork_server` started with that same interpreter and flags for a fork, instead of starting
an interpreter; any other kernel (another language, a wrapper script) is spawned as usual.

The servers belong to a `KernelForks` (one per interpreter command line, started on first use,
stopped by `close()`); a server that fails to start is not tried again and its kernels are spawned.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import KernelManager
from jupyter_client.provisioning import LocalProvisioner

from cube_jupyter.local.kernel_fork_server import READY

LOG = logging.getLogger(__name__)
LAUNCHER = ["-m", "ipykernel_launcher", "-f"]
START_TIMEOUT = 60.0  # seconds a fork server gets to import ipykernel
REQUEST_TIMEOUT = 30.0  # seconds a fork may take to be answered
STOP_GRACE = 5.0
POLL_INTERVAL = 0.05


def fork_prefix(cmd: Sequence[str]) -> tuple[str, ...] | None:
    """The interpreter and its flags when `cmd` starts ipykernel's launcher, else None."""
    if len(cmd) < 5 or list(cmd[-4:-1]) != LAUNCHER:
        return None
    return tuple(cmd[:-4])


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


def _ended(process: psutil.Process) -> bool:
    """Gone, or a zombie its server has not reaped yet (it reaps within `REAP_EVERY`)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class ForkedProvisioner(LocalProvisioner):
    """LocalProvisioner, but a Python kernel is forked by the manager's fork server. A forked kernel
    is the server's child, not ours: it is watched by pid (with its start time) and signalled as
    the group it leads; its exit code is not ours to read, so an ended kernel reports -1."""

    forked: psutil.Process | None = None

    @property
    def has_process(self) -> bool:
        return self.forked is not None or bool(super().has_process)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        prefix = fork_prefix(cmd)
        env = kwargs.get("env") or os.environ
        forks: KernelForks = getattr(self.parent, "forks")  # noqa: B009  (a ForkedKernelManager's)
        cwd = str(kwargs.get("cwd") or os.getcwd())
        pid = forks.fork(prefix, cmd[-1], cwd, env) if prefix is not None else None
        if pid is None:
            return await super().launch_kernel(cmd, **kwargs)
        self.pid = self.pgid = pid
        self.forked = psutil.Process(self.pid)
        self.cwd = cwd
        return self.connection_info

    async def poll(self) -> int | None:
        if self.forked is None:
            return await super().poll()
        return -1 if _ended(self.forked) else None

    async def wait(self) -> int | None:
        if self.forked is None:
            return await super().wait()
        await self._until_ended()
        self.forked = None
        return -1

    async def _until_ended(self) -> None:
        import asyncio

        while self.forked is not None and not _ended(self.forked):
            await asyncio.sleep(POLL_INTERVAL)

    async def send_signal(self, signum: int) -> None:
        if self.forked is None:
            await super().send_signal(signum)
        elif not _ended(self.forked):
            os.killpg(self.forked.pid, signum)

    async def kill(self, restart: bool = False) -> None:
        if self.forked is None:
            await super().kill(restart)
            return
        with contextlib.suppress(ProcessLookupError):
            await self.send_signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        if self.forked is None:
            await super().terminate(restart)
            return
        with contextlib.suppress(ProcessLookupError):
            await self.send_signal(signal.SIGTERM)


class ForkedKernelManager(KernelManager):
    """A KernelManager whose Python kernels come from `forks`."""

    def __init__(self, forks: KernelForks, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.forks = forks

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        if self.provisioner is None:
            self.provisioner = ForkedProvisioner(
                kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
            )
        return await super()._async_pre_start_kernel(**kw)

"""Kernel managers whose Python kernels are forked from a pre-imported fork server.

`ForkedKernelManager` is a `jupyter_client.KernelManager` in every way its callers see (papermill,
nbclient, interrupts, shutdown): only the launch differs. When the kernel spec's command is
`<interpreter> [flags] -m ipykernel_launcher [args]`, its provisioner asks a `fork_server` started
with that same interpreter and flags (and `forks.KERNEL_MODULES` preloaded, with the manager's
`extra` modules: torch for a notebook that imports it) for a fork, instead of starting an
interpreter; any other kernel (another language, a wrapper script) is spawned as usual.

The servers belong to a `Forks` (`forks`: one per interpreter command line and `extra`, started on
first use, stopped by `close()`); where none can start, kernels are spawned.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import psutil
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import KernelManager
from jupyter_client.provisioning import LocalProvisioner

from cube_jupyter.local.forks import ForkRequest, Forks, module_command

LAUNCHER = "ipykernel_launcher"
POLL_INTERVAL = 0.01  # a killed kernel is a zombie within milliseconds: what a shutdown waits for


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
        command = module_command(cmd)
        if command is None or command.module != LAUNCHER:
            return await super().launch_kernel(cmd, **kwargs)
        env = kwargs.get("env") or os.environ
        cwd = str(kwargs.get("cwd") or os.getcwd())

        def request(server: int) -> ForkRequest:
            # as a spawned kernel names the process that started it, and watches it: its server
            args = [*command.args, f"--IPKernelApp.parent_handle={server}"]
            return ForkRequest(
                LAUNCHER, args, cwd, {**env, "JPY_PARENT_PID": str(server)}, title=" ".join(cmd)
            )

        manager = self.parent
        assert isinstance(manager, ForkedKernelManager)  # its only parent: `_async_pre_start_kernel`
        pid = manager.forks.fork(command.prefix, env, request, extra=manager.extra)
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
        while self.forked is not None and not _ended(self.forked):
            await asyncio.sleep(POLL_INTERVAL)

    async def send_signal(self, signum: int) -> None:
        if self.forked is None:
            await super().send_signal(signum)
        elif not _ended(self.forked):
            with contextlib.suppress(ProcessLookupError):  # it ended since: nothing to signal
                os.killpg(self.forked.pid, signum)

    async def kill(self, restart: bool = False) -> None:
        await (super().kill(restart) if self.forked is None else self.send_signal(signal.SIGKILL))

    async def terminate(self, restart: bool = False) -> None:
        await (super().terminate(restart) if self.forked is None else self.send_signal(signal.SIGTERM))


class ForkedKernelManager(KernelManager):
    """A KernelManager whose Python kernels come from `forks`, by its server that has also imported
    `extra` (`forks.PRELOADABLE` modules the kernel's code imports)."""

    def __init__(self, forks: Forks, extra: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.forks = forks
        self.extra = extra

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        if self.provisioner is None:
            self.provisioner = ForkedProvisioner(
                kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
            )
        return await super()._async_pre_start_kernel(**kw)

"""REST handler of GPU use, and how the workbench server names its own kernels to the GPU service.

GET /cube/api/v1/gpu[?history=SECONDS][&all=1]    the caller's GPUs; admins may ask for everyone's
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from tornado import web

from cube_jupyter.errors import InvalidInput
from cube_jupyter.gpu.attribution import KernelProcess
from cube_jupyter.gpu.service import GpuService
from cube_jupyter_server.handlers import API_PREFIX, CubeAPIHandler, cube_endpoint

if TYPE_CHECKING:
    from jupyter_server.serverapp import ServerApp

GPU_SETTING = "cube_gpu"
WORKBENCH_SERVER = "workbench"


class GpuHandler(CubeAPIHandler):
    @cube_endpoint
    async def get(self) -> None:
        caller = self.caller
        all_users = self.flag_param("all")
        history = parse_history(self.get_query_argument("history", None))
        service: GpuService = self.settings[GPU_SETTING]
        report = await service.report(caller, all_users=all_users, history_seconds=history)
        self.write_json(report.to_dict())


def parse_history(value: str | None) -> float | None:
    """`?history=` as seconds (the service checks the range); None when absent."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        raise InvalidInput(f"history must be a number of seconds, got {value!r}", field="history")
    return seconds


def workbench_kernels(serverapp: ServerApp) -> Callable[[], list[KernelProcess]]:
    """The kernels this Jupyter server runs, with their notebook paths: read from its kernel and
    session managers on the event loop (no I/O besides its in-process sessions database)."""

    def kernels() -> list[KernelProcess]:
        manager = serverapp.kernel_manager
        paths: dict[str, str] = {}
        try:
            rows = serverapp.session_manager.connection.execute("SELECT kernel_id, path FROM session")
            paths = {str(kernel_id): str(path) for kernel_id, path in rows.fetchall() if kernel_id and path}
        except sqlite3.Error:
            pass  # no sessions table yet: kernels are still listed, without notebook paths
        found = []
        for kernel_id in manager.list_kernel_ids():
            provisioner = getattr(manager.get_kernel(kernel_id), "provisioner", None)
            pid = getattr(provisioner, "pid", None)
            if isinstance(pid, int):
                found.append(KernelProcess(kernel_id, pid, paths.get(kernel_id), WORKBENCH_SERVER))
        return found

    return kernels


GPU_HANDLERS: list[tuple[str, type[web.RequestHandler]]] = [(rf"{API_PREFIX}/gpu", GpuHandler)]

"""Kernels over Unix sockets: no TCP port on the host (two kernels starting at once in different
processes can be handed the same free port by jupyter_client, and one then dies before it answers),
and no "running over TCP without encryption" warning from each kernel."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

# A Unix socket's path is at most 107 bytes; the longest name here is "{folder}/k{8 hex}-{port}".
MAX_FOLDER = 90


def socket_dir(pid: int) -> Path:
    """Where the kernels process `pid` starts put their sockets: a folder of its own in Jupyter's
    private runtime dir, or in the temp dir when that path is too long for a socket (a deep $HOME),
    removed when it is done (by it, or by whoever saw it killed)."""
    from jupyter_core.paths import jupyter_runtime_dir

    name = f"cube-kernels-{pid}"
    runtime = Path(jupyter_runtime_dir()) / name
    return runtime if len(str(runtime)) <= MAX_FOLDER else Path(tempfile.gettempdir()) / name


def kernel_transport() -> dict[str, str]:
    """KernelManager settings for a kernel this process starts. The socket paths are absolute: the
    kernel resolves them in its own working directory, this process in its own, and a relative path
    (jupyter_client's default) would name two different files."""
    if os.name != "posix":
        return {}
    sockets = socket_dir(os.getpid())
    sockets.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = f"k{secrets.token_hex(4)}"
    # The connection file beside the sockets: a process stopped without its kernels' clean-up (its
    # close kills them at once; a kill -9) leaves one folder to remove, not files among Jupyter's.
    return {"transport": "ipc", "ip": str(sockets / name), "connection_file": str(sockets / f"{name}.json")}

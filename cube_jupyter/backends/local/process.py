"""Child `jupyter lab` processes: how they are launched, probed, and stopped.

Each child runs in its own session (so a restart of the main server does not take it down) and is
identified by a marker argument unique to the server (its `--ServerApp.base_url=...`), which guards
against a recycled pid being mistaken for a child.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from cube_jupyter.backends.local import files

# `python -m jupyterlab` of the interpreter running the workbench: the child sees the same packages.
LAB_COMMAND: tuple[str, ...] = (sys.executable, "-m", "jupyterlab")
LOOPBACK = "127.0.0.1"
LOG_SEPARATOR = "==== cube-jupyter: starting "
# The workbench extension must not load inside a child: it would supervise (and cull) its siblings.
CHILD_MARKER_ENV = "CUBE_JUPYTER_CHILD"


def base_url_arg(base_url: str) -> str:
    return f"--ServerApp.base_url={base_url}"


def lab_argv(command: Sequence[str], *, base_url: str, port: int, root_dir: Path) -> list[str]:
    """The argv of a child server; the token travels in the environment, not in `ps` output."""
    argv = [
        *command,
        base_url_arg(base_url),
        f"--ServerApp.ip={LOOPBACK}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root_dir}",
        "--ServerApp.jpserver_extensions=cube_jupyter_server=False",
        # A child reads the same config files as the workbench; it is reached with its own token
        # only, never with the workbench's trusted-header identity or its authorizer.
        "--ServerApp.identity_provider_class=jupyter_server.auth.identity.PasswordIdentityProvider",
        "--ServerApp.authorizer_class=jupyter_server.auth.authorizer.AllowAllAuthorizer",
        "--no-browser",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")
    return argv


def child_env(
    base: Mapping[str, str], *, token: str, profile_env: Mapping[str, str], gpu_ids: Sequence[str]
) -> dict[str, str]:
    """The child's environment: ours, the profile's env, its token, and only the GPUs it was given.

    `CUDA_VISIBLE_DEVICES` is always set (empty when the profile asks for no GPU) so a CPU server
    cannot use GPUs that count against other users' quotas.
    """
    env = {k: v for k, v in base.items() if k not in ("JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE")}
    env.update(profile_env)
    env["JUPYTER_TOKEN"] = token
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    env[CHILD_MARKER_ENV] = "1"
    return env


def free_port() -> int:
    """A loopback port nobody listens on right now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def spawn(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_path: Path, header: str
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session with stdout and stderr appended to `log_path` (made 0600).

    Raises OSError when the log cannot be opened or the executable cannot be started.
    """
    with files.open_private_append(log_path) as log:
        log.write(f"{LOG_SEPARATOR}{header} ====\n".encode())
        log.flush()
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def find_child(pid: int | None, marker: str) -> psutil.Process | None:
    """The live (non-zombie) process `pid` if its command line carries `marker`, else None."""
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc if marker in proc.cmdline() else None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


async def terminate(proc: psutil.Process, grace: float) -> None:
    """SIGTERM the child's process group, wait up to `grace` s, then SIGKILL what is left.

    Kernels live in their own process groups; they are collected first so that any the server did
    not shut down in time are killed too instead of being orphaned.
    """
    try:
        family = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.terminate()
    except (ProcessLookupError, psutil.NoSuchProcess):
        pass
    _, alive = await asyncio.to_thread(psutil.wait_procs, family, grace)
    for leftover in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            leftover.kill()
    if alive:
        await asyncio.to_thread(psutil.wait_procs, alive, 5)


def log_tail(path: Path, lines: int = 20, max_chars: int = 2000) -> str:
    """The last lines of the child's log since its latest start, for a `failed` server's reason."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - 64 * 1024))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return ""
    start = text.rfind(LOG_SEPARATOR)
    if start >= 0:
        text = text[start:].split("\n", 1)[1] if "\n" in text[start:] else ""
    tail = "\n".join(text.rstrip().splitlines()[-lines:])
    return tail[-max_chars:]


async def probe_status(port: int, base_url: str, token: str, timeout: float = 2.0) -> bool:
    """True when a Jupyter server on `port` answers `{base_url}api/status` and accepts `token`."""
    request = HTTPRequest(
        f"http://{LOOPBACK}:{port}{base_url}api/status",
        headers={"Authorization": f"token {token}"},
        connect_timeout=timeout,
        request_timeout=timeout,
    )
    try:
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
    except (TimeoutError, OSError, HTTPClientError):
        return False
    return response.code == 200


def visible_gpu_ids(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this machine can hand to children: NVML's devices, narrowed by our own
    `CUDA_VISIBLE_DEVICES` when the admin set one. No NVML (no driver, `nvidia-ml-py` not installed)
    means no GPUs."""
    count = nvml_device_count()
    ids = [str(i) for i in range(count)]
    environ = os.environ if environ is None else environ
    restricted = environ.get("CUDA_VISIBLE_DEVICES")
    if restricted is not None:
        ids = [part.strip() for part in restricted.split(",") if part.strip()][:count]
    return ids


def nvml_device_count() -> int:
    """GPUs this machine can hand to servers, read through the same NVML source the GPU monitor uses."""
    from cube_jupyter.gpu.nvml import NvmlSource
    from cube_jupyter.gpu.sources import NoGpuVisible

    source = NvmlSource()
    try:
        return len(source.read())
    except NoGpuVisible:
        return 0
    finally:
        source.close()

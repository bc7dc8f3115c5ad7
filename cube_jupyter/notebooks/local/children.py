"""Child `jupyter lab` processes: their argv, their environment, and the probe that says they are up.

Each child runs in its own session (so a restart of the main server does not take it down) and is
identified by a marker argument unique to the server (its `--ServerApp.base_url=...`), which guards
against a recycled pid being mistaken for a child.

A child is a user server (`CubeWorkbench.role = "user"`): the workbench extension loads in it and
serves its owner's pipelines, jobs and GPU panels on its workspace. It is told who it is on the
command line and gets the workbench's effective Cube* config (quotas, profiles, stores, images) as a
private `jupyter_server_config.json` on `JUPYTER_CONFIG_PATH`, so runs, jobs and GPUs count against
the same limits and the same local state (one ledger) whichever server they came through.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cube_jupyter.local import files
from cube_jupyter.local.processes import CHILD_MARKER_ENV, LOOPBACK, TOKEN_VARIABLES

# `python -m jupyterlab` of the interpreter running the workbench: the child sees the same packages.
LAB_COMMAND: tuple[str, ...] = (sys.executable, "-m", "jupyterlab")
CONFIG_FILE = "jupyter_server_config.json"
# What a child's environment sets that Jupyter reads as the server starts, not as it imports: a
# child forked from a server that imported Jupyter without them still gets them right.
READ_LATER = frozenset({"JUPYTER_TOKEN", "JUPYTER_CONFIG_PATH", "JUPYTER_RUNTIME_DIR"})
# What `python -m jupyterlab` imports as a user server starts: what its fork server preloads.
LAB_MODULES = (
    "jupyterlab.labapp",
    "cube_jupyter_server.app",
    "cube_jupyter.notebooks.local.backend",
    "cube_jupyter.jobs.local",
    "cube_jupyter.gpu.nvml",
    "cube_jupyter.storage.local",
    "jupyter_lsp",
    "jupyter_lsp.virtual_documents_shadow",
    "jupyter_server_terminals",
    "jupyter_server.kernelspecs.handlers",
    "jupyter_server.nbconvert.handlers",
    "jupyter_server.services.api.handlers",
    "jupyter_server.services.events.handlers",
    "jupyter_server.services.shutdown",
    "jupyter_server.view.handlers",
    "notebook_shim.nbserver",
    "httpcore",  # Lab's extension manager's HTTP client
)


def base_url_arg(base_url: str) -> str:
    return f"--ServerApp.base_url={base_url}"


def lab_argv(
    command: Sequence[str],
    *,
    base_url: str,
    port: int,
    root_dir: Path,
    user: str,
    state_dir: Path,
    workbench_url: str,
) -> list[str]:
    """The argv of a child server; the token travels in the environment, not in `ps` output."""
    argv = [
        *command,
        base_url_arg(base_url),
        f"--ServerApp.ip={LOOPBACK}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root_dir}",
        # Lab's layouts in the server's own workspace, where a pod's home keeps them: a folder shared
        # with the workbench and the other servers is written by each without an atomic write, and
        # one server reading another's half-written file answers 500.
        f"--LabApp.workspaces_dir={root_dir / '.jupyter' / 'lab' / 'workspaces'}",
        # A user server of `user`, on the workbench's own state (its jobs, runs and GPU ledger).
        "--CubeWorkbench.role=user",
        f"--CubeWorkbench.default_user={user}",
        f"--CubeWorkbench.state_dir={state_dir}",
        f"--CubeWorkbench.workbench_url={workbench_url}",
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
    base: Mapping[str, str],
    *,
    token: str,
    profile_env: Mapping[str, str],
    gpu_ids: Sequence[str],
    config_dir: Path,
    runtime_dir: Path,
) -> dict[str, str]:
    """The child's environment: ours, the profile's env, its token, only the GPUs it was given, its
    config directory first on `JUPYTER_CONFIG_PATH` and a private runtime directory of its own.

    `CUDA_VISIBLE_DEVICES` is always set (empty when the profile asks for no GPU) so a CPU server
    cannot use GPUs that count against other users' quotas.
    """
    env = {k: v for k, v in base.items() if k not in TOKEN_VARIABLES}
    env.update(profile_env)
    env["JUPYTER_TOKEN"] = token
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    env[CHILD_MARKER_ENV] = "1"
    env["JUPYTER_RUNTIME_DIR"] = str(runtime_dir)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
        p for p in (str(config_dir), base.get("JUPYTER_CONFIG_PATH")) if p
    )
    return env


def write_child_config(config_dir: Path, config: Mapping[str, Any]) -> Path:
    """The workbench's effective Cube* config for a child, private (it may hold store credentials)."""
    files.private_dir(config_dir)
    path = config_dir / CONFIG_FILE
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, files.PRIVATE_FILE)
    with os.fdopen(fd, "w") as stream:
        json.dump(config, stream, indent=1, sort_keys=True)
    return path


async def probe_status(port: int, base_url: str, token: str, timeout: float = 2.0) -> bool:
    """True when a Jupyter server on `port` answers `{base_url}api/status` and accepts `token`."""
    # Loaded here: a command that asks no server (`cube-jupyter notebook list`) never pays for it.
    from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

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

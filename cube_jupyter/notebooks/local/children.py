"""Child `jupyter lab` processes: their argv, their environment, and the probe that says they are up.

Each child runs in its own session (so a restart of the main server does not take it down) and is
identified by a marker argument unique to the server (its `--ServerApp.base_url=...`), which guards
against a recycled pid being mistaken for a child.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from cube_jupyter.local.processes import LOOPBACK

# `python -m jupyterlab` of the interpreter running the workbench: the child sees the same packages.
LAB_COMMAND: tuple[str, ...] = (sys.executable, "-m", "jupyterlab")
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

"""The installed extension: enabled on install, and refusing to start on invalid admin config."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cube_jupyter.config import CONFIG_CLASSES
from tests.unit.test_config import BAD_VALUE_PER_CLASS

pytestmark = pytest.mark.timeout(120)
JUPYTER = [sys.executable, "-m", "jupyter"]
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def _run(args: list[str], tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        JUPYTER + args, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path, check=False
    )


def test_server_and_lab_extensions_are_enabled_and_ok(tmp_path: Path) -> None:
    server = _run(["server", "extension", "list"], tmp_path)
    out = ANSI_ESCAPE.sub("", server.stdout + server.stderr)
    assert "cube_jupyter_server enabled" in out, out
    assert "cube_jupyter_server" in out and "OK" in out.split("cube_jupyter_server enabled", 1)[1], out
    lab = _run(["labextension", "list"], tmp_path)
    out = ANSI_ESCAPE.sub("", lab.stdout + lab.stderr)
    line = next((ln for ln in out.splitlines() if "cube-jupyter" in ln), "")
    assert "enabled" in line and "OK" in line, out


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ('c.CubeSpawner.profiles = [{"name": "p", "image": "i", "cpu": "x"}]', "CubeSpawner.profiles[0].cpu"),
        ("c.CubeSpawner.max_servers_per_user = -1", "CubeSpawner.max_servers_per_user"),
        ('c.CubeWorkbench.backend = "docker"', "CubeWorkbench.backend"),
        # A workbench-wide trait by its old name: still read, and refused naming both names.
        ("c.CubeSpawner.gpu_quota_per_user = -1", "(given as CubeSpawner.gpu_quota_per_user)"),
        # One bad value in each Configurable (jobs, GPU, pipelines, storage too), each at startup.
        *(
            (f"c.{section}.{trait} = {value!r}", field)
            for section, trait, value, field in BAD_VALUE_PER_CLASS
        ),
    ],
)
def test_invalid_config_stops_the_server_naming_the_field(tmp_path: Path, config: str, field: str) -> None:
    (tmp_path / "jupyter_server_config.py").write_text(config + "\n")
    result = _run(
        [
            "server",
            "--allow-root",
            "--no-browser",
            "--ServerApp.port=0",
            f"--config={tmp_path / 'jupyter_server_config.py'}",
            '--ServerApp.jpserver_extensions={"cube_jupyter_server": True}',
            f"--CubeWorkbench.state_dir={tmp_path / 'state'}",
        ],
        tmp_path,
    )
    assert result.returncode != 0
    assert field in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def _serve(tmp_path: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Start a server that is expected to stop by itself; one that keeps running fails the test."""
    argv = [
        "server",
        "--allow-root",
        "--no-browser",
        "--ServerApp.port=0",
        '--ServerApp.jpserver_extensions={"cube_jupyter_server": True}',
        *args,
    ]
    try:
        return _run(argv, tmp_path, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the server kept running without the workbench: {exc.stderr!r}"[-3000:])


def test_trusted_header_without_the_cube_authorizer_stops_the_server(tmp_path: Path) -> None:
    result = _serve(
        tmp_path,
        "--ServerApp.identity_provider_class=cube_jupyter_server.identity.TrustedHeaderIdentityProvider",
        f"--CubeWorkbench.state_dir={tmp_path / 'state'}",
    )
    assert result.returncode != 0
    assert "ServerApp.authorizer_class" in result.stderr, result.stderr[-3000:]
    assert "cube_jupyter_server.authorizer.CubeAuthorizer" in result.stderr
    assert "Traceback" not in result.stderr


def test_any_setup_failure_stops_the_server_with_a_message(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state dir should be")
    result = _serve(tmp_path, f"--CubeWorkbench.state_dir={blocker}")
    assert result.returncode != 0
    assert "cube-jupyter" in result.stderr and str(blocker) in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_help_all_lists_every_cube_configurable(tmp_path: Path) -> None:
    """`--help-all` of the extension app (`jupyter lab --help-all` prints only LabApp's own classes)."""
    from cube_jupyter_server.app import CubeJupyterApp

    assert set(CONFIG_CLASSES) <= set(CubeJupyterApp.classes)
    code = (
        "from cube_jupyter_server.app import CubeJupyterApp; CubeJupyterApp.launch_instance(['--help-all'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for cls in CONFIG_CLASSES:
        assert f"\n{cls.__name__}(" in result.stdout, cls.__name__
        for trait in cls.class_traits(config=True):
            assert f"--{cls.__name__}.{trait}=" in result.stdout, f"{cls.__name__}.{trait}"
    for shared in (
        "CubeWorkload.gpu_tolerations",
        "CubeWorkload.gpu_node_selector",
        "CubePods.service_account",
    ):
        assert f"--{shared}=" in result.stdout, shared

"""The `cube-jupyter notebook` command, run as a user runs it: a subprocess with a config file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cube_jupyter.cli import main
from cube_jupyter.notebooks.render import STOPPED_ANNOTATION
from tests.k8s_schemas import validate_object

pytestmark = pytest.mark.timeout(180)
CONFIG = """
c.CubeWorkbench.state_dir = {state!r}
c.CubeWorkbench.default_user = "alice"
c.CubeSpawner.max_servers_per_user = 1
c.CubeSpawner.profiles = [
    {{"name": "small", "image": "jupyter/base", "cpu": "500m", "memory": "1Gi", "default": True}},
    {{"name": "a100", "image": "jupyter/gpu", "cpu": "8", "memory": "64Gi", "gpu": 1,
      "node_selector": {{"gpu": "a100"}},
      "tolerations": [{{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}]}},
]
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "jupyter_server_config.py"
    path.write_text(CONFIG.format(state=str(tmp_path / "state")))
    return path


def cube(*args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cube_jupyter.cli", *args]
    if config is not None:
        argv += ["--config", str(config)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


def test_render_prints_exactly_the_valid_objects(config: Path) -> None:
    render = ("notebook", "render", "--user", "alice", "--name", "nb1", "--profile", "a100")
    result = cube(*render, config=config)
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [o["kind"] for o in objects] == [
        "AuthorizationPolicy",  # first: the tokenless pod is never reachable without it
        "PersistentVolumeClaim",
        "ConfigMap",  # the user server's config, mounted in the pod
        "Notebook",  # its Service and VirtualService are the notebook controller's
    ]
    for obj in objects:
        validate_object(obj)
    [notebook] = [o for o in objects if o["kind"] == "Notebook"]
    container = notebook["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "--ServerApp.base_url=/notebook/cube-alice/nb1/" in container["args"]
    again = cube(*render, config=config)
    assert again.stdout == result.stdout  # deterministic, like `helm template`
    assert STOPPED_ANNOTATION not in result.stdout


def test_render_into_a_namespace_only_the_cluster_knows(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Kubeflow Profile's namespace (namespace_source 'kubeflow-profile') is given, not templated."""
    render = ["notebook", "render", "--name", "nb1", "--config", str(config)]
    assert main([*render, "--namespace", "team-a"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {o["metadata"]["namespace"] for o in objects} == {"team-a"}
    assert main([*render, "--namespace", "Team_A"]) != 0
    assert "--namespace 'Team_A' may only have lower-case letters" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["notebook", "render", "--name", "Bad_Name"], "name 'Bad_Name'"),
        (["notebook", "render", "--name", "nb1", "--profile", "huge"], "profile 'huge' is not offered"),
        (["notebook", "stop", "--name", "ghost"], "no server named 'ghost'"),
    ],
)
def test_bad_input_exits_1_naming_the_field(config: Path, args: list[str], needle: str) -> None:
    result = cube(*args, config=config)
    assert result.returncode == 1
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_bad_config_and_usage(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('c.CubeSpawner.profiles = [{"name": "p", "image": "i", "memory": "lots"}]\n')
    result = cube("notebook", "list", config=bad)
    assert result.returncode == 1 and "CubeSpawner.profiles[0].memory" in result.stderr
    result = cube("notebook", "list", config=tmp_path / "missing.py")
    assert result.returncode == 1 and "does not exist" in result.stderr
    assert cube("notebook", "create").returncode == 2  # --name is required
    assert cube().returncode == 2


def test_local_lifecycle_from_the_shell(config: Path) -> None:
    created = cube("notebook", "create", "--name", "nb1", config=config)
    try:
        assert created.returncode == 0, created.stderr
        assert created.stdout.startswith("nb1: running  /cube/notebook/alice/nb1/")
        over = cube("notebook", "create", "--name", "nb2", config=config)
        assert over.returncode == 1 and "limit is 1" in over.stderr

        listed = json.loads(cube("notebook", "list", "--json", config=config).stdout)
        assert [(s["name"], s["status"], s["profile"]) for s in listed] == [("nb1", "running", "small")]
        table = cube("notebook", "list", config=config).stdout.splitlines()
        assert table[0].split()[:3] == ["NAME", "PROFILE", "STATUS"] and table[1].split()[:3] == [
            "nb1",
            "small",
            "running",
        ]

        stopped = cube("notebook", "stop", "--name", "nb1", config=config)
        assert stopped.returncode == 0 and stopped.stdout.startswith("nb1: stopped")
        started = cube("notebook", "start", "--name", "nb1", config=config)
        assert started.returncode == 0 and started.stdout.startswith("nb1: running"), started.stderr
    finally:
        deleted = cube("notebook", "delete", "--name", "nb1", config=config)
    assert deleted.returncode == 0 and "workspace is kept" in deleted.stdout
    assert json.loads(cube("notebook", "list", "--json", config=config).stdout) == []


def test_the_cli_never_culls_or_supervises(tmp_path: Path) -> None:
    """Culling belongs to the workbench server. A CLI command that runs for a while (here: creating a
    second server and waiting for it) must not stop the user's idle first server behind its back."""
    state = tmp_path / "state"
    config = tmp_path / "jupyter_server_config.py"
    config.write_text(
        CONFIG.format(state=str(state)).replace("max_servers_per_user = 1", "max_servers_per_user = 5")
        + "c.CubeSpawner.cull_idle_seconds = 1\nc.CubeWorkbench.poll_seconds = 0.2\n"
    )
    try:
        first = cube("notebook", "create", "--name", "idle", config=config)
        assert first.returncode == 0, first.stderr
        second = cube("notebook", "create", "--name", "busy", config=config)  # idle for > 1 s meanwhile
        assert second.returncode == 0, second.stderr
        listed = {s["name"]: s for s in json.loads(cube("notebook", "list", "--json", config=config).stdout)}
        assert listed["idle"]["status"] == "running", listed["idle"]
        assert listed["idle"]["reason"] is None
    finally:
        for name in ("idle", "busy"):
            cube("notebook", "delete", "--name", name, config=config)

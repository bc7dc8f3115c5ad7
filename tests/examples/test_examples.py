"""Every file in examples/, run as a user following the README runs it after `make lab`: the
`cube-jupyter` command in a shell in examples/ (here a copy of it in a temporary folder), where Lab's
terminals open, with no config file, so state and artifacts go where they go by default (the Jupyter
data dir, here a temporary one). None of them may print ipykernel's "running over TCP" warning, and
none may change the example files."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cube_jupyter.pipelines.dataflow import parse_cell
from tests.k8s_schemas import validate_object

pytestmark = pytest.mark.timeout(420)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLI = str(Path(sys.executable).with_name("cube-jupyter"))  # the command `make lab` installs
TCP_WARNING = "Kernel is running over TCP"
# Each pipeline example and what its metrics must show: a run that "succeeds" with a model that
# learned nothing is a broken example.
PIPELINES = {
    "pipelines/fanout_ml.ipynb": {"accuracy": (0.75, 1.0), "f1": (0.75, 1.0)},
    "pipelines/kale_tagged.ipynb": {"rmse": (0.0, 70.0), "r2": (0.4, 1.0)},
    "pipelines/options_and_magics.ipynb": {"total": (499500.0, 499500.0)},
}
# Each job spec, the command that takes it and the kind it renders to (None: it names a path on
# this machine, so it runs locally only).
SPECS = {
    "jobs/pytorch-ddp.yaml": ("train", "PyTorchJob"),
    "jobs/tune-lr.yaml": ("tune", "Experiment"),
    "jobs/tune-notebook.yaml": ("tune", "Experiment"),
    "jobs/serve-iris.yaml": ("serve", "InferenceService"),
    "jobs/serve-local.yaml": ("serve", None),
}
SCRIPTS = ["jobs/train_ddp.py", "jobs/save_iris_model.py", "jobs/trial_lr.ipynb"]  # run by the tests below


def example_files() -> list[str]:
    """The examples a clone has, relative to examples/: its tracked files (not what running them
    writes there, nor its .gitignore)."""
    listed = subprocess.run(["git", "ls-files"], cwd=EXAMPLES, capture_output=True, text=True, check=True)
    names = listed.stdout.splitlines()
    return sorted(n for n in names if (EXAMPLES / n).is_file() and not Path(n).name.startswith("."))


@dataclass
class Shell:
    """A user's shell in examples/: runs commands there and returns what they printed."""

    root: Path
    env: dict[str, str]

    def run(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            argv, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert TCP_WARNING not in result.stdout + result.stderr, (argv, result.stderr)
        return result

    def cube(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(CLI, *args)


@pytest.fixture
def shell(tmp_path: Path) -> Shell:
    root = tmp_path / "examples"
    for name in example_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes((EXAMPLES / name).read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUBE_JUPYTER_", "JUPYTER_"))}
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "data")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return Shell(root, env)


def test_every_example_is_run_by_a_test() -> None:
    covered = {*PIPELINES, *SPECS, *SCRIPTS}
    missing = sorted(set(example_files()) - covered)
    assert not missing, f"examples no test runs (add them to {Path(__file__).name}): {missing}"


def example_imports(path: Path) -> set[str]:
    """Top-level modules a script or a notebook's code cells import (magics understood)."""
    if path.suffix == ".ipynb":
        cells = nbformat.read(path, as_version=4).cells
        sources = [c.source for c in cells if c.cell_type == "code"]
    else:
        sources = [path.read_text()]
    modules = set()
    for index, source in enumerate(sources):
        for node in ast.walk(parse_cell(source, f"{path.name} cells[{index}]")):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module.split(".")[0])
    return modules


def test_the_examples_extra_names_every_library_the_examples_import() -> None:
    """`make lab` installs cube-jupyter with its `examples` extra: that must be all they need."""
    installed = set()
    for line in importlib.metadata.requires("cube-jupyter") or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": "examples"}):
            installed.add(canonicalize_name(requirement.name))
    installed.add("cube-jupyter")
    providers = importlib.metadata.packages_distributions()
    missing = {}
    for name in example_files():
        if name.endswith((".py", ".ipynb")):
            for module in example_imports(EXAMPLES / name) - set(sys.stdlib_module_names):
                distributions = {canonicalize_name(d) for d in providers.get(module, [module])}
                if not distributions & installed:
                    missing[f"{name}: {module}"] = sorted(distributions)
    assert not missing, f"not in pyproject.toml's `examples` extra: {missing}"


def printed_metrics(stdout: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(r"^(\w+)=(\S+)$", stdout, re.MULTILINE)}


@pytest.mark.parametrize("notebook", PIPELINES)
def test_a_pipeline_example_runs_and_its_model_learns(shell: Shell, notebook: str) -> None:
    before = (shell.root / notebook).read_bytes()
    steps = [s["name"] for s in json.loads(shell.cube("pipeline", "graph", notebook).stdout)["steps"]]

    result = shell.cube("pipeline", "run", notebook, "--parallel", "4", "--output-dir", "out/")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "succeeded in" in result.stdout, result.stdout
    metrics = printed_metrics(result.stdout)
    for name, (low, high) in PIPELINES[notebook].items():
        assert low <= metrics[name] <= high, (name, metrics)
    assert sorted(p.stem for p in (shell.root / "out").glob("*.ipynb")) == sorted(steps)
    assert (shell.root / notebook).read_bytes() == before  # the runner never writes the notebook


@pytest.mark.parametrize("spec", SPECS)
def test_a_job_example_renders_to_valid_objects(shell: Shell, spec: str) -> None:
    command, kind = SPECS[spec]
    result = shell.cube(command, "render", spec)
    if kind is None:  # a path on this machine: the message says what the cluster needs instead
        assert result.returncode == 2 and "storage_uri" in result.stderr, result.stderr
        return
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [o["kind"] for o in objects] == [kind]
    for obj in objects:
        validate_object(obj, strict=True)


def test_the_training_example_runs_both_replicas(shell: Shell) -> None:
    result = shell.cube("train", "run", "jobs/pytorch-ddp.yaml", "--wait")
    assert result.returncode == 0, result.stderr
    assert "toy-ddp: Succeeded" in result.stdout, result.stdout + result.stderr

    for replica, rank in (("master-0", 0), ("worker-0", 1)):
        log = shell.cube("train", "logs", "toy-ddp", "--replica", replica).stdout
        assert f"rank {rank} of 2 done" in log, log
        losses = [float(v) for v in re.findall(r"^epoch=\d+ loss=(\S+)$", log, re.MULTILINE)]
        assert len(losses) == 2 and losses[-1] < 0.1, log  # two epochs, and it fits the toy data
    listed = shell.cube("train", "list").stdout.splitlines()
    assert listed[1].split()[:5] == ["toy-ddp", "training", "pytorch", "Succeeded", "2/2"], listed
    assert shell.cube("train", "delete", "toy-ddp").returncode == 0


def test_the_tuning_example_finds_a_learning_rate(shell: Shell) -> None:
    result = shell.cube("tune", "run", "jobs/tune-lr.yaml", "--wait")
    assert result.returncode == 0, result.stderr
    assert "lr-search: Succeeded" in result.stdout, result.stdout + result.stderr
    best = re.search(r"best trial: (\S+) objective=(\S+) parameters=(.+)$", result.stdout, re.MULTILINE)
    assert best, result.stdout
    assert 0.001 <= json.loads(best[3])["lr"] <= 0.2 and float(best[2]) < 0.1, best[0]
    [job] = json.loads(shell.cube("tune", "list", "--json").stdout)
    assert len(job["trials"]) == 4, job["trials"]
    assert shell.cube("tune", "delete", "lr-search").returncode == 0


def test_the_notebook_tuning_example_finds_a_learning_rate(shell: Shell) -> None:
    """Each trial runs trial_lr.ipynb with its lr; the toy loss is lowest near lr = 0.05."""
    result = shell.cube("tune", "run", "jobs/tune-notebook.yaml", "--wait")
    assert result.returncode == 0, result.stderr
    assert "lr-notebook: Succeeded" in result.stdout, result.stdout + result.stderr
    best = re.search(r"best trial: (\S+) objective=(\S+) parameters=(.+)$", result.stdout, re.MULTILINE)
    assert best, result.stdout
    assert 0.001 <= json.loads(best[3])["lr"] <= 0.5 and float(best[2]) < 1.2, best[0]
    assert shell.cube("tune", "delete", "lr-notebook").returncode == 0


def test_the_serving_example_answers_a_prediction(shell: Shell) -> None:
    saved = shell.run(sys.executable, "jobs/save_iris_model.py")
    assert saved.returncode == 0, saved.stderr
    try:
        result = shell.cube("serve", "run", "jobs/serve-local.yaml", "--wait")
        assert result.returncode == 0, result.stderr
        endpoint = re.search(r"^endpoint: (\S+)$", result.stdout, re.MULTILINE)
        assert endpoint, result.stdout
        # What README's curl line sends: KServe's V1 protocol, one iris flower of each species.
        body = {"instances": [[5.1, 3.5, 1.4, 0.2], [5.7, 2.8, 4.1, 1.3], [6.3, 3.3, 6.0, 2.5]]}
        request = urllib.request.Request(f"{endpoint[1]}:predict", data=json.dumps(body).encode())
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.load(response) == {"predictions": [0, 1, 2]}
    finally:
        shell.cube("serve", "delete", "iris-local")  # its model server outlives the command
    assert json.loads(shell.cube("serve", "list", "--json").stdout) == []

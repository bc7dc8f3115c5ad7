"""images/ and the CI workflow that publishes them agree with what the config defaults name
(cube_jupyter/images.py), and the runtime's one package list agrees with the package's own."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from cube_jupyter import __version__
from cube_jupyter.images import IMAGE_NAMES, NOTEBOOK_IMAGE, REGISTRY, RUNTIME_IMAGE, image, image_repository
from cube_jupyter.wheelhouse import distribution, lock_text, platforms

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "images.yml"
RUNTIME_REQUIREMENTS = ROOT / "images" / "runtime" / "requirements.txt"


def dockerfile(name: str) -> str:
    return (ROOT / "images" / name / "Dockerfile").read_text()


def requirements(lines: list[str]) -> dict[str, Requirement]:
    parsed = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    return {requirement.name.lower().replace("_", "-"): requirement for requirement in parsed}


def test_defaults_name_this_versions_images() -> None:
    assert RUNTIME_IMAGE == f"ghcr.io/cube-jupyter/runtime:{__version__}" == image("runtime")
    assert image("notebook") == NOTEBOOK_IMAGE == f"{REGISTRY}/notebook:{__version__}"
    with pytest.raises(ValueError, match="not one of"):
        image("base")


@pytest.mark.parametrize(
    ("reference", "repository"),
    [
        ("ghcr.io/cube-jupyter/runtime:0.1.0", "ghcr.io/cube-jupyter/runtime"),
        ("registry:5000/ml/torch", "registry:5000/ml/torch"),
        ("registry:5000/ml/torch:2@sha256:" + "0" * 64, "registry:5000/ml/torch"),
        ("pytorch/pytorch@sha256:" + "0" * 64, "pytorch/pytorch"),
    ],
)
def test_image_repository_drops_tag_and_digest(reference: str, repository: str) -> None:
    assert image_repository(reference) == repository


def test_the_workflow_builds_and_pushes_every_image_with_the_package_version() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    jobs = workflow["jobs"]
    assert jobs["image"]["strategy"]["matrix"]["image"] == list(IMAGE_NAMES)
    assert jobs["image"]["env"]["IMAGE"] == REGISTRY + "/${{ matrix.image }}"
    [build] = [s for s in jobs["image"]["steps"] if s.get("uses", "").startswith("docker/build-push-action")]
    assert build["with"]["file"] == "images/${{ matrix.image }}/Dockerfile"
    assert "${{ env.IMAGE }}:${{ needs.wheel.outputs.version }}" in build["with"]["tags"].splitlines()
    # The version step, run here, reads this package's version.
    [step] = [s for s in jobs["wheel"]["steps"] if s.get("id") == "version"]
    command = re.search(r"python -c '([^']+)'", step["run"])
    assert command is not None
    read = subprocess.run(
        [sys.executable, "-c", command[1]], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert read.stdout.strip() == __version__


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_every_image_is_pinned_and_runs_as_a_user(name: str) -> None:
    text = dockerfile(name)
    bases = re.findall(r"^ARG \w*IMAGE=(\S+)|^FROM (\S+)", text, re.MULTILINE)
    pinned = [base for pair in bases for base in pair if base and not base.startswith("$")]
    assert pinned and all(":" in base and not base.endswith(":latest") for base in pinned)
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")


def test_the_runtime_image_installs_its_one_package_list_through_its_wheelhouse() -> None:
    text = dockerfile("runtime")
    assert "COPY images/runtime/requirements.txt" in text
    assert "python -m cube_jupyter.wheelhouse build" in text
    assert '-r "$wheels/runtime.lock"' in text and "--no-index --no-deps" in text


def test_the_runtime_requires_what_the_package_requires() -> None:
    """Each runtime requirement with the package's own version range (no second opinion)."""
    runtime = requirements(RUNTIME_REQUIREMENTS.read_text().splitlines())
    package = requirements(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    assert runtime and set(runtime) <= set(package)
    for name, requirement in runtime.items():
        assert requirement.specifier == package[name].specifier, name


def test_the_lock_marks_each_wheel_with_the_pythons_it_serves() -> None:
    closures = {
        "3.12": ["pyzmq-27.3.0-cp312-abi3-manylinux_2_28_x86_64.whl", "Jinja2-3.1.6-py3-none-any.whl"],
        "3.11": ["pyzmq-27.3.0-cp311-cp311-manylinux_2_28_x86_64.whl", "jinja2-3.1.6-py3-none-any.whl"],
        "3.13": ["pyzmq-27.4.0-1-cp313-cp313-manylinux_2_28_x86_64.whl"],
    }
    every = 'python_version == "3.11" or python_version == "3.12" or python_version == "3.13"'
    assert lock_text(closures, "cube_jupyter-0.1.0-py3-none-any.whl").splitlines() == [
        f"cube-jupyter==0.1.0 ; {every}",
        'jinja2==3.1.6 ; python_version == "3.11" or python_version == "3.12"',
        'pyzmq==27.3.0 ; python_version == "3.11" or python_version == "3.12"',
        'pyzmq==27.4.0 ; python_version == "3.13"',
    ]
    assert distribution("typing_extensions-4.16.0-py3-none-any.whl") == ("typing-extensions", "4.16.0")
    with pytest.raises(ValueError, match="not a wheel"):
        distribution("minio-7.2.20.tar.gz")
    assert platforms("aarch64")[0] == "manylinux_2_28_aarch64"
    assert "manylinux_2_17_aarch64" in platforms("aarch64")

"""Container images as venvs: what a pod's `image` would hold, built on this machine from the same
recipe the image uses, so a rendered container runs against exactly that and nothing else.

- the runtime image (images/runtime/Dockerfile): its wheelhouse built by `cube_jupyter.wheelhouse`
  from images/runtime/requirements.txt and this checkout's wheel (for this machine's Python only; the
  image serves 3.11-3.13), the venv installed from that wheelhouse's lock with `--no-deps`, and the
  wheelhouse kept where the image keeps it (under its prefix);
- a user's PyTorch image without cube-jupyter (pytorch/pytorch): python, pip and torch (this
  checkout's venv's torch, linked in with exactly what `pip install torch` brings).
- the workbench image (images/workbench/Dockerfile): the full package, as this checkout's venv has it.

Venvs are built once and cached under `.venv/cube-image-venvs/` (so `make clean` removes them), named
by a hash of their recipe. The runtime's cube-jupyter is this checkout's: when the package's sources
change, its wheel is rebuilt and reinstalled (and replaced in the wheelhouse) without rebuilding the rest.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import Distribution, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cube_jupyter import __version__
from cube_jupyter.wheelhouse import LOCK

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".venv" / "cube-image-venvs"
RUNTIME_REQUIREMENTS = ROOT / "images" / "runtime" / "requirements.txt"
TORCH = "torch==2.13.0"  # the local CPU build; any other spec pulls GBs of CUDA packages
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
# What the runtime's wheel is built from: a change in any of these reinstalls cube-jupyter.
PACKAGE_SOURCES = ("cube_jupyter", "kernels", "server_ext", "pyproject.toml")
BUILT = ".built"
SOURCES_STAMP = ".cube-jupyter-sources"


@dataclass(frozen=True)
class ImageVenv:
    """An image's filesystem, as far as a pod's command can tell: its Python prefix and PATH."""

    prefix: Path

    @property
    def bin(self) -> Path:
        return self.prefix / "bin"

    def env(self) -> dict[str, str]:
        """The image's own env (its Dockerfile's ENV): its bin first on PATH, and no pip config from this
        machine (an image has none), so pip finds only what a pod's command tells it to."""
        return {
            "PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin",
            "PIP_CONFIG_FILE": os.devnull,
            "LANG": "C.UTF-8",
        }


def _run(*argv: str, **env: str) -> None:
    subprocess.run(argv, check=True, env={**os.environ, **env}, stdout=subprocess.DEVNULL)


def _pip(image: ImageVenv, *args: str) -> None:
    _run(str(image.bin / "python"), "-m", "pip", *args, "--quiet")


def _digest(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder of `path` at a time, across test sessions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached_venv(name: str, recipe: list[str], install: Callable[[Path], None]) -> ImageVenv:
    """The venv `name` built by `install(prefix)` after `python -m venv`, once per recipe: a venv whose
    build did not finish is built again."""
    prefix = CACHE / f"{name}-{_digest(PYTHON, *recipe)}"
    with _locked(prefix):
        if not (prefix / BUILT).exists():
            shutil.rmtree(prefix, ignore_errors=True)
            _run(sys.executable, "-m", "venv", str(prefix))
            install(prefix)
            (prefix / BUILT).touch()
    return ImageVenv(prefix)


def package_sources() -> str:
    """A digest of what cube-jupyter's wheel is built from."""
    files = []
    for name in PACKAGE_SOURCES:
        path = ROOT / name
        found = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [
            f for f in found if f.is_file() and "__pycache__" not in f.parts and "labextension" not in f.parts
        ]
    return _digest(*(part for f in files for part in (str(f.relative_to(ROOT)), f.read_bytes())))


def checkout_wheel(dest: Path) -> Path:
    """This checkout's wheel, as the image build gets it (`pip wheel --no-deps .`); the panels' build
    hook is off: the runtime needs no frontend."""
    argv = ["pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", str(ROOT), "-w", str(dest)]
    _run(sys.executable, "-m", *argv, HATCH_BUILD_NO_HOOKS="true")
    [wheel] = dest.glob("cube_jupyter-*.whl")
    return wheel


def wheelhouse_of(image: ImageVenv) -> Path:
    """Where the runtime image keeps its wheelhouse: cube_jupyter.wheelhouse.WHEELHOUSE, under its prefix."""
    return image.prefix / "share" / "cube-jupyter" / "wheels"


def runtime_image() -> ImageVenv:
    """The runtime image, built as images/runtime/Dockerfile builds it, with this checkout's package."""
    sources = package_sources()
    with tempfile.TemporaryDirectory() as scratch:

        def wheel() -> str:  # built only when a venv needs it
            built = list(Path(scratch).glob("cube_jupyter-*.whl")) or [checkout_wheel(Path(scratch))]
            return str(built[0])

        def install(prefix: Path) -> None:
            image = ImageVenv(prefix)
            wheels = wheelhouse_of(image)
            _pip(image, "uninstall", "--yes", "setuptools")  # python:3.12's venv has none
            build = ["--wheel", wheel(), "--requirements", str(RUNTIME_REQUIREMENTS), "--python", PYTHON]
            _run(sys.executable, "-m", "cube_jupyter.wheelhouse", "build", *build, "--dest", str(wheels))
            _pip(
                image,
                "install",
                "--no-index",
                "--no-deps",
                "--find-links",
                str(wheels),
                "-r",
                str(wheels / LOCK),
            )
            (prefix / SOURCES_STAMP).write_text(sources)

        recipe = [
            RUNTIME_REQUIREMENTS.read_text(),
            __version__,
            (ROOT / "cube_jupyter" / "wheelhouse.py").read_text(),
        ]
        image = cached_venv("runtime", recipe, install)
        with _locked(image.prefix):
            stamp = image.prefix / SOURCES_STAMP
            if stamp.read_text() != sources:
                shutil.copy2(wheel(), wheelhouse_of(image))
                _pip(image, "install", "--no-index", "--no-deps", "--force-reinstall", wheel())
                stamp.write_text(sources)
    return image


def requirement_closure(requirement: str) -> list[Distribution]:
    """The installed distributions `pip install requirement` brings into a fresh venv: the requirement
    and, recursively, the requirements its markers select (with the extras asked for), each checked
    against the version it was asked at."""
    found: dict[str, Distribution] = {}
    pending = [(Requirement(requirement), "")]
    while pending:
        wanted, extra = pending.pop()
        if wanted.marker is not None and not wanted.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(wanted.name)
        dist = distribution(name)
        if not wanted.specifier.contains(dist.version, prereleases=True):
            raise RuntimeError(f"{requirement} needs {wanted}, and this venv has {name} {dist.version}")
        extras = sorted(wanted.extras)
        if name in found and not extras:
            continue
        found[name] = dist
        pending += [(Requirement(r), e) for r in dist.requires or [] for e in ["", *extras]]
    return list(found.values())


def link_distributions(prefix: Path, dists: list[Distribution]) -> None:
    """Put `dists` into the venv at `prefix` as links to where they are installed (a top-level folder
    several of them share, such as `nvidia/`, one level down), with their console scripts."""
    site = prefix / "lib" / f"python{PYTHON}" / "site-packages"
    # as pip would replace them: the venv's own copies (its setuptools) of any of them
    own = {canonicalize_name(info.name.split("-")[0]) for info in site.glob("*.dist-info")}
    if replaced := [d.metadata["Name"] for d in dists if canonicalize_name(d.metadata["Name"]) in own]:
        _pip(ImageVenv(prefix), "uninstall", "--yes", *replaced)
    owners: dict[str, set[tuple[str, ...]]] = {}
    for dist in dists:
        for file in dist.files or []:
            if file.parts[0] != "..":  # scripts: written below, for this venv's python
                owners.setdefault(file.parts[0], set()).add(file.parts[:2])
    source = Path(str(dists[0].locate_file("")))
    for top, entries in owners.items():
        if len({dist for dist in dists if any(f.parts[0] == top for f in dist.files or [])}) == 1:
            (site / top).symlink_to(source / top)
            continue
        (site / top).mkdir(exist_ok=True)
        for entry in {e for e in entries if len(e) == 2}:
            (site / Path(*entry)).symlink_to(source / Path(*entry))
    for dist in dists:
        for point in dist.entry_points.select(group="console_scripts"):
            head = point.attr.split(".")[0]
            script = prefix / "bin" / point.name
            script.write_text(
                f"#!{prefix / 'bin' / 'python'}\nimport sys\nfrom {point.module} import {head}\n"
                f"sys.exit({point.attr}())\n"
            )
            script.chmod(0o755)


def torch_image() -> ImageVenv:
    """A user's PyTorch image (pytorch/pytorch): Python, pip and torch, no cube-jupyter. Its torch is
    the one this checkout's venv has from the same pin (the `examples` extra): exactly the
    distributions `pip install torch` brings, linked in, so the image costs no second download of
    several GB, nor the disk for it."""
    dists = requirement_closure(TORCH)
    recipe = [TORCH, *sorted(f"{d.metadata['Name']}=={d.version}" for d in dists)]
    return cached_venv("torch", recipe, lambda prefix: link_distributions(prefix, dists))


def workbench_image() -> ImageVenv:
    """The workbench image (images/workbench) installs the full package, as this checkout's venv does:
    the environment running the tests stands for it."""
    return ImageVenv(Path(sys.prefix))


def layered_image(name: str, *layers: ImageVenv) -> ImageVenv:
    """An image built FROM the first layer with the others' packages added (as ghcr.io/cube-jupyter/
    notebook-gpu is PyTorch's image plus cube-jupyter): a venv whose site-packages lists theirs."""
    sites = [str(layer.prefix / "lib" / f"python{PYTHON}" / "site-packages") for layer in layers]

    def install(prefix: Path) -> None:
        (prefix / "lib" / f"python{PYTHON}" / "site-packages" / "layers.pth").write_text(
            "\n".join(sites) + "\n"
        )

    return cached_venv(name, sites, install)

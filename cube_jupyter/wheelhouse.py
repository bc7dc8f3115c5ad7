"""The runtime's wheelhouse: cube-jupyter's wheel and the wheels of what its runtime imports
(`images/runtime/requirements.txt`), for several CPython versions, with a lock file saying which
wheels each version installs. It lets a pod whose image has Python but not cube-jupyter get the
runtime from the cluster itself, never from the internet at run time:

    python -m cube_jupyter.wheelhouse build --wheel dist/cube_jupyter-*.whl \\
        --requirements images/runtime/requirements.txt --python 3.11 --python 3.12 --dest DIR
    python -m cube_jupyter.wheelhouse copy DEST     # in an init container of the runtime image
    python -m cube_jupyter.wheelhouse upload s3://BUCKET/PREFIX   # once, for Kubeflow Pipelines

The runtime image builds it at `WHEELHOUSE` (and installs itself from it, as pods do); a second init
container, in the user's image, runs `install_argv`: pip picks the wheels matching that image's
Python from the lock's environment markers (`kube.pods.runtime_injection` renders both). KFP has no
init containers: its steps import the wheelhouse from the object store as an artifact
(`CubePipelines.kfp_runtime_wheels`, where `upload` puts it) and install it the same way
(`pipelines.kubernetes.kfp_runtime`).
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

# Where the runtime image keeps it: under its Python's prefix, like a package's shared data.
WHEELHOUSE = Path(sys.prefix) / "share" / "cube-jupyter" / "wheels"
LOCK = "runtime.lock"
PACKAGE = "cube-jupyter"
# The oldest glibc the wheels may need (manylinux_2_17 is CentOS 7's; 2_28 is Debian 10's, RHEL 8's).
MANYLINUX_GLIBC = range(28, 16, -1)
# The object stores `upload` writes to: S3 endpoints (KFP's minio:// is its in-cluster MinIO's S3 API).
UPLOAD_SCHEMES = ("s3", "minio")
# A wheel's file name: name, version, optional build tag, then python, abi and platform tags.
WHEEL_FILE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def install_argv(wheels: str, site: str) -> list[str]:
    """What runs in the user's image: install the lock's wheels for its Python into `site`, offline.
    `--no-deps`: the lock is already each version's whole closure (the package's own server-side
    dependencies are left out on purpose)."""
    return [
        "python",
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--find-links",
        wheels,
        "--target",
        site,
        "-r",
        f"{wheels}/{LOCK}",
    ]


def runtime_paths(site: str) -> dict[str, str]:
    """Where a process finds the runtime `install_argv` put into `site`: its modules, and its
    kernelspecs ("Python 3 (cube-jupyter)")."""
    return {"PYTHONPATH": site, "JUPYTER_PATH": f"{site}/share/jupyter"}


def copy_argv(wheels: str) -> list[str]:
    """What runs in the runtime image: hand its wheelhouse over to a shared volume."""
    return ["python", "-m", "cube_jupyter.wheelhouse", "copy", wheels]


def distribution(wheel: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel file name."""
    match = WHEEL_FILE.match(wheel)
    if match is None:
        raise ValueError(f"{wheel!r} is not a wheel file name")
    return re.sub(r"[-_.]+", "-", match["name"]).lower(), match["version"]


def platforms(machine: str) -> list[str]:
    """pip's --platform values for glibc Linux on `machine` (pip does not widen manylinux_2_X itself)."""
    return [f"manylinux_2_{minor}_{machine}" for minor in MANYLINUX_GLIBC] + [f"manylinux2014_{machine}"]


def lock_text(closures: dict[str, list[str]], package: str) -> str:
    """The lock: one `name==version` line per distribution, marked with the Python versions whose
    closure holds it, so one file serves them all. Every line is marked, cube-jupyter's too: on a
    Python the wheelhouse has no wheels for, pip says so ("Ignoring ...: markers ... don't match")
    instead of failing on some dependency's missing wheel."""
    versions: dict[tuple[str, str], set[str]] = defaultdict(set)
    for python, wheels in closures.items():
        for wheel in [package, *wheels]:
            versions[distribution(wheel)].add(python)
    lines = []
    for (name, version), pythons in sorted(versions.items()):
        marker = " or ".join(f'python_version == "{p}"' for p in sorted(pythons, key=_version_key))
        lines.append(f"{name}=={version} ; {marker}")
    return "\n".join(lines) + "\n"


def _version_key(python: str) -> tuple[int, ...]:
    return tuple(int(part) for part in python.split("."))


def build(
    wheel: Path, requirements: Path, pythons: Sequence[str], dest: Path, machine: str | None = None
) -> None:
    """Download the wheels of `requirements`' closure for each CPython version into `dest`, with
    cube-jupyter's `wheel` and the lock. Only wheels (`--only-binary`): the user's image may have no
    compiler."""
    dest.mkdir(parents=True, exist_ok=True)
    arch = platforms(machine or platform.machine())
    closures: dict[str, list[str]] = {}
    for python in pythons:
        with tempfile.TemporaryDirectory() as scratch:
            argv = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
            argv += ["--implementation", "cp", "--python-version", python, "--dest", scratch]
            for tag in arch:
                argv += ["--platform", tag]
            subprocess.run([*argv, "-r", str(requirements)], check=True)
            closures[python] = sorted(path.name for path in Path(scratch).glob("*.whl"))
            for path in Path(scratch).glob("*.whl"):
                shutil.copy2(path, dest / path.name)
    shutil.copy2(wheel, dest / wheel.name)
    (dest / LOCK).write_text(lock_text(closures, wheel.name))


def _check_wheelhouse(source: Path) -> None:
    if not (source / LOCK).is_file():
        raise SystemExit(
            f"cube-jupyter: there is no runtime wheelhouse at {source} (no {LOCK}); run this in the "
            "cube-jupyter runtime image (CubeWorkload.runtime_image)"
        )


def copy(dest: Path, source: Path = WHEELHOUSE) -> None:
    """Copy the wheelhouse to `dest` (an init container's shared volume)."""
    _check_wheelhouse(source)
    shutil.copytree(source, dest, dirs_exist_ok=True)


def upload(dest: str, source: Path = WHEELHOUSE) -> list[str]:
    """Put the wheelhouse's files under `dest` (s3:// or minio://bucket/prefix), where KFP steps
    import it from (CubePipelines.kfp_runtime_wheels); the keys written. The endpoint and credentials
    are CubeStorage's as a pod reads them from its environment (MINIO_ENDPOINT, AWS_ACCESS_KEY_ID,
    ...)."""
    # Imported here: `build` runs where only cube-jupyter's wheel is installed, without its dependencies.
    from cube_jupyter.errors import InvalidInput
    from cube_jupyter.storage import open_store

    _check_wheelhouse(source)
    parts = urlsplit(dest.strip())
    if parts.scheme not in UPLOAD_SCHEMES:
        hint = " (for gs://, copy the folder with `gcloud storage cp -r`)" if parts.scheme == "gs" else ""
        raise InvalidInput(
            f"dest {dest!r} must be an S3 location, {' or '.join(s + '://' for s in UPLOAD_SCHEMES)}"
            f"bucket/prefix{hint}",
            field="dest",
        )
    store = open_store(parts._replace(scheme="s3").geturl())
    keys = []
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        key = path.relative_to(source).as_posix()
        store.put_file(key, path)
        keys.append(key)
    return keys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cube_jupyter.wheelhouse", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="download the wheelhouse (at image build time)")
    build_parser.add_argument("--wheel", type=Path, required=True, help="cube-jupyter's wheel")
    build_parser.add_argument("--requirements", type=Path, required=True, help="what the runtime imports")
    build_parser.add_argument("--python", action="append", required=True, help="a CPython version, e.g. 3.12")
    build_parser.add_argument("--dest", type=Path, default=WHEELHOUSE)
    build_parser.add_argument("--machine", help="the platform's machine (default: this one's, e.g. x86_64)")
    copy_parser = commands.add_parser("copy", help="copy the wheelhouse to a shared volume (at run time)")
    copy_parser.add_argument("dest", type=Path)
    upload_parser = commands.add_parser(
        "upload", help="put the wheelhouse in the object store, for Kubeflow Pipelines steps to import"
    )
    upload_parser.add_argument(
        "dest", help="s3:// or minio://bucket/prefix (CubePipelines.kfp_runtime_wheels)"
    )
    upload_parser.add_argument("--from", dest="source", type=Path, default=WHEELHOUSE, help="the wheelhouse")
    options = parser.parse_args(argv)
    if options.command == "build":
        build(options.wheel, options.requirements, options.python, options.dest, options.machine)
    elif options.command == "copy":
        copy(options.dest)
    else:
        _upload(options.dest, options.source)
    return 0


def _upload(dest: str, source: Path) -> None:
    """`upload`, a bad destination or an unreachable store said in one line, not a traceback."""
    from cube_jupyter.errors import CubeError

    try:
        keys = upload(dest, source)
    except CubeError as exc:
        raise SystemExit(f"cube-jupyter: {exc.message}") from None
    print(f"uploaded {len(keys)} files to {dest.strip().rstrip('/')}/")


if __name__ == "__main__":
    sys.exit(main())

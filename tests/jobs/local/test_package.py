"""Code shipped without a Dockerfile: what goes into a package, safe unpacking, and the entry that
runs it in a real child process, as a replica does."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from cube_jupyter.errors import InvalidInput, NotFound
from cube_jupyter.jobs import package
from cube_jupyter.storage.local import LocalStore

HELPER = "cube_test_pkg_helper"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's working directory with a local helper module, importable as in a notebook."""
    work = tmp_path / "work"
    (work / "mylib").mkdir(parents=True)
    (work / f"{HELPER}.py").write_text(
        "import mylib.scale\n\ndef double(x):\n    return mylib.scale.times(x, 2)\n"
    )
    (work / "mylib" / "__init__.py").write_text("")
    (work / "mylib" / "scale.py").write_text("def times(x, n):\n    return x * n\n")
    (work / "unused.py").write_text("raise RuntimeError('never shipped')\n")
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    yield work
    for name in [HELPER, "mylib", "mylib.scale"]:
        sys.modules.pop(name, None)


def shipped_function(out: str, label: str) -> None:
    """Runs on the replica: uses the local helper from the user's working directory."""
    import cube_test_pkg_helper

    Path(out, f"{label}-{os.environ.get('RANK', 'x')}.txt").write_text(str(cube_test_pkg_helper.double(21)))


def run_entry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "cube_jupyter.jobs.entry", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_function_ships_by_value_with_its_local_modules_only(workdir: Path, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    shipped = package.package_function(shipped_function, store)
    assert shipped.kind == "function" and shipped.target == package.FUNCTION_TARGET
    assert set(shipped.files) == {
        "function.pkl",
        f"{package.FUNCTION_MODULE}.py",
        f"{HELPER}.py",
        "mylib/__init__.py",
        "mylib/scale.py",
    }
    assert shipped.uri.startswith("file://") and store.exists(shipped.uri.split(str(store.root) + "/")[1])
    # The same code is stored once, under the same key.
    assert package.package_function(shipped_function, store).uri == shipped.uri

    elsewhere = tmp_path / "replica"
    elsewhere.mkdir()
    result = run_entry(
        "--package",
        shipped.uri,
        "--kind",
        "function",
        "--target",
        shipped.target,
        "--",
        str(elsewhere),
        "fn",
        cwd=elsewhere,
    )
    assert result.returncode == 0, result.stderr
    assert (elsewhere / "fn-x.txt").read_text() == "42"
    assert [p.name for p in elsewhere.iterdir()] == ["fn-x.txt"]  # the unpacked package is removed


def test_script_ships_with_sibling_modules_and_gets_its_args(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "helpers.py").write_text("def shout(s):\n    return s.upper()\n")
    (code / "train.py").write_text(
        "import sys\nfrom helpers import shout\nprint(shout(' '.join(sys.argv[1:])))\n"
        "raise SystemExit(7 if '--fail' in sys.argv else 0)\n"
    )
    shipped = package.package_file(code / "train.py", LocalStore(tmp_path / "store"))
    assert (shipped.kind, shipped.target, set(shipped.files)) == (
        "script",
        "train.py",
        {"train.py", "helpers.py"},
    )
    ok = run_entry(
        "--package", shipped.uri, "--kind", "script", "--target", "train.py", "--", "a", "b", cwd=tmp_path
    )
    assert (ok.returncode, ok.stdout) == (0, "A B\n")
    failed = run_entry(
        "--package", shipped.uri, "--kind", "script", "--target", "train.py", "--", "--fail", cwd=tmp_path
    )
    assert failed.returncode == 7


def test_a_cell_ships_as_a_script(workdir: Path, tmp_path: Path) -> None:
    shipped = package.package_source(
        f"import {HELPER}\nprint({HELPER}.double(5))\n", LocalStore(tmp_path / "s")
    )
    assert (shipped.kind, shipped.target) == ("script", "cell.py")
    assert "mylib/scale.py" in shipped.files and "unused.py" not in shipped.files
    result = run_entry("--package", shipped.uri, "--kind", "script", "--target", "cell.py", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "10\n")


def test_a_raising_function_fails_the_replica_with_its_traceback(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "jobcode.py").write_text("def main(*args):\n    raise ValueError('bad data ' + ','.join(args))\n")
    shipped = package.package_module_function("jobcode:main", LocalStore(tmp_path / "s"), base_dir=code)
    assert shipped.files == ("jobcode.py",)
    result = run_entry(
        "--package", shipped.uri, "--kind", "function", "--target", "jobcode:main", "--", "x", cwd=tmp_path
    )
    assert result.returncode == 1
    assert "ValueError: bad data x" in result.stderr


def test_notebook_runs_with_papermill_parameters(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "nbhelper.py").write_text("def square(x):\n    return x * x\n")
    notebook = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("n = 1")
    params.metadata["tags"] = ["parameters"]
    notebook.cells = [
        params,
        nbformat.v4.new_code_cell("import nbhelper\nopen('result.txt', 'w').write(str(nbhelper.square(n)))"),
    ]
    nbformat.write(notebook, str(code / "job.ipynb"))
    shipped = package.package_file(code / "job.ipynb", LocalStore(tmp_path / "s"))
    assert set(shipped.files) == {"job.ipynb", "nbhelper.py"}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = run_entry(
        "--package",
        shipped.uri,
        "--kind",
        "notebook",
        "--target",
        "job.ipynb",
        "--",
        "-p",
        "n",
        "7",
        cwd=run_dir,
    )
    assert result.returncode == 0, result.stderr
    assert (run_dir / "result.txt").read_text() == "49"


def _tar(members: list[tarfile.TarInfo], data: bytes = b"x") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return out.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize(
    "member",
    [
        _file("../escape.py"),
        _file("/etc/cube-escape"),
        _file("ok/../../escape.py"),
        _link("link", "/etc/passwd", tarfile.SYMTYPE),
        _link("hard", "/etc/passwd", tarfile.LNKTYPE),
    ],
    ids=["dotdot", "absolute", "nested-dotdot", "symlink", "hardlink"],
)
def test_unsafe_archives_are_refused_and_nothing_lands_outside(
    tmp_path: Path, member: tarfile.TarInfo
) -> None:
    dest = tmp_path / "dest"
    with pytest.raises(InvalidInput) as err:
        package.extract_archive(_tar([_file("fine.py"), member]), dest)
    assert err.value.field == "package"
    assert not (tmp_path / "escape.py").exists() and not Path("/etc/cube-escape").exists()
    assert list(dest.iterdir()) == []  # checked before anything is written


def test_fetch_package_errors_name_the_package(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        package.fetch_package((tmp_path / "missing.tar.gz").as_uri(), tmp_path / "d")
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(InvalidInput) as err:
        package.fetch_package(str(tmp_path / "junk.tar.gz"), tmp_path / "d")
    assert err.value.field == "package"
    with pytest.raises(InvalidInput):
        package.fetch_package("ftp://host/x.tar.gz", tmp_path / "d")


def test_installed_modules_are_never_shipped(tmp_path: Path) -> None:
    shipped = package.package_source(
        "import json\nimport numpy\nimport cube_jupyter\n", LocalStore(tmp_path / "s"), base_dir=tmp_path
    )
    assert shipped.files == ("cell.py",)


def test_a_replica_fetches_its_package_from_s3_with_credentials_from_its_env(tmp_path: Path) -> None:
    from cube_jupyter.storage import CubeStorage
    from cube_jupyter.storage.s3 import S3Store
    from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, s3_server

    code = tmp_path / "code"
    code.mkdir()
    (code / "s3job.py").write_text("print('from s3')\n")
    with s3_server() as server:
        bucket = server.new_bucket()
        storage = CubeStorage(endpoint=server.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)
        shipped = package.package_file(code / "s3job.py", S3Store(bucket, "team/artifacts", storage))
        assert shipped.uri.startswith(f"s3://{bucket}/team/artifacts/packages/")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MINIO_"))},
            "MINIO_ENDPOINT": server.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "cube_jupyter.jobs.entry",
                "--package",
                shipped.uri,
                "--kind",
                "script",
                "--target",
                "s3job.py",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert (result.returncode, result.stdout) == (0, "from s3\n"), result.stderr
    assert SECRET_KEY not in result.stdout + result.stderr

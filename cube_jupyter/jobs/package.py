"""Ship code to training replicas without a Dockerfile (Fairing's idea), as one tar.gz artifact.

A function (pickled by value with cloudpickle), a notebook cell's source, a script or a notebook is
packed with the local modules it imports — modules found under its working directory, never
installed ones (site-packages, the standard library) — and put in the artifact store under a key
derived from its content, so the same code is stored once. A replica fetches it with
`fetch_package` and runs it through `python -m cube_jupyter.jobs.entry`.

    shipped = package_function(train, open_store(None))
    shipped.uri, shipped.kind, shipped.target   # what entry's --package/--kind/--target take
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib.util
import io
import os
import sys
import sysconfig
import tarfile
import tempfile
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

from cube_jupyter.errors import InvalidInput, NotFound

if TYPE_CHECKING:  # a replica's entry imports this module: it stays light (no traitlets, no cloudpickle)
    from cube_jupyter.jobs.training_spec import TrainingSpec
    from cube_jupyter.storage import ArtifactStore, CubeStorage

PackageKind = Literal["script", "notebook", "function"]
FUNCTION_FILE = "function.pkl"
# A pickled function travels as a module that loads it, so every function target is `module:function`.
FUNCTION_MODULE = "cube_shipped_function"
FUNCTION_TARGET = f"{FUNCTION_MODULE}:function"
FUNCTION_LOADER = (
    '"""Loads the function shipped by cube_jupyter.jobs.package (cloudpickle, by value)."""\n'
    "import pathlib\n\nimport cloudpickle\n\n"
    f"function = cloudpickle.loads(pathlib.Path(__file__).with_name({FUNCTION_FILE!r}).read_bytes())\n"
)
CELL_FILE = "cell.py"
KEY_PREFIX = "packages"
MAX_PACKAGE_BYTES = 64 * 1024 * 1024  # code, not data: a package this big is a mistake


@dataclass(frozen=True)
class ShippedCode:
    """Where a package lives and how `entry` runs it: `--package uri --kind kind --target target`."""

    uri: str
    kind: PackageKind
    target: str
    files: tuple[str, ...]  # archive members, for the user to see what was shipped


# -- finding local modules ---------------------------------------------------------------------------


def _installed_roots() -> list[Path]:
    """Directories whose modules are installed ones, never shipped."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(name)
        if path:
            roots.add(path)
    return [Path(r).resolve() for r in roots]


def is_local_file(path: Path, base_dir: Path) -> bool:
    """True when `path` is under `base_dir` and not installed code (a venv inside the working
    directory is still installed code)."""
    return path.resolve().is_relative_to(base_dir.resolve()) and not _is_installed(path)


def _is_installed(path: Path) -> bool:
    resolved = path.resolve()
    if {"site-packages", "dist-packages"} & set(resolved.parts):
        return True
    return any(resolved.is_relative_to(root) for root in _installed_roots())


def _imported_names(source: str, filename: str) -> set[str]:
    """Top-level module names a source imports (absolute imports only; relative ones stay inside a
    package that is shipped whole)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise InvalidInput(
            f"{filename} is not valid Python: {exc.msg} (line {exc.lineno})", field="code"
        ) from None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _python_files(package_dir: Path) -> list[Path]:
    return sorted(p for p in package_dir.rglob("*.py") if p.is_file() and "__pycache__" not in p.parts)


def _module_members(name: str, search: list[Path], base_dir: Path) -> dict[str, Path]:
    """Archive path → file for local top-level module `name`: found as `name.py` or package `name/`
    in the `search` directories first, then where this interpreter would import it from; {} when
    it is not local (installed, built in, or nowhere)."""
    for root in search:
        if (root / f"{name}.py").is_file():
            return {f"{name}.py": root / f"{name}.py"} if is_local_file(root / f"{name}.py", base_dir) else {}
        if (root / name / "__init__.py").is_file():
            if not is_local_file(root / name, base_dir):
                return {}
            return {p.relative_to(root).as_posix(): p for p in _python_files(root / name)}
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return {}
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    if origin is None or origin.suffix != ".py" or not is_local_file(origin, base_dir):
        return {}
    if spec is not None and spec.submodule_search_locations is not None:
        return {p.relative_to(origin.parent.parent).as_posix(): p for p in _python_files(origin.parent)}
    return {origin.name: origin}


def local_modules(
    sources: Iterable[tuple[str, str]], base_dir: Path, search: Iterable[Path] = ()
) -> dict[str, Path]:
    """Archive path → file of every local module the `(source, filename)` pairs import, followed
    transitively; `search` directories are looked in before this interpreter's import path."""
    roots = [Path(p) for p in search]
    found: dict[str, Path] = {}
    queue = list(sources)
    seen: set[str] = set()
    while queue:
        source, filename = queue.pop()
        for name in sorted(_imported_names(source, filename) - seen):
            seen.add(name)
            for member, path in _module_members(name, roots, base_dir).items():
                if member not in found:
                    found[member] = path
                    queue.append((path.read_text(encoding="utf-8"), str(path)))
    return found


# -- building and storing archives -------------------------------------------------------------------


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = 0  # reproducible: the same code gives the same archive and key
    tar.addfile(info, io.BytesIO(data))


def build_archive(members: dict[str, bytes]) -> bytes:
    """A reproducible tar.gz of `members` (archive path → bytes), sorted, without owners or times."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            _add_bytes(tar, name, members[name])
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def _read_members(files: dict[str, Path]) -> dict[str, bytes]:
    return {member: path.read_bytes() for member, path in files.items()}


def store_package(
    members: dict[str, bytes], kind: PackageKind, target: str, store: ArtifactStore
) -> ShippedCode:
    """Archive `members` and put them in `store` under `packages/{sha256}.tar.gz` (once)."""
    data = build_archive(members)
    if len(data) > MAX_PACKAGE_BYTES:
        raise InvalidInput(
            f"the code package is {len(data) // (1024 * 1024)} MiB; ship code, and read data from a volume "
            f"or the artifact store (limit {MAX_PACKAGE_BYTES // (1024 * 1024)} MiB)",
            field="code",
        )
    key = f"{KEY_PREFIX}/{hashlib.sha256(data).hexdigest()}.tar.gz"
    if not store.exists(key):
        store.put(key, data)
    return ShippedCode(uri=store.url(key), kind=kind, target=target, files=tuple(sorted(members)))


# -- what users ship ---------------------------------------------------------------------------------


def _module_of(obj: Any) -> types.ModuleType | None:
    name = getattr(obj, "__module__", None)
    return sys.modules.get(name) if isinstance(name, str) else None


def _module_file(module: types.ModuleType | None) -> Path | None:
    path = getattr(module, "__file__", None) if module is not None else None
    return Path(path) if isinstance(path, str) and path.endswith(".py") else None


def package_function(
    fn: Callable[..., Any], store: ArtifactStore, *, base_dir: str | Path | None = None
) -> ShippedCode:
    """Ship `fn` by value plus the local modules (under `base_dir`, default the working directory)
    that it and its module import. Its own module is pickled by value unless installed, so a
    function defined in a notebook, a test or a script needs no import path on the replica."""
    import cloudpickle

    if not callable(fn):
        raise InvalidInput(f"code must be a function, got {type(fn).__name__}", field="code")
    base = Path(base_dir or os.getcwd()).resolve()
    own_module = _module_of(fn)
    own_file = _module_file(own_module)
    sources: list[tuple[str, str]] = []
    if own_file is not None and own_file.is_file():
        sources.append((own_file.read_text(encoding="utf-8"), str(own_file)))
    for value in list(getattr(fn, "__globals__", {}).values()):
        module = value if isinstance(value, types.ModuleType) else _module_of(value)
        if module is not None and module is not own_module:
            sources.append((f"import {module.__name__.split('.')[0]}", f"<global {module.__name__}>"))
    found = local_modules(sources, base, [base])
    if own_file is not None:
        found = {m: p for m, p in found.items() if p.resolve() != own_file.resolve()}
    by_value = own_module is not None and own_module.__name__ != "__main__"
    by_value = by_value and not (own_file is not None and _is_installed(own_file))
    if by_value:
        cloudpickle.register_pickle_by_value(own_module)
    try:
        pickled = cloudpickle.dumps(fn)
    except Exception as exc:
        raise InvalidInput(f"function {fn!r} cannot be shipped: {exc}", field="code") from None
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(own_module)
    members = _read_members(found)
    members[FUNCTION_FILE] = pickled
    members[f"{FUNCTION_MODULE}.py"] = FUNCTION_LOADER.encode()
    return store_package(members, "function", FUNCTION_TARGET, store)


def package_module_function(
    target: str, store: ArtifactStore, *, base_dir: str | Path | None = None
) -> ShippedCode:
    """Ship the local module of a `module:function` target (under `base_dir`) with the local
    modules it imports; the replica imports it from the package."""
    module, _, function = target.partition(":")
    if not module or not function:
        raise InvalidInput(f"function {target!r} must be 'module:function'", field="function")
    base = Path(base_dir or os.getcwd()).resolve()
    found = local_modules([(f"import {module}", "<function>")], base, [base])
    if not found:
        raise NotFound(f"function {target!r}: module {module!r} is not under {base}", field="function")
    return store_package(_read_members(found), "function", target, store)


def package_source(source: str, store: ArtifactStore, *, base_dir: str | Path | None = None) -> ShippedCode:
    """Ship a notebook cell's source as a script (`cell.py`) with the local modules it imports."""
    if not isinstance(source, str) or not source.strip():
        raise InvalidInput("the cell to ship is empty", field="code")
    base = Path(base_dir or os.getcwd()).resolve()
    members = _read_members(local_modules([(source, CELL_FILE)], base, [base]))
    members[CELL_FILE] = source.encode()
    return store_package(members, "script", CELL_FILE, store)


def package_file(path: str | os.PathLike[str], store: ArtifactStore) -> ShippedCode:
    """Ship a script (.py) or a notebook (.ipynb) with the sibling local modules it imports."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise NotFound(f"code file {str(path)!r} does not exist", field="code.path")
    base = file.parent.resolve()
    if file.suffix == ".py":
        kind: PackageKind = "script"
        sources = [(file.read_text(encoding="utf-8"), str(file))]
    elif file.suffix == ".ipynb":
        kind = "notebook"
        sources = _notebook_sources(file)
    else:
        raise InvalidInput(
            f"code file {file.name!r} must be a .py script or an .ipynb notebook", field="code.path"
        )
    found = local_modules(sources, base, [base])
    members = _read_members({m: p for m, p in found.items() if p.resolve() != file.resolve()})
    members[file.name] = file.read_bytes()
    return store_package(members, kind, file.name, store)


def _notebook_sources(path: Path) -> list[tuple[str, str]]:
    import nbformat

    try:
        notebook = nbformat.read(str(path), as_version=4)
    except Exception as exc:
        raise InvalidInput(f"notebook {path.name!r} cannot be read: {exc}", field="code.path") from None
    sources = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            # IPython magics and shell escapes are not Python: drop those lines before parsing.
            lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            sources.append(("\n".join(lines), f"{path.name}[cell {index}]"))
    return sources


# -- fetching and unpacking --------------------------------------------------------------------------


def _check_member(member: tarfile.TarInfo) -> None:
    """Only regular files and directories at safe relative paths: no links, devices, '..' or '/'."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or "\\" in member.name or not member.name:
        raise InvalidInput(f"package member {member.name!r} escapes the package directory", field="package")
    if not (member.isfile() or member.isdir()):
        raise InvalidInput(
            f"package member {member.name!r} is a link or device; only files are shipped", field="package"
        )


def extract_archive(data: bytes, dest: str | Path) -> Path:
    """Unpack a package into `dest` (created), refusing anything that would land outside it."""
    target = Path(dest)
    target.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member)
            tar.extractall(target, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise InvalidInput(f"package is not a valid tar.gz archive: {exc}", field="package") from None
    return target


def read_package(uri: str, storage: CubeStorage | None = None) -> bytes:
    """The bytes of the package at `uri`: a file:// URL or path, or s3://bucket/key (credentials
    from the environment, as a step pod gets them)."""
    parts = urlsplit(uri)
    if parts.scheme == "s3":
        from cube_jupyter.storage import open_store

        key = unquote(parts.path).lstrip("/")
        store = open_store(f"s3://{parts.netloc}", storage, check=False)
        return store.get(key)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
    elif parts.scheme == "":
        path = Path(uri)
    else:
        raise InvalidInput(f"package {uri!r}: unsupported scheme {parts.scheme!r}", field="package")
    try:
        return path.read_bytes()
    except OSError:
        raise NotFound(f"package {uri!r} not found", field="package") from None


def fetch_package(uri: str, dest: str | Path, storage: CubeStorage | None = None) -> Path:
    """Download the package at `uri` and unpack it safely into `dest`."""
    return extract_archive(read_package(uri, storage), dest)


def new_package_dir(parent: str | Path | None = None) -> Path:
    """A fresh directory to unpack one replica's package into."""
    return Path(tempfile.mkdtemp(prefix="cube-package-", dir=parent))


def ship_training_code(spec: TrainingSpec, store: ArtifactStore, code_dir: Path) -> TrainingSpec:
    """The spec with its script, notebook or function shipped to `store`: `package_uri` set and the
    target named as the package holds it (a script `src/train.py` travels as `train.py`). Commands,
    and code already packaged, are left as they are (they are in the image, or shipped already)."""
    from dataclasses import replace

    code = spec.code
    if code.kind == "command" or code.package_uri:
        return spec
    if code.kind == "function":
        shipped = package_module_function(code.target, store, base_dir=code_dir)
        return replace(spec, code=replace(code, package_uri=shipped.uri))
    shipped = ship_spec_file(code.target, code_dir, store, code.kind)
    return replace(spec, code=replace(code, package_uri=shipped.uri, path=shipped.target))


def ship_spec_file(name: str, code_dir: Path, store: ArtifactStore, field: str) -> ShippedCode:
    """Ship the script or notebook a spec names (relative to `code_dir`); a missing file is bad input
    naming the spec's own field (`script`, `notebook`, `trial.notebook`)."""
    path = Path(name)
    path = path if path.is_absolute() else code_dir / path
    if not path.is_file():
        raise InvalidInput(f"{field} {name!r} is not a file in {code_dir}", field=field)
    return package_file(path, store)


def ship_to_cluster(spec: Any, storage: CubeStorage, code_dir: Path) -> Any:
    """A training or tuning spec whose code is a local script, notebook or function, with that code
    shipped to the S3 store the replicas' pods read (`CubeStorage.url`); commands (in the image) and
    code already packaged go as they are. Pods cannot read this machine's disk, so a local store is
    an error naming the spec's field."""
    from dataclasses import replace

    from cube_jupyter.jobs.training_spec import TrainingSpec
    from cube_jupyter.jobs.tuning_spec import TuningSpec

    if isinstance(spec, TrainingSpec):
        if spec.code.kind == "command" or spec.code.package_uri:
            return spec
        return ship_training_code(spec, _cluster_store(storage, spec.code.kind), code_dir)
    if isinstance(spec, TuningSpec):
        if spec.trial_training is not None:
            return replace(spec, trial_training=ship_to_cluster(spec.trial_training, storage, code_dir))
        if spec.trial_notebook and not spec.trial_package_uri:
            store = _cluster_store(storage, "trial.notebook")
            shipped = ship_spec_file(spec.trial_notebook, code_dir, store, "trial.notebook")
            return replace(spec, trial_package_uri=shipped.uri, trial_notebook=shipped.target)
    return spec


def _cluster_store(storage: CubeStorage, field: str) -> ArtifactStore:
    from cube_jupyter.storage import open_store

    if not storage.url.strip().startswith("s3://"):
        raise InvalidInput(
            f"shipping the {field} to the cluster needs an artifact store its pods can read: set "
            "c.CubeStorage.url = 's3://bucket/prefix', or run a command that is in the image",
            field=field,
        )
    return open_store(storage.url, storage)

"""A local directory as the artifact store: the default, under the Jupyter data dir.

Writes go to a temporary file first and are renamed into place, so a reader (a parallel step, a
cache lookup) never sees half an artifact.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from cube_jupyter.errors import BackendUnavailable, InvalidInput, NotFound, quote
from cube_jupyter.storage.base import validate_key

# Kernel and device filesystems: never artifact stores, and their paths name processes and devices.
SYSTEM_DIRS = tuple(Path(name) for name in ("/proc", "/sys", "/dev"))


class LocalStore:
    """Artifacts as files below `root` (created on open)."""

    def __init__(self, root: str | Path) -> None:
        # Messages name the path as given: resolving `/proc/self/...` would tell the server's PID.
        given = quote(str(root))
        self.root = Path(root).expanduser().resolve()
        if any(self.root.is_relative_to(system) for system in SYSTEM_DIRS):
            raise InvalidInput(
                f"store {given} is a system directory, not a place for artifacts", field="store"
            )
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InvalidInput(
                f"store {given} is not a directory (it, or a folder above it, is a file)", field="store"
            ) from None
        except OSError as exc:
            raise BackendUnavailable(
                f"artifact store {given} cannot be created: {exc.strerror or type(exc).__name__}",
                field="store",
            ) from None

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    def put(self, key: str, data: bytes) -> None:
        self._write(key, lambda out: out.write(data))

    def put_file(self, key: str, path: str | Path) -> None:
        with open(path, "rb") as src:
            self._write(key, lambda out: shutil.copyfileobj(src, out, 1 << 20))

    def _write(self, key: str, fill: Callable[[BinaryIO], object]) -> None:
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out:
                    fill(out)
                os.replace(tmp, target)
            except BaseException:
                os.unlink(tmp)
                raise
        except (IsADirectoryError, NotADirectoryError):
            raise BackendUnavailable(
                f"artifact store {self.url()}: {key!r} clashes with an existing key", field="key"
            ) from None
        except PermissionError as exc:
            raise BackendUnavailable(f"artifact store {self.url()} is not writable: {exc}") from None

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFound(f"artifact {key!r} not found in store {self.url()}", field="key") from None

    def get_file(self, key: str, path: str | Path) -> None:
        source = self._path(key)
        if not source.is_file():
            raise NotFound(f"artifact {key!r} not found in store {self.url()}", field="key")
        shutil.copyfile(source, path)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        validate_key(prefix, prefix=True)
        base = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not base.is_dir():
            return []
        keys = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    continue
                key = Path(dirpath, name).relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def url(self, key: str = "") -> str:
        return (self._path(key) if key else self.root).as_uri()

    def check(self) -> None:
        if not (self.root.is_dir() and os.access(self.root, os.W_OK | os.X_OK)):
            raise BackendUnavailable(
                f"artifact store {quote(str(self.root))} is not a writable directory any more", field="store"
            )

    def kernel_env(self) -> dict[str, str]:
        return {}

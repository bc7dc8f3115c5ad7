"""The artifact-store protocol every backend implements, and the one rule for keys.

Keys are relative, '/'-separated paths (`runs/{run_id}/outputs/{step}/{var}`); a key never climbs
out of the store (`..`), so a local store maps it onto a path and an S3 store onto an object name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol, runtime_checkable

from cube_jupyter.errors import InvalidInput

_SEGMENT = re.compile(r"^[A-Za-z0-9_.=+@,-]+$")


@runtime_checkable
class ArtifactStore(Protocol):
    """Bytes under keys. Missing key → NotFound; store unreachable → BackendUnavailable."""

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str = "") -> list[str]:
        """Keys under `prefix` (a key prefix, not only a folder), sorted."""
        ...

    def url(self, key: str = "") -> str:
        """The URL of `key`; of the store itself for "" (what `open_store` reopens elsewhere)."""
        ...

    def put_file(self, key: str, path: str | Path) -> None: ...

    def get_file(self, key: str, path: str | Path) -> None: ...

    def check(self) -> None:
        """Fail now, with a message naming the fault, if the store cannot be used."""
        ...

    def kernel_env(self) -> dict[str, str]:
        """Env vars another process (a step's kernel) needs to reopen this store from `url()`."""
        ...


def validate_key(key: object, *, prefix: bool = False) -> str:
    """Return `key` if it is a safe relative key; `prefix=True` also allows "" and a trailing '/'."""
    if not isinstance(key, str):
        raise InvalidInput(f"artifact key must be a string, got {type(key).__name__}", field="key")
    if prefix and key == "":
        return key
    body = key[:-1] if prefix and key.endswith("/") else key
    parts = body.split("/")
    if not body or any(p in ("", ".", "..") or not _SEGMENT.match(p) for p in parts):
        raise InvalidInput(
            f"artifact key {key!r} is not a relative path of names made of letters, digits and '_.=+@,-' "
            "(no '..', no empty parts)",
            field="key",
        )
    return key

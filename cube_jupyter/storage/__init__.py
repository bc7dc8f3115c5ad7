"""Artifact stores for pipeline runs: `open_store(url)` gives a local directory or an S3 bucket.

store = open_store("s3://ml-artifacts/pipelines", CubeStorage(config=config))
store.put("runs/r1/outputs/prepare/df", data)
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from jupyter_core.paths import jupyter_data_dir

from cube_jupyter.errors import InvalidInput, quote
from cube_jupyter.safe_text import check_text
from cube_jupyter.storage.base import ArtifactStore, validate_key
from cube_jupyter.storage.config import CubeStorage

__all__ = ["ArtifactStore", "CubeStorage", "default_store_dir", "open_store", "validate_key"]


def default_store_dir() -> Path:
    return Path(jupyter_data_dir()) / "cube-jupyter" / "artifacts"


def open_store(url: str | None, storage: CubeStorage | None = None, *, check: bool = True) -> ArtifactStore:
    """The store at `url` (None/"": `storage.url`, then the default local directory).

    A path or file:// URL → local directory; s3://bucket/prefix → S3 through the minio SDK, reached
    once at open (`check`) so an unreachable endpoint fails here with BackendUnavailable.
    """
    storage = storage or CubeStorage()
    url = check_text((url or storage.url or "").strip(), "store")
    if not url:
        from cube_jupyter.storage.local import LocalStore

        return LocalStore(default_store_dir())
    parts = urlsplit(url)
    if parts.scheme == "s3":
        from cube_jupyter.storage.s3 import S3Store

        if not parts.netloc or parts.query or parts.fragment:
            raise InvalidInput(f"store {quote(url)} must look like s3://bucket/prefix", field="store")
        s3 = S3Store(parts.netloc, check_text(unquote(parts.path), "store"), storage)
        if check:
            s3.check()
        return s3
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise InvalidInput(f"store {quote(url)} must be a local file:///absolute/path", field="store")
        path = check_text(unquote(parts.path), "store")
    elif parts.scheme == "" or (len(parts.scheme) == 1 and os.name == "nt"):
        path = url
    else:
        raise InvalidInput(
            f"store {quote(url)}: unsupported scheme {parts.scheme!r}; use a path, file:// or s3://bucket/prefix",
            field="store",
        )
    from cube_jupyter.storage.local import LocalStore

    return LocalStore(path)

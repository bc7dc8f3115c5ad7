"""Where the local backend keeps files, and with which permissions.

The state dir holds every child's token (in sqlite) and logs that may echo them: it is private to the
OS user running the workbench (0700, files 0600), whatever the umask. Paths are built here only, so
one user's files can never be named like another's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` if needed and make it 0700; each missing parent it creates is 0700 too."""
    for missing in reversed([p for p in (path, *path.parents) if not p.exists()]):
        missing.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        os.chmod(missing, PRIVATE_DIR)
    os.chmod(path, PRIVATE_DIR)
    return path


def private_file(path: Path) -> Path:
    """Create `path` empty if missing and make it 0600 (before anything secret is written to it)."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE))
    os.chmod(path, PRIVATE_FILE)
    return path


def open_private_append(path: Path) -> BinaryIO:
    """Open `path` for appending, creating it 0600 in a 0700 directory."""
    private_dir(path.parent)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)
    return os.fdopen(fd, "ab")


def log_path(state_dir: Path, slug: str, name: str) -> Path:
    """A server's log: one directory per user, so `a`/`b-c` and `a-b`/`c` never share a file."""
    return state_dir / "logs" / slug / f"{name}.log"


def user_workspaces(state_dir: Path, slug: str) -> Path:
    """Where one user's servers' workspaces are: what that user may read on a shared host."""
    return state_dir / "workspaces" / slug


def workspace_path(state_dir: Path, slug: str, name: str) -> Path:
    return user_workspaces(state_dir, slug) / name


def child_config_dir(state_dir: Path, slug: str, name: str) -> Path:
    """Where a server's config from the workbench lives (private: it may hold store credentials)."""
    return state_dir / "config" / slug / name


def child_runtime_dir(state_dir: Path, slug: str, name: str) -> Path:
    """A server's Jupyter runtime dir (private: its `jpserver-*` files and its kernels' connection
    files hold tokens and keys), never the one every process of the machine shares."""
    return state_dir / "runtime" / slug / name

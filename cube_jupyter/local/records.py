"""Local job records: one private directory per (user, name) under a kind's root, holding
`record.json` and whatever else the job keeps (logs, work files, revisions).

Training, tuning and serving all keep their state this one way. A record is replaced atomically
(write, then rename), so a reader — the server, the CLI, a tuning driver — never sees half of one; a
job's directory is made with an exclusive mkdir, so of two processes creating the same name one gets
a Conflict; deleting a job removes its directory, after which its supervisor's writes are refused.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
from pathlib import Path

from cube_jupyter.errors import Conflict
from cube_jupyter.local import files
from cube_jupyter.names import user_slug

RECORD = "record.json"


def write_record(directory: Path, text: str) -> bool:
    """Replace `directory`'s record with `text`; False when the directory is gone (deleted)."""
    partial = directory / f"{RECORD}.{os.getpid()}.partial"
    try:
        fd = os.open(partial, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, files.PRIVATE_FILE)
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "w") as stream:
        stream.write(text)
    try:
        os.replace(partial, directory / RECORD)
    except FileNotFoundError:
        return False
    return True


def read_record(directory: Path) -> str | None:
    """The record's text; None when the job has none (not created yet, or deleted)."""
    try:
        return (directory / RECORD).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None


class RecordStore:
    """The records of one kind of job under `root/{user_slug}/{name}/`."""

    def __init__(self, root: Path, what: str) -> None:
        self.root = root
        self.what = what  # "training job", for messages

    def directory(self, user: str, name: str) -> Path:
        return self.root / user_slug(user) / name

    def create(self, user: str, name: str, text: str) -> Path:
        """Make the job's directory (Conflict naming `name` when it exists) and its first record."""
        directory = self.directory(user, name)
        files.private_dir(directory.parent)
        try:
            directory.mkdir(mode=files.PRIVATE_DIR)
        except FileExistsError:
            raise Conflict(f"user {user!r} already has a {self.what} named {name!r}", field="name") from None
        os.chmod(directory, files.PRIVATE_DIR)
        write_record(directory, text)
        return directory

    def read(self, user: str, name: str) -> str | None:
        return read_record(self.directory(user, name))

    def write(self, user: str, name: str, text: str) -> bool:
        return write_record(self.directory(user, name), text)

    def list(self, user: str | None = None) -> list[str]:
        """Every record's text (of `user`'s jobs, or of all users' when None), by directory name."""
        pattern = f"{user_slug(user) if user else '*'}/*/{RECORD}"
        texts = []
        for path in sorted(self.root.glob(pattern)) if self.root.is_dir() else []:
            text = read_record(path.parent)
            if text is not None:
                texts.append(text)
        return texts

    def keys(self, user: str | None = None) -> builtins.list[tuple[str, str]]:
        """(user, name) of every record (of `user`'s jobs, or of all users' when None); a record that
        does not say whose it is, or says another user's, is passed over."""
        found = []
        for text in self.list(user):
            try:
                raw = json.loads(text)
                key = (str(raw["user"]), str(raw["name"]))
            except (ValueError, TypeError, KeyError):
                continue
            if user is None or key[0] == user:
                found.append(key)
        return found

    def remove(self, user: str, name: str) -> bool:
        """Delete the job's directory and all it holds; False when there was none."""
        directory = self.directory(user, name)
        if not directory.is_dir():
            return False
        shutil.rmtree(directory, ignore_errors=True)
        return True

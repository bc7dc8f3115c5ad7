"""The local backend: notebook servers as `jupyter lab` child processes, state in sqlite."""

from __future__ import annotations

from cube_jupyter.backends.local.notebooks import LocalNotebookBackend

__all__ = ["LocalNotebookBackend"]

"""Backends: `local` (child processes, sqlite) and `kubernetes` (objects, informer caches)."""

from __future__ import annotations

from cube_jupyter.backends.base import NotebookBackend
from cube_jupyter.config import Settings


def make_notebook_backend(settings: Settings, base_url: str = "/") -> NotebookBackend:
    """The notebook backend `c.CubeWorkbench.backend` names, imported only when chosen.

    `base_url` is the main Jupyter server's: local servers are reached under it, through its router.
    """
    if settings.workbench.backend == "kubernetes":
        from cube_jupyter.backends.kubernetes.notebooks import KubernetesNotebookBackend

        return KubernetesNotebookBackend(settings)
    from cube_jupyter.backends.local.notebooks import LocalNotebookBackend

    return LocalNotebookBackend(settings, base_url=base_url)

"""Jupyter server extension of cube-jupyter: REST API and the local path router."""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from cube_jupyter_server.app import CubeJupyterApp

    return [{"module": "cube_jupyter_server", "app": CubeJupyterApp}]

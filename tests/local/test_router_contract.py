"""The router and the local backend agree on one route prefix from the core, and the router finds
backends it can reach by the `RoutableBackend` protocol, not by duck typing."""

from __future__ import annotations

import re
from pathlib import Path

from cube_jupyter_server import router

from cube_jupyter.kube.client import make_api_client
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.notebooks import backend as base
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from cube_jupyter.notebooks.local import backend as local_notebooks
from cube_jupyter.notebooks.local.backend import LocalNotebookBackend
from tests.local.support import make_settings


def test_one_route_prefix_for_the_router_and_the_children() -> None:
    assert local_notebooks.ROUTE_PREFIX is base.ROUTE_PREFIX
    match = re.fullmatch(router.ROUTE_PATTERN, f"/{base.ROUTE_PREFIX}/alice/nb1/lab")
    assert match is not None and match["user"] == "alice" and match["name"] == "nb1"


def test_only_the_local_backend_is_routable(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "state")
    assert isinstance(LocalNotebookBackend(settings.notebooks), base.RoutableBackend)
    cluster = Cluster(settings, make_api_client(host="http://127.0.0.1:9"))
    try:
        assert not isinstance(KubernetesNotebookBackend(settings.notebooks, cluster), base.RoutableBackend)
    finally:
        cluster.client.close()

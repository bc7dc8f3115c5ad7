"""Fixtures shared by every test folder."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

pytest_plugins = ["pytest_jupyter.jupyter_server"]

# One real Prometheus scraping the DCGM sample page for the whole session, whichever folder needs it.
from tests.gpu.prometheus_server import dcgm_prometheus, prometheus_url  # noqa: E402, F401

# The test folders by the time they take in `make test`, longest first (seconds of one worker, from a
# `--durations=0` run of 2026-12-07: cluster 475, server 438, browser 385, pipelines 143, jobs 117,
# local 105, cli 78, pods 75, examples 70, gpu 47, schedules 39, deploy 17; the rest under 16). The
# workers take folders in this order, so the long ones start first and neither worker is left
# running one alone at the end (a minute less than taking them by their number of tests). A folder
# not named here comes last.
FOLDERS_LONGEST_FIRST = (
    "cluster",
    "server",
    "browser",
    "pipelines",
    "jobs",
    "local",
    "cli",
    "pods",
    "examples",
    "gpu",
    "schedules",
    "deploy",
    "e2e",
    "unit",
    "kubernetes",
    "storage",
)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections for the whole test: bound here and never listened
    on, so no other process can take it meanwhile, as one could a port that was merely free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def _folder(nodeid: str) -> str:
    return nodeid.split("/")[1] if nodeid.startswith("tests/") else nodeid


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Folders in FOLDERS_LONGEST_FIRST's order (each folder's own order kept)."""
    rank = {folder: place for place, folder in enumerate(FOLDERS_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_folder(item.nodeid), len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """With `-n` (pytest-xdist, as `make test` runs) each top-level test folder runs in one worker, in
    its order: a folder's tests share what they build (image venvs, a browser, a control plane and
    the audit log its least-privilege proof reads last). Folders are handed out in the collection's
    order (FOLDERS_LONGEST_FIRST), not xdist's default of most tests first."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFolder(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _folder(nodeid)

    config.option.loadscopereorder = False
    return ByFolder(config, log)

"""Fixtures shared by every test folder."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytest_jupyter.jupyter_server"]

# One real Prometheus scraping the DCGM sample page for the whole session, whichever folder needs it.
from tests.gpu.prometheus_server import dcgm_prometheus, prometheus_url  # noqa: E402, F401


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """With `-n` (pytest-xdist, as `make test` runs) each top-level test folder runs in one worker, in
    its order: a folder's tests share what they build (image venvs, a browser, a control plane and
    the audit log its least-privilege proof reads last)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFolder(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("/")[1] if nodeid.startswith("tests/") else nodeid

    return ByFolder(config, log)

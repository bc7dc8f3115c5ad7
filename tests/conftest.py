"""Fixtures shared by every test folder."""

from __future__ import annotations

pytest_plugins = ["pytest_jupyter.jupyter_server"]

# One real Prometheus scraping the DCGM sample page for the whole session, whichever folder needs it.
from tests.gpu.prometheus_server import dcgm_prometheus, prometheus_url  # noqa: E402, F401

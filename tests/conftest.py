"""Fixtures shared by every test folder."""

from __future__ import annotations

# rbac_session: every request the workbench made to an emulated API server in this session must be
# allowed by the ClusterRoles of deploy/base (checked once, at the end).
pytest_plugins = ["pytest_jupyter.jupyter_server", "tests.kubernetes.rbac_session"]

# One real Prometheus scraping the DCGM sample page for the whole session, whichever folder needs it.
from tests.gpu.prometheus_server import dcgm_prometheus, prometheus_url  # noqa: E402, F401

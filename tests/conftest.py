"""Fixtures shared by every test folder."""

from __future__ import annotations

pytest_plugins = ["pytest_jupyter.jupyter_server"]

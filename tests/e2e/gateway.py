"""Requests through Kubeflow's ingress gateway as one user, as a browser makes them: logged in (a Dex
session, a bearer token, or a session cookie), with the XSRF cookie and header Jupyter wants on
unsafe methods, to the workbench (`/cube/...`) and to the user's notebook servers."""

from __future__ import annotations

import html
import re
import secrets
from typing import Any
from urllib.parse import urljoin

import requests

FORM_ACTION = re.compile(r"<form\b[^>]*\baction=\"([^\"]*)\"", re.IGNORECASE)
LOCAL_CONNECTOR = re.compile(r"href=\"([^\"]*/auth/local[^\"]*)\"", re.IGNORECASE)
REQUEST_TIMEOUT = 60.0


class Gateway:
    """One user's session on the gateway at `base` (e.g. http://127.0.0.1:PORT)."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.session = requests.Session()
        xsrf = secrets.token_hex(16)  # any value: Jupyter compares the cookie with the header
        self.session.cookies.set("_xsrf", xsrf)
        self.session.headers["X-XSRFToken"] = xsrf

    def use_token(self, token: str) -> None:
        self.session.headers["Authorization"] = f"Bearer {token}"

    def use_cookies(self, cookies: str) -> None:
        """`name=value; name2=value2`, as copied from a logged-in browser."""
        for pair in cookies.split(";"):
            name, _, value = pair.strip().partition("=")
            self.session.cookies.set(name, value)

    def log_in_with_dex(self, start_path: str, user: str, password: str) -> None:
        """Kubeflow's login: oauth2-proxy sends the browser to Dex, whose form takes the password;
        Dex sends it back with oauth2-proxy's session cookie set."""
        page = self.session.get(self.base + start_path, timeout=REQUEST_TIMEOUT)
        if page.status_code in (401, 403):  # oauth2-proxy answers non-browsers; start its flow by hand
            page = self.session.get(
                f"{self.base}/oauth2/start", params={"rd": start_path}, timeout=REQUEST_TIMEOUT
            )
        connector = LOCAL_CONNECTOR.search(page.text)
        if connector and "/auth/local" not in page.url:  # Dex lists its connectors: take the passwords
            page = self.session.get(urljoin(page.url, html.unescape(connector[1])), timeout=REQUEST_TIMEOUT)
        action = FORM_ACTION.search(page.text)
        assert action, f"no Dex login form at {page.url} (status {page.status_code})"
        done = self.session.post(
            urljoin(page.url, html.unescape(action[1])),
            data={"login": user, "password": password},
            timeout=REQUEST_TIMEOUT,
        )
        assert done.ok and "/dex/" not in done.url, f"Dex did not log {user!r} in: ended at {done.url}"

    def call(self, method: str, path: str, body: Any = None, *, expect: tuple[int, ...] = (200,)) -> Any:
        """`method path` (a path on the gateway); the JSON answer, or the text of a non-JSON one."""
        response = self.session.request(method, self.base + path, json=body, timeout=REQUEST_TIMEOUT)
        if response.status_code not in expect:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text[:2000]}")
        if response.headers.get("Content-Type", "").startswith("application/json"):
            return response.json()
        return response.text

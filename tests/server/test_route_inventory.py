"""Every route the central workbench registers, tried as a non-admin behind the trusted header, against
README.md's table "What non-admins reach".

The routes come from the running Tornado application (JupyterLab, the language-server proxy and
terminals loaded, as in production), so a route that an upgrade or a new extension adds is tried too:
the README must then list it, or the server must refuse it. A request "reaches" a route unless it is
refused (401/403) or redirected to where no route answers; a 404 for a made-up name still reached the
handler.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from re import _constants as sre
from re import _parser as sre_parse
from typing import Any
from urllib.parse import urlsplit

import pytest
from jupyter_server.base.handlers import Template404
from tornado import web
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.routing import PathMatches, Router
from tornado.websocket import WebSocketHandler, websocket_connect

from tests.server.conftest import XSRF

pytestmark = [pytest.mark.timeout(120), pytest.mark.jupyterlab]
README = Path(__file__).resolve().parents[2] / "README.md"
TABLE_HEADING = "| What non-admins reach"
USER, ADMIN = "alice", "root-admin"
# OPTIONS is left out: Jupyter answers the CORS preflight to anyone, headers only (the README says so).
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
READS = ("GET", "HEAD")
REACHED, REFUSED, NOWHERE = "reached", "refused", "redirected nowhere"

Rule = tuple[re.Pattern[str], type[web.RequestHandler]]


@dataclass(frozen=True)
class Route:
    """A registered handler and one path its regex matches (and no earlier rule does)."""

    handler: type[web.RequestHandler]
    path: str


def implemented_methods(handler: type[web.RequestHandler]) -> list[str]:
    """The methods a handler implements; tornado answers 405 to the others, for anyone."""
    return [
        method
        for method in METHODS
        if method in handler.SUPPORTED_METHODS
        and getattr(handler, method.lower()) is not web.RequestHandler._unimplemented_method
    ]


def leaf_rules(router: Router) -> Iterator[Rule]:
    """The application's path rules in dispatch order, nested routers (one per extension) flattened."""
    for rule in router.rules:
        if isinstance(rule.target, Router):
            yield from leaf_rules(rule.target)
        elif isinstance(rule.matcher, PathMatches):
            yield rule.matcher.regex, rule.target


def samples(parsed: Any) -> list[str]:
    """Strings a parsed regex matches: one per alternative of each branch, an optional part both
    without and with it, other repeats their minimum number of times (at least once), a character
    class as its first member (`x` if negated), a lone `.` as itself (`spec.yaml`) and `.*` as `x`."""
    parts: list[list[str]] = []
    for op, arg in parsed:
        if op is sre.LITERAL:
            parts.append([chr(arg)])
        elif op is sre.ANY:
            parts.append(["."])
        elif op is sre.NOT_LITERAL:
            parts.append(["x"])
        elif op is sre.IN:
            parts.append([class_member(arg)])
        elif op is sre.SUBPATTERN:
            parts.append(samples(arg[-1]))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high, item = arg
            once = "x" if list(item) == [(sre.ANY, None)] else samples(item)[0]
            parts.append(["", once] if (low, high) == (0, 1) else [once * max(low, 1)])
        elif op is sre.BRANCH:
            parts.append([text for branch in arg[1] for text in samples(branch)])
        elif op is not sre.AT:
            raise AssertionError(f"no sample for regex element {op}")
    return ["".join(combination) for combination in itertools.product(*parts)]


def class_member(items: Any) -> str:
    """A character a parsed character class holds: its first literal or range start, else `x`."""
    op, arg = items[0]
    return chr(arg) if op is sre.LITERAL else chr(arg[0]) if op is sre.RANGE else "x"


def first_rule(rules: list[Rule], path: str) -> Rule:
    return next(rule for rule in rules if rule[0].match(path))


def registered_routes(rules: list[Rule]) -> list[Route]:
    """Every rule with the sample paths that reach it; each rule with methods must have one."""
    routes = []
    for regex, handler in rules:
        reaching = [
            path for path in samples(sre_parse.parse(regex.pattern)) if first_rule(rules, path)[0] is regex
        ]
        routes += [Route(handler, path) for path in reaching]
        assert reaching or not implemented_methods(handler), f"no sample path reaches {regex.pattern}"
    return routes


@dataclass(frozen=True)
class Row:
    """One row of the README table: path patterns and the methods (None: any) non-admins may use."""

    patterns: tuple[str, ...]
    methods: frozenset[str] | None

    def regex(self, pattern: str) -> re.Pattern[str]:
        """`{name}` is one path segment; a trailing `/*` is the path itself and anything below it."""
        regex = re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(pattern))
        return re.compile(regex[: -len("/\\*")] + "(/.*)?" if regex.endswith("/\\*") else regex)

    def allowing(self, path: str, method: str) -> list[str]:
        """The patterns of this row that let `method` on `path` through."""
        if self.methods is not None and method not in self.methods:
            return []
        return [pattern for pattern in self.patterns if self.regex(pattern).fullmatch(path)]


def readme_table() -> list[Row]:
    """The README's table of what non-admins reach: backquoted paths in the first column, methods
    (`any`, or a comma-separated list) in the second."""
    lines = [line.strip() for line in README.read_text().splitlines()]
    start = next(index for index, line in enumerate(lines) if line.startswith(TABLE_HEADING))
    rows = []
    for line in itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2 :]):
        paths, methods, *_ = (cell.strip() for cell in line.strip("|").split("|"))
        patterns = tuple(re.findall(r"`([^`]+)`", paths))
        assert patterns and all(pattern.startswith("/") for pattern in patterns), line
        allowed = None if methods == "any" else frozenset(method.strip() for method in methods.split(","))
        assert allowed is None or allowed <= set(METHODS), line
        rows.append(Row(patterns, allowed))
    assert rows, f"no rows under {TABLE_HEADING!r} in {README}"
    return rows


@pytest.fixture
def rules(cube_app: Any) -> list[Rule]:
    return list(leaf_rules(cube_app.web_app.default_router))


@pytest.fixture
def outcome(cube_app: Any, http_server_client: Any, rules: list[Rule]) -> Any:
    """What a request as `user` gets (a WebSocket handshake for WebSocket routes): REACHED, REFUSED
    (401/403), or NOWHERE (redirected to a path no route serves)."""

    async def request(route: Route, method: str, user: str) -> str:
        # What a browser on the JupyterLab page sends; Jupyter refuses file downloads without a Referer.
        headers = {
            "kubeflow-userid": user,
            "Referer": http_server_client.get_url(cube_app.base_url),
            **({} if method in READS else XSRF),
        }
        if issubclass(route.handler, WebSocketHandler):
            url = http_server_client.get_url(route.path).replace("http", "ws", 1)
            try:
                (await websocket_connect(HTTPRequest(url, headers=headers))).close()
            except HTTPClientError as exc:
                return status_outcome(exc.code)
            return REACHED
        try:
            response = await http_server_client.fetch(
                route.path,
                method=method,
                headers=headers,
                body="" if method in ("POST", "PUT", "PATCH") else None,
                raise_error=False,
                follow_redirects=False,
            )
        except HTTPClientError:  # no HTTP answer (a handler that fails to start): nothing refused it
            return REACHED
        if 300 <= response.code < 400:  # a redirect reaches what the browser is sent to
            target = urlsplit(response.headers["Location"]).path
            handler = first_rule(rules, target)[1]
            return NOWHERE if handler is Template404 else await request(Route(handler, target), "GET", user)
        return status_outcome(response.code)

    return request


def status_outcome(code: int) -> str:
    return REFUSED if code in (401, 403) else REACHED


async def test_non_admins_reach_exactly_what_the_readme_lists(
    cube_app: Any, rules: list[Rule], outcome: Any
) -> None:
    table = readme_table()
    base_url = cube_app.base_url
    mismatches, used, refused = [], set(), []
    for route in registered_routes(rules):
        # Paths as the README writes them: under the base URL, or absolute for the few outside it.
        path = "/" + route.path[len(base_url) :] if route.path.startswith(base_url) else route.path
        for method in implemented_methods(route.handler):
            listed = [pattern for row in table for pattern in row.allowing(path, method)]
            used.update(listed)
            got = await outcome(route, method, USER)
            if got == REFUSED:
                refused.append((route, method))
            if (got == REACHED) != bool(listed):
                mismatches.append(f"{method} {path} ({route.handler.__name__}): {got}, README lists {listed}")
    assert not mismatches, "\n".join(mismatches)
    unused = [pattern for row in table for pattern in row.patterns if pattern not in used]
    assert not unused, f"README lists paths the server does not serve to non-admins: {unused}"
    # The refusals are the authorizer's, for non-admins: an admin reads every one of those routes.
    admin_refused = [
        f"{method} {route.path}"
        for route, method in refused
        if method in READS and await outcome(route, method, ADMIN) != REACHED
    ]
    assert not admin_refused, admin_refused

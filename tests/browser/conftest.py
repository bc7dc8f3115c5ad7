"""Fixtures for the browser tests: one real `jupyter lab` and one real Chromium per module."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from tests.browser.lab import ARTIFACTS, Lab, PageErrors, running_lab

# What any `expect` waits for: a server round trip on a loaded CI machine (two workers, a kernel
# starting beside) takes longer than Playwright's 5 s default now and then; actions wait 30 s.
expect.set_options(timeout=15_000)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]


@pytest.fixture
def jp_asyncio_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """pytest-jupyter's autouse loop fixture would pick up (and close) the loop Playwright's sync API
    is running; these tests run no in-process server, so they get a private loop instead."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def jp_server_cleanup() -> None:
    """Nothing to clean: the server under test is a subprocess, stopped by the `lab` fixture."""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with running_lab(lambda root: Lab(root=root), "cube-browser-", "lab.log") as server:
        yield server


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page; the test fails at teardown if any page it opened (tabs included) threw an
    uncaught error or logged a console error."""
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    errors = PageErrors()
    context.on("page", errors.watch)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()
    if errors.errors:
        pytest.fail("the page had errors:\n" + "\n".join(errors.errors), pytrace=False)

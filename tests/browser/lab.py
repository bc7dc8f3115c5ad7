"""A real `jupyter lab` with the workbench, started for the browser tests.

It runs in its own temporary HOME, Jupyter dirs and state dir, on a free loopback port, with a token,
so a test run never touches (or is touched by) the developer's own Jupyter setup.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from playwright.sync_api import ConsoleMessage, Locator, Page, expect
from playwright.sync_api import Error as PlaywrightError

from cube_jupyter.local.processes import free_port
from tests.waiting import wait_until

# Two profiles so the form has a choice; the default one is what a person gets without choosing.
PROFILES: list[dict[str, Any]] = [
    {
        "name": "small",
        "display_name": "Small CPU",
        "description": "1 CPU and 2 GiB: notebooks, pandas, light plotting.",
        "image": "quay.io/jupyter/scipy-notebook:2025-03-17",
        "cpu": "1",
        "memory": "2Gi",
        "default": True,
    },
    {
        "name": "a100",
        "display_name": "A100 GPU",
        "description": "8 CPUs, 64 GiB and one NVIDIA A100 for training.",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-03-17",
        "cpu": "8",
        "memory": "64Gi",
        "gpu": 1,
        "gpu_resource": "nvidia.com/gpu",
    },
]
USER = "alice"
# Keep the page quiet: no news toast over the panel in screenshots. No autosave: Lab writes a notebook
# whose kernel filled in its metadata 2 minutes after opening it, and the tests check that running a
# pipeline leaves the file on disk as it was.
USER_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


@dataclass
class Lab:
    """A running `jupyter lab` and a small JSON client for its REST API."""

    root: Path
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: os.urandom(16).hex())
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def log_path(self) -> Path:
        return self.root / "lab.log"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        home = self.root / "home"
        env.update(
            HOME=str(home),
            JUPYTER_CONFIG_DIR=str(self.root / "config"),
            JUPYTER_DATA_DIR=str(self.root / "data"),
            JUPYTER_RUNTIME_DIR=str(self.root / "runtime"),
            IPYTHONDIR=str(self.root / "ipython"),
            JUPYTER_PLATFORM_DIRS="1",
            PYTHONUNBUFFERED="1",
        )
        env.pop("JUPYTER_TOKEN", None)
        return env

    def write_config(self) -> None:
        config = self.root / "config"
        config.mkdir(parents=True, exist_ok=True)
        (config / "jupyter_server_config.json").write_text(
            json.dumps(
                {
                    "ServerApp": {"jpserver_extensions": {"cube_jupyter_server": True}},
                    "CubeSpawner": {"profiles": PROFILES},
                },
                indent=2,
            )
        )
        # The default user-settings dir, so the child servers (same env) read them too.
        settings = config / "lab" / "user-settings"
        for name, body in USER_SETTINGS.items():
            path = settings / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(body))
        for sub in ("home", "data", "runtime", "ipython", "work", "state"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root / 'work'}",
            f"--CubeWorkbench.state_dir={self.root / 'state'}",
            f"--CubeWorkbench.default_user={USER}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            argv.append("--allow-root")
        return argv

    def start(self, timeout: float = 60.0) -> None:
        self.write_config()
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.argv(), env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        process = self.process

        def status() -> int:
            if process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {process.returncode}:\n{self.log_tail()}")
            return self.request("GET", "api/status")[0]

        try:
            wait_until(
                status, timeout, "jupyter lab to answer", until=lambda code: code == 200, ignoring=(OSError,)
            )
        except AssertionError as exc:
            raise RuntimeError(f"{exc}:\n{self.log_tail()}") from None

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One authenticated API call; returns (status, parsed JSON or None)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Authorization", f"token {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            raw = err.read()
            status = err.code
        return status, (json.loads(raw) if raw else None)

    def delete_all_servers(self) -> None:
        """Remove what the tests created: the workbench keeps children alive across its restarts."""
        status, body = self.request("GET", "cube/api/v1/notebooks")
        if status != 200:
            return
        for server in body["notebooks"]:
            self.request("DELETE", f"cube/api/v1/notebooks/{server['name']}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(OSError):
            self.delete_all_servers()
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass(frozen=True)
class Noise:
    """An error a page reports that our code neither causes nor can prevent: its exact message, and
    where it must come from (a fragment of the URL of the script at fault, or of the resource)."""

    message: str
    source: str

    def matches(self, message: str, where: str) -> bool:
        return message == self.message and self.source in where


NOISE = (
    # Chromium logs every 4xx answer to a fetch; the panels ask the API to validate what a person
    # typed and show its 400 by the field at fault, as the tests provoke on purpose.
    Noise(
        "Failed to load resource: the server responded with a status of 400 (Bad Request)", "/cube/api/v1/"
    ),
)


@dataclass
class PageErrors:
    """Uncaught errors and console errors of every page of a browser context: any one fails the test
    (the `page` fixture checks at teardown), as a person would see it as a broken panel. Only `NOISE`
    is let through."""

    errors: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> None:
        page.on("pageerror", self._uncaught)
        page.on("console", self._console)

    def _uncaught(self, error: PlaywrightError) -> None:
        stack = error.stack or ""
        frames = [line.strip() for line in stack.splitlines() if line.strip().startswith("at ")]
        if not self._noise(error.message, frames[0] if frames else ""):
            self.errors.append(f"uncaught {stack or error.message}")

    def _console(self, message: ConsoleMessage) -> None:
        url = message.location.get("url", "")
        if message.type == "error" and not self._noise(message.text, url):
            self.errors.append(f"console error: {message.text} (at {url})")

    @staticmethod
    def _noise(message: str, where: str) -> bool:
        return any(noise.matches(message, where) for noise in NOISE)


class LapTimer:
    """Seconds spent on each named part of a browser flow, printed at the end (figures, no asserts)."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._mark = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.timings[name] = round(now - self._mark, 2)
        self._mark = now


def open_palette(page: Page, query: str) -> Locator:
    """Open the command palette filtered by `query`, and return it. The palette is a modal that closes
    when it loses the focus, and a panel Lab restores can take the focus just after the palette opened
    (more often on a loaded machine), so open it again until it stays open with the query typed."""
    palette = page.locator("#command-palette")
    for _ in range(5):
        if not palette.is_visible():
            page.keyboard.press("Control+Shift+C")
        try:
            expect(palette).to_be_visible(timeout=5_000)
            palette.locator("input").fill(query)
            page.wait_for_timeout(300)  # a late focus change closes it now, not during the caller's click
            if palette.is_visible():
                return palette
        except (AssertionError, PlaywrightError):
            continue
    raise AssertionError("the command palette would not stay open")


def palette_labels(page: Page, query: str) -> list[str]:
    """The labels the command palette lists for `query`. A late focus change that closes the palette
    also empties it, so read again until the list was read while the palette stayed open."""
    for _ in range(3):
        palette = open_palette(page, query)
        labels = palette.locator(".lm-CommandPalette-item").all_inner_texts()
        if labels and palette.is_visible():
            return labels
    raise AssertionError(f"the command palette would not stay open listing {query!r}")


def run_from_palette(page: Page, query: str, label: str) -> None:
    """Run the command labelled `label` from the palette, opening it again if it closed first."""
    for _ in range(3):
        palette = open_palette(page, query)
        try:
            palette.locator(".lm-CommandPalette-item", has_text=label).first.click(timeout=5_000)
            return
        except PlaywrightError:
            continue
    raise AssertionError(f"could not run {label!r} from the command palette")


ARTIFACTS = Path(__file__).parent / "artifacts"
LabT = TypeVar("LabT", bound=Lab)


@contextlib.contextmanager
def running_lab(make: Callable[[Path], LabT], prefix: str, log_name: str) -> Iterator[LabT]:
    """A Lab started in a fresh directory and stopped after, its log (and its child servers' logs)
    kept in tests/browser/artifacts. Not tmp_path_factory: a concurrent pytest run prunes old
    basetemps, children's dirs included."""
    with tempfile.TemporaryDirectory(prefix=prefix) as root:
        server = make(Path(root))
        try:
            server.start()
            yield server
        finally:
            server.stop()
            ARTIFACTS.mkdir(exist_ok=True)
            shutil.copy(server.log_path, ARTIFACTS / log_name)
            for log in Path(root, "state").rglob("*.log"):
                shutil.copy(log, ARTIFACTS / f"child-{log.parent.name}-{log.name}")

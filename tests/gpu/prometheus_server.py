"""A real Prometheus (Debian's /usr/bin/prometheus) scraping local DCGM exporter pages every second.

Two exporters (stdlib HTTP servers on loopback, port 0) serve `/metrics` from a file each; a test swaps
the page with `serve()`, which waits until Prometheus has scraped the new one:

- `direct`: job `dcgm`, `honor_labels: true` — the page's labels arrive as written;
- `relabelled`: job `dcgm-kube`, `honor_labels: false`, with the target labels a Kubernetes
  ServiceMonitor gives (`namespace`, `pod`, `container` of the exporter's own pod), so DCGM's pod labels
  arrive as `exported_namespace`/`exported_pod`/`exported_container`.

Use from any test folder, by importing the fixtures into that folder's conftest.py:

    from tests.gpu.prometheus_server import dcgm_prometheus, prometheus_url  # noqa: F401

    def test_something(prometheus_url):          # the sample page, served by `direct`
        ...PrometheusSource(prometheus_url)...

    def test_other(dcgm_prometheus):             # choose the pages
        dcgm_prometheus.serve(direct=DCGM_PAGES / "lowercase-labels.txt", relabelled=SAMPLE_PAGE)

`dcgm_prometheus` is session-scoped (one Prometheus per test session, started in about 6 s; each
folder that imports it gets its own) and stopped at the end.
Every served page gets one extra gauge, `cube_test_page_generation`, that `serve()` waits on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.local.processes import free_port
from tests import waiting

PROMETHEUS = "/usr/bin/prometheus"
REPO = Path(__file__).resolve().parents[2]
DCGM_PAGES = REPO / "tests" / "data" / "dcgm"
SAMPLE_PAGE = DCGM_PAGES / "exporter-page.txt"  # dcgm-exporter's page for a 4-GPU node, pods attached
NO_DCGM_PAGE = DCGM_PAGES / "no-dcgm.txt"
GENERATION_METRIC = "cube_test_page_generation"
# The labels a kube-prometheus ServiceMonitor puts on the exporter's target.
EXPORTER_POD_LABELS = {
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-7x9kq",
    "container": "nvidia-dcgm-exporter",
}


class MetricsExporter:
    """Serves `/metrics` from `page_file` (read on every scrape) plus the generation gauge."""

    def __init__(self, page_file: Path) -> None:
        self.page_file = page_file
        self.generation = 0
        self._lock = threading.Lock()
        page_file.write_text("")
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.page().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="dcgm-exporter", daemon=True)
        self._thread.start()

    def page(self) -> str:
        with self._lock:
            generation = self.generation
        text = self.page_file.read_text()
        if text and not text.endswith("\n"):
            text += "\n"
        return f"{text}# TYPE {GENERATION_METRIC} gauge\n{GENERATION_METRIC} {generation}\n"

    def serve(self, page: Path | str) -> int:
        """Serve the page at `page` (a path) from now on; returns its generation number."""
        staged = self.page_file.with_suffix(".new")
        staged.write_text(Path(page).read_text())
        os.replace(staged, self.page_file)
        with self._lock:
            self.generation += 1
            return self.generation

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _config(direct_port: int, relabelled_port: int) -> str:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "dcgm",
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{direct_port}"]}],
            },
            {
                "job_name": "dcgm-kube",
                "honor_labels": False,
                "static_configs": [
                    {"targets": [f"127.0.0.1:{relabelled_port}"], "labels": EXPORTER_POD_LABELS}
                ],
            },
        ],
    }
    return json.dumps(config, indent=1)  # JSON is YAML


class DcgmPrometheus:
    """A running Prometheus scraping the `direct` and `relabelled` exporters every second."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.direct = MetricsExporter(workdir / "direct.txt")
        self.relabelled = MetricsExporter(workdir / "relabelled.txt")
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    @classmethod
    @contextlib.contextmanager
    def start(cls, workdir: Path, timeout: float = 60.0) -> Iterator[DcgmPrometheus]:
        """Start it, serving the sample page on `direct` and a page without DCGM metrics on `relabelled`."""
        prometheus = cls(workdir)
        try:
            prometheus._launch(timeout)
            prometheus.serve(direct=SAMPLE_PAGE, relabelled=NO_DCGM_PAGE, timeout=timeout)
            yield prometheus
        finally:
            prometheus.stop()

    def _launch(self, timeout: float) -> None:
        config = self.workdir / "prometheus.yml"
        config.write_text(_config(self.direct.port, self.relabelled.port))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = (self.workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited {process.returncode}: {self.log_tail()}")
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                return bool(answer.status == 200)

        self.wait_until(ready, timeout, "prometheus to be ready", ignoring=(OSError,))

    def log_tail(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def query(self, expression: str) -> list[dict[str, Any]]:
        """An instant query's result list (for tests' own checks and waits)."""
        data = urllib.parse.urlencode({"query": expression}).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=5) as response:
            payload = json.load(response)
        assert payload["status"] == "success", payload
        return list(payload["data"]["result"])

    def serve(
        self, direct: Path | str | None = None, relabelled: Path | str | None = None, timeout: float = 30.0
    ) -> None:
        """Swap the pages (None leaves one as it is) and wait until Prometheus has scraped them."""
        wanted = {}
        if direct is not None:
            wanted["dcgm"] = self.direct.serve(direct)
        if relabelled is not None:
            wanted["dcgm-kube"] = self.relabelled.serve(relabelled)
        for job, generation in wanted.items():
            self.wait_until(
                lambda job=job, generation=generation: self._generation(job) == generation,
                timeout,
                f"Prometheus to scrape page generation {generation} of job {job}",
            )

    def _generation(self, job: str) -> int | None:
        result = self.query(f'{GENERATION_METRIC}{{job="{job}"}}')
        return int(float(result[0]["value"][1])) if result else None

    def wait_until(
        self, condition: Any, timeout: float, what: str, ignoring: tuple[type[BaseException], ...] = ()
    ) -> None:
        """`tests.waiting.wait_until`, with Prometheus's log in the failure."""
        try:
            waiting.wait_until(condition, timeout, what, ignoring=ignoring, interval=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; prometheus log: {self.log_tail()}") from None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.direct.close()
        self.relabelled.close()


@pytest.fixture(scope="session")
def dcgm_prometheus() -> Iterator[DcgmPrometheus]:
    """One real Prometheus for the session, scraping the `direct` and `relabelled` exporters."""
    if not Path(PROMETHEUS).exists():
        pytest.fail(f"{PROMETHEUS} is missing: install Debian's prometheus package (make test does)")
    workdir = Path(tempfile.mkdtemp(prefix="cube-prometheus-"))
    try:
        with DcgmPrometheus.start(workdir) as prometheus:
            yield prometheus
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def prometheus_url(dcgm_prometheus: DcgmPrometheus) -> str:
    """The URL of a Prometheus whose only DCGM series are the sample page's."""
    dcgm_prometheus.serve(direct=SAMPLE_PAGE, relabelled=NO_DCGM_PAGE)
    return dcgm_prometheus.url

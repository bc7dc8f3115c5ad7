"""`GET /cube/api/v1/gpu` latency under 50 concurrent requests, with the read cache and without.

A real Prometheus (Debian's) scrapes the DCGM exporter sample page every second; a real `jupyter
server` with the workbench (GPU metrics from that Prometheus, callers named by the trusted header)
answers the requests. Each round fires 50 requests at once, after the cache has expired, so it
measures the cold case: the first request reads Prometheus (current values, history, idle range),
the rest wait for that read. The baseline is the same server with `CubeGPU.cache_seconds = 0`:
every request reads Prometheus itself. Per round: p50 and p95 of the 50 latencies, the round's
wall time, and the queries Prometheus counted; the table shows medians over the rounds.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from cube_jupyter.local.processes import free_port
from tests.benchmarks.server import jupyter_server_argv
from tests.benchmarks.timing import summary
from tests.gpu.prometheus_server import NO_DCGM_PAGE, SAMPLE_PAGE, DcgmPrometheus
from tests.waiting import wait_until_async

CONCURRENT, ROUNDS = 50, 10
USERS = ["alice", "bob", "carol", "dave", "erin"]  # GPUs in the sample page: alice's and bob's


def start_workbench(
    tmp: Path, prometheus_url: str, cache_seconds: float, port: int
) -> subprocess.Popen[bytes]:
    config = tmp / "jupyter_server_config.py"
    config.write_text(
        'c.ServerApp.identity_provider_class = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"\n'
        'c.ServerApp.authorizer_class = "cube_jupyter_server.authorizer.CubeAuthorizer"\n'
        'c.ServerApp.jpserver_extensions = {"cube_jupyter_server": True}\n'
        f"c.CubeWorkbench.state_dir = {str(tmp / 'state')!r}\n"
        f"c.CubeGPU.prometheus_url = {prometheus_url!r}\n"
        f"c.CubeGPU.cache_seconds = {cache_seconds!r}\n"
    )
    argv = jupyter_server_argv(config, port, tmp)
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def prometheus_queries(prometheus: DcgmPrometheus) -> float:
    """How many query and query_range requests Prometheus has answered, from its own /metrics."""
    with urllib.request.urlopen(f"{prometheus.url}/metrics", timeout=5) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and (
            'handler="/api/v1/query"' in line or 'handler="/api/v1/query_range"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def wait_ready(client: AsyncHTTPClient, url: str) -> None:
    async def available() -> bool:
        response = await client.fetch(url, headers={"kubeflow-userid": "alice"})
        return bool(json.loads(response.body)["available"])

    await wait_until_async(
        available, 60, f"{url} to answer with GPUs", ignoring=(HTTPClientError, OSError), interval=0.2
    )


Round = tuple[float, float, float, float]  # p50, p95, wall time, Prometheus queries


async def one_round(client: AsyncHTTPClient, url: str, users: list[str], prometheus: DcgmPrometheus) -> Round:
    async def one(user: str) -> float:
        t0 = time.perf_counter()
        response = await client.fetch(url, headers={"kubeflow-userid": user})
        assert response.code == 200
        return time.perf_counter() - t0

    before = prometheus_queries(prometheus)
    t0 = time.perf_counter()
    latencies = await asyncio.gather(*(one(users[i % len(users)]) for i in range(CONCURRENT)))
    wall = time.perf_counter() - t0
    queries = prometheus_queries(prometheus) - before
    stats = summary(list(latencies))
    return stats["median"], stats["p95"], wall, queries


async def main() -> None:
    configs = [
        ("no cache (baseline): every request reads Prometheus", 0.0, ["alice"]),
        ("cache 1 s + coalescing, one user", 1.0, ["alice"]),
        (f"cache 1 s + coalescing, {len(USERS)} users ({len(USERS)} scopes)", 1.0, USERS),
    ]
    rounds: list[list[Round]] = [[] for _ in configs]
    client = AsyncHTTPClient(force_instance=True, max_clients=CONCURRENT)
    with (
        tempfile.TemporaryDirectory(prefix="cube-bench-gpu-") as tmp,
        DcgmPrometheus.start(Path(tmp)) as prometheus,
    ):
        prometheus.serve(direct=SAMPLE_PAGE, relabelled=NO_DCGM_PAGE)
        servers, urls = [], []
        try:
            for i, (_, cache_seconds, _) in enumerate(configs):
                workdir = Path(tmp) / f"server-{i}"
                workdir.mkdir()
                port = free_port()
                servers.append(start_workbench(workdir, prometheus.url, cache_seconds, port))
                urls.append(f"http://127.0.0.1:{port}/cube/api/v1/gpu")
            for url in urls:
                await wait_ready(client, url)
            # Interleaved, so every configuration sees the same amount of history in Prometheus.
            for _ in range(ROUNDS):
                for i, (_, _, users) in enumerate(configs):
                    await asyncio.sleep(1.2)  # past the cache's 1 s: every round is a cold one
                    rounds[i].append(await one_round(client, urls[i], users, prometheus))
        finally:
            for server in servers:
                server.terminate()
                server.wait(15)
            client.close()
    print(
        f"\nGET /cube/api/v1/gpu, {CONCURRENT} concurrent requests per round, {ROUNDS} cold rounds each, "
        "medians over the rounds\n(real jupyter server, real Prometheus; a report = current values + 600 s "
        "history + the idle range)"
    )
    header = ("", "p50", "p95", "round wall", "Prometheus queries/round", "p50 vs baseline")
    print(f"  {header[0]:58}{header[1]:>10}{header[2]:>10}{header[3]:>12}{header[4]:>26}{header[5]:>17}")
    base = statistics.median(r[0] for r in rounds[0])
    for (label, _, _), measured in zip(configs, rounds, strict=True):
        p50, p95, wall, queries = (statistics.median(r[k] for r in measured) for k in range(4))
        print(
            f"  {label:58}{p50 * 1e3:>7.1f} ms{p95 * 1e3:>7.1f} ms{wall * 1e3:>9.1f} ms"
            f"{queries:>26.0f}{p50 / base:>16.2f}x"
        )


if __name__ == "__main__":
    asyncio.run(main())

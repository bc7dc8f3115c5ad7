"""Reliability of a shared workbench (local backend, trusted-header users), in one run:

1. 50 concurrent clients on the main read endpoints (notebooks, pipeline runs, jobs, profiles) of a
   real server holding live notebook servers, runs and jobs, vs. the same load on Jupyter's own
   `/api/status` of the same server (the baseline): latency, errors, throughput, the server's RSS;
2. kill -9 while notebook servers run, then start again: time until the API answers (vs. the first
   start), and whether every server is re-attached (running, same pid, reachable through the router);
3. 3 concurrent unauthenticated uploads of 300 MiB each to a workbench endpoint, vs. the same to
   Jupyter's own contents API of the same server (the baseline): the server's peak RSS growth, and
   how much of each body it took before answering;
4. kill -9 in the middle of a pipeline run: what the restarted server says of the run, and its resume
   (`POST .../runs/{id}/resume`, where the server offers it): time to success, steps reused vs. rerun.

Each client sends its requests one after another on a new connection (tornado's simple client); the
clients run in this process, so on a small machine they share its cores with the server.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from cube_jupyter.local.processes import stop_tree_sync
from cube_jupyter.notebooks.local.state import StateStore
from tests.benchmarks.timing import print_table
from tests.benchmarks.workbench import USER_HEADER, Workbench
from tests.pipelines.notebooks import code, notebook, write
from tests.waiting import wait_until_async

CLIENTS, REQUESTS_PER_CLIENT, ROUNDS = 50, 6, 2  # per endpoint: 600 requests, in 2 interleaved bursts
USERS = ("alice", "bob")
ADMIN = "bench-admin"
SERVERS = (("alice", "nb1"), ("alice", "nb2"), ("bob", "nb1"))
API = "/cube/api/v1"
BASELINE = "GET /api/status (Jupyter's own; baseline)"
ENDPOINTS = (
    (BASELINE, "/api/status"),
    ("GET /cube/api/v1/notebooks", f"{API}/notebooks"),
    ("GET /cube/api/v1/pipelines/runs", f"{API}/pipelines/runs"),
    ("GET /cube/api/v1/jobs", f"{API}/jobs"),
    ("GET /cube/api/v1/profiles", f"{API}/profiles"),
)
UPLOADS, UPLOAD_BYTES, UPLOAD_ROUNDS = 3, 300 * 1024 * 1024, 3
UPLOAD_CHUNK = b"x" * (1024 * 1024)
UPLOAD_BASELINE = "POST /api/contents/big.txt (Jupyter's own; baseline)"
UPLOAD_TARGETS = (
    (UPLOAD_BASELINE, "/api/contents/big.txt"),
    ("POST /cube/api/v1/pipelines/graph", f"{API}/pipelines/graph"),
)
STEP_SECONDS = {"prepare": 1, "train": 4, "report": 1}  # the interrupted pipeline: killed during `train`
PIPELINE = "pipelines/three_steps.ipynb"
QUICK_PIPELINE = "pipelines/one_step.ipynb"
TRAIN_SCRIPT = "print('trained', flush=True)\n"
# A training job alive across the kill: it ends (exit 0) once the flag file `go-on` exists.
LONG_TRAIN_SCRIPT = (
    "import os, time\nwhile not os.path.exists({flag!r}):\n    time.sleep(0.1)\nprint('trained')\n"
)
LONG_JOB = {
    "name": "across",
    "framework": "pytorch",
    "replicas": {"master": 1, "worker": 1},
    "script": "long.py",
}
DONE_RUN = ("succeeded", "failed", "cancelled")


@dataclass
class Load:
    """What one endpoint's bursts measured: every request's latency, failures by kind, wall time."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall: float = 0.0


async def burst(client: AsyncHTTPClient, url: str, load: Load) -> None:
    """CLIENTS clients at once, each sending REQUESTS_PER_CLIENT requests in turn (users alternate)."""

    async def one_client(user: str) -> None:
        for _ in range(REQUESTS_PER_CLIENT):
            started = time.perf_counter()
            try:
                response = await client.fetch(
                    url, headers={USER_HEADER: user}, raise_error=False, request_timeout=60
                )
                if not 200 <= response.code < 300:
                    load.errors[f"HTTP {response.code}"] += 1
            except (OSError, HTTPClientError) as exc:
                load.errors[type(exc).__name__] += 1
            load.latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one_client(USERS[i % len(USERS)]) for i in range(CLIENTS)))
    load.wall += time.perf_counter() - started


async def concurrent_reads(workbench: Workbench) -> None:
    client = AsyncHTTPClient(force_instance=True, max_clients=CLIENTS)
    loads = {name: Load() for name, _ in ENDPOINTS}
    rss_before = workbench.rss()
    try:
        for _ in range(ROUNDS):  # interleaved, so machine noise hits every endpoint alike
            for name, path in ENDPOINTS:
                await burst(client, f"{workbench.url}{path}", loads[name])
    finally:
        client.close()
    rss_after = workbench.rss()
    print_table(
        f"Reliability: {CLIENTS} concurrent clients on the read endpoints, {len(SERVERS)} live notebook "
        f"servers (latency per request, {ROUNDS * CLIENTS * REQUESTS_PER_CLIENT} requests each)",
        [(name, load.latencies) for name, load in loads.items()],
        unit="ms",
        baseline=BASELINE,
    )
    base_rate = len(loads[BASELINE].latencies) / loads[BASELINE].wall
    print(f"  {'':52}{'requests':>11}{'errors':>11}{'req/s':>11}{'vs baseline':>13}  errors by kind")
    for name, load in loads.items():
        rate = len(load.latencies) / load.wall
        kinds = ", ".join(f"{kind} x{count}" for kind, count in load.errors.most_common()) or "-"
        errors = sum(load.errors.values())
        ratio = f"{rate / base_rate:.3g}x"
        print(f"  {name:52}{len(load.latencies):>11}{errors:>11}{rate:>11.0f}{ratio:>13}  {kinds}")
    mib = 1024 * 1024
    print(
        f"  workbench RSS: {rss_before / mib:.1f} MiB before, {rss_after / mib:.1f} MiB after "
        f"({(rss_after - rss_before) / mib:+.1f} MiB)"
    )


async def unauthenticated_upload(port: int, path: str) -> tuple[int, str]:
    """One client sending UPLOAD_BYTES with no credentials, as fast as the server takes them: the
    bytes it got through before the server answered or closed, and the answer's status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {UPLOAD_BYTES}\r\n\r\n".encode()
    )
    answer = asyncio.ensure_future(reader.readline())  # the status line, whenever the server sends it
    sent = 0
    try:
        while sent < UPLOAD_BYTES and not answer.done():
            writer.write(UPLOAD_CHUNK)
            await writer.drain()
            sent += len(UPLOAD_CHUNK)
        line = await asyncio.wait_for(answer, 120)
        status = line.decode(errors="replace").strip() or "closed"
    except ConnectionError:
        status = "reset"
        if answer.done() and not answer.exception():
            status = answer.result().decode(errors="replace").strip() or status
    finally:
        writer.close()
        answer.cancel()
    return sent, status


async def peak_rss_during(workbench: Workbench, work: Any) -> tuple[int, Any]:
    """The server's highest RSS, sampled every 10 ms while `work` runs, and what `work` returned."""
    peak = workbench.rss()
    task = asyncio.ensure_future(work)
    while not task.done():
        peak = max(peak, workbench.rss())
        await asyncio.sleep(0.01)
    return peak, task.result()


async def large_unauthenticated_uploads(workbench: Workbench) -> None:
    growth: dict[str, list[float]] = {name: [] for name, _ in UPLOAD_TARGETS}
    taken: dict[str, list[int]] = {name: [] for name, _ in UPLOAD_TARGETS}
    answers: dict[str, Counter[str]] = {name: Counter() for name, _ in UPLOAD_TARGETS}
    for _ in range(UPLOAD_ROUNDS):  # interleaved, as the read endpoints are
        for name, path in UPLOAD_TARGETS:
            before = workbench.rss()
            uploads = asyncio.gather(*(unauthenticated_upload(workbench.port, path) for _ in range(UPLOADS)))
            peak, results = await peak_rss_during(workbench, uploads)
            growth[name].append((peak - before) / (1024 * 1024))
            for sent, status in results:
                taken[name].append(sent)
                answers[name][status] += 1
    print_table(
        f"Reliability: {UPLOADS} concurrent unauthenticated uploads of {UPLOAD_BYTES >> 20} MiB each "
        f"(the server's peak RSS growth; {UPLOAD_ROUNDS} rounds)",
        [(name, values) for name, values in growth.items()],
        unit="MiB",
        baseline=UPLOAD_BASELINE,
    )
    for name, sent in taken.items():
        kinds = ", ".join(f"{status} x{count}" for status, count in answers[name].most_common())
        print(f"  {name:52} took {statistics.median(sent) / (1 << 20):.0f} MiB of each (median)  {kinds}")


# -- seeded state ------------------------------------------------------------------------------------


def write_notebooks(workbench: Workbench) -> None:
    """The pipelines and the training script, among each user's own files."""
    timed = [code("import time", "imports"), code('label = "baseline"', "parameters")]
    previous = "label"
    for step, seconds in STEP_SECONDS.items():  # a chain: each step reads the one before
        timed.append(code(f"time.sleep({seconds})\n{step}_done = {previous} + '.{step}'", f"step:{step}"))
        previous = f"{step}_done"
    for user in USERS:
        area = workbench.user_area(user)
        (area / "pipelines").mkdir(exist_ok=True)
        write(notebook(*timed), area / PIPELINE)
        write(notebook(code(f"owner = {user!r}", "step:only")), area / QUICK_PIPELINE)
        (area / "train.py").write_text(TRAIN_SCRIPT)
        (area / "long.py").write_text(LONG_TRAIN_SCRIPT.format(flag=str(area / "go-on")))


async def expect(workbench: Workbench, method: str, path: str, user: str, body: Any = None) -> Any:
    """A request that must succeed; its JSON body."""
    status, answer = await workbench.call(method, path, user, body)
    if not 200 <= status < 300:
        raise RuntimeError(f"{method} {path} as {user}: HTTP {status}: {answer}")
    return answer


async def run_to_end(workbench: Workbench, user: str, run_id: str, timeout: float = 90) -> dict[str, Any]:
    run: dict[str, Any] = await wait_until_async(
        lambda: expect(workbench, "GET", f"{API}/pipelines/runs/{run_id}", user),
        timeout,
        f"run {run_id} to end",
        until=lambda run: run["status"] in DONE_RUN,
        interval=0.1,
    )
    return run


async def timed_run(workbench: Workbench, user: str, path: str, label: str) -> float:
    """Seconds from the run request to the run's success."""
    started = time.perf_counter()
    body = {"path": path, "parameters": {"label": label}} if path == PIPELINE else {"path": path}
    run = await expect(workbench, "POST", f"{API}/pipelines/runs", user, body)
    run = await run_to_end(workbench, user, run["id"])
    if run["status"] != "succeeded":
        raise RuntimeError(f"seed run {run['id']} of {user} {run['status']}: {run['error']}")
    return time.perf_counter() - started


async def seed(workbench: Workbench) -> float:
    """Notebook servers, finished jobs and pipeline runs for each user; the seconds an uninterrupted
    run of the three-step pipeline takes (the resume's baseline)."""
    for user, name in SERVERS:
        await expect(workbench, "POST", f"{API}/notebooks", user, {"name": name})
    for user in USERS:
        for i in range(2):
            spec = {
                "name": f"seed-{i}",
                "framework": "pytorch",
                "replicas": {"master": 1},
                "script": "train.py",
            }
            await expect(workbench, "POST", f"{API}/jobs", user, {"kind": "training", "spec": spec})
    await wait_until_async(
        lambda: expect(workbench, "GET", f"{API}/notebooks?all=1", ADMIN),
        120,
        "every notebook server to run",
        until=lambda listing: [s["status"] for s in listing["notebooks"]] == ["running"] * len(SERVERS),
        interval=0.2,
    )
    await wait_until_async(
        lambda: expect(workbench, "GET", f"{API}/jobs?all=1", ADMIN),
        60,
        "every seed job to end",
        until=lambda listing: all(job["phase"] in ("Succeeded", "Failed") for job in listing["jobs"]),
        interval=0.2,
    )
    # Timed once the servers and jobs have settled, on a cold worker pool as the resume after a restart.
    uninterrupted = await timed_run(workbench, "alice", PIPELINE, "baseline")
    await timed_run(workbench, "bob", QUICK_PIPELINE, "")
    return uninterrupted


# -- restarts ----------------------------------------------------------------------------------------


def server_pids(workbench: Workbench) -> dict[tuple[str, str], int | None]:
    """Each notebook server's child pid, as the local backend recorded it."""
    store = StateStore(workbench.state_dir / "state.sqlite")
    return {(record.user, record.name): record.pid for record in store.list()}


def other_processes(workbench: Workbench) -> list[psutil.Process]:
    """The server's processes besides its notebook servers (pipeline workers, their kernels, job
    replicas): what a kill -9 leaves behind that nothing re-attaches."""
    servers = [
        psutil.Process(pid) for pid in server_pids(workbench).values() if pid and psutil.pid_exists(pid)
    ]
    family = {p.pid for server in servers for p in [server, *server.children(recursive=True)]}
    return [p for p in workbench.descendants() if p.pid not in family]


def report_orphans(orphans: list[psutil.Process], killed_at: float) -> None:
    alive = [p for p in orphans if _alive(p)]
    kinds = Counter(_kind(p) for p in alive)
    listed = ", ".join(f"{kind} x{count}" for kind, count in kinds.most_common()) or "none"
    print(
        f"  the killed server's other processes (pipeline workers, kernels, replicas) alive "
        f"{time.perf_counter() - killed_at:.0f} s after the kill: {len(alive)} of {len(orphans)} ({listed})"
    )


def _alive(process: psutil.Process) -> bool:
    """Running, and not a zombie that nobody reaped (its parent, the killed server, is gone)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kind(process: psutil.Process) -> str:
    """`python -m MODULE` as MODULE; anything else by its name."""
    try:
        argv = process.cmdline()
    except psutil.Error:
        return "?"
    return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else process.name()


def replica_pids(job: dict[str, Any]) -> list[int | None]:
    return [replica.get("pid") for replica in job["replicas"]]


async def restart_with_servers(workbench: Workbench, first_start: float) -> list[psutil.Process]:
    """Kill -9 with the notebook servers and a training job running; returns the killed server's
    other processes."""
    await expect(workbench, "POST", f"{API}/jobs", "alice", {"kind": "training", "spec": LONG_JOB})
    job_path = f"{API}/jobs/{LONG_JOB['name']}"
    job = await wait_until_async(
        lambda: expect(workbench, "GET", job_path, "alice"),
        60,
        "the training job to run",
        until=lambda job: job["phase"] == "Running",
        interval=0.2,
    )
    pids = server_pids(workbench)
    leaders = [psutil.Process(pid) for pid in replica_pids(job) if pid]
    replicas = {p.pid for leader in leaders for p in [leader, *leader.children(recursive=True)]}
    orphans = [p for p in other_processes(workbench) if p.pid not in replicas]  # re-attached: not orphans
    workbench.kill()
    killed_at = time.perf_counter()
    restart = await workbench.start()
    listing = await expect(workbench, "GET", f"{API}/notebooks?all=1", ADMIN)
    status_at_first_answer = {(s["user"], s["name"]): s["status"] for s in listing["notebooks"]}
    pids_after = server_pids(workbench)
    same_pid = [
        key for key, pid in pids.items() if pid and pids_after.get(key) == pid and psutil.pid_exists(pid)
    ]
    routed = 0
    for user, name in SERVERS:
        status, _ = await workbench.call("GET", f"/cube/notebook/{user}/{name}/api/status", user)
        routed += status == 200
    print_table(
        f"Reliability: kill -9 of the workbench with {len(SERVERS)} notebook servers running, start again",
        [
            ("first start -> API answers (baseline)", [first_start]),
            (f"restart after kill -9 -> API answers ({len(SERVERS)} servers)", [restart]),
        ],
        baseline="first start -> API answers (baseline)",
    )
    running = sum(status == "running" for status in status_at_first_answer.values())
    print(
        f"  re-attached: {running}/{len(SERVERS)} listed running at the first answer, "
        f"{len(same_pid)}/{len(SERVERS)} the same live process as before the kill, "
        f"{routed}/{len(SERVERS)} answer /api/status through the router"
    )
    after = await expect(workbench, "GET", job_path, "alice")
    (workbench.user_area("alice") / "go-on").touch()
    ended = await wait_until_async(
        lambda: expect(workbench, "GET", job_path, "alice"),
        60,
        "the re-attached training job to end",
        until=lambda job: job["phase"] in ("Succeeded", "Failed"),
        interval=0.2,
    )
    same = "the same" if replica_pids(after) == replica_pids(job) else "other"
    print(
        f"  training job across the kill: {after['phase']} at the first answer with {same} replica "
        f"processes, then {ended['phase']} ({ended.get('message') or 'no message'})"
    )
    report_orphans(orphans, killed_at)
    return orphans


def reused_step(step: dict[str, Any], started_before: str | None) -> bool:
    """Done by the resumed run without running again: a cache hit, or the record from before the
    kill kept as it was (whichever way the server reports a resumed run)."""
    if step["status"] == "cached" or (step["status"] == "succeeded" and step["cache_hit"]):
        return True
    return step["status"] == "succeeded" and step["started"] is not None and step["started"] == started_before


def describe_steps(run: dict[str, Any]) -> str:
    return ", ".join(f"{step['name']} {step['status']}" for step in run["steps"])


async def restart_mid_run(workbench: Workbench, uninterrupted: float) -> list[psutil.Process]:
    """Kill -9 while `train` runs; returns the killed server's other processes (for cleanup)."""
    body = {"path": PIPELINE, "parameters": {"label": "interrupted"}}
    run = await expect(workbench, "POST", f"{API}/pipelines/runs", "alice", body)
    run_path = f"{API}/pipelines/runs/{run['id']}"
    await wait_until_async(
        lambda: expect(workbench, "GET", run_path, "alice"),
        60,
        "the run's second step to start",
        until=lambda run: [s["status"] for s in run["steps"]][:2] == ["succeeded", "running"],
        interval=0.05,
    )
    orphans = other_processes(workbench)
    workbench.kill()
    killed_at = time.perf_counter()
    await workbench.start()
    interrupted = await expect(workbench, "GET", run_path, "alice")
    print(f"\nReliability: kill -9 of the workbench during step 2 of a {len(STEP_SECONDS)}-step pipeline run")
    offered = " (offered for resume)" if interrupted.get("resumable") else ""
    print(f"  after the restart the run is {interrupted['status']}{offered}: {describe_steps(interrupted)}")
    if interrupted["error"]:
        print(f"  run error: {interrupted['error']}")
    await resume(workbench, interrupted, killed_at, uninterrupted)
    report_orphans(orphans, killed_at)
    return orphans


async def resume(
    workbench: Workbench, interrupted: dict[str, Any], killed_at: float, uninterrupted: float
) -> None:
    """Resume the run (the restarted server may have done so itself) where the server offers it;
    print how long it took to succeed and which steps it reused or ran again."""
    run_path = f"{API}/pipelines/runs/{interrupted['id']}"
    if interrupted["status"] in DONE_RUN:
        status, answer = await workbench.call("POST", f"{run_path}/resume", "alice", {})
        if status in (404, 405):
            print(f"  resume: not available (POST {run_path}/resume answers {status})")
            return
        if not 200 <= status < 300:
            print(f"  resume: refused, HTTP {status}: {answer}")
            return
        started, how = time.perf_counter(), "POST .../resume -> run succeeded"
        run_id = answer["id"] if isinstance(answer, dict) and "id" in answer else interrupted["id"]
    else:
        started, how, run_id = killed_at, "kill -9 -> resumed at restart -> succeeded", interrupted["id"]
    final = await run_to_end(workbench, "alice", run_id)
    elapsed = time.perf_counter() - started
    before = {step["name"]: step["started"] for step in interrupted["steps"]}
    reused = [s["name"] for s in final["steps"] if reused_step(s, before.get(s["name"]))]
    rerun = [s["name"] for s in final["steps"] if s["name"] not in reused and s["status"] == "succeeded"]
    print(f"  resumed: run {run_id} {final['status']}: {describe_steps(final)}")
    print(f"  steps reused: {len(reused)} ({', '.join(reused) or '-'}); rerun: {len(rerun)} ", end="")
    print(f"({', '.join(rerun) or '-'})")
    print_table(
        "Reliability: resuming the interrupted run",
        [("the same pipeline, uninterrupted run (baseline)", [uninterrupted]), (how, [elapsed])],
        baseline="the same pipeline, uninterrupted run (baseline)",
    )


# -- the benchmark -----------------------------------------------------------------------------------


def stop_leftovers(workbench: Workbench, processes: list[psutil.Process]) -> None:
    """Notebook servers and pipeline processes this benchmark started that outlived it."""
    leftovers = [p for p in processes if _alive(p)]
    for pid in server_pids(workbench).values():
        if pid and psutil.pid_exists(pid):
            leftovers.append(psutil.Process(pid))
    for process in leftovers:
        stop_tree_sync(process, 5)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cube-bench-reliability-") as tmp:
        workbench = Workbench(Path(tmp), ADMIN)
        orphans: list[psutil.Process] = []
        try:
            write_notebooks(workbench)
            first_start = await workbench.start()
            uninterrupted = await seed(workbench)
            await concurrent_reads(workbench)
            await large_unauthenticated_uploads(workbench)
            orphans += await restart_with_servers(workbench, first_start)
            orphans += await restart_mid_run(workbench, uninterrupted)
            for user, name in SERVERS:
                await workbench.call("DELETE", f"{API}/notebooks/{name}", user)
        except Exception:
            log = workbench.log_path.read_text(errors="replace") if workbench.log_path.exists() else ""
            print(f"workbench log (last lines):\n{log[-4000:]}")
            raise
        finally:
            workbench.stop()
            stop_leftovers(workbench, orphans)


if __name__ == "__main__":
    asyncio.run(main())

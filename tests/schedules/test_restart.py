"""The one real-time test of the scheduler: a workbench killed with SIGKILL mid-run, down for a few
fire times, started again. Every fire time gets exactly one slot; the run the kill interrupted is
retried; the fire times missed while it was down are caught up (`catchup: all`); no logical time
succeeds twice. The scheduler runs in the workbench server (`jupyter server` with the extension),
as in production; the pipeline runs are real."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.browser.lab import Lab
from tests.pipelines.notebooks import code, notebook, write
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

INTERVAL = 3
DOWN_SECONDS = 3 * INTERVAL


def dated(hold: Path, held: Path) -> Any:
    """A one-step notebook that takes a second, and waits (saying so in `held`) while `hold` exists:
    the kill must land while a run is under way, not just after the one seen running ended."""
    work = f"""import os, time
while os.path.exists({str(hold)!r}):
    open({str(held)!r}, "w").close()
    time.sleep(0.05)
time.sleep(1)
stamp = logical_date"""
    return notebook(code("logical_date = None", "parameters"), code(work, "step:work"))


@dataclass
class Workbench(Lab):
    """`jupyter server` with the workbench extension: the scheduler's home, without Lab's frontend."""

    def argv(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "jupyter_server",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root / 'work'}",
            f"--CubeWorkbench.state_dir={self.root / 'state'}",
            "--CubeSchedules.on_time_seconds=2",
        ]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        return argv

    def crash(self) -> None:
        """SIGKILL the server and everything it started, as a power cut would."""
        assert self.process is not None
        server = psutil.Process(self.process.pid)
        everything = [server, *server.children(recursive=True)]
        for process in everything:
            process.send_signal(signal.SIGKILL)
        psutil.wait_procs(everything, timeout=10)
        self.process.wait(timeout=10)


@pytest.fixture
def workbench(tmp_path: Path) -> Iterator[Workbench]:
    bench = Workbench(tmp_path)
    bench.write_config()
    write(dated(tmp_path / "hold", tmp_path / "held"), tmp_path / "work" / "dated.ipynb")
    bench.start()
    try:
        yield bench
    finally:
        bench.stop()


def slots(bench: Workbench) -> list[dict[str, Any]]:
    status, body = bench.request("GET", "cube/api/v1/schedules/tick/runs")
    assert status == 200, body
    return list(body["runs"])


def test_killed_workbench_loses_and_repeats_no_logical_time(workbench: Workbench) -> None:
    status, saved = workbench.request(
        "POST",
        "cube/api/v1/schedules",
        {
            "name": "tick",
            "path": "dated.ipynb",
            "interval_seconds": INTERVAL,
            "catchup": "all",
            "max_concurrency": 3,
            "retries": 2,
            "retry_backoff_seconds": 0,
        },
    )
    assert status == 201, saved
    wait_until(
        lambda: slots(workbench),
        90,
        "two scheduled runs to succeed",
        until=lambda found: sum(s["state"] == "succeeded" for s in found) >= 2,
        interval=0.2,
    )
    hold, held = workbench.root / "hold", workbench.root / "held"
    hold.touch()
    wait_until(held.exists, 60, "a run to be held mid-step", interval=0.1)
    workbench.crash()
    hold.unlink()
    killed_at = datetime.now(UTC)
    time.sleep(DOWN_SECONDS)  # the real time this test is about: fire times pass while nobody runs
    down_until = datetime.now(UTC)
    workbench.start()
    restarted_at = datetime.now(UTC)
    wait_until(
        lambda: slots(workbench),
        150,
        "every slot up to the restart to end",
        until=lambda found: (
            all(s["state"] not in ("pending", "running") for s in found)
            and max(s["logical_date"] for s in found) >= _iso(restarted_at)
        ),
        interval=0.5,
    )
    workbench.request("PATCH", "cube/api/v1/schedules/tick", {"paused": True})
    # A fire just before the pause may have started a run (it ends) or queued one (the pause holds it).
    found = wait_until(
        lambda: slots(workbench),
        60,
        "the run a last fire started to end",
        until=lambda found: not any(s["state"] == "running" for s in found),
        interval=0.5,
    )
    found = [s for s in found if s["state"] != "pending"]
    logicals = sorted(s["logical_date"] for s in found)
    # One slot per fire time, with no gap: the downtime's fire times were caught up.
    first = datetime.strptime(logicals[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    expected = [_iso(first + timedelta(seconds=INTERVAL * i)) for i in range(len(logicals))]
    assert logicals == expected
    down = [s for s in found if _iso(killed_at) < s["logical_date"] < _iso(down_until)]
    assert down and all(s["origin"] == "catchup" for s in down), down
    assert all(s["state"] == "succeeded" for s in found), [s for s in found if s["state"] != "succeeded"]
    interrupted = [s for s in found if s["attempts"] > 1]
    assert interrupted, "the run the kill interrupted was retried"
    assert any("interrupted" in (s["reason"] or "") or s["attempts"] > 1 for s in interrupted)
    # The run history agrees: each logical time succeeded once, the interrupted attempt failed.
    status, body = workbench.request("GET", "cube/api/v1/pipelines/runs")
    runs = [r for r in body["runs"] if r["schedule"] == "tick"]
    succeeded = Counter(r["logical_date"] for r in runs if r["status"] == "succeeded")
    assert max(succeeded.values()) == 1 and set(succeeded) >= set(logicals[: len(logicals) - 1])
    assert any(r["status"] == "failed" and "interrupted" in (r["error"] or "") for r in runs)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

"""The Notebook Servers panel with the machine's queue, in real Chromium against a real `jupyter lab`
whose GPUs are a replay of two recorded A100s (tests/gpu/nvml_replay.py, installed by the server's
config file: a replay, not a GPU) and a GPU quota of one per user. A GPU server past the quota shows
"Queued · #1 · <why>" the moment it is created (never a blank wait), and starts by itself, live in the
panel, once the server holding the quota is deleted; a GPU training job past the quota is listed
Queued in the Jobs panel with its place and why, then runs. Screenshots land in
tests/browser/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.lab import Lab, running_lab
from tests.browser.test_notebook_servers_panel import open_lab, open_panel, row, shot

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "data" / "nvml" / "a100x2-processes.json"
SERVER_CONFIG = """\
import sys
sys.path.insert(0, {repo!r})
from tests.gpu.nvml_replay import install
install({recording!r})
c.CubeWorkbench.gpu_quota_per_user = 1
"""
QUOTA_FULL = "waiting for 1 GPU of quota: 'alice' holds 1 of 1 (CubeWorkbench.gpu_quota_per_user)"


class QueueLab(Lab):
    """The browser tests' `jupyter lab`, on two replayed A100s with a quota of one GPU a user."""

    def write_config(self) -> None:
        super().write_config()
        (self.root / "config" / "jupyter_server_config.py").write_text(
            SERVER_CONFIG.format(repo=str(REPO), recording=str(RECORDING))
        )


@pytest.fixture(scope="module")
def lab() -> Iterator[QueueLab]:
    with running_lab(lambda root: QueueLab(root=root), "cube-browser-queue-", "lab-queue.log") as server:
        yield server


def test_a_queued_server_says_why_and_starts_live_when_the_quota_frees(lab: Lab, page: Page) -> None:
    status, holder = lab.request("POST", "cube/api/v1/notebooks", {"name": "holder", "profile": "a100"})
    assert status == 201 and holder["status"] == "pending", holder
    open_lab(page, lab)
    open_panel(page)

    page.get_by_test_id("cube-create-name").fill("waiter")
    page.get_by_test_id("cube-create-profile").select_option("a100")
    page.get_by_test_id("cube-create-submit").click()
    waiter = row(page, "waiter")
    expect(waiter).to_have_attribute("data-status", "queued", timeout=15_000)
    expect(waiter.get_by_test_id("cube-server-status")).to_have_text("queued")
    # the queue's waiting look, as a pipeline's queued step has it: grey, outlined dashed amber
    expect(waiter.get_by_test_id("cube-server-status")).to_have_css("outline-style", "dashed")
    expect(waiter.get_by_test_id("cube-server-queue")).to_have_text(f"Queued · #1 · {QUOTA_FULL}")
    expect(waiter.get_by_test_id("cube-server-stop")).to_be_visible()  # it may leave the queue
    expect(waiter.get_by_test_id("cube-server-connect")).to_have_count(0)
    shot(page, "notebook-queued")

    # The quota frees elsewhere (the API, as the CLI would): the queue admits it, the panel follows.
    assert lab.request("DELETE", "cube/api/v1/notebooks/holder")[0] == 204
    expect(waiter).not_to_have_attribute("data-status", "queued", timeout=30_000)
    expect(waiter.get_by_test_id("cube-server-queue")).to_have_count(0)
    expect(waiter).to_have_attribute("data-status", "running", timeout=60_000)
    shot(page, "notebook-admitted")
    assert lab.request("DELETE", "cube/api/v1/notebooks/waiter")[0] == 204


JOBS = '[data-testid="cube-jobs"]'
HOLD = """\
import os, time
while not os.path.exists({release!r}):
    time.sleep(0.1)
print("ran on GPU", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
"""


def test_a_queued_training_job_shows_its_place_and_why_then_runs_when_the_quota_frees(
    lab: Lab, page: Page
) -> None:
    """A GPU training job past the quota (a server holds it) is listed Queued with '#1 · <why>' in the
    Jobs panel; deleting the server admits it, and the panel follows it to Running and Succeeded."""
    release = lab.root / "release-gpu-job"
    (lab.root / "work" / "hold_gpu.py").write_text(HOLD.format(release=str(release)))
    status, holder = lab.request("POST", "cube/api/v1/notebooks", {"name": "gpu-holder", "profile": "a100"})
    assert status == 201, holder
    spec = {
        "name": "gpu-train",
        "framework": "pytorch",
        "script": "hold_gpu.py",
        "replicas": {"worker": 1},
        "resources": {"gpu": 1},
    }
    status, job = lab.request("POST", "cube/api/v1/jobs", {"kind": "training", "spec": spec})
    assert status == 201 and job["phase"] == "Queued", job

    open_lab(page, lab)
    page.evaluate("() => window.jupyterapp.commands.execute('cube:open-jobs')")
    queued = page.locator(f'{JOBS} [data-testid="cube-jobs-row"][data-name="gpu-train"]')
    expect(queued).to_have_attribute("data-phase", "Queued", timeout=15_000)
    expect(page.locator(JOBS).get_by_test_id("cube-job-queue")).to_have_text(f"#1 · {QUOTA_FULL}")
    shot(page, "job-queued", JOBS)

    assert lab.request("DELETE", "cube/api/v1/notebooks/gpu-holder")[0] == 204
    expect(queued).to_have_attribute("data-phase", "Running", timeout=60_000)
    expect(page.locator(JOBS).get_by_test_id("cube-job-queue")).to_have_count(0)
    release.touch()
    expect(queued).to_have_attribute("data-phase", "Succeeded", timeout=60_000)
    assert lab.request("DELETE", "cube/api/v1/jobs/gpu-train")[0] == 204

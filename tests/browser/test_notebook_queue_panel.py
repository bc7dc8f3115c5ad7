"""The Notebook Servers panel with the machine's queue, in real Chromium against a real `jupyter lab`
whose GPUs are a replay of two recorded A100s (tests/gpu/nvml_replay.py, installed by the server's
config file: a replay, not a GPU) and a GPU quota of one per user. A GPU server past the quota shows
"Queued · #1 · <why>" the moment it is created (never a blank wait), and starts by itself, live in the
panel, once the server holding the quota is deleted. Screenshots land in tests/browser/artifacts/."""

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

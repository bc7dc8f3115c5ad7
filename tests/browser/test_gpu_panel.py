"""The GPU panel and status-bar item in real Chromium against a real `jupyter lab` with the workbench.

There is no GPU on these machines, so the Jupyter server's NVML is a REPLAY of recorded NVML answers
(tests/data/nvml/*.json through tests/gpu/nvml_replay.py), installed by the server's own config file;
everything above `pynvml` — the sampler, kernel attribution, idle detection, `/gpu`, the UI — is the
real code. A control file next to that config says which recording to replay and which recorded PIDs
stand for live processes (a notebook's kernel), so a test can switch recordings while the server runs.

A person's path: open the GPU panel from the View menu, see a card per replayed GPU with its model,
utilization and memory as recorded, charts that grow as samples arrive, and the quota bar count a GPU
notebook server; open a notebook, run it, and once its kernel is the process the recording shows on
GPU 0, see the status bar show that kernel's GPU memory, the Kernels table name the notebook, and a
warning (once per idle episode) when GPU 0 sits at 0% while the kernel holds memory.
Then a MIG GPU (instances listed, utilization "not reported"), the layout restored on reload, and the
real NVML on this GPU-less machine: the "No GPU visible" state with its message.
Screenshots land in tests/browser/artifacts/ for a person to look at.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from playwright.sync_api import Locator, Page, expect

from cube_jupyter.gpu.nvml import NvmlSource
from cube_jupyter.gpu.sources import NoGpuVisible
from tests.browser.lab import ARTIFACTS, Lab, LapTimer, run_from_palette, running_lab
from tests.browser.test_notebook_servers_panel import dark_theme, open_lab, shot
from tests.waiting import wait_until

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "tests" / "data" / "nvml"
TWO_A100 = RECORDINGS / "a100x2-processes.json"
MIG_A100 = RECORDINGS / "a100-mig.json"
KERNEL_PID = 41377  # in TWO_A100: holds 1024 MiB on GPU 0 only, which reads 0% in samples 4-6
IDLE_SAMPLES = slice(4, 7)
IDLE_REPEATS = 12  # that idle stretch, replayed this many times so the episode outlasts a click
NOTEBOOK = "train.ipynb"
PANEL = "#cube-gpu"
NOT_REPORTED = "\N{EN DASH}"  # what the panel shows for a figure the source did not report
QUOTA = 2
SAMPLE_SECONDS = 0.5

# The server's config: the replay is installed in the server process (as nvml_replay's docstring
# shows) and re-installed whenever the test rewrites the control file.
SERVER_CONFIG = """\
import json, sys, threading, time
from pathlib import Path

sys.path.insert(0, {repo!r})
from tests.gpu.nvml_replay import install, uninstall

CONTROL = Path({control!r})


def apply(text):
    control = json.loads(text)
    if control["recording"] is None:
        uninstall()  # the real pynvml
    else:
        install(control["recording"], {{int(k): v for k, v in control["pid_map"].items()}})


def follow(seen):
    while True:
        text = CONTROL.read_text()
        if text != seen:
            apply(text)
            seen = text
        time.sleep(0.1)


if not any(t.name == "nvml-replay-control" for t in threading.enumerate()):
    first = CONTROL.read_text()
    apply(first)
    threading.Thread(target=follow, args=(first,), name="nvml-replay-control", daemon=True).start()

c.CubeGPU.sample_seconds = {sample}
c.CubeGPU.cache_seconds = {sample}
c.CubeGPU.idle_warning_seconds = 1.0
c.CubeGPU.cull_idle_gpu_seconds = 3600.0  # (the Lab's own kernels are never stopped)
c.CubeGPU.cull_idle_gpu_jobs = True
c.CubeWorkbench.gpu_quota_per_user = {quota}
"""


class ReplayLab(Lab):
    """The browser tests' `jupyter lab`, plus a config file that replays recorded NVML readings."""

    @property
    def control(self) -> Path:
        return self.root / "nvml-control.json"

    def replay(self, recording: Path | None, pid_map: dict[int, int] | None = None) -> None:
        """Switch the server to another recording (None: the real NVML); written atomically."""
        body = {"recording": None if recording is None else str(recording), "pid_map": pid_map or {}}
        partial = self.control.with_suffix(".partial")
        partial.write_text(json.dumps(body))
        partial.replace(self.control)

    def write_config(self) -> None:
        super().write_config()
        self.replay(idle_stretched(TWO_A100, self.root / "a100x2-idle.json"))
        (self.root / "config" / "jupyter_server_config.py").write_text(
            SERVER_CONFIG.format(
                repo=str(REPO), control=str(self.control), sample=SAMPLE_SECONDS, quota=QUOTA
            )
        )


def idle_stretched(source: Path, target: Path) -> Path:
    """The recording with its recorded idle samples replayed several times in a row: every sample
    is as recorded, the idle episode just lasts long enough for a person (and a test) to act on it."""
    recording = json.loads(source.read_text())
    samples = recording["samples"]
    idle = samples[IDLE_SAMPLES]
    assert all(s["devices"][0]["calls"]["nvmlDeviceGetUtilizationRates"]["gpu"] == 0 for s in idle)
    recording["samples"] = samples[: IDLE_SAMPLES.start] + idle * IDLE_REPEATS + samples[IDLE_SAMPLES.stop :]
    target.write_text(json.dumps(recording))
    return target


@pytest.fixture(scope="module")
def lab() -> Iterator[ReplayLab]:
    with running_lab(lambda root: ReplayLab(root=root), "cube-browser-gpu-", "lab-gpu.log") as server:
        yield server


# -- what the recordings say, as the panel shows it --------------------------------------------------


def mib_text(mib: float) -> str:
    """The panel's memory format: MiB below 1 GiB, else GiB with one decimal."""
    return f"{round(mib)} MiB" if abs(mib) < 1024 else f"{mib / 1024:.1f} GiB"


def recorded(recording: Path, index: int) -> dict[str, Any]:
    """Every value GPU `index` takes in the recording, formatted as the panel formats them."""
    samples = json.loads(recording.read_text())["samples"]
    calls = [next(d for d in s["devices"] if d["index"] == index)["calls"] for s in samples]
    util = {c["nvmlDeviceGetUtilizationRates"].get("gpu") for c in calls}
    return {
        "name": calls[0]["nvmlDeviceGetName"],
        "uuid": calls[0]["nvmlDeviceGetUUID"],
        "util": {NOT_REPORTED if u is None else f"{u}%" for u in util},
        "memory": {
            f"{mib_text(c['nvmlDeviceGetMemoryInfo']['used'] / 2**20)} / "
            f"{mib_text(c['nvmlDeviceGetMemoryInfo']['total'] / 2**20)}"
            for c in calls
        },
    }


# -- page helpers ------------------------------------------------------------------------------------


def card(page: Page, index: int) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-gpu-device"][data-index="{index}"]')


def chart_points(chart: Locator) -> int:
    return int(chart.get_attribute("data-points") or 0)


def expect_text_in(locator: Locator, allowed: set[str]) -> str:
    """The locator's text once it is one of `allowed` (values change as samples arrive)."""
    pattern = re.compile("^(" + "|".join(re.escape(a) for a in sorted(allowed)) + ")$")
    expect(locator).to_have_text(pattern)
    return locator.inner_text()


def open_gpu_panel_from_view_menu(page: Page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^View$")).click()
    page.locator(".lm-Menu-itemLabel", has_text="Open GPU Panel").click()
    expect(page.locator(PANEL)).to_be_visible()


def close_gpu_panel(page: Page) -> None:
    """Close the panel if the restored layout brought it back, so opening it again is what shows it."""
    page.evaluate(
        "() => { for (const w of window.jupyterapp.shell.widgets('main')) "
        "{ if (w.id === 'cube-gpu') { w.close(); } } }"
    )
    expect(page.locator(PANEL)).to_have_count(0)
    # An emptied main area gets a launcher, which takes the focus once its cards are drawn.
    page.wait_for_function(
        "() => !document.querySelector('.jp-Launcher') || document.querySelector('.jp-LauncherCard')"
    )


def idle_toasts(page: Page) -> Locator:
    return page.locator(".Toastify__toast", has_text=f"{NOTEBOOK} has held")


def write_notebook(lab: Lab) -> None:
    cell: dict[str, Any] = {
        "cell_type": "code",
        "execution_count": None,
        "id": "pid",
        "metadata": {},
        "outputs": [],
        "source": "import os\nprint('kernel pid', os.getpid())",
    }
    notebook = {
        "cells": [cell],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (lab.root / "work" / NOTEBOOK).write_text(json.dumps(notebook))


def run_notebook_for_kernel_pid(page: Page) -> int:
    """Open the notebook, run its one cell and read the kernel's PID from the output."""
    page.evaluate(
        "(p) => { void window.jupyterapp.commands.execute('docmanager:open', {path: p}); }",
        NOTEBOOK,
    )
    notebook = page.locator(".jp-NotebookPanel:visible")
    expect(notebook.locator(".jp-Cell")).to_have_count(1, timeout=30_000)
    page.wait_for_function(
        "(p) => window.jupyterapp.shell.widgets('main').some(w => w.context && w.context.path === p"
        " && w.sessionContext.session?.kernel?.status === 'idle')",
        arg=NOTEBOOK,
        timeout=60_000,
    )
    notebook.locator(".jp-Cell").first.click()
    page.keyboard.press("Shift+Enter")
    output = notebook.locator(".jp-OutputArea-output").first
    expect(output).to_contain_text("kernel pid", timeout=60_000)
    match = re.search(r"kernel pid (\d+)", output.inner_text())
    assert match, output.inner_text()
    return int(match.group(1))


# -- tests -------------------------------------------------------------------------------------------


def test_gpu_cards_quota_kernel_status_and_idle_warning(lab: ReplayLab, page: Page) -> None:
    lap = LapTimer()
    gpu0, gpu1 = recorded(TWO_A100, 0), recorded(TWO_A100, 1)

    open_lab(page, lab)
    open_gpu_panel_from_view_menu(page)
    panel = page.locator(PANEL)
    expect(panel.get_by_test_id("cube-gpu-source")).to_have_attribute("data-source", "nvml")
    lap("open lab + GPU panel")

    # One card per replayed GPU, with the recorded model, utilization and memory.
    expect(panel.get_by_test_id("cube-gpu-device")).to_have_count(2)
    for index, gpu in ((0, gpu0), (1, gpu1)):
        device = card(page, index)
        expect(device).to_have_attribute("data-uuid", gpu["uuid"])
        expect(device.get_by_test_id("cube-gpu-name")).to_have_text(f"GPU {index}: {gpu['name']}")
        expect_text_in(device.get_by_test_id("cube-gpu-util-text"), gpu["util"])
        expect_text_in(device.get_by_test_id("cube-gpu-memory-text"), gpu["memory"])
    # Recorded processes are listed; none is one of this server's kernels yet.
    expect(card(page, 1).locator('[data-testid="cube-gpu-process"][data-pid="52001"]')).to_be_visible()
    expect(panel.get_by_test_id("cube-gpu-kernels-none")).to_be_visible()

    # The charts grow as the server samples.
    chart = card(page, 0).locator('[data-testid="cube-gpu-chart"][data-metric="utilization_pct"]')
    expect(chart).not_to_have_attribute("data-points", "0")
    before = chart_points(chart)
    selector = f'{PANEL} [data-index="0"] [data-testid="cube-gpu-chart"][data-metric="utilization_pct"]'
    page.wait_for_function(
        "([sel, n]) => Number(document.querySelector(sel).dataset.points) > n", arg=[selector, before]
    )
    lap("cards + growing charts")

    # The quota bar: the admin's per-user limit; a GPU notebook server (on a replayed GPU) counts.
    quota = panel.get_by_test_id("cube-gpu-quota")
    expect(quota).to_have_attribute("data-limit", str(QUOTA))
    expect(quota.get_by_test_id("cube-gpu-quota-bar-text")).to_have_text(f"0 / {QUOTA}")
    status, body = lab.request("POST", "cube/api/v1/notebooks", {"name": "trainer", "profile": "a100"})
    assert status == 201, body
    expect(quota.get_by_test_id("cube-gpu-quota-bar-text")).to_have_text(f"1 / {QUOTA}")
    expect(quota.get_by_test_id("cube-gpu-quota-holders")).to_contain_text("notebook trainer: 1 GPU")
    demand = quota.get_by_test_id("cube-gpu-demand")
    expect(demand).to_have_text("holding 1 · queued 0")
    # A job past the quota waits in the queue: its GPUs show beside those held, then go with it.
    wide = {
        "name": "wide",
        "framework": "pytorch",
        "replicas": {"worker": {"replicas": 2, "resources": {"gpu": 1}}},
        "command": [sys.executable, "-c", "pass"],
    }
    status, body = lab.request("POST", "cube/api/v1/jobs", {"kind": "training", "spec": wide})
    assert status == 201 and body["phase"] == "Queued", body
    expect(demand).to_have_text("holding 1 · queued 2 (job wide)")
    expect(demand).to_have_attribute("title", re.compile(r"#1 job wide: 2 GPUs, waiting for 2 GPUs of quota"))
    # A GPU server behind it (its owner's work goes in order) waits in the same queue, and shows too.
    status, body = lab.request("POST", "cube/api/v1/notebooks", {"name": "waiter", "profile": "a100"})
    assert status == 201 and body["status"] == "queued", body
    expect(demand).to_have_text("holding 1 · queued 3 (job wide, notebook waiter)")
    expect(demand).to_have_attribute("title", re.compile(r"#2 notebook waiter: 1 GPU, behind job wide"))
    assert lab.request("DELETE", "cube/api/v1/notebooks/waiter")[0] == 204
    expect(demand).to_have_text("holding 1 · queued 2 (job wide)")
    status, body = lab.request("DELETE", "cube/api/v1/jobs/wide")
    assert status == 204, body
    expect(demand).to_have_text("holding 1 · queued 0")
    lap("quota")
    shot(page, "21-gpu-panel", PANEL)

    # A notebook's kernel: no GPU memory, so no status-bar item...
    write_notebook(lab)
    pid = run_notebook_for_kernel_pid(page)
    status_item = page.get_by_test_id("cube-gpu-status")
    expect(status_item).to_be_hidden()
    lap("notebook kernel started")

    # ...until the recording's process on GPU 0 is that kernel.
    lab.replay(idle_stretched(TWO_A100, lab.root / "a100x2-idle.json"), {KERNEL_PID: pid})
    expect(status_item).to_be_visible(timeout=30_000)
    expect(status_item.get_by_test_id("cube-gpu-status-memory")).to_have_text(mib_text(1024))
    expect_text_in(status_item.get_by_test_id("cube-gpu-status-util"), gpu0["util"])
    lap("status bar shows the kernel's GPU memory")
    page.locator("#jp-main-statusbar").screenshot(path=str(ARTIFACTS / "22-gpu-statusbar.png"))

    # The panel beside the notebook names the notebook and the kernel's PID.
    status_item.locator("button").click()
    kernel_row = panel.locator(f'[data-testid="cube-gpu-kernel"][data-path="{NOTEBOOK}"]')
    expect(kernel_row).to_be_visible()
    expect(kernel_row.get_by_test_id("cube-gpu-kernel-memory")).to_have_text(mib_text(1024))
    expect(kernel_row).to_contain_text("GPU 0")
    process = card(page, 0).locator(f'[data-testid="cube-gpu-process"][data-pid="{pid}"]')
    expect(process).to_contain_text(NOTEBOOK)
    expect(page.locator(".jp-NotebookPanel:visible")).to_be_visible()  # split, not replaced

    # GPU 0 reads 0% while the kernel holds memory: one warning for the whole episode, from the server.
    toast = idle_toasts(page)
    expect(toast).to_have_count(1, timeout=30_000)
    warning = panel.locator('[data-testid="cube-gpu-idle-warning"][data-key^="kernel:"]')
    expect(warning).to_contain_text(f"{NOTEBOOK} has held 1024 MiB on GPU 0 at 0% utilization")
    expect(kernel_row).to_have_class(re.compile("cube-mod-idle"))
    expect(status_item.locator("button")).to_have_class(re.compile("cube-mod-idle"))
    page.wait_for_function(  # several reports of the same episode arrive...
        "(sel) => Number(document.querySelector(sel)?.dataset.idleSeconds) >= 2",
        arg=f'{PANEL} [data-testid="cube-gpu-idle-warning"]',
    )
    expect(toast).to_have_count(1)  # ...and still one toast
    lap("idle warning")

    # Its action opens the GPU panel (here: activates it again after the notebook took focus) and, as
    # any toast action does, closes the toast.
    page.locator(".jp-NotebookPanel:visible .jp-Cell").first.click()
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.id") != "cube-gpu"
    idle_for = float(warning.get_attribute("data-idle-seconds") or 0)
    toast.get_by_role("button", name="Open GPU panel").click()
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.id === 'cube-gpu'")
    expect(toast).to_have_count(0)

    # Later reports of the same episode bring no new toast; when the GPU works again the episode ends,
    # and the next idle spell is a new episode with a new toast.
    page.wait_for_function(
        "([sel, s]) => Number(document.querySelector(sel)?.dataset.idleSeconds) >= s + 1",
        arg=[f'{PANEL} [data-testid="cube-gpu-idle-warning"]', idle_for],
    )
    expect(toast).to_have_count(0)
    expect(warning).to_have_count(0, timeout=30_000)
    expect(toast).to_have_count(1, timeout=30_000)
    lap("idle episode ended, next began")
    shot(page, "23-gpu-idle", PANEL)
    page.screenshot(path=str(ARTIFACTS / "23-gpu-idle-toast.png"))

    with dark_theme(page):
        shot(page, "24-gpu-panel-dark", PANEL)
    print(f"GPU panel timings (s): {lap.timings}")


def saved_layout_has_gpu_panel(lab: Lab) -> bool:
    status, body = lab.request("GET", "lab/api/workspaces/default")
    return status == 200 and "cube-gpu" in json.dumps(body)


def test_launcher_card_mig_gpu_and_restored_layout(lab: ReplayLab, page: Page) -> None:
    mig = recorded(MIG_A100, 0)
    lab.replay(MIG_A100)
    open_lab(page, lab)
    close_gpu_panel(page)
    # The first test left the panel in the saved layout: the close is saved before it opens again,
    # or the save of the close could land after the open's and the reload restore no panel.
    wait_until(
        lambda: not saved_layout_has_gpu_panel(lab), 30, "the workspace to drop the panel", interval=0.2
    )
    page.evaluate("() => { void window.jupyterapp.commands.execute('launcher:create'); }")
    page.locator(".jp-LauncherCard", has_text=re.compile("^GPU$")).click()
    panel = page.locator(PANEL)
    expect(panel).to_be_visible()
    # The layout (saved in the server's workspace) brings the panel back after a reload.
    wait_until(
        lambda: saved_layout_has_gpu_panel(lab), 30, "the workspace to record the GPU panel", interval=0.2
    )
    page.reload()
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=30_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    expect(panel).to_be_visible(timeout=30_000)

    expect(panel.get_by_test_id("cube-gpu-device")).to_have_count(1, timeout=30_000)
    device = card(page, 0)
    expect(device.get_by_test_id("cube-gpu-name")).to_have_text(f"GPU 0: {mig['name']}")
    # MIG mode: NVML does not report whole-GPU utilization; the panel says so, never 0%.
    assert mig["util"] == {NOT_REPORTED}
    expect(device.get_by_test_id("cube-gpu-util-text")).to_have_text(NOT_REPORTED)
    instances = device.get_by_test_id("cube-gpu-mig-instance")
    expect(instances).to_have_count(2)
    expect(instances.first).to_contain_text("NVIDIA A100-SXM4-80GB MIG 3g.40gb")
    expect(device.locator('[data-testid="cube-gpu-process"][data-pid="60112"]')).to_be_visible()
    shot(page, "25-gpu-mig", PANEL)


JOB_PID = 41234  # in TWO_A100: holds 18944 MiB on GPU 0 and 512 MiB on GPU 1
# A replica whose child holds the GPU memory, as a DataLoader worker or `!python train.py` would.
WITH_CHILD = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "time.sleep(300)\n"
)


def test_a_jobs_gpu_memory_is_named_after_the_job_with_its_history(lab: ReplayLab, page: Page) -> None:
    """A local training job's replica (really started by the workbench) holds the recorded GPU
    memory through its child: the panel names it "job toy-ddp, worker-0" under each GPU, and lists
    the job with its memory and a sparkline that grows as samples arrive."""
    spec = {
        "name": "toy-ddp",
        "framework": "pytorch",
        "replicas": {"worker": 1},
        "command": [sys.executable, "-c", WITH_CHILD],
    }
    status, body = lab.request("POST", "cube/api/v1/jobs", {"kind": "training", "spec": spec})
    assert status == 201, body
    try:
        child = wait_until(lambda: replica_child(lab), 60, "the replica and its child running")
        lab.replay(TWO_A100, {JOB_PID: child})
        open_lab(page, lab)
        close_gpu_panel(page)
        open_gpu_panel_from_view_menu(page)
        panel = page.locator(PANEL)
        process = card(page, 0).locator(f'[data-testid="cube-gpu-process"][data-pid="{child}"]')
        expect(process).to_contain_text("job toy-ddp, worker-0", timeout=30_000)
        row = panel.locator('[data-testid="cube-gpu-workload"][data-series="job:alice/toy-ddp"]')
        expect(row).to_contain_text("job toy-ddp, worker-0")
        expect(row).to_contain_text("GPU 0, GPU 1")
        sparkline = row.get_by_test_id("cube-gpu-workload-sparkline")
        wait_until(lambda: chart_points(sparkline) >= 3, 30, "the job's memory history growing")
        shot(page, "25b-gpu-job", PANEL)

        # the Jobs panel shows the running job's GPU memory too, from the GPU plugin's history
        page.evaluate("() => window.jupyterapp.commands.execute('cube:open-jobs')")
        jobs = page.locator('[data-testid="cube-jobs"]')
        jobs.locator('[data-testid="cube-jobs-row"][data-name="toy-ddp"]').click()
        memory = jobs.get_by_test_id("cube-job-detail").get_by_test_id("cube-gpu-memory")
        expect(memory).to_contain_text("GPU memory", timeout=30_000)
        expect(memory).to_contain_text("GiB")
        shot(page, "25c-job-gpu-memory", '[data-testid="cube-jobs"]')

        # Its GPU sits idle: the GPU panel counts down to the culler's stop (the admin opted jobs
        # in), and the user gets a toast for it.
        lab.replay(idle_stretched(TWO_A100, lab.root / "a100x2-idle.json"), {KERNEL_PID: child})
        page.evaluate("() => window.jupyterapp.commands.execute('cube:open-gpu')")
        warning = panel.locator('[data-testid="cube-gpu-idle-warning"][data-key="job:alice/toy-ddp"]')
        expect(warning).to_contain_text("a training job is stopped after 1.0 h of this", timeout=30_000)
        expect(warning.get_by_test_id("cube-gpu-idle-stops")).to_have_text(re.compile(r"^stops in 59m$"))
        toast = page.locator(".Toastify__toast", has_text="job toy-ddp has held 1024 MiB")
        expect(toast).to_have_count(1)
        shot(page, "25d-gpu-job-idle", PANEL)
    finally:
        lab.request("DELETE", "cube/api/v1/jobs/toy-ddp")


def replica_child(lab: Lab) -> int | None:
    """The pid of the running replica's child process, once there is one."""
    status, job = lab.request("GET", "cube/api/v1/jobs/toy-ddp")
    pid = job["replicas"][0].get("pid") if status == 200 and job.get("replicas") else None
    if not pid:
        return None
    children = psutil.Process(pid).children(recursive=True)
    return children[0].pid if children else None


def test_palette_and_no_gpu_visible_with_the_real_nvml(lab: ReplayLab, page: Page) -> None:
    try:
        NvmlSource().read()
    except NoGpuVisible as exc:
        message = exc.message
    else:
        pytest.skip("this machine has a real GPU: the 'No GPU visible' state cannot be shown here")
    lab.replay(None)  # back to the real pynvml, in the server
    open_lab(page, lab)
    close_gpu_panel(page)
    run_from_palette(page, "GPU", "Open GPU Panel")
    panel = page.locator(PANEL)
    expect(panel.get_by_test_id("cube-gpu-none")).to_have_text(message, timeout=30_000)
    expect(panel.get_by_test_id("cube-gpu-device")).to_have_count(0)
    expect(panel.get_by_test_id("cube-gpu-quota")).to_be_visible()
    expect(panel.get_by_test_id("cube-gpu-error")).to_have_count(0)
    shot(page, "26-gpu-none", PANEL)

"""A user server in real Chromium: a notebook server the central workbench started, used as its owner.

A person's path: create a notebook server from the workbench's Notebook Servers panel and connect to it
(a new tab, through the workbench's path router). That child is a user server: in its Lab, run a
2-step pipeline notebook from its workspace in the Pipeline panel and see the run succeed; launch a
2-replica PyTorch job (a real gloo all_reduce) from the Jobs panel and see it succeed; open the GPU
panel and see "No GPU visible" (these machines have none), not an error. The child page never gets a
404, a failed cube API request or an uncaught error. The workbench lists the run and the job as the
user's (one state dir). Then the job is deleted from the child's panel and the server from the
workbench's.
Screenshots land in tests/browser/artifacts/ for a person to look at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Page, Response, expect

from cube_jupyter.names import user_slug
from tests.browser.lab import USER, Lab, LapTimer, running_lab
from tests.browser.test_jobs_panel import ALLREDUCE, field_input, job_row, training_form
from tests.browser.test_notebook_servers_panel import (
    PANEL_TAB,
    confirm_dialog,
    open_lab,
    open_panel,
    row,
    shot,
)
from tests.pipelines.notebooks import code, notebook, write

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SERVER = "usr"
NOTEBOOK = "twostep.ipynb"
STEPS = ("make", "total")
SCRIPT = "allreduce.py"
JOB = "child-ddp"
PIPELINE_PANEL = "#cube-pipeline"
JOBS_PANEL = '[data-testid="cube-jobs"]'
GPU_PANEL = "#cube-gpu"


class UserServerLab(Lab):
    """The browser tests' `jupyter lab`, whose child servers (which read the same config files) also
    expose `window.jupyterapp` to the test."""

    def write_config(self) -> None:
        super().write_config()
        (self.root / "config" / "jupyter_lab_config.json").write_text(
            json.dumps({"LabApp": {"expose_app_in_browser": True}})
        )


@pytest.fixture(scope="module")
def lab() -> Iterator[UserServerLab]:
    with running_lab(lambda root: UserServerLab(root=root), "cube-browser-user-", "lab-user.log") as server:
        yield server


def write_pipeline(lab: Lab) -> None:
    """Two steps with data flowing from the first to the second, and a parameter, in the server's
    workspace (the child's root dir)."""
    workspace = lab.root / "state" / "workspaces" / user_slug(USER) / SERVER
    workspace.mkdir(parents=True, exist_ok=True)
    write(
        notebook(
            code("n = 4", "parameters"),
            code("values = list(range(n))", "step:make"),
            code("total = sum(values)\nprint('total', total)", "step:total", "after:make"),
            code("total", "metrics"),
        ),
        workspace / NOTEBOOK,
    )
    (workspace / SCRIPT).write_text(ALLREDUCE)


@dataclass
class PageProblems:
    """Failed requests of a page (its uncaught and console errors fail the test through the `page`
    fixture, which watches every page of the context)."""

    problems: list[str] = field(default_factory=list)
    cube_answers: int = 0  # the cube API answers seen, to show the page was watched at all

    def watch(self, page: Page) -> None:
        page.on("response", self._response)

    def _response(self, response: Response) -> None:
        if "/cube/api/" in response.url:
            self.cube_answers += 1
        if response.status == 404 or (response.status >= 400 and "/cube/" in response.url):
            self.problems.append(f"{response.request.method} {response.url} -> {response.status}")


def test_user_server_runs_a_pipeline_a_job_and_shows_the_gpu_panel(lab: Lab, page: Page) -> None:
    lap = LapTimer()

    # -- the workbench: create a server and connect to it -------------------------------------------
    open_lab(page, lab)
    open_panel(page)
    page.get_by_test_id("cube-create-name").fill(SERVER)
    page.get_by_test_id("cube-create-submit").click()
    server_row = row(page, SERVER)
    expect(server_row).to_have_attribute("data-status", "running", timeout=60_000)
    write_pipeline(lab)
    lap("create server")

    child_problems = PageProblems()
    # Watched from its first request: the tab opens blank, then goes through the router.
    page.context.on("page", child_problems.watch)
    with page.context.expect_page() as opened:
        server_row.get_by_test_id("cube-server-connect").click()
    child = opened.value
    child.wait_for_url(re.compile(rf"/cube/notebook/{USER}/{SERVER}/lab"))
    # A user server: no Notebook Servers panel, a way back to the workbench instead. (Lab may move
    # the page to a fresh workspace first, as the workbench's page holds the window name `default`:
    # the card is drawn by the page that stays.)
    expect(child.locator(".jp-LauncherCard", has_text=re.compile("^Workbench$"))).to_be_visible(
        timeout=30_000
    )
    child.wait_for_function("() => window.jupyterapp !== undefined")
    child.evaluate("() => window.jupyterapp.restored.then(() => true)")
    expect(child.locator(PANEL_TAB)).to_have_count(0)
    lap("connect")

    # -- the child: the notebook as a pipeline ------------------------------------------------------
    child.evaluate("(p) => window.jupyterapp.commands.execute('docmanager:open', {path: p})", NOTEBOOK)
    expect(child.locator(".jp-NotebookPanel:visible .jp-Cell")).to_have_count(4, timeout=30_000)
    child.evaluate("() => window.jupyterapp.commands.execute('cube:open-pipeline')")
    pipeline = child.locator(PIPELINE_PANEL)
    expect(pipeline).to_be_visible()
    expect(pipeline.get_by_test_id("cube-pipeline-path")).to_have_text(NOTEBOOK)
    expect(pipeline.locator('[data-testid="cube-dag-node"]')).to_have_count(len(STEPS))
    edge = pipeline.locator('[data-testid="cube-dag-edge"][data-upstream="make"][data-downstream="total"]')
    expect(edge).to_have_attribute("data-variables", "values")
    pipeline.locator('[data-testid="cube-parameter"][data-name="n"]').fill("5")
    pipeline.get_by_test_id("cube-run-start").click()
    run = pipeline.get_by_test_id("cube-run")
    expect(run).to_have_attribute("data-status", "succeeded", timeout=90_000)
    steps = run.get_by_test_id("cube-run-step")
    expect(steps).to_have_count(len(STEPS))
    for index in range(len(STEPS)):
        expect(steps.nth(index)).to_have_attribute("data-status", "succeeded")
    expect(run.get_by_test_id("cube-run-metrics")).to_contain_text("total=10")  # sum(range(5))
    run_id = run.get_attribute("data-run")
    assert run_id
    lap("pipeline run")
    shot(child, "41-user-server-pipeline", PIPELINE_PANEL)

    # -- the child: a 2-replica PyTorch job ---------------------------------------------------------
    child.evaluate("() => window.jupyterapp.commands.execute('cube:new-training-job')")
    jobs = child.locator(JOBS_PANEL)
    expect(jobs).to_be_visible()
    form = training_form(child)
    expect(form).to_be_visible()
    expect(field_input(form, "framework")).to_have_value("pytorch")
    field_input(form, "name").fill(JOB)
    field_input(form, "script").fill(SCRIPT)
    field_input(form, "replicas.master.replicas").fill("1")
    field_input(form, "replicas.worker.replicas").fill("1")
    form.get_by_test_id("cube-job-launch").click()
    job = job_row(child, JOB)
    expect(job).to_be_visible()
    expect(job).to_have_attribute("data-phase", "Succeeded", timeout=120_000)
    expect(job.get_by_test_id("cube-job-replicas")).to_have_text(re.compile(r"/2$"))
    detail = jobs.get_by_test_id("cube-job-detail")
    expect(detail).to_have_attribute("data-name", JOB)
    log = detail.get_by_test_id("cube-job-log")
    expect(log).to_contain_text("rank 0 of 2: all_reduce sum = 3", timeout=30_000)
    lap("training job")
    shot(child, "42-user-server-job", JOBS_PANEL)

    # -- the child: the GPU panel on a machine without GPUs -----------------------------------------
    child.evaluate("() => window.jupyterapp.commands.execute('cube:open-gpu')")
    gpu = child.locator(GPU_PANEL)
    expect(gpu).to_be_visible()
    expect(gpu.get_by_test_id("cube-gpu-none")).to_contain_text("No GPU visible", timeout=30_000)
    expect(gpu.get_by_test_id("cube-gpu-device")).to_have_count(0)
    expect(gpu.get_by_test_id("cube-gpu-error")).to_have_count(0)
    lap("GPU panel")
    shot(child, "43-user-server-gpu", GPU_PANEL)

    # -- the workbench lists the child's run and job as the user's ----------------------------------
    status, body = lab.request("GET", "cube/api/v1/pipelines/runs")
    assert status == 200, body
    assert body["user"] == USER
    (central_run,) = [r for r in body["runs"] if r["id"] == run_id]
    assert (central_run["user"], central_run["status"]) == (USER, "succeeded"), central_run
    status, body = lab.request("GET", "cube/api/v1/jobs")
    assert status == 200, body
    (central_job,) = [j for j in body["jobs"] if j["name"] == JOB]
    assert (central_job["user"], central_job["phase"]) == (USER, "Succeeded"), central_job

    # -- clean up: the job from the child's panel, the server from the workbench's ------------------
    child.evaluate("() => window.jupyterapp.commands.execute('cube:open-jobs')")
    expect(jobs).to_be_visible()
    detail.get_by_test_id("cube-job-delete").click()
    confirm_dialog(child, "Delete")
    expect(job).to_have_count(0)
    assert lab.request("GET", f"cube/api/v1/jobs/{JOB}")[0] == 404
    lap("delete job")

    # Nothing in the child page failed, all along.
    assert child_problems.problems == []
    assert child_problems.cube_answers > 0
    child.close()

    server_row.get_by_test_id("cube-server-delete").click()
    confirm_dialog(page, "Delete")
    expect(server_row).to_have_count(0)
    status, body = lab.request("GET", "cube/api/v1/notebooks")
    assert (status, body["notebooks"]) == (200, [])
    lap("delete server")
    print(f"user server timings (s): {lap.timings}")

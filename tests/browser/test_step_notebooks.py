"""Opening notebooks as a new user does, in real Chromium against a real `jupyter lab`, with no page
error let through (third-party ones included: `tests/browser/lab.py` lets through only our own API's
400s, which the panels provoke on purpose).

The examples open unmodified: nothing to save when closing one. Every kind of executed step notebook
opens from the Pipeline panel's run view, read-only and without a kernel, with no error from any
extension (ipywidgets' manager expects a kernel of every notebook in Lab's notebook view; step
notebooks have a view of their own) and trusted (the workbench's own record of the user's code), so
a model's HTML shows as it did when the step ran: a step that succeeded, one that failed, and one
taken from the cache of an earlier run. Screenshots land in tests/browser/artifacts/.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.lab import ARTIFACTS, Lab
from tests.browser.test_notebook_servers_panel import open_lab
from tests.browser.test_pipeline_panel import open_path, run_command
from tests.pipelines.notebooks import EXAMPLES, code, notebook, write
from tests.waiting import wait_until

NOTEBOOK = "report.ipynb"
# What scikit-learn's HTML shows only where the notebook is not trusted (Lab drops its <style>,
# which hides this text).
UNTRUSTED_FALLBACK = "please rerun this cell to show the HTML representation or trust the notebook"


def state_of(page: Page, path: str) -> dict[str, Any]:
    """The open notebook's unsaved-changes flag, its kernel's state, and the language its metadata says."""
    script = (
        "(path) => { const w = window.jupyterapp.shell.widgets('main').find("
        "w => w.context && w.context.path === path); if (!w) { return null; } "
        "const info = w.context.model.getMetadata('language_info') || {}; "
        "return {dirty: w.context.model.dirty, "
        "status: w.sessionContext.session && w.sessionContext.session.kernel "
        "? w.sessionContext.session.kernel.status : null, "
        "codemirror: 'codemirror_mode' in info}; }"
    )
    return dict(page.evaluate(script, path) or {})


EXAMPLE_NOTEBOOKS = sorted(EXAMPLES.parent.glob("*/*.ipynb"))


@pytest.mark.parametrize("path", EXAMPLE_NOTEBOOKS, ids=[p.name for p in EXAMPLE_NOTEBOOKS])
def test_an_example_notebook_opens_with_nothing_to_save(lab: Lab, page: Page, path: Path) -> None:
    example = path.name
    shutil.copy(path, lab.root / "work" / example)
    open_lab(page, lab)
    open_path(page, example)
    # its kernel started and told Lab its language: what used to rewrite the notebook's metadata
    settled = wait_until(
        lambda: state_of(page, example),
        60,
        f"{example}'s kernel idle and its language known",
        until=lambda s: s.get("status") == "idle" and s.get("codemirror"),
    )
    assert settled["dirty"] is False, settled
    tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=example)
    expect(tab).not_to_have_class(re.compile("jp-mod-dirty"))


def report_notebook() -> object:
    return notebook(
        code("from sklearn.linear_model import LogisticRegression", "imports"),
        code("model = LogisticRegression(C=0.5)\nmodel", "step:fit"),
        code("raise ValueError('no rows for this report')", "step:report", "prev:fit"),
    )


def run_and_wait(lab: Lab) -> dict[str, Any]:
    status, run = lab.request("POST", "cube/api/v1/pipelines/runs", {"path": NOTEBOOK})
    assert status in (200, 201), run

    def ended() -> dict[str, Any] | None:
        _, record = lab.request("GET", f"cube/api/v1/pipelines/runs/{run['id']}")
        return record if record["status"] in ("succeeded", "failed", "cancelled") else None

    return dict(wait_until(ended, 120, "the run ended"))


def test_every_kind_of_executed_step_opens_trusted_without_errors(lab: Lab, page: Page) -> None:
    write(report_notebook(), lab.root / "work" / NOTEBOOK)  # type: ignore[arg-type]
    first = run_and_wait(lab)
    assert first["status"] == "failed" and {s["name"]: s["status"] for s in first["steps"]} == {
        "fit": "succeeded",
        "report": "failed",
    }
    second = run_and_wait(lab)  # the same inputs: fit comes from the first run's cache
    assert {s["name"]: s["cache_hit"] for s in second["steps"]}["fit"] is True

    open_lab(page, lab)
    open_path(page, NOTEBOOK)
    for run, step, expected in (
        (first, "fit", "LogisticRegression"),
        (first, "report", "no rows for this report"),
        (second, "fit", "LogisticRegression"),
    ):
        run_command(page, "cube:open-pipeline-run", {"path": NOTEBOOK, "run": run["id"]})
        view = page.locator(f'#cube-pipeline [data-testid="cube-run"][data-run="{run["id"]}"]')
        view.locator(f'[data-testid="cube-run-step"][data-step="{step}"] button').first.click()
        path = f"cube-runs:{run['id']}/{step}.ipynb"
        executed = page.locator(".jp-NotebookPanel:visible")
        expect(executed.locator(".jp-OutputArea-output").first).to_be_visible(timeout=30_000)
        expect(executed).to_contain_text(expected)
        if expected == "LogisticRegression":  # the estimator's HTML with its style: trusted
            expect(executed.locator(".sk-top-container").first).to_be_visible()
            expect(executed.get_by_text(UNTRUSTED_FALLBACK)).to_be_hidden()
        opened = page.evaluate(
            "(p) => { const w = window.jupyterapp.shell.widgets('main').find(w => w.context && "
            "w.context.path === p); return {kernel: w.sessionContext.session !== null, "
            "dirty: w.context.model.dirty, trusted: w.content.widgets[1].model.trusted}; }",
            path,
        )
        assert opened == {"kernel": False, "dirty": False, "trusted": True}, opened
        page.screenshot(path=str(ARTIFACTS / f"27-step-{step}-{'cached' if run is second else 'run'}.png"))

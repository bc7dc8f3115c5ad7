"""What a new user hit trying every panel in a fresh `make lab`, checked in real Chromium at 1600x1000:
the Pipeline panel at the sidebar's default width shows step names and the cells' role labels in full,
a notebook's `C = 1.0` as 1.0, "cached" once per cached step and a step's failure once (under the
step); a bad notebook-server name says what to type; and a Lab started as `make lab` starts it (no
user settings) shows no "official Jupyter news?" toast. Screenshots, light and dark, land in
tests/browser/artifacts/papercuts-*.png for a person to look at.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.lab import Lab, running_lab
from tests.browser.test_notebook_servers_panel import dark_theme, open_lab
from tests.browser.test_notebook_servers_panel import open_panel as open_servers_panel
from tests.browser.test_notebook_servers_panel import shot as shot_panel
from tests.browser.test_pipeline_panel import PANEL, STEPS, cell_row, open_path, run_command
from tests.pipelines.notebooks import FANOUT_ML, code, notebook, write

VIEWPORT = {"width": 1600, "height": 1000}
NOTEBOOK = "papercuts.ipynb"
# The config section where Lab's news plugin keeps which news were seen: it reads it before it asks.
NEWS_CONFIG = "/api/config/jupyterlabapputilsextensionannouncements"
CONTINUES = 6  # untagged: "Same as cell above", in step load

# What of an element is cut off: its text is wider than its box (an ellipsis or hidden overflow).
CLIPPED = "(e) => e.scrollWidth > e.clientWidth"
# A select shows its selected label in full: the label's width in the select's font, plus its padding,
# fits in the select (a select never overflows: it cuts its label short).
SELECT_FITS = """(select) => {
  const style = getComputedStyle(select);
  const context = document.createElement('canvas').getContext('2d');
  context.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const label = select.options[select.selectedIndex].text;
  const needed = context.measureText(label).width + parseFloat(style.paddingLeft)
    + parseFloat(style.paddingRight);
  return {label, fits: needed <= select.clientWidth};
}"""


def shot(page: Page, name: str, panel: str = PANEL) -> None:
    shot_panel(page, f"papercuts-{name}", panel)
    with dark_theme(page):
        shot_panel(page, f"papercuts-{name}-dark", panel)


def open_pipeline(page: Page, lab: Lab, path: str) -> Locator:
    page.set_viewport_size(VIEWPORT)
    open_lab(page, lab)
    open_path(page, path)
    run_command(page, "cube:open-pipeline")
    panel = page.locator(PANEL)
    expect(panel.get_by_test_id("cube-pipeline-path")).to_have_text(path)
    return panel


def assert_readable(panel: Locator, testid: str, names: set[str]) -> None:
    """Each element `testid` shows its whole text, and together they show `names`."""
    elements = panel.get_by_test_id(testid)
    shown = set()
    for index in range(elements.count()):
        element = elements.nth(index)
        text = element.inner_text().strip()
        assert not element.evaluate(CLIPPED), f"{testid} {text!r} is cut off"
        shown.add(text)
    assert shown == names, shown


def test_the_pipeline_panel_reads_in_full_at_the_sidebars_default_width(lab: Lab, page: Page) -> None:
    shutil.copy(FANOUT_ML, lab.root / "work" / NOTEBOOK)
    panel = open_pipeline(page, lab, NOTEBOOK)
    expect(panel.locator('[data-testid="cube-dag-node"]')).to_have_count(len(STEPS))

    # The cells' step names and role labels, in full.
    assert_readable(panel, "cube-cell-step", STEPS)
    roles = panel.get_by_test_id("cube-cell-role")
    for index in range(roles.count()):
        fit = roles.nth(index).evaluate(SELECT_FITS)
        assert fit["fits"], f"the role select {index} cuts {fit['label']!r} short"
    continues = cell_row(page, CONTINUES).get_by_test_id("cube-cell-role")
    expect(continues).to_have_value("continue")
    assert continues.evaluate(SELECT_FITS)["label"] == "Same as cell above"

    # `C = 1.0` is a float, and is shown as one.
    expect(panel.locator('[data-testid="cube-parameter"][data-name="C"]')).to_have_value("1.0")
    expect(panel.locator('[data-testid="cube-parameter"][data-name="n_samples"]')).to_have_value("600")
    shot(page, "01-cells")

    panel.get_by_test_id("cube-run-start").click()
    run = panel.get_by_test_id("cube-run")
    expect(run).to_have_attribute("data-status", "succeeded", timeout=90_000)
    expect(run).not_to_contain_text("C=")  # 1.0 as shown is the default: nothing to send
    assert_readable(run, "cube-run-step-name", STEPS)

    # The same inputs again: every step cached, and each says so once.
    first = run.get_attribute("data-run") or ""
    panel.get_by_test_id("cube-run-start").click()
    expect(run).not_to_have_attribute("data-run", first)
    expect(run).to_have_attribute("data-status", "succeeded", timeout=90_000)
    steps = run.get_by_test_id("cube-run-step")
    expect(steps).to_have_count(len(STEPS))
    for index in range(len(STEPS)):
        expect(steps.nth(index)).to_have_attribute("data-status", "cached")
        assert steps.nth(index).inner_text().lower().count("cached") == 1, steps.nth(index).inner_text()
    assert_readable(run, "cube-run-step-name", STEPS)
    run.scroll_into_view_if_needed()
    shot(page, "02-cached")


def test_a_failed_step_shows_its_error_once_under_the_step(lab: Lab, page: Page) -> None:
    failing = notebook(
        code("x = 20", "step:make"),
        code("assert x > 100, 'x is too small for this step'", "step:check-the-value"),
    )
    failing.metadata = json.loads(FANOUT_ML.read_text())["metadata"]
    write(failing, lab.root / "work" / "failing.ipynb")
    panel = open_pipeline(page, lab, "failing.ipynb")
    panel.get_by_test_id("cube-run-start").click()
    run = panel.get_by_test_id("cube-run")
    expect(run).to_have_attribute("data-status", "failed", timeout=90_000)

    failed = run.locator('[data-testid="cube-run-step"][data-step="check-the-value"]')
    expect(failed.get_by_test_id("cube-run-step-error")).to_contain_text("x is too small for this step")
    expect(run.get_by_test_id("cube-run-error")).to_have_text(
        "Failed at step check-the-value: see its error below"
    )
    assert run.inner_text().count("x is too small for this step") == 1, run.inner_text()
    run.scroll_into_view_if_needed()
    shot(page, "03-failed")


def test_a_bad_server_name_says_what_to_type_first(lab: Lab, page: Page) -> None:
    page.set_viewport_size(VIEWPORT)
    open_lab(page, lab)
    open_servers_panel(page)
    name = page.get_by_test_id("cube-create-name")
    name.fill("My Server")
    page.get_by_test_id("cube-create-submit").click()
    error = page.get_by_test_id("cube-create-error")
    expect(error).to_have_text(
        "name 'My Server' may only have lower-case letters, digits and '-', starting and ending with a "
        "letter or digit (a DNS-1123 label)"
    )
    expect(name).to_have_attribute("aria-invalid", "true")
    shot(page, "04-server-name", "#cube-notebook-servers")


class FreshLab(Lab):
    """Lab as `make lab` starts it for a new user: no user settings (the other tests' Lab has some)."""

    def write_config(self) -> None:
        super().write_config()
        shutil.rmtree(self.root / "config" / "lab" / "user-settings")


@pytest.fixture
def fresh_lab() -> Iterator[Lab]:
    with running_lab(lambda root: FreshLab(root=root), "cube-fresh-", "lab-fresh.log") as server:
        yield server


def test_a_fresh_lab_asks_nothing_about_jupyter_news(fresh_lab: Lab, page: Page) -> None:
    # The package's default for every user (the toast shows while `fetchNews` is "none")...
    status, notification = fresh_lab.request(
        "GET", "lab/api/settings/@jupyterlab/apputils-extension:notification"
    )
    assert status == 200
    assert notification["schema"]["properties"]["fetchNews"]["default"] == "false"
    assert not Path(fresh_lab.root, "config", "lab", "user-settings").exists()
    # ...so once the news plugin has what it waits for (Lab restored, the settings, its config
    # section: the last request it makes), it shows no toast.
    page.set_viewport_size(VIEWPORT)
    with page.expect_response(lambda response: NEWS_CONFIG in response.url):
        open_lab(page, fresh_lab)
    # A toast is drawn a few frames after it is emitted: look for one for a while, not once.
    for _ in range(15):
        assert page.get_by_text("official Jupyter news").count() == 0
        assert page.locator(".Toastify__toast").count() == 0
        page.wait_for_timeout(200)
    page.screenshot(path=str(Path(__file__).parent / "artifacts" / "papercuts-05-fresh-lab.png"))

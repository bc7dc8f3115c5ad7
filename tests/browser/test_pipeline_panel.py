"""The Pipeline panel in real Chromium against a real `jupyter lab` with the workbench.

A person's path: open a notebook whose last step is not tagged yet, see its steps and DAG in the panel,
make a bad edit and see the server's error by the cell, tag the step from the panel (the notebook's
cell tags change, unsaved), see the DAG grow with the variables on its edges, set a parameter, run,
watch every step succeed, open an executed step notebook in a new tab, then run again from the
notebook toolbar's "Run as pipeline" and see every step come from the cache.
Screenshots land in tests/browser/artifacts/ for a person to look at.
"""

from __future__ import annotations

import json

from playwright.sync_api import Locator, Page, expect

from tests.browser.lab import ARTIFACTS, Lab, LapTimer
from tests.browser.test_notebook_servers_panel import dark_theme, open_lab
from tests.browser.test_notebook_servers_panel import shot as shot_panel
from tests.pipelines.notebooks import FANOUT_ML, code, notebook, write

NOTEBOOK = "churn.ipynb"
PANEL = "#cube-pipeline"
EVALUATE_CELL = 12  # tagged `step:evaluate` in the example; untagged here, so the panel tags it
STEPS = {"load", "numeric-features", "city-features", "train", "evaluate"}


def write_notebook(lab: Lab) -> None:
    content = json.loads(FANOUT_ML.read_text())
    content["cells"][EVALUATE_CELL]["metadata"]["tags"] = []
    (lab.root / "work" / NOTEBOOK).write_text(json.dumps(content, indent=1))


def cell_row(page: Page, index: int) -> Locator:
    return page.locator(f'[data-testid="cube-cell-row"][data-cell="{index}"]')


def dag_nodes(page: Page) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-dag-node"]')


def cell_tags(page: Page, index: int) -> list[str]:
    script = (
        "([path, i]) => { const nb = window.jupyterapp.shell.widgets('main').find("
        "w => w.context && w.context.path === path); "
        "return nb.content.model.cells.get(i).getMetadata('tags') || []; }"
    )
    return list(page.evaluate(script, [NOTEBOOK, index]))


def shot(page: Page, name: str) -> None:
    shot_panel(page, name, PANEL)


def test_tag_run_and_open_a_step_notebook(lab: Lab, page: Page) -> None:
    lap = LapTimer()

    write_notebook(lab)
    open_lab(page, lab)
    page.evaluate("(p) => window.jupyterapp.commands.execute('docmanager:open', {path: p})", NOTEBOOK)
    expect(page.locator(".jp-NotebookPanel .jp-Cell").nth(EVALUATE_CELL)).to_be_attached(timeout=30_000)
    page.evaluate("() => window.jupyterapp.commands.execute('cube:open-pipeline')")
    panel = page.locator(PANEL)
    expect(panel).to_be_visible()
    expect(panel.get_by_test_id("cube-pipeline-path")).to_have_text(NOTEBOOK)
    lap("open lab + notebook + panel")

    # The server's graph of the notebook as it is: the untagged cell belongs to `train`.
    expect(dag_nodes(page)).to_have_count(4)
    expect(cell_row(page, EVALUATE_CELL)).to_have_attribute("data-step", "train")
    expect(cell_row(page, 6)).to_have_attribute("data-step", "load")
    expect(cell_row(page, 1).get_by_test_id("cube-cell-role")).to_have_value("imports")
    edge_of = '[data-testid="cube-dag-edge"][data-upstream="{}"][data-downstream="{}"]'
    expect(panel.locator(edge_of.format("load", "city-features"))).to_have_attribute("data-variables", "raw")

    # A duplicate step name: the server's 400 shows by the cell that was edited.
    role = cell_row(page, EVALUATE_CELL).get_by_test_id("cube-cell-role")
    role.select_option("step")
    name = cell_row(page, EVALUATE_CELL).get_by_test_id("cube-cell-step-name")
    name.fill("load")
    name.press("Enter")
    graph_error = panel.get_by_test_id("cube-graph-error")
    expect(graph_error).to_contain_text("duplicate step name 'load'")
    expect(cell_row(page, EVALUATE_CELL).get_by_test_id("cube-cell-error")).to_be_visible()
    shot(page, "11-pipeline-duplicate-step")

    # Fixed: the cell's tags change in the notebook model and the DAG grows by one step.
    name.fill("evaluate")
    name.press("Enter")
    expect(graph_error).to_have_count(0)
    expect(dag_nodes(page)).to_have_count(5)
    assert cell_tags(page, EVALUATE_CELL) == ["step:evaluate"]
    expect(cell_row(page, EVALUATE_CELL)).to_have_attribute("data-step", "evaluate")
    edge = panel.locator(edge_of.format("train", "evaluate"))
    expect(edge).to_have_count(1)
    for variable in ("model", "X_test", "y_test"):
        assert variable in (edge.get_attribute("data-variables") or "").split(", ")
    lap("tag from the panel -> graph")
    shot(page, "12-pipeline-tagged")

    # Parameters come from the parameters cell, defaults filled in.
    n_samples = panel.locator('[data-testid="cube-parameter"][data-name="n_samples"]')
    expect(n_samples).to_have_value("600")
    n_samples.fill("300")

    panel.get_by_test_id("cube-run-start").click()
    run = panel.get_by_test_id("cube-run")
    expect(run).to_be_visible()
    expect(run).to_have_attribute("data-status", "succeeded", timeout=60_000)
    steps = run.get_by_test_id("cube-run-step")
    expect(steps).to_have_count(len(STEPS))
    for index in range(len(STEPS)):
        expect(steps.nth(index)).to_have_attribute("data-status", "succeeded")
    expect(page.locator(f'{PANEL} [data-testid="cube-dag-node"][data-status="succeeded"]')).to_have_count(
        len(STEPS)
    )
    expect(run).to_contain_text("n_samples=300")
    expect(run.get_by_test_id("cube-run-metrics")).to_contain_text("accuracy=")  # the metrics cell
    # The run executed the saved file: the panel saved the tag edit first.
    saved = json.loads((lab.root / "work" / NOTEBOOK).read_text())
    assert saved["cells"][EVALUATE_CELL]["metadata"]["tags"] == ["step:evaluate"]
    run_id = run.get_attribute("data-run")
    lap("run 5 steps")
    run.scroll_into_view_if_needed()
    shot(page, "13-pipeline-succeeded")
    with dark_theme(page):
        shot(page, "14-pipeline-succeeded-dark")

    # A step of the run opens its executed notebook, read-only, in a new tab.
    run.locator('[data-testid="cube-run-step"][data-step="evaluate"] button').click()
    tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="evaluate.ipynb")
    expect(tab).to_be_visible(timeout=15_000)
    executed = page.locator(".jp-NotebookPanel:visible")
    expect(executed.locator(".jp-OutputArea-output").first).to_be_visible()
    expect(executed).to_contain_text("accuracy")
    opened = page.evaluate(
        "() => { const w = window.jupyterapp.shell.currentWidget; return {path: w.context.path, "
        "canSave: w.context.canSave, editable: w.content.model.cells.get(0).getMetadata('editable')}; }"
    )
    # Served from the run's store through the read-only `cube-runs:` drive; nothing is written.
    assert opened == {"path": f"cube-runs:{run_id}/evaluate.ipynb", "canSave": False, "editable": False}
    assert [p.name for p in (lab.root / "work").iterdir() if p.name != ".ipynb_checkpoints"] == [NOTEBOOK]
    lap("open executed step notebook")
    page.screenshot(path=str(ARTIFACTS / "15-executed-step.png"))

    # "Run as pipeline" in the notebook's toolbar: the same inputs again, so every step is cached.
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=NOTEBOOK).click()
    page.locator('.jp-NotebookPanel:visible [data-testid="cube-run-as-pipeline"] button').click()
    expect(run).not_to_have_attribute("data-run", str(run_id))
    expect(run).to_have_attribute("data-status", "succeeded", timeout=60_000)
    for index in range(len(STEPS)):
        expect(steps.nth(index)).to_have_attribute("data-status", "cached")
    history = panel.get_by_test_id("cube-history-row")
    expect(history).to_have_count(2)
    lap("run again from the toolbar (cached)")
    shot(page, "16-pipeline-cached")

    # Picking the first run in the history shows its steps again.
    panel.locator(f'[data-testid="cube-history-row"][data-run="{run_id}"]').click()
    expect(run).to_have_attribute("data-run", str(run_id))
    expect(steps.first).to_have_attribute("data-status", "succeeded")

    # A run that failed on its last step resumes in one click: the first step is kept, not rerun.
    fixed = lab.root / "work" / "fixed"
    flaky = notebook(
        code("x = 20", "step:make"),
        code(f"import os\nassert os.path.exists({str(fixed)!r}), 'the input is missing'", "step:use"),
    )
    write(flaky, lab.root / "work" / "flaky.ipynb")
    open_file = "(p) => { window.jupyterapp.commands.execute('docmanager:open', {path: p}); }"
    page.evaluate(open_file, "flaky.ipynb")
    expect(panel.get_by_test_id("cube-pipeline-path")).to_have_text("flaky.ipynb")
    panel.get_by_test_id("cube-run-start").click()
    expect(run).to_have_attribute("data-status", "failed", timeout=60_000)
    expect(run.get_by_test_id("cube-run-error")).to_contain_text("the input is missing")
    made = run.locator('[data-testid="cube-run-step"][data-step="make"]')
    expect(made).to_have_attribute("data-status", "succeeded")
    made_at = made.get_attribute("data-started")
    assert made_at
    fixed.touch()
    run.get_by_test_id("cube-run-resume").click()
    expect(run).to_have_attribute("data-status", "succeeded", timeout=60_000)
    expect(run.get_by_test_id("cube-run-resume")).to_have_count(0)
    expect(made).to_have_attribute("data-status", "succeeded")
    expect(made).to_have_attribute("data-started", made_at)  # kept, not run again
    expect(panel.get_by_test_id("cube-history-row")).to_have_count(1)  # the same run, resumed
    lap("resume a failed run")
    shot(page, "17-pipeline-resumed")
    print(f"pipeline panel timings (s): {lap.timings}")

"""The Pipeline panel in real Chromium against a real `jupyter lab` with the workbench.

A person's path: open a notebook whose last step is not tagged yet, see its steps and DAG in the panel,
name an earlier step again and see the server's warning on the cell, make a bad edit and see the server's
error by the cell, tag the step from the panel (the notebook's cell tags change, unsaved), see the DAG
grow with the variables on its edges, set a parameter, run what is on screen (the file on disk is not
saved nor touched), watch every step succeed, open an executed step notebook in a new tab (outputs as Lab
shows any notebook's, no kernel), then run again from the notebook toolbar's "Run as pipeline" and see
every step come from the cache; then run a notebook as it is, without editing it, let it fail, and resume
it: its file is never written. A notebook tagged in Kale's editor: its warnings listed by cell, each
showing its cell in the notebook, the cells continuing a step through an empty `block:` shown in that
step, the data files a run's step read listed under it. Screenshots land in tests/browser/artifacts/ for
a person to look at.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from nbformat import NotebookNode
from playwright.sync_api import Locator, Page, expect

from tests.browser.lab import ARTIFACTS, Lab, LapTimer
from tests.browser.test_notebook_servers_panel import dark_theme, open_lab
from tests.browser.test_notebook_servers_panel import shot as shot_panel
from tests.pipelines.notebooks import FANOUT_ML, code, markdown, notebook, write
from tests.waiting import wait_until

NOTEBOOK = "churn.ipynb"
PANEL = "#cube-pipeline"
EVALUATE_CELL = 12  # tagged `step:evaluate` in the example; untagged here, so the panel tags it
STEPS = {"load", "numeric-features", "city-features", "train", "evaluate"}


def write_notebook(lab: Lab) -> None:
    content = json.loads(FANOUT_ML.read_text())
    content["cells"][EVALUATE_CELL]["metadata"]["tags"] = []
    (lab.root / "work" / NOTEBOOK).write_text(json.dumps(content, indent=1))


def on_disk(path: Path) -> tuple[bytes, int]:
    """What running must leave as it is: the file's bytes and its mtime."""
    return path.read_bytes(), path.stat().st_mtime_ns


def document(page: Page, path: str) -> dict[str, object]:
    """The open document's state in Lab: unsaved changes, its kernel, its Contents model's times."""
    script = (
        "(path) => { const w = window.jupyterapp.shell.widgets('main').find("
        "w => w.context && w.context.path === path); const m = w.context.contentsModel; "
        "return {dirty: w.context.model.dirty, canSave: w.context.canSave, "
        "kernel: w.sessionContext.session ? w.sessionContext.session.kernel.name : null, "
        "editable: w.content.model.cells.get(0).getMetadata('editable'), "
        "created: m.created, last_modified: m.last_modified}; }"
    )
    return dict(page.evaluate(script, path))


def run_command(page: Page, command: str, args: dict[str, object] | None = None) -> None:
    """Run a Lab command and wait for it; what it resolves to (a widget) stays in the page: its
    reference chain is too long for Playwright to hand back."""
    script = "async ([id, args]) => { await window.jupyterapp.commands.execute(id, args); }"
    page.evaluate(script, [command, args or {}])


def open_path(page: Page, path: str) -> None:
    run_command(page, "docmanager:open", {"path": path})


def cell_row(page: Page, index: int) -> Locator:
    return page.locator(f'[data-testid="cube-cell-row"][data-cell="{index}"]')


def dag_nodes(page: Page) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-dag-node"]')


def cell_tags(page: Page, index: int, path: str = NOTEBOOK) -> list[str]:
    script = (
        "([path, i]) => { const nb = window.jupyterapp.shell.widgets('main').find("
        "w => w.context && w.context.path === path); "
        "return nb.content.model.cells.get(i).getMetadata('tags') || []; }"
    )
    return list(page.evaluate(script, [path, index]))


def shot(page: Page, name: str) -> None:
    shot_panel(page, name, PANEL)


def test_tag_run_and_open_a_step_notebook(lab: Lab, page: Page) -> None:
    lap = LapTimer()

    write_notebook(lab)
    churn = lab.root / "work" / NOTEBOOK
    saved = on_disk(churn)
    open_lab(page, lab)
    open_path(page, NOTEBOOK)
    expect(page.locator(".jp-NotebookPanel .jp-Cell").nth(EVALUATE_CELL)).to_be_attached(timeout=30_000)
    run_command(page, "cube:open-pipeline")
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

    # Naming an earlier step again: the cell joins that step, as in Kale, and the server's warnings
    # mark the cell and list it.
    row = cell_row(page, EVALUATE_CELL)
    role = row.get_by_test_id("cube-cell-role")
    role.select_option("step")
    name = row.get_by_test_id("cube-cell-step-name")
    name.fill("load")
    name.press("Enter")
    expect(row).to_have_attribute("data-step", "load")
    named_again = re.compile("names step 'load'")
    expect(row.get_by_test_id("cube-cell-warning")).to_have_attribute("title", named_again)
    warned = panel.locator(f'[data-testid="cube-graph-warning"][data-cell="{EVALUATE_CELL}"]')
    expect(warned.first).to_contain_text(named_again)
    expect(dag_nodes(page)).to_have_count(4)
    shot(page, "11-pipeline-step-named-again")

    # A name that is no step name: the server's 400 shows by the cell that was edited.
    name.fill("evaluate!")
    name.press("Enter")
    graph_error = panel.get_by_test_id("cube-graph-error")
    expect(graph_error).to_contain_text("'evaluate!' may only have lower-case letters")
    expect(row.get_by_test_id("cube-cell-error")).to_be_visible()
    shot(page, "11-pipeline-bad-step-name")

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
    # The run executed what is on screen (the `evaluate` step exists only there), and the panel did
    # not save it: the file is as it was and the tag edit is still unsaved.
    assert on_disk(churn) == saved
    assert document(page, NOTEBOOK)["dirty"] is True
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
    # A multi-line output reads as printed: one `loaded ...` line per input, nothing glued to them.
    loaded = executed.locator(".jp-OutputArea-output", has_text="loaded model").inner_text()
    assert [line.split(" ")[:2] for line in loaded.strip().splitlines()] == [
        ["loaded", "X_test"],
        ["loaded", "model"],
        ["loaded", "y_test"],
    ], loaded
    # Served from the run's store through the read-only `cube-runs:` drive, with the step's times;
    # opened without a kernel (a record: nothing runs, nothing changes it); nothing is written.
    _, recorded = lab.request("GET", f"cube/api/v1/pipelines/runs/{run_id}")
    (evaluated,) = [s for s in recorded["steps"] if s["name"] == "evaluate"]
    assert document(page, f"cube-runs:{run_id}/evaluate.ipynb") == {
        "dirty": False,
        "canSave": False,
        "kernel": None,
        "editable": False,
        "created": evaluated["started"],
        "last_modified": evaluated["finished"],
    }
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
    assert on_disk(churn) == saved
    lap("run again from the toolbar (cached)")
    shot(page, "16-pipeline-cached")

    # Picking the first run in the history shows its steps again.
    panel.locator(f'[data-testid="cube-history-row"][data-run="{run_id}"]').click()
    expect(run).to_have_attribute("data-run", str(run_id))
    expect(steps.first).to_have_attribute("data-status", "succeeded")

    # A run that failed on its last step resumes in one click: the first step is kept, not rerun.
    # The notebook is run as it is (its metadata as the examples', which its kernel fills in): the
    # file is never written.
    fixed = lab.root / "work" / "fixed"
    flaky = notebook(
        code("x = 20", "step:make"),
        code(f"import os\nassert os.path.exists({str(fixed)!r}), 'the input is missing'", "step:use"),
    )
    flaky.metadata = json.loads(FANOUT_ML.read_text())["metadata"]
    flaky_file = write(flaky, lab.root / "work" / "flaky.ipynb")
    flaky_saved = on_disk(flaky_file)
    open_file = "(p) => { window.jupyterapp.commands.execute('docmanager:open', {path: p}); }"
    page.evaluate(open_file, "flaky.ipynb")
    expect(panel.get_by_test_id("cube-pipeline-path")).to_have_text("flaky.ipynb")
    panel.get_by_test_id("cube-run-start").click()
    expect(run).to_have_attribute("data-status", "failed", timeout=60_000)
    # The error shows once, under the step that failed; the run's line says which step that is.
    used = run.locator('[data-testid="cube-run-step"][data-step="use"]')
    expect(used.get_by_test_id("cube-run-step-error")).to_contain_text("the input is missing")
    expect(run.get_by_test_id("cube-run-error")).to_have_text("Failed at step use: see its error below")
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
    assert on_disk(flaky_file) == flaky_saved
    lap("resume a failed run")
    shot(page, "17-pipeline-resumed")
    print(f"pipeline panel timings (s): {lap.timings}")


def thirty_steps() -> list[tuple[str, str]]:
    """A 30-step pipeline of every shape: a chain, a 10-way fan-out and fan-in, six parallel
    train-and-evaluate pairs, an edge that skips ranks, and two steps after the last."""
    steps = [("load", "raw = list(range(100))"), ("clean", "df = [v for v in raw if v % 7]")]
    steps += [(f"feature-{i}", f"f_{i} = sum(df) * {i}") for i in range(10)]
    steps.append(("combine", f"table = [{', '.join(f'f_{i}' for i in range(10))}]"))
    steps.append(("split", "train_set, test_set = table[:7], table[7:]"))
    for i in range(6):
        steps.append((f"train-{i}", f"model_{i} = max(train_set) + {i}"))
        steps.append((f"evaluate-{i}", f"score_{i} = model_{i} - min(test_set)"))
    steps.append(("compare", f"best = max([{', '.join(f'score_{i}' for i in range(6))}])"))
    steps.append(("report", "summary = f'{best} of {len(raw)}'"))
    steps += [("publish", "url = 'https://example.org/' + summary"), ("archive", "archive = summary.upper()")]
    return steps


def settled_transform(viewport: Locator) -> str:
    """The graph's transform once it stops changing: the canvas fits the graph again on every resize
    until the user moves the view, and the new tab may still be settling into its size."""
    seen = [viewport.get_attribute("transform")]

    def unchanged() -> bool:
        seen.append(viewport.get_attribute("transform"))
        return seen[-1] == seen[-2]

    wait_until(unchanged, 15, "the graph to stop fitting itself to a resize", interval=0.3)
    return seen[-1] or ""


def transform(viewport: Locator, before: str = "") -> tuple[float, float, float]:
    """(x, y, k) of the large graph's `translate(x y) scale(k)`, once it is no longer `before`."""
    if before:
        expect(viewport).not_to_have_attribute("transform", before)
    value = viewport.get_attribute("transform") or ""
    translate, scale = value.split(") scale(")
    x, y = translate.removeprefix("translate(").split(" ")
    return float(x), float(y), float(scale.rstrip(")"))


BOXES = """(root) => {
  const rect = el => { const r = el.getBoundingClientRect();
    return {x: r.left, y: r.top, right: r.right, bottom: r.bottom}; };
  const text = el => el.querySelector('text').getBoundingClientRect().width;
  return [...root.querySelectorAll('[data-testid="cube-dag-node"], [data-testid="cube-dag-label"]')]
    .map(g => ({name: g.dataset.step || g.textContent, box: rect(g.querySelector('rect')), text: text(g)}));
}"""


def test_graph_in_the_main_area(lab: Lab, page: Page) -> None:
    """The DAG of 30 steps, large, in the main area: no box on another, text inside its box; the wheel
    zooms around the cursor, a drag pans, the buttons and keys zoom and fit; it follows the notebook's
    edits and a run's step states live. Screenshots at 1600x1000, light and dark."""
    lap = LapTimer()
    page.set_viewport_size({"width": 1600, "height": 1000})
    steps = thirty_steps()
    thirty = notebook(*(code(source, f"step:{name}") for name, source in steps))
    write(thirty, lab.root / "work" / "thirty.ipynb")
    open_lab(page, lab)
    open_path(page, "thirty.ipynb")
    run_command(page, "cube:open-pipeline")
    panel = page.locator(PANEL)
    expect(panel.get_by_test_id("cube-pipeline-path")).to_have_text("thirty.ipynb")
    expect(dag_nodes(page)).to_have_count(30)
    overview = panel.get_by_test_id("cube-dag-overview")
    overview.screenshot(path=str(ARTIFACTS / "18-pipeline-graph-overview.png"))

    # The overview opens the large view, which follows the same notebook.
    overview.click()
    graph = page.get_by_test_id("cube-pipeline-graph")
    expect(graph).to_be_visible()
    expect(graph.get_by_test_id("cube-pipeline-graph-path")).to_have_text("thirty.ipynb")
    nodes = graph.locator('[data-testid="cube-dag-node"]')
    expect(nodes).to_have_count(30)
    edge = graph.locator('[data-testid="cube-dag-edge"][data-upstream="report"][data-downstream="publish"]')
    expect(edge).to_have_attribute("data-variables", "summary")
    lap("open the graph large")

    # As drawn on screen: no box on another, and every name and label inside its box.
    boxes = graph.locator("svg").evaluate(BOXES)
    assert len(boxes) == 30 + len(graph.locator('[data-testid="cube-dag-label"]').all())
    for i, a in enumerate(boxes):
        width = a["box"]["right"] - a["box"]["x"]
        assert a["text"] <= width, f"{a['name']!r} overflows its box"
        for b in boxes[i + 1 :]:
            apart = (
                a["box"]["right"] <= b["box"]["x"] + 0.5
                or b["box"]["right"] <= a["box"]["x"] + 0.5
                or a["box"]["bottom"] <= b["box"]["y"] + 0.5
                or b["box"]["bottom"] <= a["box"]["y"] + 0.5
            )
            assert apart, f"{a['name']!r} overlaps {b['name']!r}"

    # The wheel zooms around the cursor: the point under it stays put.
    viewport = graph.get_by_test_id("cube-dag-viewport")
    fitted = settled_transform(viewport)
    x0, y0, k0 = transform(viewport)
    canvas = graph.get_by_test_id("cube-dag-canvas")
    frame = canvas.bounding_box()
    assert frame
    cx, cy = frame["width"] * 0.3, frame["height"] * 0.6
    page.mouse.move(frame["x"] + cx, frame["y"] + cy)
    page.mouse.wheel(0, -400)
    x, y, k = transform(viewport, fitted)
    assert k > k0
    assert abs((cx - x) / k - (cx - x0) / k0) < 0.5
    assert abs((cy - y) / k - (cy - y0) / k0) < 0.5
    # A drag pans, at the same zoom.
    zoomed = viewport.get_attribute("transform") or ""
    page.mouse.down()
    page.mouse.move(frame["x"] + cx + 120, frame["y"] + cy + 80, steps=6)
    page.mouse.up()
    panned = transform(viewport, zoomed)
    assert all(abs(a - b) < 0.01 for a, b in zip(panned, (x + 120, y + 80, k), strict=True))
    # The buttons, then the keyboard.
    graph.get_by_test_id("cube-dag-fit").click()
    expect(viewport).to_have_attribute("transform", fitted)
    graph.get_by_test_id("cube-dag-zoom-in").click()
    assert transform(viewport, fitted)[2] > k0
    graph.get_by_test_id("cube-dag-zoom-out").click()
    graph.get_by_test_id("cube-dag-zoom-out").click()
    expect(graph.get_by_test_id("cube-dag-zoom")).to_have_text(f"{round(k0 / 1.25 * 100)}%")
    canvas.focus()
    page.keyboard.press("0")
    expect(viewport).to_have_attribute("transform", fitted)
    page.keyboard.press("+")
    assert transform(viewport, fitted)[2] > k0
    page.keyboard.press("0")
    expect(viewport).to_have_attribute("transform", fitted)
    canvas.blur()
    lap("pan and zoom")
    page.screenshot(path=str(ARTIFACTS / "18-pipeline-graph.png"))
    with dark_theme(page):
        page.screenshot(path=str(ARTIFACTS / "18-pipeline-graph-dark.png"))

    # It follows the notebook's edits (a new step), the sidebar closed too; then a run's states.
    page.evaluate("() => window.jupyterapp.shell.collapseRight()")
    expect(panel).to_be_hidden()
    page.evaluate(
        "() => { const nb = window.jupyterapp.shell.widgets('main').find(w => w.context && "
        "w.context.path === 'thirty.ipynb'); nb.content.model.sharedModel.insertCell(30, {cell_type: 'code', "
        "source: 'notice = url + archive', metadata: {tags: ['step:notify']}}); }"
    )
    expect(nodes).to_have_count(31)
    page.evaluate("() => window.jupyterapp.shell.expandRight()")
    panel.get_by_test_id("cube-run-start").click()
    succeeded = graph.locator('[data-testid="cube-dag-node"][data-status="succeeded"]')
    expect(succeeded).to_have_count(31, timeout=120_000)
    expect(graph.get_by_test_id("cube-graph-run-status")).to_have_text("succeeded")
    lap("run 31 steps")
    page.screenshot(path=str(ARTIFACTS / "19-pipeline-graph-run.png"))
    with dark_theme(page):
        page.screenshot(path=str(ARTIFACTS / "19-pipeline-graph-run-dark.png"))

    # The example notebook: the view follows the notebook made current.
    (lab.root / "work" / "fanout_ml.ipynb").write_text(FANOUT_ML.read_text())
    open_file = "(p) => { window.jupyterapp.commands.execute('docmanager:open', {path: p}); }"
    page.evaluate(open_file, "fanout_ml.ipynb")
    expect(panel.get_by_test_id("cube-pipeline-path")).to_have_text("fanout_ml.ipynb")
    run_command(page, "cube:open-pipeline-graph")
    expect(graph.get_by_test_id("cube-pipeline-graph-path")).to_have_text("fanout_ml.ipynb")
    expect(nodes).to_have_count(len(STEPS))
    page.screenshot(path=str(ARTIFACTS / "19-pipeline-graph-fanout.png"))
    print(f"pipeline graph timings (s): {lap.timings}")


KALE = "kale.ipynb"
KALE_DATA = "numbers.txt"


def kale_notebook() -> NotebookNode:
    """Tagged as Kale's editor tags: `block:NAME` on a step's first cell, an empty `block:` on its
    next ones; a skip cell that also carries `prev:`; code above the first tagged cell; a Kale
    setting the workbench does not honour."""
    nb = notebook(
        markdown("# Tagged in Kale"),
        code("print('set up by hand')"),  # 1: before the first tag: no step runs it
        code("import math", "imports"),
        code(f"raw = [float(v) for v in open({KALE_DATA!r}).read().split()]", "block:load"),
        code("raw = raw + [16.0]", "block:"),  # 4: continues `load`
        code("print(raw)", "prev:load", "skip"),  # 5: the role tag decides; `prev:` is ignored
        markdown("## Roots"),
        code("roots = [math.sqrt(v) for v in raw]", "block:roots", "prev:load"),
        code("total = sum(roots)"),
    )
    nb.metadata["kubeflow_notebook"] = {"volumes": [{"mount_point": "/data", "size": 1}]}
    return nb


def active_cell(page: Page, path: str) -> int:
    script = (
        "(path) => window.jupyterapp.shell.widgets('main').find("
        "w => w.context && w.context.path === path).content.activeCellIndex"
    )
    return int(page.evaluate(script, path))


def test_kale_tags_warnings_and_data_files(lab: Lab, page: Page) -> None:
    lap = LapTimer()
    (lab.root / "work" / KALE_DATA).write_text("1 4 9\n")
    write(kale_notebook(), lab.root / "work" / KALE)
    open_lab(page, lab)
    open_path(page, KALE)
    cells = page.locator(".jp-NotebookPanel:visible .jp-Cell")
    expect(cells).to_have_count(9, timeout=30_000)
    run_command(page, "cube:open-pipeline")
    panel = page.locator(PANEL)
    expect(panel.get_by_test_id("cube-pipeline-path")).to_have_text(KALE)
    expect(dag_nodes(page)).to_have_count(2)
    lap("open lab + Kale notebook + panel")

    # The warnings, the notebook-wide one first (not a link), then by cell, each naming its cell.
    warnings = panel.get_by_test_id("cube-graph-warning")
    expect(warnings).to_have_count(3)
    expect(warnings.nth(0)).to_have_attribute("data-cell", "")
    expect(warnings.nth(0)).to_contain_text("kubeflow_notebook.volumes is ignored")
    expect(warnings.nth(0).locator("button")).to_have_count(0)
    expect(warnings.nth(1)).to_have_attribute("data-cell", "1")
    expect(warnings.nth(1)).to_contain_text("Cell 1")
    expect(warnings.nth(1)).to_contain_text("code before the first tagged cell")
    skip_warning = panel.locator('[data-testid="cube-graph-warning"][data-cell="5"]')
    expect(skip_warning).to_contain_text("Cell 5")
    expect(skip_warning).to_contain_text("'prev:load' are ignored")

    # The same cells carry a warning mark in the Cells list, the message as its tooltip.
    marked = panel.locator('[data-testid="cube-cell-row"]:has([data-testid="cube-cell-warning"])')
    expect(marked).to_have_count(2)
    expect(cell_row(page, 1).get_by_test_id("cube-cell-warning")).to_have_attribute(
        "title", re.compile("code before the first tagged cell")
    )
    expect(cell_row(page, 5).get_by_test_id("cube-cell-warning")).to_have_attribute(
        "title", re.compile("skip cell")
    )
    expect(cell_row(page, 5).get_by_test_id("cube-cell-role")).to_have_value("skip")
    expect(cell_row(page, 5)).to_have_attribute("data-step", "")
    expect(cell_row(page, 1)).to_have_attribute("data-step", "")

    # The empty `block:` cell is shown in the step it continues, as "same as above", no name to type.
    continued = cell_row(page, 4)
    expect(continued).to_have_attribute("data-step", "load")
    expect(continued.get_by_test_id("cube-cell-role")).to_have_value("continue")
    expect(continued.get_by_test_id("cube-cell-step-name")).to_have_count(0)
    chip = continued.get_by_test_id("cube-cell-step")
    expect(chip).to_have_text("load")
    expect(chip).to_have_attribute("title", re.compile("Continues step load"))
    expect(cell_row(page, 3).get_by_test_id("cube-cell-role")).to_have_value("step")
    expect(cell_row(page, 3).get_by_test_id("cube-cell-step")).to_have_attribute("title", "Starts step load")
    expect(cell_row(page, 8)).to_have_attribute("data-step", "roots")
    shot(page, "20-pipeline-kale-warnings")

    # A warning shows its cell: the notebook's active cell, in view.
    assert active_cell(page, KALE) == 0
    skip_warning.locator("button").click()
    page.wait_for_function(
        "(path) => window.jupyterapp.shell.widgets('main').find(w => w.context && "
        "w.context.path === path).content.activeCellIndex === 5",
        arg=KALE,
    )
    expect(cells.nth(5)).to_have_class(re.compile(r"\bjp-mod-active\b"))
    expect(cells.nth(5)).to_be_in_viewport()
    panel.locator('[data-testid="cube-graph-warning"][data-cell="1"] button').click()
    expect(cells.nth(1)).to_have_class(re.compile(r"\bjp-mod-active\b"))
    assert active_cell(page, KALE) == 1
    lap("warnings -> cells")

    # "Same as cell above" on the empty `block:` cell drops the tag that said just that.
    continued.get_by_test_id("cube-cell-role").select_option("step")
    expect(continued.get_by_test_id("cube-cell-step-name")).to_have_value("load")
    continued.get_by_test_id("cube-cell-role").select_option("continue")
    expect(continued.get_by_test_id("cube-cell-step-name")).to_have_count(0)
    assert cell_tags(page, 4, KALE) == []
    expect(continued).to_have_attribute("data-step", "load")

    # A run lists the data files each step read, whose contents its cache key saw.
    panel.get_by_test_id("cube-run-start").click()
    run = panel.get_by_test_id("cube-run")
    expect(run).to_have_attribute("data-status", "succeeded", timeout=60_000)
    load = run.locator('[data-testid="cube-run-step"][data-step="load"]')
    expect(load.get_by_test_id("cube-run-step-files")).to_have_text(f"Reads: {KALE_DATA}")
    roots = run.locator('[data-testid="cube-run-step"][data-step="roots"]')
    expect(roots.get_by_test_id("cube-run-step-files")).to_have_count(0)
    lap("run, files read")
    run.scroll_into_view_if_needed()
    shot(page, "21-pipeline-kale-run")
    print(f"Kale notebook timings (s): {lap.timings}")

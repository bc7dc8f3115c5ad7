"""The Notebook Servers panel in real Chromium against a real `jupyter lab` with the workbench.

A person's path through it: open the panel, create a server from the form, connect to it in a new
tab, run a cell there, come back, stop it (confirming), delete it. Plus: a bad name shows the
server's own 400 message by the form, and the launcher card opens the panel ready to type.
Screenshots land in tests/browser/artifacts/ for a person to look at.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Locator, Page, expect

from tests.browser.lab import ARTIFACTS, PROFILES, USER, Lab, LapTimer, palette_labels, run_from_palette
from tests.waiting import wait_until

PANEL_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="cube-notebook-servers"]'
PANEL = "#cube-notebook-servers"


def open_lab(page: Page, lab: Lab) -> None:
    page.goto(f"{lab.base_url}lab?token={lab.token}")
    # Wait until the saved layout is restored, or it may toggle the panel after we do.
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=30_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    expect(page.locator(PANEL_TAB)).to_be_visible(timeout=30_000)


def open_panel(page: Page) -> None:
    # The restored layout may already show it; clicking an active tab would collapse it.
    if not page.locator(PANEL).is_visible():
        page.locator(PANEL_TAB).click()
    expect(page.locator(PANEL)).to_be_visible()
    expect(page.get_by_test_id("cube-create-profile")).to_be_enabled()


def row(page: Page, name: str) -> Locator:
    return page.locator(f'[data-testid="cube-server-row"][data-name="{name}"]')


def confirm_dialog(page: Page, label: str) -> None:
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=label).click()
    expect(dialog).to_have_count(0)


@contextmanager
def dark_theme(page: Page) -> Iterator[None]:
    """Switch to JupyterLab Dark for a screenshot: the panel must read well there too."""
    change = "window.jupyterapp.commands.execute('apputils:change-theme', {theme: '%s'})"
    page.evaluate(change % "JupyterLab Dark")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false")
    page.wait_for_timeout(300)  # the theme's CSS variables settle after the attribute flips
    try:
        yield
    finally:
        page.evaluate(change % "JupyterLab Light")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "true")


def shot(page: Page, name: str, panel: str = PANEL) -> None:
    """The panel alone and the whole page, for a person to judge the look."""
    page.locator(panel).screenshot(path=str(ARTIFACTS / f"{name}-panel.png"))
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def test_create_connect_run_stop_delete(lab: Lab, page: Page) -> None:
    lap = LapTimer()

    open_lab(page, lab)
    open_panel(page)
    lap("open lab + panel")

    # The form is built from the server's profiles, default preselected.
    default = next(p for p in PROFILES if p.get("default"))
    select = page.get_by_test_id("cube-create-profile")
    expect(select).to_have_value(default["name"])
    expect(select.locator("option")).to_have_text([p["display_name"] for p in PROFILES])
    expect(page.get_by_test_id("cube-profile-details")).to_contain_text(default["description"])
    select.select_option("a100")
    # What the local backend really gives, as the server words it: never the image.
    gpu_profile = page.get_by_test_id("cube-profile-enforcement")
    expect(gpu_profile).to_contain_text("GPU: 1, visible to this server only.")
    expect(gpu_profile).to_contain_text("Runs in this machine's Python environment; the image is not used.")
    select.select_option(default["name"])

    page.get_by_test_id("cube-create-name").fill("nb1")
    page.get_by_test_id("cube-create-submit").click()
    server_row = row(page, "nb1")
    expect(server_row).to_be_visible()
    expect(server_row.get_by_test_id("cube-server-profile")).to_have_text(default["name"])
    expect(server_row).to_contain_text("1 CPU")
    expect(server_row).to_contain_text("2Gi")
    expect(server_row).to_have_attribute("data-status", "running", timeout=60_000)
    expect(server_row.get_by_test_id("cube-server-status")).to_have_text("running")
    expect(server_row.get_by_test_id("cube-server-age")).to_have_text(re.compile(r"^\d+[smhd]"))
    expect(page.get_by_test_id("cube-create-name")).to_have_value("")
    lap("create -> running")
    shot(page, "01-running")

    # The panel shows what the server says.
    status, body = lab.request("GET", "cube/api/v1/notebooks")
    assert status == 200
    assert body["user"] == USER
    (server,) = body["notebooks"]
    assert server["status"] == "running"

    with page.context.expect_page() as opened:
        server_row.get_by_test_id("cube-server-connect").click()
    child = opened.value
    # The tab opens blank (to drop `opener`), then goes to the server through the router.
    child.wait_for_url(re.compile(rf"/cube/notebook/{USER}/nb1/lab"))
    child.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=30_000)
    # The kernel answers through the router's WebSocket before anything is typed.
    expect(child.get_by_role("button", name=re.compile(r"\| Idle$"))).to_be_visible(timeout=30_000)
    # Asked once Lab has loaded: the login redirect may still be navigating right after the URL matched.
    assert child.evaluate("window.opener") is None
    editor = child.locator(".jp-Notebook .jp-Cell.jp-CodeCell .cm-content").first
    editor.click()
    child.keyboard.type("print(6*7)")
    expect(editor).to_have_text("print(6*7)")
    child.keyboard.press("Shift+Enter")
    expect(child.locator(".jp-OutputArea-output").first).to_have_text("42", timeout=30_000)
    child.screenshot(path=str(ARTIFACTS / "02-child-lab.png"))
    # The child runs the same labextension but no workbench API: no panel there.
    expect(child.locator(".jp-LauncherCard", has_text="Notebook Server")).to_have_count(0)
    expect(child.locator(PANEL_TAB)).to_have_count(0)
    child.close()
    lap("connect + run cell")

    server_row.get_by_test_id("cube-server-stop").click()
    confirm_dialog(page, "Stop")
    expect(server_row).to_have_attribute("data-status", "stopped", timeout=30_000)
    expect(server_row.get_by_test_id("cube-server-start")).to_be_visible()
    expect(server_row.get_by_test_id("cube-server-connect")).to_have_count(0)
    lap("stop")
    shot(page, "03-stopped")

    with dark_theme(page):
        shot(page, "04-stopped-dark")

    server_row.get_by_test_id("cube-server-delete").click()
    confirm_dialog(page, "Delete")
    expect(server_row).to_have_count(0)
    expect(page.get_by_test_id("cube-empty")).to_be_visible()
    status, body = lab.request("GET", "cube/api/v1/notebooks")
    assert (status, body["notebooks"]) == (200, [])
    lap("delete")
    print(f"browser flow timings (s): {lap.timings}")


def test_bad_name_shows_the_servers_message_by_the_form(lab: Lab, page: Page) -> None:
    # What the server answers for this name, asked directly: the panel must show exactly that.
    status, error = lab.request("POST", "cube/api/v1/notebooks", {"name": "Bad_Name", "profile": "small"})
    assert status == 400
    assert error["field"] == "name"

    open_lab(page, lab)
    open_panel(page)
    name = page.get_by_test_id("cube-create-name")
    name.fill("Bad_Name")
    page.get_by_test_id("cube-create-submit").click()
    form_error = page.get_by_test_id("cube-create-error")
    expect(form_error).to_have_text(error["message"])
    expect(name).to_have_attribute("aria-invalid", "true")
    expect(row(page, "Bad_Name")).to_have_count(0)
    shot(page, "05-bad-name")
    with dark_theme(page):
        shot(page, "05-bad-name-dark")
    # Typing again clears the stale error.
    name.fill("good-name")
    expect(form_error).to_have_count(0)


def test_panel_follows_servers_changed_elsewhere(lab: Lab, page: Page) -> None:
    open_lab(page, lab)
    open_panel(page)
    # Created through the API (as the CLI would): the panel's polling picks it up, no click.
    status, _ = lab.request("POST", "cube/api/v1/notebooks", {"name": "from-cli"})
    assert status == 201
    server_row = row(page, "from-cli")
    expect(server_row).to_have_attribute("data-status", "running", timeout=30_000)
    status, _ = lab.request("DELETE", "cube/api/v1/notebooks/from-cli")
    assert status == 204
    expect(server_row).to_have_count(0, timeout=15_000)


def hide_panel(page: Page) -> None:
    if page.locator(PANEL).is_visible():
        page.locator(PANEL_TAB).click()
    expect(page.locator(PANEL)).to_be_hidden()


def test_launcher_card_and_commands_open_the_panel(lab: Lab, page: Page) -> None:
    open_lab(page, lab)
    hide_panel(page)
    labels = palette_labels(page, "Notebook Server")
    assert sum("Refresh Notebook Servers" in label for label in labels) == 1, labels
    assert sum("New Notebook Server" in label for label in labels) == 1, labels
    page.screenshot(path=str(ARTIFACTS / "06-palette.png"))
    run_from_palette(page, "Notebook Server", "Open Notebook Servers")
    expect(page.locator(PANEL)).to_be_visible()

    hide_panel(page)
    card = page.locator('.jp-LauncherCard[title="Create a notebook server from a profile"]')
    expect(card).to_contain_text("Notebook Server")
    card.click()
    expect(page.locator(PANEL)).to_be_visible()
    expect(page.get_by_test_id("cube-create-name")).to_be_focused()


# The sizes a person sees: a large screen with Lab's own narrow sidebar, then the sidebar dragged wide.
SCREEN = {"width": 1600, "height": 1000}
NARROW_SIDEBAR = 260
WIDE_SIDEBAR = 420


def set_sidebar_width(page: Page, width: int) -> None:
    """Drag the handle between the left sidebar and the main area until the panel is `width` wide
    (again if a relayout, a theme switch say, swallowed a drag)."""

    def drag() -> float:
        handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first.bounding_box()
        panel = page.locator(PANEL).bounding_box()
        assert handle is not None and panel is not None
        y = handle["y"] + handle["height"] / 2
        page.mouse.move(handle["x"] + handle["width"] / 2, y)
        page.mouse.down()
        page.mouse.move(panel["x"] + width + handle["width"] / 2, y, steps=5)
        page.mouse.up()
        now = page.locator(PANEL).bounding_box()
        return now["width"] if now else 0.0

    wait_until(drag, 15, f"the sidebar to be {width} px wide", until=lambda now: abs(now - width) <= 2)


def test_panel_and_form_read_well_wide_and_narrow_in_light_and_dark(lab: Lab, page: Page) -> None:
    page.set_viewport_size(SCREEN)
    open_lab(page, lab)
    open_panel(page)

    # A placeholder is an example, not a value; the profile says what this backend really applies.
    name = page.get_by_test_id("cube-create-name")
    expect(name).to_have_attribute("placeholder", "e.g. my-notebook")
    enforcement = page.get_by_test_id("cube-profile-enforcement")
    expect(enforcement).to_contain_text("Runs in this machine's Python environment; the image is not used.")
    expect(enforcement).to_contain_text("Memory: at most 2 GiB")

    status, _ = lab.request("POST", "cube/api/v1/notebooks", {"name": "looks"})
    assert status == 201
    expect(row(page, "looks")).to_have_attribute("data-status", "running", timeout=60_000)
    # No name: the server's words name the field and say what a name may be.
    page.get_by_test_id("cube-create-submit").click()
    expect(page.get_by_test_id("cube-create-error")).to_contain_text("name is required: use lower-case")
    expect(name).to_have_attribute("aria-invalid", "true")

    panel = page.locator(PANEL).bounding_box()
    assert panel is not None and panel["width"] <= NARROW_SIDEBAR  # Lab opens it narrow
    for width in ("narrow", "wide"):
        if width == "wide":
            set_sidebar_width(page, WIDE_SIDEBAR)
        shot(page, f"07-{width}-light")
        with dark_theme(page):
            shot(page, f"07-{width}-dark")
    set_sidebar_width(page, NARROW_SIDEBAR)
    page.get_by_test_id("cube-create-profile").select_option("a100")
    shot(page, "07-narrow-gpu-profile")

    # Deleting says what stays: the workspace, which a new server of that name gets again.
    row(page, "looks").get_by_test_id("cube-server-delete").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Its workspace is kept: a new server named looks gets its files back.")
    dialog.locator(".jp-Dialog-content").screenshot(path=str(ARTIFACTS / "07-delete-dialog.png"))
    confirm_dialog(page, "Delete")
    expect(row(page, "looks")).to_have_count(0)

"""The Schedules panel and the schedule form in real Chromium against a real `jupyter lab` with the
workbench (which runs the scheduler).

A person's path: open a tagged notebook, press "Schedule…" in its toolbar, pick "daily at" and watch the
server's words and next five fire times follow what is typed, type a cron that does not parse and see
the server's error by the cron field, give a bad name and see the server's 400 by the name, save; the
Schedules panel lists it with its words, state and next fire; "Run now" makes a real pipeline run whose
square turns green, and clicking the square shows that run in the Pipeline panel; pause and resume;
backfill a range (a dry run lists the logical times, Confirm queues them, a second dry run lists them as
already succeeded); edit it (the form prefilled); delete it (confirmed). The Pipeline panel's
"Schedule…" opens the same form. Screenshots land in tests/browser/artifacts/ at 1600x1000 and narrow,
light and dark.
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from playwright.sync_api import Locator, Page, ViewportSize, expect

from tests.browser.lab import Lab, LapTimer
from tests.browser.test_notebook_servers_panel import confirm_dialog, dark_theme, open_lab
from tests.browser.test_notebook_servers_panel import shot as shot_panel
from tests.browser.test_pipeline_panel import open_path, run_command
from tests.pipelines.notebooks import FANOUT_ML

NOTEBOOK = "fanout.ipynb"
PANEL = "#cube-schedules"
ZONE = "Europe/Berlin"
SCREEN: ViewportSize = {"width": 1600, "height": 1000}
NARROW: ViewportSize = {"width": 900, "height": 1000}
RUN_TIMEOUT = 90_000  # a real pipeline run of the example: several seconds, more on a loaded machine


def shot(page: Page, name: str) -> None:
    shot_panel(page, name, PANEL)


def card(page: Page, name: str) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-schedule"][data-name="{name}"]')


def field_error(form: Locator, field: str) -> Locator:
    return form.locator(f'[data-testid="cube-job-field-error"][data-field="{field}"]')


def preview_times(form: Locator) -> list[str]:
    times = form.get_by_test_id("cube-schedule-preview-time")
    expect(times).to_have_count(5)
    return [times.nth(i).get_attribute("data-time") or "" for i in range(5)]


def open_notebook(page: Page, lab: Lab) -> None:
    (lab.root / "work" / NOTEBOOK).write_text(FANOUT_ML.read_text())
    open_lab(page, lab)
    open_path(page, NOTEBOOK)
    expect(page.locator(".jp-NotebookPanel:visible .jp-Cell").first).to_be_attached(timeout=30_000)


def test_schedule_a_notebook_run_it_backfill_edit_and_delete(lab: Lab, page: Page) -> None:
    lap = LapTimer()
    page.set_viewport_size(SCREEN)
    open_notebook(page, lab)
    lap("open lab + notebook")

    # "Schedule…" next to "Run as pipeline" in the notebook's toolbar opens the form for this notebook.
    toolbar = page.locator(".jp-NotebookPanel:visible .jp-Toolbar")
    names = toolbar.locator(".jp-Toolbar-item").evaluate_all(
        "items => items.map(i => i.getAttribute('data-jp-item-name'))"
    )
    assert names.index("cube-schedule-notebook") == names.index("cube-run-as-pipeline") + 1, names
    toolbar.locator('[data-testid="cube-schedule-notebook"] button').click()
    panel = page.locator(PANEL)
    form = panel.get_by_test_id("cube-schedule-form")
    expect(form).to_be_visible()
    expect(form).to_have_attribute("data-mode", "create")
    expect(form.get_by_test_id("cube-schedule-path")).to_have_text(NOTEBOOK)
    # The notebook's parameters, their defaults filled in.
    n_samples = form.locator('[data-testid="cube-parameter"][data-name="n_samples"]')
    expect(n_samples).to_have_value("600")

    # Daily at: the server's words and the next five fire times, live as the time and zone change.
    expect(form.get_by_test_id("cube-schedule-preset")).to_have_value("daily")
    form.locator('[name="timezone"]').select_option(ZONE)
    words = form.get_by_test_id("cube-schedule-preview-describe")
    expect(words).to_have_text(f"At 02:00 every day ({ZONE})")
    form.locator('[name="at"]').fill("09:30")
    # The words and the times come from one answer: once the words are 09:30's, so are the times.
    expect(words).to_have_text(f"At 09:30 every day ({ZONE})")
    daily = preview_times(form)
    berlin = [datetime.fromisoformat(t.replace("Z", "+00:00")).astimezone(ZoneInfo(ZONE)) for t in daily]
    assert [(t.hour, t.minute) for t in berlin] == [(9, 30)] * 5, daily
    assert [(b - a) for a, b in itertools.pairwise(berlin)] == [timedelta(days=1)] * 4
    expect(form.locator('[name="cron"]')).to_have_value("30 9 * * *")
    shot(page, "51-schedules-form-daily")

    # Weekly on Friday.
    form.get_by_test_id("cube-schedule-preset").select_option("weekly")
    form.get_by_test_id("cube-schedule-day").select_option("Friday")
    expect(words).to_have_text(re.compile(r"At 09:30 on Friday"))
    weekly = preview_times(form)  # not "different from daily's": daily's first may be a Friday
    assert {datetime.fromisoformat(t.replace("Z", "+00:00")).weekday() for t in weekly} == {4}, weekly

    # A custom cron that does not parse: the server's error, by the cron field, as it is typed.
    form.get_by_test_id("cube-schedule-preset").select_option("cron")
    cron = form.locator('[name="cron"]')
    cron.fill("61 9 * * *")
    error = field_error(form, "cron")
    expect(error).to_contain_text("does not parse")
    expect(cron).to_have_attribute("aria-invalid", "true")
    shot(page, "52-schedules-bad-cron")
    cron.fill("30 9 * * 1-5")
    expect(error).to_have_count(0)
    expect(words).to_contain_text("Monday through Friday")

    # Back to daily at 09:30; a name that is no DNS label: the server's 400 by the name field.
    form.get_by_test_id("cube-schedule-preset").select_option("daily")
    expect(words).to_have_text(f"At 09:30 every day ({ZONE})")
    n_samples.fill("300")
    form.locator('[name="name"]').fill("Nightly")
    form.get_by_test_id("cube-schedule-save").click()
    expect(field_error(form, "name")).to_contain_text("may only have lower-case letters")
    form.locator('[name="name"]').fill("nightly")
    expect(field_error(form, "name")).to_have_count(0)
    form.get_by_test_id("cube-schedule-save").click()
    lap("form: preview, errors, save")

    # The list: the schedule with its words, state and next fire.
    nightly = card(page, "nightly")
    expect(nightly).to_be_visible()
    expect(form).to_have_count(0)
    status, saved = lab.request("GET", "cube/api/v1/schedules/nightly")
    assert status == 200, saved
    assert (saved["cron"], saved["timezone"], saved["parameters"]) == ("30 9 * * *", ZONE, {"n_samples": 300})
    expect(nightly.get_by_test_id("cube-schedule-describe")).to_have_text(saved["describe"])
    expect(nightly.get_by_test_id("cube-schedule-state")).to_have_text("active")
    expect(nightly.get_by_test_id("cube-schedule-next-fire")).to_have_attribute(
        "data-time", saved["next_fire"]
    )
    expect(nightly.get_by_test_id("cube-schedule-last-run")).to_have_text("none yet")
    expect(nightly.get_by_test_id("cube-schedule-no-runs")).to_be_visible()

    # Run now: a real pipeline run; its square turns green and the last run says so.
    nightly.get_by_test_id("cube-schedule-run-now").click()
    square = nightly.get_by_test_id("cube-schedule-run")
    expect(square).to_have_count(1)
    expect(square).to_have_attribute("data-state", "succeeded", timeout=RUN_TIMEOUT)
    expect(nightly.get_by_test_id("cube-schedule-last-run")).to_have_attribute("data-state", "succeeded")
    expect(nightly.get_by_test_id("cube-schedule-counts")).to_have_attribute("data-running", "0")
    run_id = square.get_attribute("data-run")
    assert run_id
    assert "succeeded" in (square.get_attribute("title") or "")
    lap("run now -> succeeded")
    shot(page, "53-schedules-list")
    with dark_theme(page):
        shot(page, "54-schedules-list-dark")

    # The square opens that pipeline run in the Pipeline panel, with its notebook.
    square.click()
    run = page.locator('#cube-pipeline [data-testid="cube-run"]')
    expect(run).to_be_visible()
    expect(run).to_have_attribute("data-run", run_id)
    expect(run).to_have_attribute("data-status", "succeeded")
    expect(run).to_contain_text("n_samples=300")

    # Pause and resume.
    pause = nightly.get_by_test_id("cube-schedule-pause")
    pause.click()
    expect(nightly.get_by_test_id("cube-schedule-state")).to_have_text("paused")
    expect(pause).to_have_text("Resume")
    assert lab.request("GET", "cube/api/v1/schedules/nightly")[1]["paused"] is True
    pause.click()
    expect(nightly.get_by_test_id("cube-schedule-state")).to_have_text("active")
    expect(pause).to_have_text("Pause")

    # Backfill the last three days: a dry run lists the logical times, Confirm queues them.
    today = datetime.now(ZoneInfo(ZONE)).date()
    first, last = today - timedelta(days=3), today - timedelta(days=1)
    expected = [
        datetime(d.year, d.month, d.day, 9, 30, tzinfo=ZoneInfo(ZONE))
        .astimezone(UTC)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        for d in (first, first + timedelta(days=1), last)
    ]
    nightly.get_by_test_id("cube-schedule-backfill").click()
    backfill = nightly.get_by_test_id("cube-backfill")
    backfill.locator('[name="start"]').fill(f"{first.isoformat()}T00:00")
    backfill.locator('[name="end"]').fill(f"{last.isoformat()}T23:59")
    backfill.locator('[name="parallel"]').fill("3")
    backfill.get_by_test_id("cube-backfill-plan-button").click()
    to_run = backfill.get_by_test_id("cube-backfill-to-run")
    expect(to_run).to_have_count(3)
    assert [to_run.nth(i).get_attribute("data-time") for i in range(3)] == expected
    shot(page, "55-schedules-backfill-plan")
    backfill.get_by_test_id("cube-backfill-confirm").click()
    expect(backfill.get_by_test_id("cube-backfill-queued")).to_have_text("Queued 3 runs.")
    for logical in expected:
        cell = nightly.locator(f'[data-testid="cube-schedule-run"][data-logical="{logical}"]')
        expect(cell).to_have_attribute("data-state", "succeeded", timeout=RUN_TIMEOUT)
    lap("backfill 3 -> succeeded")
    # The same range again: every time already succeeded, nothing to run.
    backfill.locator('[name="parallel"]').fill("2")
    backfill.get_by_test_id("cube-backfill-plan-button").click()
    expect(backfill.get_by_test_id("cube-backfill-done")).to_have_count(3)
    expect(backfill.get_by_test_id("cube-backfill-to-run")).to_have_count(0)
    expect(backfill.get_by_test_id("cube-backfill-confirm")).to_have_count(0)
    backfill.get_by_test_id("cube-backfill-close").click()
    expect(backfill).to_have_count(0)
    expect(nightly.get_by_test_id("cube-schedule-run")).to_have_count(4)
    shot(page, "56-schedules-runs")

    # Edit: the form prefilled with what the server has; weekly on Friday, two retries.
    nightly.get_by_test_id("cube-schedule-edit").click()
    expect(form).to_have_attribute("data-mode", "edit")
    expect(form.locator('[name="name"]')).to_have_value("nightly")
    expect(form.locator('[name="name"]')).to_be_disabled()
    expect(form.get_by_test_id("cube-schedule-preset")).to_have_value("daily")
    expect(form.locator('[name="at"]')).to_have_value("09:30")
    expect(form.locator('[name="timezone"]')).to_have_value(ZONE)
    expect(form.locator('[name="retries"]')).to_have_value("0")
    expect(n_samples).to_have_value("300")
    form.get_by_test_id("cube-schedule-preset").select_option("weekly")
    form.get_by_test_id("cube-schedule-day").select_option("Friday")
    expect(words).to_have_text(f"At 09:30 on Friday ({ZONE})")
    form.locator('[name="retries"]').fill("2")
    with dark_theme(page):
        shot(page, "57-schedules-edit-dark")
    form.get_by_test_id("cube-schedule-save").click()
    expect(form).to_have_count(0)
    expect(nightly.get_by_test_id("cube-schedule-describe")).to_have_text(f"At 09:30 on Friday ({ZONE})")
    edited = lab.request("GET", "cube/api/v1/schedules/nightly")[1]
    assert (edited["cron"], edited["retries"], edited["parameters"]) == ("30 9 * * 5", 2, {"n_samples": 300})

    # Narrow: the list and the form still read (nothing cut off, nothing overlapping).
    page.set_viewport_size(NARROW)
    shot(page, "58-schedules-narrow")
    nightly.get_by_test_id("cube-schedule-edit").click()
    expect(words).to_have_text(f"At 09:30 on Friday ({ZONE})")
    shot(page, "59-schedules-form-narrow")
    form.get_by_test_id("cube-schedule-cancel").click()
    page.set_viewport_size(SCREEN)

    # Delete, confirmed: gone from the panel and from the server.
    nightly.get_by_test_id("cube-schedule-delete").click()
    confirm_dialog(page, "Delete")
    expect(nightly).to_have_count(0)
    expect(panel.get_by_test_id("cube-schedules-none")).to_be_visible()
    assert lab.request("GET", "cube/api/v1/schedules/nightly")[0] == 404
    lap("edit + delete")
    print(json.dumps(lap.timings))


def test_pipeline_panel_offers_schedule(lab: Lab, page: Page) -> None:
    """The Pipeline panel's "Schedule…" opens the form for the notebook it shows."""
    open_notebook(page, lab)
    run_command(page, "cube:open-pipeline")
    pipeline = page.locator("#cube-pipeline")
    expect(pipeline.get_by_test_id("cube-pipeline-path")).to_have_text(NOTEBOOK)
    pipeline.get_by_test_id("cube-pipeline-schedule").click()
    form = page.locator(f'{PANEL} [data-testid="cube-schedule-form"]')
    expect(form).to_be_visible()
    expect(form).to_contain_text(NOTEBOOK)
    expect(form.locator('[data-testid="cube-parameter"][data-name="n_samples"]')).to_have_value("600")
    form.get_by_test_id("cube-schedule-cancel").click()
    expect(form).to_have_count(0)


def test_a_training_schedule_shows_its_job(lab: Lab, page: Page) -> None:
    """A schedule saved with the CLI or REST as `kind: training` is listed by the job it runs."""
    job = {"name": "retrain", "framework": "pytorch", "replicas": {"worker": 1}, "command": ["true"]}
    body = {"name": "weekly-retrain", "kind": "training", "job": job, "cron": "0 3 * * 0"}
    status, saved = lab.request("POST", "cube/api/v1/schedules", body)
    assert status == 201, saved
    try:
        open_lab(page, lab)
        run_command(page, "cube:open-schedules")
        weekly = card(page, "weekly-retrain")
        expect(weekly.locator(".cube-ScheduleCard-facts")).to_contain_text("Job")
        expect(weekly.locator(".cube-ScheduleCard-path")).to_have_text("retrain")
        expect(weekly.get_by_test_id("cube-schedule-describe")).to_have_text("At 03:00 on Sunday (UTC)")
    finally:
        lab.request("DELETE", "cube/api/v1/schedules/weekly-retrain")

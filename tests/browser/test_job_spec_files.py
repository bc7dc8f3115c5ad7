"""YAML job specs opened into the Jobs panel's forms, in real Chromium against a real `jupyter lab`.

A person's path: right-click a training spec in the file browser, "Run as Job": the training form is
prefilled from the file (the fields it does not show named as sent as written), Launch runs it to
Succeeded, and its conditions no longer say it is running. Then a double-click on examples'
tune-lr.yaml opens it in the editor as always and its tuning form beside it, in script-trial mode;
an edit saved with "Save as YAML" is in the file, and "Export as YAML" writes a new one. A YAML that
is no job spec only opens in the editor. Last, examples' serve-local.yaml served from its form, and a
test request sent with the box empty sends the example the box shows. Screenshots land in
tests/browser/artifacts/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Locator, Page, expect

from tests.browser.lab import Lab
from tests.browser.test_jobs_panel import PANEL, field_input, job_row, shot
from tests.browser.test_notebook_servers_panel import open_lab

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
JOB = "spec-ddp"
SCRIPT = "print_rank.py"
TRAINING_SPEC = f"""\
name: {JOB}
framework: pytorch
replicas:
  master: 1
  worker: {{replicas: 1, resources: {{cpu: "1"}}}}
script: {SCRIPT}
args: [--greeting, hello world]
restart_policy: Never
clean_pod_policy: Running
"""
PRINT_RANK = (
    "import os, sys\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], sys.argv[1:])\n"
)


def form(page: Page, kind: str) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-job-form"][data-kind="{kind}"]')


def file_item(page: Page, name: str) -> Locator:
    """The file browser's row of `name` (the browser shown, its listing fetched again)."""
    page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
    page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:refresh')")
    item = page.locator(".jp-DirListing-item", has=page.locator(".jp-DirListing-itemText", has_text=name))
    expect(item).to_have_count(1)
    return item


def test_a_spec_file_opens_into_its_form_launches_and_saves(lab: Lab, page: Page) -> None:
    work = lab.root / "work"
    (work / SCRIPT).write_text(PRINT_RANK)
    (work / "ddp.yaml").write_text(TRAINING_SPEC)
    shutil.copy(EXAMPLES / "tune-lr.yaml", work / "tune-lr.yaml")
    (work / "compose.yaml").write_text("services:\n  web: {image: nginx}\n")

    open_lab(page, lab)
    file_item(page, "ddp.yaml").click(button="right")
    page.locator(".lm-Menu-item", has_text="Run as Job").click()
    training = form(page, "training")
    expect(training).to_be_visible()
    expect(field_input(training, "name")).to_have_value(JOB)
    expect(field_input(training, "framework")).to_have_value("pytorch")
    expect(field_input(training, "replicas.master.replicas")).to_have_value("1")
    expect(field_input(training, "replicas.worker.replicas")).to_have_value("1")
    expect(field_input(training, "script")).to_have_value(SCRIPT)
    expect(field_input(training, "args")).to_have_value("--greeting 'hello world'")
    expect(field_input(training, "restart_policy")).to_have_value("Never")
    expect(training.get_by_test_id("cube-job-form-file")).to_contain_text("ddp.yaml")
    expect(training.get_by_test_id("cube-job-form-file")).to_contain_text("clean_pod_policy")
    shot(page, "61-jobs-spec-file-training")

    training.get_by_test_id("cube-job-launch").click()
    row = job_row(page, JOB)
    expect(row).to_have_attribute("data-phase", "Succeeded", timeout=90_000)
    status, job = lab.request("GET", f"cube/api/v1/jobs/{JOB}")
    assert status == 200, job
    assert job["spec"]["clean_pod_policy"] == "Running"  # sent as the file wrote it
    assert job["spec"]["replicas"]["worker"]["resources"] == {"cpu": "1"}
    detail = page.get_by_test_id("cube-job-detail")
    expect(detail.locator('[data-testid="cube-job-condition"][data-type="Succeeded"]')).to_have_count(1)
    # The operator's Running turned False when the job ended: the Succeeded row replaced it.
    expect(detail.locator('[data-testid="cube-job-condition"][data-status="False"]')).to_have_count(0)
    shot(page, "62-jobs-spec-file-succeeded")

    # A double-click: the editor as always, and the tuning form beside it in script-trial mode.
    file_item(page, "tune-lr.yaml").dblclick()
    expect(page.locator(".jp-FileEditor")).to_be_visible()
    tuning = form(page, "tuning")
    expect(tuning).to_be_visible()
    expect(field_input(tuning, "name")).to_have_value("lr-search")
    expect(field_input(tuning, "trial")).to_have_value("script")
    expect(field_input(tuning, "trial.training.framework")).to_have_value("pytorch")
    expect(field_input(tuning, "trial.training.script")).to_have_value("jobs/train_ddp.py")
    expect(field_input(tuning, "trial.training.args")).to_have_value("--epochs 1")
    expect(field_input(tuning, "trial.training.replicas.worker.replicas")).to_have_value("1")
    expect(field_input(tuning, "objective.metric")).to_have_value("loss")
    expect(field_input(tuning, "algorithm.name")).to_have_value("tpe")
    expect(tuning.get_by_test_id("cube-tuning-parameter")).to_have_count(1)
    expect(field_input(tuning, "parameters.lr.max")).to_have_value("0.2")
    expect(field_input(tuning, "max_trials")).to_have_value("4")
    shot(page, "63-jobs-spec-file-tuning")

    field_input(tuning, "max_trials").fill("6")
    tuning.get_by_test_id("cube-job-save-yaml").click()
    expect(tuning.get_by_test_id("cube-job-saved")).to_contain_text("tune-lr.yaml")
    saved = yaml.safe_load((work / "tune-lr.yaml").read_text())
    original = yaml.safe_load((EXAMPLES / "tune-lr.yaml").read_text())
    assert saved["max_trials"] == 6
    assert saved["algorithm"] == original["algorithm"]  # its settings kept
    assert saved["trial"]["training"]["script"] == "jobs/train_ddp.py"
    assert saved.keys() == original.keys()

    tuning.get_by_test_id("cube-job-export-yaml").click()
    dialog = page.locator(".jp-Dialog")
    dialog.locator("input").fill("lr-copy.yaml")
    dialog.get_by_role("button", name="Save").click()
    expect(tuning.get_by_test_id("cube-job-saved")).to_contain_text("lr-copy.yaml")
    assert yaml.safe_load((work / "lr-copy.yaml").read_text()) == saved
    assert lab.request("GET", "cube/api/v1/jobs/lr-search")[0] == 404  # saving launches nothing
    shot(page, "64-jobs-spec-file-saved")

    # A YAML that is no job spec: only the editor; the form shown stays the tuning spec's.
    file_item(page, "compose.yaml").dblclick()
    expect(page.locator(".lm-TabBar-tab", has_text="compose.yaml")).to_have_count(1)
    page.locator(".lm-TabBar-tab", has_text="Jobs").first.click()
    expect(tuning).to_be_visible()
    expect(field_input(tuning, "name")).to_have_value("lr-search")
    expect(page.get_by_test_id("cube-jobs-open-error")).to_have_count(0)


def test_a_serving_spec_runs_and_an_empty_test_box_sends_its_example(lab: Lab, page: Page) -> None:
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    features, labels = load_iris(return_X_y=True)
    model_dir = lab.root / "work" / "jobs" / "iris-model"  # where serve-local.yaml says it is
    model_dir.mkdir(parents=True, exist_ok=True)
    joblib.dump(LogisticRegression(max_iter=500).fit(features, labels), model_dir / "model.joblib")
    shutil.copy(EXAMPLES / "serve-local.yaml", lab.root / "work" / "serve-local.yaml")

    open_lab(page, lab)
    file_item(page, "serve-local.yaml").click(button="right")
    page.locator(".lm-Menu-item", has_text="Run as Job").click()
    serving = form(page, "serving")
    expect(serving).to_be_visible()
    expect(field_input(serving, "name")).to_have_value("iris-local")
    expect(field_input(serving, "model_format")).to_have_value("sklearn")
    expect(field_input(serving, "storage_uri")).to_have_value("jobs/iris-model")
    expect(serving.get_by_test_id("cube-job-form-file")).to_contain_text("protocol_version")
    serving.get_by_test_id("cube-job-launch").click()

    row = job_row(page, "iris-local")
    expect(row).to_have_attribute("data-phase", "Ready", timeout=120_000)
    detail = page.get_by_test_id("cube-job-detail")
    expect(detail.get_by_test_id("cube-job-predict-protocol")).to_have_value("v2")  # as the file says
    inputs = detail.get_by_test_id("cube-job-predict-inputs")
    expect(inputs).to_have_value("")
    detail.get_by_test_id("cube-job-predict-send").click()
    expect(detail.get_by_test_id("cube-job-predict-response")).to_be_visible(timeout=30_000)
    expect(detail.get_by_test_id("cube-job-predict-error")).to_have_count(0)
    expect(inputs).to_have_value("[[5.1, 3.5, 1.4, 0.2]]")  # what was sent, shown
    shot(page, "65-jobs-spec-file-serving")

    detail.get_by_test_id("cube-job-delete").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)

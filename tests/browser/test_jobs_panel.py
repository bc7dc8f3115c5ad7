"""The Jobs panel in real Chromium against a real `jupyter lab` with the workbench (local backend).

A person's path: open the Jobs panel at its training form, make two mistakes and see the server's
own message by the field it names (a CPU that is not a quantity, a PyTorch job with no replicas),
then launch a 2-replica PyTorch job (Master 1 + Worker 1) whose script runs a real gloo all_reduce
across both processes. The list shows it Running with 2/2 replicas; each replica's live log shows
its rank and the reduced sum while the job still runs; once the test lets the script finish the
list shows Succeeded and the conditions say so. Deleting it from the panel removes it.
Then a tuning job from its form (real papermill trials driven by Optuna): the trial table, the best
trial and the optimization history; and a served sklearn model: its endpoint and a test request whose
predictions are the model's own.
Screenshots land in tests/browser/artifacts/ for a person to look at.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.lab import Lab, LapTimer
from tests.browser.test_notebook_servers_panel import confirm_dialog, dark_theme, open_lab
from tests.browser.test_notebook_servers_panel import shot as shot_panel

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

PANEL = '[data-testid="cube-jobs"]'
SCRIPT = "allreduce.py"
JOB = "ddp-allreduce"
# Every rank adds rank+1 to the sum (1 + 2 = 3 for two replicas) and prints what all_reduce gave it;
# given a path, it then holds until the test creates it (so the panel can be seen with the job Running
# and its logs live).
ALLREDUCE = """\
import os, sys, time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(f"rank {rank} of {world}: all_reduce sum = {value.item():g}", flush=True)
if len(sys.argv) > 1:
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
"""


def training_form(page: Page) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-job-form"][data-kind="training"]')


def field_input(form: Locator, path: str) -> Locator:
    return form.get_by_test_id(f"cube-job-input-{path}")


def field_error(form: Locator, path: str) -> Locator:
    return form.locator(
        f'[data-testid="cube-job-field"][data-field="{path}"] [data-testid="cube-job-field-error"]'
    )


def job_row(page: Page, name: str) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-jobs-row"][data-name="{name}"]')


def column_widths(row: Locator) -> list[float]:
    return row.evaluate("row => [...row.cells].map(cell => cell.getBoundingClientRect().width)")


def shot(page: Page, name: str) -> None:
    shot_panel(page, name, PANEL)


def submit_error(lab: Lab, spec: dict[str, object]) -> dict[str, object]:
    """What the server answers for this spec, asked directly: the panel must show exactly that."""
    status, error = lab.request("POST", "cube/api/v1/jobs", {"kind": "training", "spec": spec})
    assert status == 400, error
    return dict(error)


def test_launch_a_two_replica_pytorch_job_and_watch_it_succeed(lab: Lab, page: Page) -> None:
    lap = LapTimer()
    work = lab.root / "work"
    (work / SCRIPT).write_text(ALLREDUCE)
    release = Path(lab.root) / "release-allreduce"

    open_lab(page, lab)
    page.evaluate("() => window.jupyterapp.commands.execute('cube:new-training-job')")
    panel = page.locator(PANEL)
    expect(panel).to_be_visible()
    form = training_form(page)
    expect(form).to_be_visible()
    expect(panel.get_by_test_id("cube-jobs-empty")).to_be_visible()
    lap("open lab + jobs panel")

    # The PyTorch form starts at Master 1 + Worker 1.
    expect(field_input(form, "framework")).to_have_value("pytorch")
    expect(field_input(form, "replicas.master.replicas")).to_have_value("1")
    expect(field_input(form, "replicas.worker.replicas")).to_have_value("1")
    field_input(form, "name").fill(JOB)
    field_input(form, "script").fill(SCRIPT)
    field_input(form, "args").fill(str(release))

    # A CPU that is not a quantity: the server's message, by the CPU field.
    expected = submit_error(
        lab, {"name": JOB, "framework": "pytorch", "script": SCRIPT, "resources": {"cpu": "two"}}
    )
    assert expected["field"] == "resources.cpu"
    field_input(form, "resources.cpu").fill("two")
    form.get_by_test_id("cube-job-launch").click()
    expect(field_error(form, "resources.cpu")).to_have_text(str(expected["message"]))
    expect(field_input(form, "resources.cpu")).to_have_attribute("aria-invalid", "true")
    expect(form.get_by_test_id("cube-job-field-error")).to_have_count(1)
    shot(page, "31-jobs-bad-cpu")
    # Editing clears the stale error.
    field_input(form, "resources.cpu").fill("")
    expect(form.get_by_test_id("cube-job-field-error")).to_have_count(0)

    # No replicas at all: the server names replicas.worker, shown by the Worker count.
    expected = submit_error(
        lab,
        {"name": JOB, "framework": "pytorch", "script": SCRIPT, "replicas": {"master": 0, "worker": 0}},
    )
    assert expected["field"] == "replicas.worker"
    field_input(form, "replicas.master.replicas").fill("0")
    field_input(form, "replicas.worker.replicas").fill("0")
    form.get_by_test_id("cube-job-launch").click()
    expect(field_error(form, "replicas.worker.replicas")).to_have_text(str(expected["message"]))
    expect(field_input(form, "replicas.worker.replicas")).to_have_attribute("aria-invalid", "true")
    assert lab.request("GET", "cube/api/v1/jobs")[1]["jobs"] == []  # nothing half-created
    lap("two bad values -> errors by their fields")

    field_input(form, "replicas.master.replicas").fill("1")
    field_input(form, "replicas.worker.replicas").fill("1")
    form.get_by_test_id("cube-job-launch").click()
    row = job_row(page, JOB)
    expect(row).to_be_visible()
    expect(row.get_by_test_id("cube-job-kind")).to_contain_text("training")
    expect(row.get_by_test_id("cube-job-kind")).to_contain_text("pytorch")
    expect(row).to_have_attribute("data-phase", "Running", timeout=60_000)
    expect(row.get_by_test_id("cube-job-phase")).to_have_text("running")
    expect(row.get_by_test_id("cube-job-replicas")).to_have_text("2/2")
    expect(row.get_by_test_id("cube-job-gpus")).to_have_text("0")
    running_widths = column_widths(row)
    lap("launch -> running")

    # The job is shown: its log follows the master while the job still runs.
    detail = panel.get_by_test_id("cube-job-detail")
    expect(detail).to_have_attribute("data-name", JOB)
    picker = detail.get_by_test_id("cube-job-replica-select")
    expect(picker.locator("option")).to_have_count(2)
    log = detail.get_by_test_id("cube-job-log")
    expect(log).to_have_attribute("data-replica", "master-0")
    expect(log).to_contain_text("rank 0 of 2: all_reduce sum = 3", timeout=60_000)
    expect(detail.get_by_test_id("cube-job-log-state")).to_have_attribute("data-state", "streaming")
    picker.select_option("worker-0")
    expect(log).to_have_attribute("data-replica", "worker-0")
    expect(log).to_contain_text("rank 1 of 2: all_reduce sum = 3", timeout=30_000)
    expect(log).not_to_contain_text("rank 0 of 2")
    assert row.get_attribute("data-phase") == "Running"
    lap("live logs of both replicas")
    shot(page, "32-jobs-running")

    # Let the ranks finish: the same live log gets the last line, then the list says Succeeded.
    release.write_text("go")
    expect(log).to_contain_text("rank 1 done", timeout=30_000)
    expect(row).to_have_attribute("data-phase", "Succeeded", timeout=60_000)
    expect(row.get_by_test_id("cube-job-phase")).to_have_text("succeeded")
    assert column_widths(row) == running_widths  # the list does not jump when a job finishes
    expect(detail.get_by_test_id("cube-job-log-state")).to_have_attribute("data-state", "ended")
    expect(detail.get_by_test_id("cube-job-log-state")).to_have_text("complete")
    succeeded = detail.locator('[data-testid="cube-job-condition"][data-type="Succeeded"]')
    expect(succeeded).to_have_attribute("data-status", "True")
    picker.select_option("master-0")
    expect(log).to_contain_text("rank 0 of 2: all_reduce sum = 3")
    expect(log).to_contain_text("rank 0 done")
    status, job = lab.request("GET", f"cube/api/v1/jobs/{JOB}")
    assert status == 200
    assert job["phase"] == "Succeeded"
    assert sorted((r["name"], r["state"], r["exit_code"]) for r in job["replicas"]) == [
        ("master-0", "Succeeded", 0),
        ("worker-0", "Succeeded", 0),
    ]
    lap("running -> succeeded")
    shot(page, "33-jobs-succeeded")
    with dark_theme(page):
        shot(page, "34-jobs-succeeded-dark")

    detail.get_by_test_id("cube-job-delete").click()
    confirm_dialog(page, "Delete")
    expect(row).to_have_count(0)
    assert lab.request("GET", f"cube/api/v1/jobs/{JOB}")[0] == 404
    lap("delete")
    print(f"browser flow timings (s): {lap.timings}")


BROKEN_SCRIPT = "broken.py"
BROKEN = "print('loading the data', flush=True)\n\ndef load():\n    import not_a_module_xyz\n\nload()\n"
CAUSE = "ModuleNotFoundError: No module named 'not_a_module_xyz'"


def test_a_failed_job_leads_with_its_cause_and_folds_the_workbench_frames(lab: Lab, page: Page) -> None:
    (lab.root / "work" / BROKEN_SCRIPT).write_text(BROKEN)
    page.set_viewport_size({"width": 1600, "height": 1000})
    open_lab(page, lab)
    page.evaluate("() => window.jupyterapp.commands.execute('cube:new-training-job')")
    form = training_form(page)
    expect(form).to_be_visible()
    # Empty inputs show examples, marked as such, never what looks like a value already typed.
    expect(field_input(form, "name")).to_have_attribute("placeholder", "e.g. mnist-ddp")
    expect(field_input(form, "script")).to_have_attribute("placeholder", "e.g. train.py")
    expect(field_input(form, "resources.memory")).to_have_attribute("placeholder", "e.g. 8Gi")
    form.get_by_test_id("cube-job-launch").click()  # no name: the server's words, by the field
    expect(field_error(form, "name")).to_have_text(re.compile(r"^name is required: use lower-case letters"))
    shot(page, "38-jobs-form-placeholders")

    field_input(form, "name").fill("broken")
    field_input(form, "script").fill(BROKEN_SCRIPT)
    field_input(form, "replicas.master.replicas").fill("0")
    form.get_by_test_id("cube-job-launch").click()
    row = job_row(page, "broken")
    expect(row).to_have_attribute("data-phase", "Failed", timeout=60_000)

    detail = page.locator(PANEL).get_by_test_id("cube-job-detail")
    message = detail.get_by_test_id("cube-job-message")
    # The cause first, then the user's frames; what ended under them.
    expect(message.get_by_test_id("cube-job-error-cause")).to_have_text(CAUSE)
    frames = message.get_by_test_id("cube-job-error-frames")
    expect(frames).to_contain_text(f'{BROKEN_SCRIPT}", line 6, in <module>')
    expect(frames).to_contain_text("line 4, in load")
    expect(frames).not_to_contain_text("entry.py")
    expect(frames).not_to_contain_text("^^^")
    context = "PyTorchJob broken has failed: replica worker-0 exited with code 1"
    expect(message.get_by_test_id("cube-job-error-context")).to_have_text(context)
    # The workbench's frames are folded away, one click from view.
    traceback = message.get_by_test_id("cube-job-error-traceback")
    expect(traceback).to_be_hidden()
    # The condition carries one line: what ended and why.
    failed = detail.locator('[data-testid="cube-job-condition"][data-type="Failed"]')
    expect(failed.locator(".cube-JobTable-message")).to_have_text(f"{context}: {CAUSE}")
    # The log holds everything; the header says it is complete, not that something "ended".
    log = detail.get_by_test_id("cube-job-log")
    expect(log).to_contain_text("loading the data")
    expect(log).to_contain_text("entry.py")
    expect(detail.get_by_test_id("cube-job-log-state")).to_have_text("complete")
    shot(page, "39-jobs-failed")
    with dark_theme(page):
        shot(page, "39-jobs-failed-dark")

    message.get_by_test_id("cube-job-error-details").locator("summary").click()
    expect(traceback).to_be_visible()
    expect(traceback).to_contain_text("entry.py")
    expect(traceback).to_contain_text(CAUSE)
    page.set_viewport_size({"width": 900, "height": 1000})
    shot(page, "39-jobs-failed-narrow")

    detail.get_by_test_id("cube-job-delete").click()
    confirm_dialog(page, "Delete")
    expect(row).to_have_count(0)


# A trial notebook: papermill sets `x`; the objective peaks at x = 0.3.
TRIAL_NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "metadata": {"tags": ["parameters"]},
            "source": "x = 0.0",
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "metadata": {},
            "source": 'print(f"accuracy={1 - (x - 0.3) ** 2}")',
            "outputs": [],
            "execution_count": None,
        },
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}
TRIALS = 4


def tuning_form(page: Page) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-job-form"][data-kind="tuning"]')


def test_launch_a_tuning_job_and_see_its_trials_best_and_history(lab: Lab, page: Page) -> None:
    (lab.root / "work" / "trial.ipynb").write_text(json.dumps(TRIAL_NOTEBOOK))
    open_lab(page, lab)
    page.evaluate("() => window.jupyterapp.commands.execute('cube:new-tuning-job')")
    form = tuning_form(page)
    expect(form).to_be_visible()
    field_input(form, "name").fill("tune-x")
    field_input(form, "trial.notebook").fill("trial.ipynb")
    field_input(form, "objective.metric").fill("accuracy")
    field_input(form, "algorithm.name").select_option("random")
    form.get_by_test_id("cube-job-input-parameter-name").fill("x")
    field_input(form, "parameters.x.min").fill("0.5")
    field_input(form, "parameters.x.max").fill("0.1")
    field_input(form, "max_trials").fill(str(TRIALS))
    field_input(form, "parallel_trials").fill("2")

    # max below min: the server names parameters.x.max; the error shows under that parameter's row.
    form.get_by_test_id("cube-job-launch").click()
    error = form.locator('[data-testid="cube-job-field-error"][data-field="parameters.x.max"]')
    expect(error).to_contain_text("parameters.x.max (0.1) must be greater than min (0.5)")
    expect(field_input(form, "parameters.x.max")).to_have_attribute("aria-invalid", "true")
    shot(page, "35-jobs-tuning-bad-range")

    field_input(form, "parameters.x.min").fill("0")
    field_input(form, "parameters.x.max").fill("1")
    form.get_by_test_id("cube-job-launch").click()
    row = job_row(page, "tune-x")
    expect(row).to_have_attribute("data-kind", "tuning")
    expect(row).to_have_attribute("data-phase", "Succeeded", timeout=240_000)

    status, job = lab.request("GET", "cube/api/v1/jobs/tune-x")
    assert status == 200 and job["phase"] == "Succeeded", job
    detail = page.locator(PANEL).get_by_test_id("cube-job-detail")
    trials = detail.get_by_test_id("cube-job-trial")
    expect(trials).to_have_count(TRIALS)
    expect(detail.locator('[data-testid="cube-job-trial"][data-state="Succeeded"]')).to_have_count(TRIALS)
    best = job["best_trial"]
    assert best is not None
    best_row = detail.locator('[data-testid="cube-job-trial"][data-best="true"]')
    expect(best_row).to_have_count(1)
    expect(best_row).to_have_attribute("data-trial", best)
    best_x = next(t for t in job["trials"] if t["name"] == best)["parameters"]["x"]
    expect(detail.get_by_test_id("cube-job-best")).to_have_attribute("data-trial", best)
    shown = detail.get_by_test_id("cube-job-best-parameter")
    expect(shown).to_have_text(re.compile(r"^x="))
    assert float(shown.inner_text().removeprefix("x=")) == pytest.approx(best_x, rel=1e-3)
    # The history plot: one dot per finished trial, and the best-so-far line.
    expect(detail.get_by_test_id("cube-job-history-point")).to_have_count(TRIALS)
    expect(detail.get_by_test_id("cube-job-history-best")).to_have_attribute("d", re.compile(r"^M "))
    detail.get_by_test_id("cube-job-history").scroll_into_view_if_needed()
    shot(page, "36-jobs-tuning")

    detail.get_by_test_id("cube-job-delete").click()
    confirm_dialog(page, "Delete")
    expect(row).to_have_count(0)


def serving_form(page: Page) -> Locator:
    return page.locator(f'{PANEL} [data-testid="cube-job-form"][data-kind="serving"]')


def test_serve_a_model_and_send_a_test_request(lab: Lab, page: Page) -> None:
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    features, labels = load_iris(return_X_y=True)
    model = LogisticRegression(max_iter=500).fit(features, labels)
    model_dir = lab.root / "work" / "iris-model"
    model_dir.mkdir(exist_ok=True)
    joblib.dump(model, model_dir / "model.joblib")

    open_lab(page, lab)
    page.evaluate("() => window.jupyterapp.commands.execute('cube:new-serving-job')")
    form = serving_form(page)
    expect(form).to_be_visible()
    field_input(form, "name").fill("iris")
    field_input(form, "model_format").select_option("sklearn")
    field_input(form, "storage_uri").fill(str(model_dir))
    # min above max: the server's message by the min field.
    field_input(form, "min_replicas").fill("2")
    field_input(form, "max_replicas").fill("1")
    form.get_by_test_id("cube-job-launch").click()
    expect(field_error(form, "min_replicas")).to_have_text(
        "min_replicas (2) must not exceed max_replicas (1)"
    )
    # The autoscaling metric's label shows whole: its select is as wide as its widest choice.
    scale_on = field_input(form, "scale_metric")
    assert scale_on.evaluate("select => select.scrollWidth <= select.clientWidth")
    shot(page, "37-jobs-serving-form")
    field_input(form, "min_replicas").fill("1")
    form.get_by_test_id("cube-job-launch").click()

    row = job_row(page, "iris")
    expect(row).to_have_attribute("data-phase", "Ready", timeout=120_000)
    status, job = lab.request("GET", "cube/api/v1/jobs/iris")
    assert status == 200 and job["endpoint"], job
    detail = page.locator(PANEL).get_by_test_id("cube-job-detail")
    expect(detail.get_by_test_id("cube-job-endpoint")).to_have_text(job["endpoint"])

    inputs = detail.get_by_test_id("cube-job-predict-inputs")
    inputs.fill("[[5.1, 3.5")
    detail.get_by_test_id("cube-job-predict-send").click()
    expect(detail.get_by_test_id("cube-job-predict-error")).to_contain_text("inputs is not JSON")
    rows = features[[0, 60, 120]].tolist()
    inputs.fill(json.dumps(rows))
    detail.get_by_test_id("cube-job-predict-send").click()
    response = detail.get_by_test_id("cube-job-predict-response")
    expect(response).to_be_visible(timeout=30_000)
    expect(detail.get_by_test_id("cube-job-predict-error")).to_have_count(0)
    assert json.loads(response.inner_text()) == model.predict(rows).tolist()
    shot(page, "37-jobs-serving")

    detail.get_by_test_id("cube-job-delete").click()
    confirm_dialog(page, "Delete")
    expect(row).to_have_count(0)

    # The panel is part of the saved layout: a reload brings it back.
    page.wait_for_function(
        "async () => { const ws = await window.jupyterapp.serviceManager.workspaces.fetch('default');"
        " return JSON.stringify(ws.data).includes('cube-jobs:cube-jobs'); }"
    )
    page.reload()
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=30_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    expect(page.locator(PANEL)).to_be_visible()
    expect(page.locator(PANEL).get_by_test_id("cube-jobs-empty")).to_be_visible()

"""`cube-jupyter schedule ...` run as a user runs it: a subprocess in the folder the workbench serves,
writing the workbench's schedule store. One test runs a workbench (`jupyter server` with the
extension) beside the commands, so `run --wait` and `backfill --wait` follow real runs to their end."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.k8s_schemas import validate_object
from tests.pipelines.notebooks import code, notebook, write
from tests.schedules.test_restart import Workbench

pytestmark = pytest.mark.timeout(240)
CONFIG = """
c.CubeWorkbench.state_dir = {state!r}
c.CubeWorkbench.default_user = "alice"
"""
# The same workbench with the S3 store a cluster's step pods would reach: what `render` needs.
WITH_S3 = 'load_subconfig("cfg.py")\nc.CubeStorage.url = "s3://ml-artifacts/pipelines"\n'
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
DATED = notebook(
    code("logical_date = None", "parameters"),
    code("stamp = logical_date", "step:only"),
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "cfg.py").write_text(CONFIG.format(state=str(tmp_path / "state")))
    (tmp_path / "work" / "s3.py").write_text(WITH_S3)
    write(DATED, tmp_path / "work" / "dated.ipynb")
    return tmp_path / "work"


def cli(folder: Path, *args: str, config: str = "cfg.py") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cube_jupyter.cli", "schedule", *args, "--config", config],
        cwd=folder,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=200,
    )


def test_create_list_show_pause_and_delete(folder: Path) -> None:
    made = cli(
        folder,
        "create",
        "nightly",
        "--notebook",
        "dated.ipynb",
        "--cron",
        "0 2 * * *",
        "--timezone",
        "Europe/Berlin",
        "--catchup",
        "all",
        "--retries",
        "2",
    )
    assert made.returncode == 0, made.stderr
    assert "At 02:00 every day (Europe/Berlin)" in made.stdout
    assert "no scheduler is running" in made.stderr  # nobody will run it until the workbench starts
    listing = cli(folder, "list")
    assert listing.returncode == 0 and listing.stdout.split("\n")[1].split()[:3] == [
        "nightly",
        "notebook",
        "At",
    ]
    shown = cli(folder, "show", "nightly", "--json")
    body = yaml.safe_load(shown.stdout)
    assert body["catchup"] == "all" and body["retries"] == 2 and body["runs"] == []
    assert cli(folder, "pause", "nightly").returncode == 0
    assert "paused" in cli(folder, "list").stdout
    assert cli(folder, "resume", "nightly").returncode == 0
    plan = cli(folder, "backfill", "nightly", "--from", "2026-11-01", "--to", "2026-11-03", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.split() == [
        "2026-11-01T01:00:00Z",
        "to",
        "run",
        "2026-11-02T01:00:00Z",
        "to",
        "run",
        "2026-11-03T01:00:00Z",
        "to",
        "run",
    ]
    rendered = cli(folder, "render", "nightly", config="s3.py")
    assert rendered.returncode == 0, rendered.stderr
    cron = yaml.safe_load(rendered.stdout)
    validate_object(cron)  # strict, against the upstream CronWorkflow CRD
    assert cron["spec"]["schedules"] == ["0 2 * * *"] and cron["spec"]["timezone"] == "Europe/Berlin"
    assert "S3 store" in cli(folder, "render", "nightly").stderr  # where pods could not reach the store
    assert cli(folder, "delete", "nightly").returncode == 0
    assert cli(folder, "show", "nightly").returncode == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--cron", "0 25 * * *"], "cron '0 25 * * *' does not parse"),
        (["--cron", "0 2 * * *", "--timezone", "Mars/Olympus"], "not an IANA timezone"),
        (["--cron", "0 2 * * *", "--depends-on", "nope"], "depends_on 'nope'"),
        (["--every", "0"], "interval_seconds must be >= 1"),
    ],
)
def test_bad_input_exits_2_naming_it(folder: Path, args: list[str], words: str) -> None:
    result = cli(folder, "create", "bad", "--notebook", "dated.ipynb", *args)
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_outside_the_served_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    write(DATED, tmp_path / "elsewhere.ipynb")
    result = cli(folder, "create", "x", "--notebook", str(tmp_path / "elsewhere.ipynb"), "--cron", "@daily")
    assert result.returncode == 2 and "--notebook" not in result.stdout and "not under" in result.stderr


@pytest.fixture
def workbench(folder: Path) -> Iterator[Workbench]:
    bench = Workbench(folder.parent)
    bench.write_config()
    bench.start()
    try:
        yield bench
    finally:
        bench.stop()


def test_run_and_backfill_wait_for_the_workbench_to_run_them(folder: Path, workbench: Workbench) -> None:
    assert (
        cli(folder, "create", "nightly", "--notebook", "dated.ipynb", "--cron", "0 2 * * *").returncode == 0
    )
    ran = cli(folder, "run", "nightly", "--wait")
    assert ran.returncode == 0, ran.stderr
    assert "no scheduler is running" not in ran.stderr and " succeeded " in ran.stdout
    filled = cli(
        folder,
        "backfill",
        "nightly",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-02",
        "--parallel",
        "2",
        "--wait",
    )
    assert filled.returncode == 0, filled.stderr
    assert filled.stdout.count("succeeded") == 2
    again = cli(folder, "backfill", "nightly", "--from", "2026-11-01", "--to", "2026-11-02")
    assert again.returncode == 0 and again.stdout.count("already succeeded") == 2
    shown = yaml.safe_load(cli(folder, "show", "nightly", "--json").stdout)
    # (A real fire, should the test span 02:00 UTC, is the clock's run, not the test's.)
    assert sorted(r["origin"] for r in shown["runs"] if r["origin"] != "schedule") == [
        "backfill",
        "backfill",
        "manual",
    ]

"""Our entry points start without jsonschema's IRI grammars (`skip_unused_schema_formats`), and
nbformat still validates as before with them skipped. Each case is a fresh interpreter: the guard
only counts before jsonschema's first import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "pipelines" / "fanout_ml.ipynb"

# Runs MODULE as `python -m MODULE ARGV...` does, then loads nbformat as the process would next, and
# reports whether rfc3987_syntax (jsonschema's optional IRI checker) was imported.
PROBE = """
import os, runpy, sys
module, argv = sys.argv[1], sys.argv[2:]


def leave(code):  # an entry point ending with os._exit (the worker) comes back here instead
    raise SystemExit(code)


os._exit = leave
if module:
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
import nbformat
print("rfc3987_syntax:", "loaded" if sys.modules.get("rfc3987_syntax") else "skipped", file=sys.stderr)
"""


def probe(module: str, *argv: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, module, *argv],
        stdin=subprocess.DEVNULL,  # a worker reads its tasks there: end of input, it exits
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
        check=False,
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("rfc3987_syntax:")]
    assert lines, result.stderr
    return lines[-1].split()[-1]


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        pytest.param(
            "cube_jupyter.cli", ["pipeline", "graph", str(EXAMPLE), "--config", "{config}"], id="cli"
        ),
        pytest.param("cube_jupyter.pipelines.local.workers", ["1"], id="pipeline-worker"),
        pytest.param(
            "cube_jupyter.pipelines.runner",
            ["--pipeline-json", "{}", "--step", "train", "--run-id", "r1"],
            id="step-runner",
        ),
        pytest.param(
            "cube_jupyter.jobs.entry",
            ["--kind", "function", "--target", "nbformat.v4:new_notebook"],
            id="job-entry",
        ),
    ],
)
def test_entry_points_skip_the_iri_grammars(module: str, argv: list[str], tmp_path: Path) -> None:
    config = tmp_path / "jupyter_server_config.py"
    config.write_text(f"c.CubeWorkbench.state_dir = {str(tmp_path / 'state')!r}\n")
    assert probe(module, *(a.replace("{config}", str(config)) for a in argv), cwd=tmp_path) == "skipped"


VALIDATE = """
import json, sys
if sys.argv[1] == "guarded":
    from cube_jupyter.startup import skip_unused_schema_formats

    skip_unused_schema_formats()
import jsonschema, nbformat
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
nbformat.validate(nb)
broken = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
del broken.cells[0]["outputs"]
try:
    nbformat.validate(broken)
    rejected = None
except nbformat.ValidationError as exc:
    rejected = exc.message
print(json.dumps({
    "rejected": rejected,
    "formats": sorted(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers),
    "rfc3987_syntax": bool(sys.modules.get("rfc3987_syntax")),
}))
"""


def validate_notebooks(mode: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", VALIDATE, mode]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_nbformat_validates_as_before_with_the_guard_on() -> None:
    """Only the two IRI format checks go; nbformat accepts and rejects the same notebooks."""
    plain, guarded = validate_notebooks("plain"), validate_notebooks("guarded")
    assert plain["rfc3987_syntax"] and not guarded["rfc3987_syntax"]  # the guard is what skips it
    assert guarded["rejected"] == plain["rejected"]
    assert "'outputs' is a required property" in str(guarded["rejected"])
    assert set(plain["formats"]) - set(guarded["formats"]) == {"iri", "iri-reference"}
    assert set(guarded["formats"]) <= set(plain["formats"])


def test_the_pipeline_worker_skips_papermills_remote_store_clients(tmp_path: Path) -> None:
    """It imports papermill (and the step runner) before any step, but none of the clients papermill
    would use for s3://, hdfs:// or gs:// notebooks: the worker only hands papermill local files."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cube_jupyter.pipelines.local.workers", "1"],
        input='{"op": "exit"}\n',
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert {"papermill", "cube_jupyter.pipelines.runner", "cube_jupyter.local.forked_kernels"} <= imported
    # (the blocked names themselves show as attempts that took no time)
    assert not imported & {"boto3", "botocore", "pyarrow", "pyarrow.lib"}

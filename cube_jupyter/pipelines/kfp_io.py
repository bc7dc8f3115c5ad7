"""A step whose inputs and outputs are files, as Kubeflow Pipelines hands them over: its launcher
downloads a task's input artifacts to local paths before the container starts and uploads its output
artifacts from local paths after it exits 0 (`kubernetes/kfp.py` compiles the placeholders).

The runner still runs the step against a store: a private one in a temporary folder, where each
input file is put at the key the step loads it from, and from which each output, the executed
notebook and the metrics are copied to their paths. The artifact bytes are the marshaller's own
(`marshal.pack`: a header naming the format, then the payload), so the next step loads them as it
would from the store. What KFP shows of each artifact (its format, hash and size; the metrics) goes
into the executor output file, which the launcher records with the artifacts.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube_jupyter.errors import InvalidInput
from cube_jupyter.pipelines.model import Pipeline
from cube_jupyter.pipelines.runner import Log, StepResult, run_step
from cube_jupyter.pipelines.stepnb import input_keys
from cube_jupyter.storage.local import LocalStore

NOTEBOOK_OUTPUT = "step_notebook"  # the executed step notebook, an `Artifact`
METRICS_OUTPUT = "step_metrics"  # the step's metrics, a `Metrics` artifact
RESERVED = (NOTEBOOK_OUTPUT, METRICS_OUTPUT)


@dataclass(frozen=True)
class OutputFile:
    name: str  # a variable the step saves, or one of RESERVED
    path: str  # where the launcher uploads it from
    uri: str  # where it lands under the pipeline root (recorded in the executor output)


def run_step_with_files(
    pipeline: Pipeline,
    step: str,
    run_id: str,
    parameters: Mapping[str, Any],
    *,
    inputs: Mapping[str, str],
    outputs: list[OutputFile],
    executor_output: str | None,
    cwd: str,
    timeout: float | None = None,
    log: Log | None = None,
) -> StepResult:
    """Run `step` reading `inputs` ({variable: path}) and writing `outputs`; CubeError on bad input."""
    with tempfile.TemporaryDirectory(prefix="cube-step-files-") as folder:
        store = LocalStore(folder)
        keys = input_keys(pipeline, pipeline.step(step), run_id)
        for name, path in inputs.items():
            if name not in keys:
                raise InvalidInput(
                    f"--input-file {name!r}: step {step!r} loads no such variable (it loads "
                    f"{', '.join(sorted(keys)) or 'none'})",
                    field="input-file",
                )
            store.put(keys[name], _read(path, name))
        missing = sorted(set(keys) - set(inputs))
        if missing:
            raise InvalidInput(f"step {step!r} needs --input-file {missing[0]} PATH", field="input-file")
        result = run_step(pipeline, step, run_id, store, parameters, cwd=cwd, timeout=timeout, log=log)
        artifacts = {
            output.name: {"artifacts": [{"uri": output.uri, "metadata": _export(store, result, output)}]}
            for output in outputs
            if result.status == "succeeded" or output.name == NOTEBOOK_OUTPUT
        }
    if executor_output:
        target = Path(executor_output)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"artifacts": artifacts}))
    return result


def _read(path: str, name: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(
            f"--input-file {name!r}: cannot read {path}: {exc.strerror}", field="input-file"
        ) from None


def _export(store: LocalStore, result: StepResult, output: OutputFile) -> dict[str, Any]:
    """Write one output to its path; its metadata for KFP."""
    target = Path(output.path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if output.name == NOTEBOOK_OUTPUT:
        if result.notebook is not None:
            target.write_bytes(store.get(result.notebook))
        return {"step": result.step, "status": result.status, "display_name": f"{result.step}.ipynb"}
    if output.name == METRICS_OUTPUT:
        target.write_text(json.dumps(result.metrics))
        # KFP's UI charts a Metrics artifact's numeric metadata; text metrics stay in the file.
        return {
            name: value
            for name, value in result.metrics.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
    ref = result.outputs.get(output.name)
    if ref is None:
        raise InvalidInput(
            f"--output-file {output.name!r}: step {result.step!r} saves no such variable", field="output-file"
        )
    target.write_bytes(store.get(ref.key))
    return {"kind": ref.kind, "sha256": ref.sha256, "size": ref.size}

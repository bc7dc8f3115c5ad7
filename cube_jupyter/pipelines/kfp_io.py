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
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from cube_jupyter.errors import InvalidInput
from cube_jupyter.pipelines.model import Pipeline
from cube_jupyter.pipelines.stepnb import input_keys
from cube_jupyter.storage.local import LocalStore

NOTEBOOK_OUTPUT = "step_notebook"  # the executed step notebook, an `Artifact`
METRICS_OUTPUT = "step_metrics"  # the step's metrics, a `Metrics` artifact
RESERVED = (NOTEBOOK_OUTPUT, METRICS_OUTPUT)


def input_name(variable: str) -> str:
    """A step's input artifact in KFP, named apart from the pipeline's parameters and from its
    outputs (a step changing a value in place, or a parameter, hands it on under the same name)."""
    return f"in_{variable}"


def output_name(variable: str) -> str:
    """A step's output artifact in KFP (its own outputs, RESERVED, keep their names)."""
    return variable if variable in RESERVED else f"out_{variable}"


@dataclass(frozen=True)
class OutputFile:
    name: str  # a variable the step saves, or one of RESERVED
    path: str  # where the launcher uploads it from
    uri: str  # where it lands under the pipeline root (recorded in the executor output)


class SavedOutput(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def sha256(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def size(self) -> int: ...


class StepOutcome(Protocol):
    """What `runner.run_step` returns, as far as the files are concerned."""

    @property
    def step(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def notebook(self) -> str | None: ...

    @property
    def outputs(self) -> Mapping[str, SavedOutput]: ...

    @property
    def metrics(self) -> Mapping[str, Any]: ...


@dataclass
class StepFiles:
    """A private store for one step, its inputs put in from their files on entry; `export` writes
    the outputs to theirs. Use as a context manager: the store is removed on exit."""

    pipeline: Pipeline
    step: str
    run_id: str
    inputs: Mapping[str, str]  # {variable: path}
    outputs: list[OutputFile]
    executor_output: str | None
    _folder: tempfile.TemporaryDirectory[str] = field(init=False)
    store: LocalStore = field(init=False)

    def __enter__(self) -> StepFiles:
        keys = input_keys(self.pipeline, self.pipeline.step(self.step), self.run_id)
        unknown = sorted(set(self.inputs) - set(keys))
        if unknown:
            raise InvalidInput(
                f"--input-file {unknown[0]!r}: step {self.step!r} loads no such variable (it loads "
                f"{', '.join(sorted(keys)) or 'none'})",
                field="input-file",
            )
        missing = sorted(set(keys) - set(self.inputs))
        if missing:
            raise InvalidInput(f"step {self.step!r} needs --input-file {missing[0]} PATH", field="input-file")
        self._folder = tempfile.TemporaryDirectory(prefix="cube-step-files-")
        self.store = LocalStore(self._folder.name)
        for name, path in self.inputs.items():
            self.store.put(keys[name], _read(path, name))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._folder.cleanup()

    def export(self, result: StepOutcome) -> None:
        """Write each output to its path (only the notebook when the step failed) and what KFP shows
        of them into the executor output file."""
        artifacts = {
            output_name(output.name): {
                "artifacts": [{"uri": output.uri, "metadata": self._export(result, output)}]
            }
            for output in self.outputs
            if result.status == "succeeded" or output.name == NOTEBOOK_OUTPUT
        }
        if self.executor_output:
            target = Path(self.executor_output)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps({"artifacts": artifacts}))

    def _export(self, result: StepOutcome, output: OutputFile) -> dict[str, Any]:
        """Write one output to its path; its metadata for KFP."""
        target = Path(output.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if output.name == NOTEBOOK_OUTPUT:
            if result.notebook is not None:
                target.write_bytes(self.store.get(result.notebook))
            return {"step": result.step, "status": result.status, "display_name": f"{result.step}.ipynb"}
        if output.name == METRICS_OUTPUT:
            target.write_text(json.dumps(dict(result.metrics)))
            # KFP's UI charts a Metrics artifact's numeric metadata; text metrics stay in the file.
            return {
                name: value
                for name, value in result.metrics.items()
                if isinstance(value, int | float) and not isinstance(value, bool)
            }
        ref = result.outputs.get(output.name)
        if ref is None:
            raise InvalidInput(
                f"--output-file {output.name!r}: step {result.step!r} saves no such variable",
                field="output-file",
            )
        target.write_bytes(self.store.get(ref.key))
        return {"kind": ref.kind, "sha256": ref.sha256, "size": ref.size}


def _read(path: str, name: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(
            f"--input-file {name!r}: cannot read {path}: {exc.strerror}", field="input-file"
        ) from None

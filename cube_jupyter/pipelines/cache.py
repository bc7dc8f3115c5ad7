"""Content-hash caching of pipeline steps: skip a step whose code and inputs have not changed.

A step's key hashes everything that decides its outputs: its cells, the pipeline's imports and
functions, the parameter values, the content hashes of the variables it loads (and, for an
ordering-only `after:`, the upstream step's own key), the data files its code names (`datafiles`),
the kernel and the artifact format, and the user who runs it: a hit is only ever one of their own
earlier runs, so one user is never handed another's outputs or executed notebooks (which show their
data), even in a store they share. An entry lives in the run's artifact store (`cache/{key}.json`)
next to the artifacts it points at, so a hit is only taken while those artifacts still exist, and a
failed run resumes from the failure by running again: every step that succeeded before is a hit.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from cube_jupyter.errors import NotFound
from cube_jupyter.pipelines.model import Pipeline
from cube_jupyter.storage.base import ArtifactStore

# Bump when the step notebook layout or the way outputs are saved changes: old entries stop matching.
CACHE_FORMAT = 1


@dataclass(frozen=True)
class CacheEntry:
    """What a successful step left behind: its executed notebook and its outputs (key + hash)."""

    key: str
    step: str
    run_id: str
    notebook: str
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # var -> {key, sha256, kind, size}
    metrics: dict[str, Any] = field(default_factory=dict)
    duration: float = 0.0

    def artifact_keys(self) -> list[str]:
        return [self.notebook, *(output["key"] for output in self.outputs.values())]


def effective_parameters(pipeline: Pipeline, given: Mapping[str, Any]) -> dict[str, Any]:
    """The value each parameter takes in a run: the given one, else the cell's literal default, else
    the default's source text (an expression such as `np.arange(3)` is hashed as written)."""
    values: dict[str, Any] = {}
    for parameter in pipeline.parameters:
        if parameter.name in given:
            values[parameter.name] = ["value", given[parameter.name]]
        elif _is_literal(parameter.default_source):
            values[parameter.name] = ["value", parameter.default]
        else:
            values[parameter.name] = ["source", parameter.default_source]
    for name in sorted(set(given) - set(values)):
        values[name] = ["value", given[name]]
    return values


def step_cache_key(
    pipeline: Pipeline,
    step_name: str,
    parameters: Mapping[str, Any],
    upstream_outputs: Mapping[str, Mapping[str, Mapping[str, Any]]],
    upstream_keys: Mapping[str, str],
    marshal_format: object = None,
    *,
    user: str,
    files: Mapping[str, str] | None = None,
) -> str:
    """The step's content hash. `upstream_outputs[step][var]["sha256"]` are the hashes of the values an
    upstream step saved; `upstream_keys[step]` its own key, used for ordering-only edges; `files` the
    fingerprints of the data files the step reads (`datafiles.fingerprints`)."""
    step = pipeline.step(step_name)
    inputs: dict[str, Any] = {}
    for edge in pipeline.edges:
        if edge.downstream != step_name:
            continue
        if edge.variables:
            saved = upstream_outputs[edge.upstream]
            inputs[edge.upstream] = {var: saved[var]["sha256"] for var in edge.variables}
        else:
            inputs[edge.upstream] = {"@step": upstream_keys[edge.upstream]}
    material = {
        "format": CACHE_FORMAT,
        "user": user,
        "marshal": repr(marshal_format),
        "kernel": pipeline.kernel_name,
        "step": step.name,
        "source": list(step.source),
        "inputs_loaded": list(step.inputs),
        "outputs_saved": list(step.outputs),
        "imports": list(pipeline.imports),
        "functions": list(pipeline.functions),
        "parameters_source": pipeline.parameters_source,
        "parameters": effective_parameters(pipeline, parameters),
        "upstream": inputs,
        "files": dict(files or {}),
    }
    encoded = json.dumps(material, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(encoded.encode()).hexdigest()


class StepCache:
    """Cache entries in an artifact store."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store

    @staticmethod
    def entry_key(key: str) -> str:
        return f"cache/{key}.json"

    def lookup(self, key: str) -> CacheEntry | None:
        """The entry for `key` if it exists and every artifact it names is still in the store."""
        try:
            raw = json.loads(self.store.get(self.entry_key(key)))
            entry = CacheEntry(**raw)
        except (NotFound, ValueError, TypeError):
            return None
        if entry.key != key or not all(self.store.exists(k) for k in entry.artifact_keys()):
            return None
        return entry

    def record(self, entry: CacheEntry) -> None:
        self.store.put(self.entry_key(entry.key), json.dumps(asdict(entry), sort_keys=True).encode())


def _is_literal(source: str) -> bool:
    try:
        ast.literal_eval(source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True

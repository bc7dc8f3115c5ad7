"""Helpers a step notebook calls inside its kernel: load the step's inputs, save its outputs.

The generated cells pass only plain data (the store URL, keys, names); everything else happens
here, so the code a user sees in an executed step notebook stays two short lines.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from cube_jupyter.pipelines import marshal
from cube_jupyter.pipelines.model import PipelineError
from cube_jupyter.storage import ArtifactStore, open_store

OUTPUTS_MIME = "application/vnd.cube-jupyter.outputs+json"
_stores: dict[str, ArtifactStore] = {}


def _store(url: str) -> ArtifactStore:
    """One opened store per URL in this kernel (S3: endpoint and credentials from the kernel's env)."""
    if url not in _stores:
        _stores[url] = open_store(url)
    return _stores[url]


def load_inputs(store_url: str, inputs: Mapping[str, str]) -> dict[str, Any]:
    """{name: value} for each `name: key` in `inputs`, read from the store."""
    store = _store(store_url)
    values = {}
    for name, key in inputs.items():
        data = store.get(key)
        values[name] = marshal.unpack(data, name)
        print(f"loaded {name} ({type(values[name]).__name__}, {len(data)} bytes) from {key}")
    return values


def save_outputs(
    store_url: str,
    prefix: str,
    outputs: Sequence[str],
    namespace: Mapping[str, Any],
    *,
    step: str,
    metrics: Sequence[str] = (),
) -> None:
    """Store each output under `{prefix}/{name}` and display the manifest the runner reads back:
    {"outputs": {name: {key, sha256, kind, size}}, "metrics": {name: scalar}}."""
    store = _store(store_url)
    missing = [name for name in outputs if name not in namespace]
    if missing:
        raise PipelineError(
            f"step {step!r} did not define {', '.join(map(repr, missing))}, needed by a downstream step",
            field=f"steps.{step}.outputs",
        )
    manifest: dict[str, Any] = {"outputs": {}, "metrics": {}}
    for name in outputs:
        data, kind = marshal.pack(namespace[name], name)
        key = f"{prefix}/{name}"
        store.put(key, data)
        digest = hashlib.sha256(data).hexdigest()
        manifest["outputs"][name] = {"key": key, "sha256": digest, "kind": kind, "size": len(data)}
    for name in metrics:
        value = namespace.get(name)
        if isinstance(value, bool | int | float | str):
            manifest["metrics"][name] = value
        elif type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:  # numpy scalars
            manifest["metrics"][name] = value.item()  # type: ignore[union-attr]
    _display(manifest)


def _display(manifest: dict[str, Any]) -> None:
    lines = [
        f"saved {n} ({o['kind']}, {o['size']} bytes, sha256 {o['sha256'][:12]})"
        for n, o in manifest["outputs"].items()
    ]
    lines += [f"metric {n} = {v!r}" for n, v in manifest["metrics"].items()]
    text = "\n".join(lines) or "no outputs"
    try:
        from IPython.display import display
    except ImportError:  # not in a kernel: print the manifest itself
        print(json.dumps(manifest))
        return
    display({OUTPUTS_MIME: manifest, "text/plain": text}, raw=True)

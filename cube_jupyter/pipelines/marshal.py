"""Serialize the variables passed between steps, by type, into self-describing bytes.

numpy arrays as .npy, pandas objects as parquet (pickle protocol 5 without pyarrow), torch objects
with torch.save, scikit-learn/xgboost models with joblib, xgboost's DMatrix in its own binary format
(it holds a C pointer no pickle can save), anything else with cloudpickle. `pack`
prefixes a one-line header naming the format, so a stored artifact can be loaded by key alone and
its sha256 covers the format too.
"""

from __future__ import annotations

import importlib.util
import io
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

from cube_jupyter.pipelines.model import PipelineError

FORMAT_VERSION = 1  # part of every step's cache key: bump when a format below changes
MAGIC = b"CUBEART"
KINDS = ("npy", "parquet", "pandas-pickle", "torch", "joblib", "xgboost-dmatrix", "cloudpickle")


def _module_root(value: Any) -> str:
    return type(value).__module__.split(".", 1)[0]


def _type_name(value: Any) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _is_model(value: Any) -> bool:
    """A scikit-learn estimator or an xgboost model, detected without importing either."""
    if _module_root(value) == "xgboost":
        return True
    return any(getattr(c, "__module__", "").startswith("sklearn.") for c in type(value).__mro__)


def kind_of(value: Any) -> str:
    """The format `save` uses for `value`."""
    root = _module_root(value)
    if root == "numpy" and type(value).__name__ == "ndarray" and not value.dtype.hasobject:
        return "npy"
    if root == "pandas" and type(value).__name__ == "DataFrame" and importlib.util.find_spec("pyarrow"):
        return "parquet"
    if root == "pandas" and type(value).__name__ in ("DataFrame", "Series"):
        return "pandas-pickle"
    if root == "torch":
        return "torch"
    if root == "xgboost" and type(value).__name__ == "DMatrix":
        return "xgboost-dmatrix"
    if _is_model(value):
        return "joblib"
    return "cloudpickle"


def save(value: Any, name: str) -> tuple[bytes, str]:
    """(payload, kind) for `value`; PipelineError naming `name` and its type if it cannot be saved."""
    kind = kind_of(value)
    buffer = io.BytesIO()
    try:
        if kind == "npy":
            import numpy

            numpy.save(buffer, value, allow_pickle=False)
        elif kind == "parquet":
            try:
                value.to_parquet(buffer)
            except (ValueError, TypeError, ImportError):  # e.g. mixed-type object columns: keep them as-is
                buffer, kind = io.BytesIO(), "pandas-pickle"
                pickle.dump(value, buffer, protocol=5)
        elif kind == "pandas-pickle":
            pickle.dump(value, buffer, protocol=5)
        elif kind == "torch":
            import torch

            torch.save(value, buffer)
        elif kind == "joblib":
            import joblib

            joblib.dump(value, buffer)
        elif kind == "xgboost-dmatrix":
            buffer = io.BytesIO(_through_file(value.save_binary, lambda path: Path(path).read_bytes()))
        else:
            cloudpickle.dump(value, buffer, protocol=5)
    except Exception as exc:
        raise PipelineError(
            f"output {name!r} of type {_type_name(value)} cannot be serialized ({kind}): "
            f"{type(exc).__name__}: {exc}. Pass a picklable value, or compute it in the step that uses it.",
            field=f"outputs.{name}",
        ) from None
    return buffer.getvalue(), kind


def load(data: bytes, kind: str) -> Any:
    """The value `save` turned into (`data`, `kind`)."""
    buffer = io.BytesIO(data)
    if kind == "npy":
        import numpy

        return numpy.load(buffer, allow_pickle=False)
    if kind == "parquet":
        import pandas

        return pandas.read_parquet(buffer)
    if kind in ("pandas-pickle", "cloudpickle"):
        return pickle.load(buffer)  # artifacts are this run's own outputs, written by `save`
    if kind == "torch":
        import torch

        return torch.load(buffer, weights_only=False)
    if kind == "joblib":
        import joblib

        return joblib.load(buffer)
    if kind == "xgboost-dmatrix":
        import xgboost

        return _through_file(lambda path: Path(path).write_bytes(data), xgboost.DMatrix)
    raise PipelineError(f"unknown artifact format {kind!r}; known: {', '.join(KINDS)}", field="kind")


def _through_file(write: Callable[[str], object], read: Callable[[str], Any]) -> Any:
    """What `read` makes of the file `write` wrote: for formats that only go to and from a path."""
    with tempfile.TemporaryDirectory(prefix="cube-artifact-") as folder:
        path = str(Path(folder) / "artifact.buffer")
        write(path)
        return read(path)


def pack(value: Any, name: str) -> tuple[bytes, str]:
    """Self-describing bytes for the store: b"CUBEART <version> <kind>\\n" + payload."""
    payload, kind = save(value, name)
    return MAGIC + f" {FORMAT_VERSION} {kind}\n".encode() + payload, kind


def unpack(data: bytes, name: str = "artifact") -> Any:
    header, sep, payload = data.partition(b"\n")
    parts = header.split(b" ")
    if not sep or len(parts) != 3 or parts[0] != MAGIC:
        raise PipelineError(f"{name!r} is not a cube-jupyter artifact (no header)", field=f"inputs.{name}")
    return load(payload, parts[2].decode("ascii", "replace"))

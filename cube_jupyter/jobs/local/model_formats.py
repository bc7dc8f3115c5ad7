"""Which file in a model directory is the model, and how each format loads and predicts.

Shared by `LocalModelServing` (which checks before it starts anything that the file is there, so a
missing model is an error naming `storage_uri`) and the model server process (which loads it). The
file names follow KServe's model servers: `model.joblib`/`model.pkl` (sklearn), `model.bst`/`.json`/
`.ubj` (xgboost), a TorchScript `.pt` (pytorch), `model.onnx` (onnx). Heavy frameworks are imported
only by the server that needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from cube_jupyter.errors import InvalidInput

# Per format: preferred file names first, then any file with one of the suffixes.
MODEL_FILES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "sklearn": (("model.joblib", "model.pkl", "model.pickle"), (".joblib", ".pkl", ".pickle")),
    "xgboost": (
        ("model.bst", "model.json", "model.ubj", "model.joblib", "model.pkl"),
        (".bst", ".json", ".ubj", ".joblib", ".pkl", ".pickle"),
    ),
    "pytorch": (("model.pt", "model.pth"), (".pt", ".pth")),
    "onnx": (("model.onnx",), (".onnx",)),
}
LOCAL_FORMATS: tuple[str, ...] = tuple(MODEL_FILES)
XGBOOST_NATIVE = (".bst", ".json", ".ubj", ".model")


def find_model_file(model_dir: Path, model_format: str, field: str, where: str) -> Path:
    """The model file for `model_format` at `model_dir` (a file, or a directory holding one).

    `where` is what the user wrote (the storage URI) so the error names it; InvalidInput on `field`.
    """
    if model_format not in MODEL_FILES:
        raise InvalidInput(
            f"model_format {model_format!r} cannot be served locally; the local model server serves "
            f"{', '.join(LOCAL_FORMATS)}",
            field="model_format",
        )
    names, suffixes = MODEL_FILES[model_format]
    if model_dir.is_file():
        if model_dir.suffix.lower() not in suffixes:
            raise InvalidInput(
                f"{field} {where!r} is not a {model_format} model file (expected {', '.join(suffixes)})",
                field=field,
            )
        return model_dir
    if not model_dir.is_dir():
        raise InvalidInput(f"{field} {where!r}: no model file or directory there", field=field)
    for name in names:
        if (model_dir / name).is_file():
            return model_dir / name
    candidates = sorted(p for p in model_dir.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    if not candidates:
        raise InvalidInput(
            f"{field} {where!r} holds no {model_format} model file (looked for {', '.join(names)} "
            f"or any {', '.join(suffixes)} file)",
            field=field,
        )
    return candidates[0]


class Predictor(Protocol):
    """A loaded model: named input tensors in, named output tensors out (numpy arrays)."""

    input_names: tuple[str, ...]

    def predict(self, inputs: Sequence[Any]) -> list[tuple[str, Any]]:
        """`inputs` in `input_names` order (one array for the tabular formats)."""
        ...


class _Single:
    """A model with one input array and one output array."""

    input_names: tuple[str, ...] = ("input-0",)

    def predict(self, inputs: Sequence[Any]) -> list[tuple[str, Any]]:
        if len(inputs) != 1:
            raise ValueError(f"this model takes one input tensor, got {len(inputs)}")
        return [("output-0", self.run(inputs[0]))]

    def run(self, array: Any) -> Any:
        raise NotImplementedError


class SklearnPredictor(_Single):
    def __init__(self, path: Path) -> None:
        import joblib

        self.model = joblib.load(path)
        if not hasattr(self.model, "predict"):
            raise ValueError(f"{path.name} holds a {type(self.model).__name__}, which has no predict()")

    def run(self, array: Any) -> Any:
        import numpy as np

        return np.asarray(self.model.predict(array))


class XGBoostPredictor(_Single):
    """A native Booster file (predictions as `Booster.predict`, as KServe's xgbserver gives them) or a
    pickled scikit-learn-API model (its `predict`)."""

    def __init__(self, path: Path) -> None:
        import xgboost

        self.booster: Any = None
        self.model: Any = None
        if path.suffix.lower() in XGBOOST_NATIVE:
            self.booster = xgboost.Booster(model_file=str(path))
        else:
            import joblib

            self.model = joblib.load(path)
            if not hasattr(self.model, "predict"):
                raise ValueError(f"{path.name} holds a {type(self.model).__name__}, which has no predict()")

    def run(self, array: Any) -> Any:
        import numpy as np
        import xgboost

        if self.booster is not None:
            return np.asarray(self.booster.predict(xgboost.DMatrix(np.asarray(array, dtype=np.float32))))
        return np.asarray(self.model.predict(array))


class TorchScriptPredictor(_Single):
    def __init__(self, path: Path) -> None:
        import torch

        torch.set_num_threads(1)  # one request at a time on a shared machine
        self.model = torch.jit.load(str(path), map_location="cpu")
        self.model.eval()

    def run(self, array: Any) -> Any:
        import numpy as np
        import torch

        tensor = torch.as_tensor(np.asarray(array, dtype=np.float32))
        with torch.inference_mode():
            output = self.model(tensor)
        if isinstance(output, (tuple, list)):
            output = output[0]
        return output.detach().cpu().numpy()


class OnnxPredictor:
    def __init__(self, path: Path) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = self.session.get_inputs()
        self.input_names = tuple(i.name for i in self.inputs)
        self.output_names = tuple(o.name for o in self.session.get_outputs())

    def predict(self, inputs: Sequence[Any]) -> list[tuple[str, Any]]:
        import numpy as np

        if len(inputs) != len(self.inputs):
            raise ValueError(f"this model takes {len(self.inputs)} input tensor(s), got {len(inputs)}")
        feed = {}
        for spec, array in zip(self.inputs, inputs, strict=True):
            dtype = _ONNX_TYPES.get(spec.type, np.float32)
            feed[spec.name] = np.asarray(array, dtype=dtype)
        outputs = self.session.run(None, feed)
        return [(name, np.asarray(value)) for name, value in zip(self.output_names, outputs, strict=True)]


_ONNX_TYPES: dict[str, Any] = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
    "tensor(string)": "object",
}

LOADERS: dict[str, type[Any]] = {
    "sklearn": SklearnPredictor,
    "xgboost": XGBoostPredictor,
    "pytorch": TorchScriptPredictor,
    "onnx": OnnxPredictor,
}


def load_predictor(model_format: str, path: Path) -> Predictor:
    """Load the model file `path` (already found by `find_model_file`)."""
    predictor: Predictor = LOADERS[model_format](path)
    return predictor

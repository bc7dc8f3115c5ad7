"""Values passed between steps survive a round trip in the format chosen for their type."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from cube_jupyter.pipelines import marshal
from cube_jupyter.pipelines.model import PipelineError


def test_numpy_arrays_are_npy_files() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    data, kind = marshal.save(array, "x")
    assert kind == "npy" and data.startswith(b"\x93NUMPY")
    back = marshal.load(data, kind)
    assert back.dtype == np.float32 and np.array_equal(back, array)


def test_object_arrays_fall_back_to_cloudpickle() -> None:
    array = np.array([{"a": 1}, None], dtype=object)
    data, kind = marshal.save(array, "x")
    assert kind == "cloudpickle"
    assert marshal.load(data, kind).tolist() == [{"a": 1}, None]


def test_pandas_frames_and_series() -> None:
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", None]}, index=pd.Index([10, 20, 30], name="id"))
    data, kind = marshal.save(frame, "df")
    assert kind in ("parquet", "pandas-pickle")
    pd.testing.assert_frame_equal(marshal.load(data, kind), frame)
    series = pd.Series([1.5, 2.5], name="s")
    data, kind = marshal.save(series, "s")
    assert kind == "pandas-pickle"
    pd.testing.assert_series_equal(marshal.load(data, kind), series)


def test_parquet_when_pyarrow_is_installed() -> None:
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"a": [1, 2]})
    data, kind = marshal.save(frame, "df")
    assert kind == "parquet" and data.startswith(b"PAR1")


def test_sklearn_models_use_joblib_and_still_predict() -> None:
    features = np.array([[0.0], [1.0], [2.0], [3.0]])
    model = LogisticRegression().fit(features, [0, 0, 1, 1])
    data, kind = marshal.save(model, "model")
    assert kind == "joblib"
    back = marshal.load(data, kind)
    assert back.predict([[0.1], [2.9]]).tolist() == [0, 1]


def test_xgboost_dmatrices_use_their_own_binary_format_and_still_train() -> None:
    """A DMatrix holds a C pointer no pickle saves (Kale's serving/xgboost example hands one on)."""
    import xgboost

    matrix = xgboost.DMatrix(np.arange(12.0).reshape(4, 3), label=[0, 1, 0, 1], feature_names=["a", "b", "c"])
    data, kind = marshal.pack(matrix, "D_trn")
    assert kind == "xgboost-dmatrix"
    back = marshal.unpack(data, "D_trn")
    assert (back.num_row(), back.num_col(), back.feature_names) == (4, 3, ["a", "b", "c"])
    assert back.get_label().tolist() == [0, 1, 0, 1]
    booster = xgboost.train({"objective": "binary:logistic"}, back, num_boost_round=2)
    assert booster.predict(back).shape == (4,)


def test_torch_tensors_use_torch_save() -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.arange(6).reshape(2, 3)
    data, kind = marshal.save(tensor, "t")
    assert kind == "torch"
    assert torch.equal(marshal.load(data, kind), tensor)


def _square(v: int) -> int:
    return v * v


@pytest.mark.parametrize(
    "value",
    [42, 3.5, "text", None, [1, {"a": (2, 3)}], {1, 2}, np.float64(2.5), lambda v: v + 1, _square],
)
def test_everything_else_is_cloudpickled(value: Any) -> None:
    data, kind = marshal.save(value, "v")
    assert kind == "cloudpickle"
    back = marshal.load(data, kind)
    if callable(value):
        assert back(3) == value(3)
    else:
        assert back == value


def test_unserializable_names_the_variable_and_its_type() -> None:
    with pytest.raises(PipelineError) as caught:
        marshal.save(threading.Lock(), "lock")
    assert caught.value.field == "outputs.lock"
    assert "'lock'" in caught.value.message and "_thread.lock" in caught.value.message
    with pytest.raises(PipelineError) as caught:
        marshal.save((x for x in range(3)), "gen")
    assert "'gen'" in caught.value.message and "generator" in caught.value.message


def test_pack_is_self_describing_and_stable() -> None:
    packed, kind = marshal.pack(np.ones(3), "x")
    assert kind == "npy" and packed.startswith(b"CUBEART 1 npy\n")
    again, _ = marshal.pack(np.ones(3), "x")
    assert hashlib.sha256(packed).hexdigest() == hashlib.sha256(again).hexdigest()
    assert np.array_equal(marshal.unpack(packed), np.ones(3))
    with pytest.raises(PipelineError):
        marshal.unpack(b"not an artifact", "x")
    with pytest.raises(PipelineError) as caught:
        marshal.load(b"", "nope")
    assert "nope" in caught.value.message

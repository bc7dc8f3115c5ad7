"""Which kind a YAML job spec is, told by the keys only that kind has, and the YAML a form's spec
is saved as: the rules the Jobs panel and `cube-jupyter train|tune|serve run FILE` share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.spec_files import read_spec_file, render_spec, spec_kind


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ({"name": "a", "framework": "pytorch", "script": "t.py"}, "training"),
        ({"name": "a", "replicas": {"worker": 2}, "command": ["x"]}, "training"),
        # a tuning spec's trial holds a training spec: its own keys decide first
        ({"name": "a", "trial": {"training": {"framework": "pytorch"}}}, "tuning"),
        ({"objective": {"metric": "loss"}}, "tuning"),
        ({"name": "a", "storage_uri": "s3://m/iris"}, "serving"),
        ({"model_format": "onnx", "resources": {"cpu": "1"}}, "serving"),
    ],
)
def test_the_kind_is_told_by_the_keys_only_it_has(raw: dict[str, Any], kind: str) -> None:
    assert spec_kind(raw) == kind


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"name": "a", "image": "x"}, "spec"),  # keys every kind has: no kind to tell
        (["a"], "spec"),
        (
            {"name": "a", "framework": "pytorch", "storage_uri": "s3://m"},
            "framework",
        ),  # serving + a training key
    ],
)
def test_no_job_spec_is_refused_naming_the_field(raw: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as error:
        spec_kind(raw)
    assert error.value.field == field


def test_a_rendered_spec_reads_back_the_same(tmp_path: Path) -> None:
    spec = {"name": "a", "framework": "pytorch", "args": ["--lr", "0.1"], "env": {"Ü": "ß"}}
    rendered = render_spec({"kind": "training", "spec": spec})
    file = tmp_path / "a.yaml"
    file.write_text(rendered["yaml"], encoding="utf-8")
    assert read_spec_file(file) == spec
    assert yaml.safe_load(rendered["yaml"]) == spec

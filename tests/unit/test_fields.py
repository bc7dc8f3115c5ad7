"""The core field rules (`cube_jupyter.fields`) every profile, job spec, step tag, traitlet and the
Argo compiler check values with: each refusal names the field, each value kept is normalized."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cube_jupyter import fields
from cube_jupyter.errors import InvalidInput


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", 0.5),
        ("2", 2.0),
        ("1.5", 1.5),
        ("4Gi", 4 * 2**30),
        ("1k", 1000.0),
        ("2e3", 2000.0),
        (3, 3.0),
        ("2E", 2e18),  # exa, not an exponent
        ("1Ei", 2.0**60),
    ],
)
def test_quantities(text: object, value: float) -> None:
    assert fields.parse_quantity(text, "cpu") == pytest.approx(value)


@pytest.mark.parametrize("bad", ["two", "4GB", "", "-1", True, None, "1..2x", "1..2", "."])
def test_bad_quantities(bad: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        fields.parse_quantity(bad, "memory")
    assert refused.value.field == "memory"


@pytest.mark.parametrize("huge", ["1e400", "9" * 400, "9" * 300 + "E", "9" * 300 + "Ei", 10**400])
def test_a_quantity_past_what_a_number_holds_is_refused_naming_the_field(huge: object) -> None:
    """Was an OverflowError (a 500 from POST /jobs with cpu '1e400'), or inf taken as a CPU count."""
    with pytest.raises(InvalidInput) as refused:
        fields.parse_quantity(huge, "resources.cpu")
    assert refused.value.field == "resources.cpu"


@pytest.mark.parametrize(("given", "kept"), [("2", "2"), ("500m", "500m"), (4, "4"), (0.5, "0.5")])
def test_a_quantity_is_kept_as_the_text_a_pod_carries(given: object, kept: str) -> None:
    assert fields.quantity(given, "cpu") == kept


@pytest.mark.parametrize("bad", ["0", "0m", "-2", "two", " 2 ", "4Gi\n"])
def test_a_quantity_must_be_more_than_zero(bad: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        fields.quantity(bad, "resources.cpu")
    assert refused.value.field == "resources.cpu"


@pytest.mark.parametrize(
    "good", ["python:3.11-slim", "ghcr.io/a/b:1", "registry:5000/x/y@sha256:" + "a" * 64]
)
def test_image_references_are_kept_as_given(good: str) -> None:
    assert fields.image_reference(good, "image") == good


@pytest.mark.parametrize(
    "bad", ["", "two words", " ghcr.io/a/b:1", "{{workflow.name}}", "a;rm", None, 3, "-a"]
)
def test_bad_image_references_name_the_field(bad: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        fields.image_reference(bad, "steps.x.image")
    assert refused.value.field == "steps.x.image"


def test_extended_resources_need_a_domain() -> None:
    assert fields.extended_resource("gpu.intel.com/i915", "gpu_resource") == "gpu.intel.com/i915"
    with pytest.raises(InvalidInput, match="extended resource"):
        fields.extended_resource("gpu", "gpu_resource")


def test_env_names_and_reserved_names() -> None:
    assert fields.env({"A_B": 1, "x.y": "z"}, "env") == {"A_B": "1", "x.y": "z"}
    with pytest.raises(InvalidInput) as bad_name:
        fields.env({"1A": "x"}, "env")
    assert bad_name.value.field == "env.1A"
    with pytest.raises(InvalidInput) as reserved:
        fields.env({"RANK": "0"}, "env", reserved=("RANK",))
    assert reserved.value.field == "env.RANK"


@pytest.mark.parametrize(
    ("toleration", "field"),
    [
        ({"key": "k", "operator": "Maybe"}, "t[0].operator"),
        ({"key": "k", "effect": "Sometimes"}, "t[0].effect"),
        ({"operator": "Equal"}, "t[0].key"),
        ({"key": "k", "operator": "Exists", "value": "v"}, "t[0].value"),
        ({"key": "k", "tolerationSeconds": 5}, "t[0].tolerationSeconds"),
        ({"key": "k", "effect": "NoExecute", "tolerationSeconds": "5"}, "t[0].tolerationSeconds"),
        ({"key": "k", "colour": "red"}, "t[0].colour"),
    ],
)
def test_tolerations_are_checked_as_the_api_server_checks_them(
    toleration: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        fields.tolerations([toleration], "t")
    assert refused.value.field == field


def test_node_selectors_are_label_keys_and_values() -> None:
    assert fields.node_selector({"nvidia.com/gpu.present": "true"}, "s") == {"nvidia.com/gpu.present": "true"}
    with pytest.raises(InvalidInput) as refused:
        fields.node_selector({"ok": "not a value"}, "s")
    assert refused.value.field == "s.ok"


def test_timestamps_read_as_utc_and_garbage_as_none() -> None:
    assert fields.parse_timestamp("2026-01-02T03:04:05Z") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert fields.parse_timestamp("2026-01-02T03:04:05") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert fields.parse_timestamp("yesterday") is None
    assert fields.parse_timestamp(None) is None
    assert fields.seconds_between("2026-01-02T03:04:05Z", "2026-01-02T03:05:00Z") == 55.0
    assert fields.seconds_between("2026-01-02T03:04:05Z", None) is None
    stamp = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
    assert fields.format_timestamp(stamp) == "2026-01-02T03:04:05Z"


def test_choices_fold_case_and_say_what_is_allowed() -> None:
    assert fields.choice("PyTorch", "framework", ("pytorch", "xgboost")) == "pytorch"
    with pytest.raises(InvalidInput, match="pytorch, xgboost"):
        fields.choice("torch", "framework", ("pytorch", "xgboost"))

"""Names that enter URLs and object names: DNS-1123 labels, quantities, user slugs."""

from __future__ import annotations

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.names import DNS1123_LABEL, parse_quantity, user_slug, validate_dns_label


@pytest.mark.parametrize("good", ["a", "nb1", "my-server", "0abc", "a" * 63])
def test_dns_labels_accepted(good: str) -> None:
    assert validate_dns_label(good, "name") == good


@pytest.mark.parametrize("bad", ["", "A", "a_b", "-a", "a-", "a.b", "../x", "a" * 64, None, 3])
def test_dns_labels_rejected_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_dns_label(bad, "name")
    assert caught.value.field == "name"


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("2", 2.0), ("1.5", 1.5), ("4Gi", 4 * 2**30), ("1k", 1000.0), ("2e3", 2000.0), (3, 3.0)],
)
def test_quantities(text: object, value: float) -> None:
    assert parse_quantity(text, "cpu") == pytest.approx(value)


@pytest.mark.parametrize("bad", ["two", "4GB", "", "-1", True, None, "1..2x", "1..2", "."])
def test_bad_quantities(bad: object) -> None:
    with pytest.raises(InvalidInput):
        parse_quantity(bad, "memory")


def test_user_slugs_are_labels_and_do_not_collide() -> None:
    assert user_slug("alice") == "alice"
    escaped = {user_slug(u) for u in ("Alice@Example.com", "alice@example.com", "alice-example-com", "ALICE")}
    assert len(escaped) == 4
    for name in escaped | {user_slug("x" * 200), user_slug("@@@")}:
        assert DNS1123_LABEL.match(name) and len(name) <= 47

"""Names that enter URLs and object names: DNS-1123 labels, qualified names, user slugs."""

from __future__ import annotations

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.names import (
    DNS1123_LABEL,
    MAX_SLUG_LENGTH,
    user_slug,
    validate_dns_label,
    validate_label_value,
    validate_qualified_name,
)


@pytest.mark.parametrize("good", ["a", "nb1", "my-server", "0abc", "a" * 63])
def test_dns_labels_accepted(good: str) -> None:
    assert validate_dns_label(good, "name") == good


@pytest.mark.parametrize("bad", ["", "A", "a_b", "-a", "a-", "a.b", "../x", "a" * 64, None, 3])
def test_dns_labels_rejected_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_dns_label(bad, "name")
    assert caught.value.field == "name"


def test_user_slugs_are_labels_and_do_not_collide() -> None:
    assert user_slug("alice") == "alice"
    escaped = {user_slug(u) for u in ("Alice@Example.com", "alice@example.com", "alice-example-com", "ALICE")}
    assert len(escaped) == 4
    for name in escaped | {user_slug("x" * 200), user_slug("@@@")}:
        assert DNS1123_LABEL.match(name) and len(name) <= MAX_SLUG_LENGTH
    assert len(user_slug("x" * 200)) == MAX_SLUG_LENGTH


@pytest.mark.parametrize("escaped_user", ["bob@x.com", "Alice", "a_b", "x" * 200, "@@@"])
def test_a_raw_name_never_takes_another_users_escaped_slug(escaped_user: str) -> None:
    """Whoever can choose their raw name cannot pick `bob@x.com`'s slug (namespace, workspace, URL)."""
    taken = user_slug(escaped_user)
    assert taken != escaped_user
    assert user_slug(taken) != taken  # the slug itself, used as a raw name, is escaped again
    digest = taken.rpartition("-")[2]
    assert len(digest) >= 10 and set(digest) <= set("0123456789abcdef")  # not brute-forceable


def test_raw_names_that_look_escaped_are_escaped() -> None:
    assert user_slug("team-0123456789ab") != "team-0123456789ab"
    assert user_slug("team-0123456789") == "team-0123456789"  # not the digest's length: kept
    assert user_slug("build-2024") == "build-2024"


@pytest.mark.parametrize("good", ["gpu", "nvidia.com/gpu.present", "kubernetes.io/arch", "a_b.c-d"])
def test_qualified_names(good: str) -> None:
    assert validate_qualified_name(good, "key") == good


@pytest.mark.parametrize("bad", ["", "has space", "-a", "a/", "/a", "Bad_Domain/x", "a/b/c", "x" * 64, 3])
def test_bad_qualified_names(bad: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_qualified_name(bad, "key")
    assert caught.value.field == "key"


def test_label_values() -> None:
    assert validate_label_value("", "v") == "" and validate_label_value("NVIDIA-A100_80GB.x", "v")
    for bad in ("a b", "-a", "x" * 64, None):
        with pytest.raises(InvalidInput):
            validate_label_value(bad, "v")

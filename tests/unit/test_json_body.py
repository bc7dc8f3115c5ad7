"""The pre-parse scan of request bodies: brackets inside strings are text, escapes included, and
every string, keys too, is checked after parsing."""

from __future__ import annotations

import pytest
from cube_jupyter_server.json_body import nesting_depth, parse_json_body

from cube_jupyter.errors import InvalidInput


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (b"", 0),
        (b"1", 0),
        (b"[]", 1),
        (b'{"a": [[{"b": 1}]]}', 4),
        (b'["[[[[", "]]"]', 1),
        (b'["\\"[[[", {"k\\\\": "{{"}]', 2),
        (b"[[]][[[]]]", 3),
    ],
)
def test_nesting_depth_counts_brackets_outside_strings(raw: bytes, depth: int) -> None:
    assert nesting_depth(raw) == depth


def test_a_body_at_the_limit_parses_and_one_past_it_is_refused() -> None:
    assert parse_json_body(b"[" * 3 + b"]" * 3, max_depth=3) == [[[]]]
    with pytest.raises(InvalidInput) as caught:
        parse_json_body(b"[" * 4 + b"]" * 4, max_depth=3)
    assert caught.value.field == "body" and "limit of 3 levels" in caught.value.message


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"a": {"b": ["x", "\\u0000"]}}', "a.b[1]"),
        (b'["\\ud83d"]', "body[0]"),
        (b'"\\udc00"', "body"),
        (b'{"a": {"\\u0000": 1}}', "a"),
        (b"\xff", "body"),
        (b"9" * 5000, "body"),
    ],
)
def test_bad_text_is_refused_naming_its_json_path(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_json_body(raw)
    assert caught.value.field == field


def test_a_surrogate_pair_is_text() -> None:
    assert parse_json_body(b'["\\ud83d\\ude00"]') == ["\U0001f600"]

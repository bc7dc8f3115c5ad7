"""Request bodies are read within limits checked before parsing: Python's json parser recurses once
per level of nesting (`[` x 200000 is a RecursionError) and holds the whole document, so size and
depth are measured on the raw bytes first, and every string is checked once parsed."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from cube_jupyter.errors import InvalidInput, PayloadTooLarge
from cube_jupyter.safe_text import check_strings

# A notebook with its outputs (the graph endpoint takes unsaved content) fits comfortably.
MAX_BODY_BYTES = 32 * 1024 * 1024
# Deeper than any spec, notebook or prediction input the API takes, far below the parser's recursion.
MAX_DEPTH = 64
# A JSON string literal (its escapes included): its brackets are text, not nesting.
STRING_LITERAL = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
DEPTH_CHANGE = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def nesting_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in `raw`, outside string literals, in one pass at C
    speed (an unterminated string counts its brackets: such a body fails to parse anyway)."""
    brackets = STRING_LITERAL.sub(b"", raw).translate(None, NOT_BRACKETS)
    return max(itertools.accumulate(map(DEPTH_CHANGE.__getitem__, brackets)), default=0)


def parse_json_body(raw: bytes, *, max_bytes: int = MAX_BODY_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The parsed body (None when empty), or a 413/400 naming the limit or the field at fault."""
    if len(raw) > max_bytes:
        raise PayloadTooLarge(
            f"request body is {len(raw)} bytes; the limit is {max_bytes} bytes", field="body"
        )
    if not raw.strip():
        return None
    if nesting_depth(raw) > max_depth:
        raise InvalidInput(f"request body nests deeper than the limit of {max_depth} levels", field="body")
    try:
        body = json.loads(raw)
    except ValueError as exc:  # bad JSON, bad UTF-8, an integer past Python's digit limit
        raise InvalidInput(f"request body is not valid JSON: {exc}", field="body") from None
    check_strings(body)
    return body

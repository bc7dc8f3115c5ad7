"""Strings from users must be text every consumer accepts: a NUL ends a C string (a path, an argv
word, an env value handed to the OS) and a lone surrogate cannot be encoded as UTF-8, so both would
fail deep inside a file open, a Popen or a response, far from the field that carried them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cube_jupyter.errors import QUOTE_LIMIT, InvalidInput

# NUL, or a UTF-16 surrogate code point (which a str holds only when it came from an escape like
# "\ud800": UTF-8 input cannot produce one).
UNSAFE_CHARACTER = re.compile("[\x00\ud800-\udfff]")


def text_fault(text: str) -> str | None:
    """What makes `text` unsafe (the first such character and where), or None."""
    found = UNSAFE_CHARACTER.search(text)
    if found is None:
        return None
    what = "a NUL character" if found.group() == "\x00" else "a lone surrogate (not UTF-8 text)"
    return f"{what} at position {found.start()}"


def check_text(text: str, field: str) -> str:
    """`text` unchanged, or InvalidInput naming `field` and the character at fault."""
    fault = text_fault(text)
    if fault:
        raise InvalidInput(f"{field} contains {fault}", field=field)
    return text


def child_field(parent: str, key: object) -> str:
    """The path of `key` under `parent`: `spec.command[0]`, `env.HOME`; `key` alone at the top. A key
    is cut to a short prefix: the path names the place, it does not repeat the input."""
    if isinstance(key, int):
        return f"{parent or 'body'}[{key}]"
    name = str(key)[:QUOTE_LIMIT]
    return f"{parent}.{name}" if parent else name


def check_strings(value: Any, field: str = "") -> None:
    """Check every string in a parsed JSON value, keys included; the error names the JSON path of a
    string at fault (`field` is the path of `value` itself, '' for a request body; a bad key is
    reported at the object holding it)."""
    pending: list[tuple[Any, str]] = [(value, field)]
    while pending:  # a loop, not recursion: bodies are depth-limited, but cheaply so
        item, where = pending.pop()
        if isinstance(item, str):
            check_text(item, where or "body")
        elif isinstance(item, Mapping):
            for key, child in item.items():
                fault = text_fault(key) if isinstance(key, str) else None
                if fault:
                    raise InvalidInput(
                        f"a key of {where or 'the body'} contains {fault}", field=where or "body"
                    )
                pending.append((child, child_field(where, key)))
        elif isinstance(item, list):
            pending.extend((child, child_field(where, index)) for index, child in enumerate(item))

"""Validation and escaping of names that end up in URLs, paths and Kubernetes objects."""

from __future__ import annotations

import hashlib
import re

from cube_jupyter.errors import InvalidInput

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX = 63
# Kubernetes quantities: plain or decimal numbers with an optional binary/decimal suffix.
QUANTITY = re.compile(
    r"^(\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][-+]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def validate_dns_label(value: object, field: str, max_length: int = DNS1123_LABEL_MAX) -> str:
    """Return `value` if it is a DNS-1123 label no longer than `max_length`, else raise naming `field`."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} is required and must be a string", field=field)
    if len(value) > max_length:
        raise InvalidInput(
            f"{field} {value!r} is {len(value)} characters long; the limit is {max_length}",
            field=field,
        )
    if not DNS1123_LABEL.match(value):
        raise InvalidInput(
            f"{field} {value!r} is not a valid DNS-1123 label: use lower-case letters, digits and "
            "'-', starting and ending with a letter or digit",
            field=field,
        )
    return value


def parse_quantity(value: object, field: str) -> float:
    """Parse a Kubernetes resource quantity ("500m", "2", "4Gi") into a float, naming `field` on error."""
    text = str(value).strip() if isinstance(value, (str, int, float)) else ""
    match = QUANTITY.match(text)
    if not match or isinstance(value, bool):
        raise InvalidInput(
            f"{field} {value!r} is not a Kubernetes quantity (examples: '500m', '2', '4Gi')",
            field=field,
        )
    number, suffix = float(match.group(1)), match.group(2) or ""
    if suffix.startswith(("e", "E")):
        return number * 10 ** int(suffix[1:])
    return number * _BINARY.get(suffix, 0) if suffix in _BINARY else number * _DECIMAL[suffix]


def user_slug(username: str) -> str:
    """A DNS-1123 label for a user name, stable and collision-free.

    "alice" stays "alice"; "Alice@Example.com" becomes "alice-example-com-" plus a short hash of the
    original, so two names that escape alike never share a namespace or a URL.
    """
    if not username:
        raise InvalidInput("user name is empty", field="user")
    slug = re.sub(r"[^a-z0-9]+", "-", username.lower()).strip("-")
    if slug == username and len(slug) <= 40:
        return slug
    digest = hashlib.sha256(username.encode()).hexdigest()[:6]
    slug = slug[:40].strip("-")
    return f"{slug}-{digest}" if slug else f"u-{digest}"

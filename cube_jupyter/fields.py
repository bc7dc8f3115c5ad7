"""The one set of field rules: what a value a user or an admin gives must look like, checked where it
enters (a profile, a job spec, a step tag, the Argo compiler, a traitlet) and named when it is wrong.

Each check is `check(value, field, ...)`: it returns the value to keep (normalized: surrounding
spaces dropped, numbers as the text Kubernetes reads) or raises InvalidInput naming `field`, down to
the item at fault (`resources.cpu`, `CubeSpawner.profiles[1].tolerations[0].operator`). A caller that
speaks its own error type (a step tag's PipelineError) converts; it never checks again in its own words.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from cube_jupyter.errors import InvalidInput, quote
from cube_jupyter.names import validate_label_value, validate_qualified_name
from cube_jupyter.safe_text import check_text

# An image reference: registry/path[:tag][@digest], no whitespace.
IMAGE_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")
# What Kubernetes accepts as a container env var name.
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# Kubernetes quantities: plain or decimal numbers with an optional binary/decimal suffix.
QUANTITY = re.compile(
    r"^(\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][-+]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
# Environment sizes a process can start with: Linux refuses one string over 128 KiB and an argv plus
# environment over a few MiB ("Argument list too long"), so far less is taken, and said where it is given.
MAX_ENV_NAME = 256
MAX_ENV_VALUE = 32 * 1024
MAX_ENV_TOTAL = 256 * 1024
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def join(prefix: str, key: str) -> str:
    """The dotted path of `key` under `prefix` ('' at the top level)."""
    return f"{prefix}.{key}" if prefix else key


# -- shapes ------------------------------------------------------------------------------------------


def mapping(value: object, field: str) -> dict[str, Any]:
    """A dict with string keys, or InvalidInput naming `field`."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidInput(f"{field} must be a mapping (a JSON object), got {quote(value)}", field=field)
    return dict(value)


def reject_unknown(raw: Mapping[str, Any], allowed: Iterable[str], prefix: str) -> None:
    """Fail on any key not in `allowed`, naming the first unknown one and listing what is allowed."""
    allowed_set = set(allowed)
    unknown = sorted(set(raw) - allowed_set)
    if unknown:
        where = prefix or "spec"
        raise InvalidInput(
            f"{where} has unknown key(s) {unknown}; allowed: {sorted(allowed_set)}",
            field=join(prefix, unknown[0]),
        )


def string(value: object, field: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text, got {quote(value)}", field=field)
    if not allow_empty and not value.strip():
        raise InvalidInput(f"{field} is required", field=field)
    return check_text(value, field)


def optional_string(value: object, field: str) -> str | None:
    return None if value is None else string(value, field)


def string_map(value: object, field: str) -> dict[str, str]:
    """Strings to strings (labels, selectors, a profile's env)."""
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidInput(f"{field} must map strings to strings, got {quote(value)}", field=field)
    return dict(value)


def boolean(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{field} must be true or false, got {quote(value)}", field=field)
    return value


def integer(value: object, field: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A whole number (not a bool) within [minimum, maximum]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{field} must be a whole number, got {quote(value)}", field=field)
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{field} must be >= {minimum}, got {value}", field=field)
    if maximum is not None and value > maximum:
        raise InvalidInput(f"{field} must be <= {maximum}, got {value}", field=field)
    return value


def optional_integer(
    value: object, field: str, *, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    return None if value is None else integer(value, field, minimum=minimum, maximum=maximum)


def number(value: object, field: str) -> float:
    """An int or float (not a bool), as a float."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidInput(f"{field} must be a number, got {quote(value)}", field=field)
    return float(value)


def choice(value: object, field: str, choices: Iterable[str], *, fold_case: bool = True) -> str:
    """One of `choices`; matched case-insensitively unless `fold_case` is off, returned as spelled there."""
    options = list(choices)
    if isinstance(value, str):
        for option in options:
            if value == option or (fold_case and value.lower() == option.lower()):
                return option
    raise InvalidInput(f"{field} {quote(value)} is not one of: {', '.join(options)}", field=field)


# -- Kubernetes values: checked as the API server would, so a bad one fails where it is given --------


def image_reference(value: object, field: str) -> str:
    """A container image reference (registry/path[:tag][@digest]), exactly as a pod will name it."""
    if not isinstance(value, str) or not IMAGE_REFERENCE.match(value):
        raise InvalidInput(
            f"{field} {quote(value)} is not an image reference "
            "(e.g. 'docker.io/pytorch/pytorch:2.5.1'; no spaces)",
            field=field,
        )
    return value


def optional_image(value: object, field: str) -> str | None:
    return None if value is None else image_reference(value, field)


def parse_quantity(value: object, field: str) -> float:
    """A Kubernetes resource quantity ("500m", "2", "4Gi") as a number, naming `field` on error."""
    text = str(value).strip() if isinstance(value, (str, int, float)) else ""
    match = QUANTITY.match(text)
    if not match or isinstance(value, bool):
        raise InvalidInput(
            f"{field} {quote(value)} is not a Kubernetes quantity (examples: '500m', '2', '4Gi')",
            field=field,
        )
    number_, suffix = float(match.group(1)), match.group(2) or ""
    try:
        if suffix in _BINARY:
            amount = number_ * _BINARY[suffix]
        elif suffix in _DECIMAL:  # "E" alone is exa, not an exponent
            amount = number_ * _DECIMAL[suffix]
        else:
            amount = number_ * 10.0 ** int(suffix[1:])
    except OverflowError:
        amount = math.inf
    if not math.isfinite(amount):
        raise InvalidInput(f"{field} {quote(value)} is too large a quantity", field=field)
    return amount


def quantity(value: object, field: str) -> str:
    """A CPU or memory amount more than 0, as the text a pod will carry: the API server refuses
    " 2 ", so it is refused here, where it is given, not at some user's create."""
    if isinstance(value, str) and value != value.strip():
        raise InvalidInput(
            f"{field} {quote(value)} has spaces around it; write the quantity alone, e.g. '2' or '4Gi'",
            field=field,
        )
    if parse_quantity(value, field) <= 0:
        raise InvalidInput(f"{field} must be more than 0, got {quote(value)}", field=field)
    return str(value)


def extended_resource(value: object, field: str) -> str:
    """An extended resource name such as 'nvidia.com/gpu' (a qualified name with its domain)."""
    try:
        return validate_qualified_name(value, field, prefix_required=True)
    except InvalidInput:
        raise InvalidInput(
            f"{field} must be an extended resource name such as 'nvidia.com/gpu' or "
            f"'gpu.intel.com/i915', got {quote(value)}",
            field=field,
        ) from None


def env(value: object, field: str, reserved: Iterable[str] = ()) -> dict[str, str]:
    """Environment variables: names Kubernetes accepts, values strings (YAML numbers are converted);
    `reserved` names are the workbench's or the operator's to set."""
    raw = mapping(value, field)
    reserved_set = set(reserved)
    result: dict[str, str] = {}
    for key, item in raw.items():
        if len(key) > MAX_ENV_NAME:
            raise InvalidInput(
                f"{field} has a name {len(key)} characters long; the limit is {MAX_ENV_NAME}", field=field
            )
        where = join(field, key)
        if not ENV_NAME.match(key):
            raise InvalidInput(f"{where}: {quote(key)} is not a valid environment variable name", field=where)
        if key in reserved_set:
            raise InvalidInput(f"{where}: {key} is set by the workbench or the operator", field=where)
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise InvalidInput(f"{where} must be a string, got {quote(item)}", field=where)
        text = check_text(str(item), where)
        if len(text) > MAX_ENV_VALUE:
            raise InvalidInput(
                f"{where} is {len(text)} characters long; the limit is {MAX_ENV_VALUE}", field=where
            )
        result[key] = text
    total = sum(len(k) + len(v) + 2 for k, v in result.items())
    if total > MAX_ENV_TOTAL:
        raise InvalidInput(f"{field} is {total} characters in all; the limit is {MAX_ENV_TOTAL}", field=field)
    return result


def node_selector(value: object, field: str) -> dict[str, str]:
    """A nodeSelector: label keys to label values."""
    selector = string_map(value, field)
    for key, label in selector.items():
        validate_qualified_name(key, join(field, key))
        validate_label_value(label, join(field, key))
    return selector


def tolerations(value: object, field: str) -> list[dict[str, Any]]:
    """Pod tolerations, checked as kube-apiserver checks them, so a bad one fails where it is given."""
    if not isinstance(value, list):
        raise InvalidInput(f"{field} must be a list of tolerations", field=field)
    for i, toleration in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(toleration, dict):
            raise InvalidInput(f"{where} must be a dict", field=where)
        reject_unknown(toleration, TOLERATION_KEYS, where)
        _toleration(toleration, where)
    return [dict(t) for t in value]


def _toleration(toleration: dict[str, Any], where: str) -> None:
    operator = toleration.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        raise InvalidInput(f"{where}.operator must be 'Equal' or 'Exists'", field=f"{where}.operator")
    effect = toleration.get("effect", "NoSchedule")
    if effect not in TOLERATION_EFFECTS:
        raise InvalidInput(f"{where}.effect must be {', '.join(TOLERATION_EFFECTS)}", field=f"{where}.effect")
    key = toleration.get("key", "")
    if key != "":
        validate_qualified_name(key, f"{where}.key")
    elif operator != "Exists":
        raise InvalidInput(f"{where}.key may be empty only with operator 'Exists'", field=f"{where}.key")
    label = toleration.get("value", "")
    validate_label_value(label, f"{where}.value")
    if label and operator == "Exists":
        raise InvalidInput(f"{where}.value must be empty when operator is 'Exists'", field=f"{where}.value")
    if "tolerationSeconds" in toleration:
        integer(toleration["tolerationSeconds"], f"{where}.tolerationSeconds")
        if effect != "NoExecute":
            raise InvalidInput(
                f"{where}.tolerationSeconds is only allowed with effect 'NoExecute'",
                field=f"{where}.tolerationSeconds",
            )


# -- commands and paths ------------------------------------------------------------------------------


def argv(value: object, field: str) -> tuple[str, ...]:
    """A command or argument list: a list of strings, or one string split as a shell would split
    words (never run through a shell)."""
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise InvalidInput(
                f"{field} {quote(value)} cannot be split into words: {exc}", field=field
            ) from None
    elif isinstance(value, (list, tuple)) and all(isinstance(w, (str, int, float)) for w in value):
        words = [str(w) for w in value]
    else:
        raise InvalidInput(f"{field} must be a list of strings, got {quote(value)}", field=field)
    total = sum(len(word) + 1 for word in words)
    if total > MAX_ENV_TOTAL:  # the same bound as an environment: the kernel takes both together
        raise InvalidInput(f"{field} is {total} characters in all; the limit is {MAX_ENV_TOTAL}", field=field)
    return tuple(check_text(word, f"{field}[{index}]") for index, word in enumerate(words))


def relative_path(value: object, field: str, *, suffix: str | None = None) -> str:
    """A file path without `..` parts (relative to a working directory, or absolute)."""
    path = string(value, field)
    if ".." in PurePosixPath(path).parts:
        raise InvalidInput(f"{field} {quote(path)} may not contain '..'", field=field)
    if suffix and not path.endswith(suffix):
        raise InvalidInput(f"{field} {quote(path)} must end in {suffix}", field=field)
    return path


def absolute_path(value: object, field: str) -> str:
    path = relative_path(value, field)
    if not path.startswith("/"):
        raise InvalidInput(f"{field} {quote(path)} must be an absolute path", field=field)
    return path


# -- timestamps --------------------------------------------------------------------------------------


def parse_timestamp(value: object) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes and the run history write it ('2026-01-02T03:04:05Z'),
    in UTC when it names no zone; None for anything else (a missing or garbled stamp reads as none)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def format_timestamp(stamp: datetime) -> str:
    """RFC 3339 in UTC, whole seconds, 'Z' suffix: what records, REST responses and Kubeflow's
    annotations use. A naive time is taken to be UTC already."""
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds_between(start: object, end: object) -> float | None:
    """Seconds from one timestamp to another; None unless both read."""
    first, last = parse_timestamp(start), parse_timestamp(end)
    return None if first is None or last is None else (last - first).total_seconds()

"""Small parsers for the raw dicts users write as job specs; every error names the dotted field.

Shared by the training, tuning and serving specs so the three read the same way: unknown keys are
rejected, numbers are whole where Kubernetes wants integers, and names and paths are checked where
they enter.
"""

from __future__ import annotations

import keyword
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from cube_jupyter.errors import InvalidInput, quote
from cube_jupyter.names import validate_dns_label
from cube_jupyter.notebooks.spec import ENV_NAME, IMAGE_REFERENCE
from cube_jupyter.safe_text import check_text

# A job name prefixes the names the operators give Services and pods (`<job>-evaluator-12`, and for
# Katib `<experiment>-<8 chars>-worker-0`); Services need DNS-1035 labels of at most 63 characters.
MAX_JOB_NAME = 40
# Names the REST API uses itself: `GET /jobs/config` is the launch forms' vocabulary, not a job.
RESERVED_JOB_NAMES = frozenset({"config"})


def join(prefix: str, key: str) -> str:
    """The dotted path of `key` under `prefix` ('' at the top level)."""
    return f"{prefix}.{key}" if prefix else key


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


def job_name(value: object, field: str = "name") -> str:
    """A DNS-1035 label (a letter first) short enough for the names the operators derive from it."""
    name = validate_dns_label(value, field, MAX_JOB_NAME)
    if not name[0].isalpha():
        raise InvalidInput(
            f"{field} {quote(name)} must start with a letter (it also names Services)", field=field
        )
    if name in RESERVED_JOB_NAMES:
        raise InvalidInput(f"{field} {quote(name)} is reserved; choose another name", field=field)
    return name


def string(value: object, field: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text, got {quote(value)}", field=field)
    if not allow_empty and not value.strip():
        raise InvalidInput(f"{field} is required", field=field)
    return check_text(value, field)


def optional_string(value: object, field: str) -> str | None:
    return None if value is None else string(value, field)


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


def optional_integer(value: object, field: str, *, minimum: int | None = None) -> int | None:
    return None if value is None else integer(value, field, minimum=minimum)


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


def image(value: object, field: str) -> str | None:
    """An optional container image reference (no whitespace)."""
    if value is None:
        return None
    if not isinstance(value, str) or not IMAGE_REFERENCE.match(value):
        raise InvalidInput(
            f"{field} {quote(value)} is not an image reference (e.g. 'docker.io/pytorch/pytorch:2.5.1')",
            field=field,
        )
    return value


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
    return tuple(check_text(word, f"{field}[{index}]") for index, word in enumerate(words))


def env(value: object, field: str, reserved: Iterable[str] = ()) -> dict[str, str]:
    """Environment variables: names Kubernetes accepts, values strings (YAML numbers are converted)."""
    raw = mapping(value, field)
    reserved_set = set(reserved)
    result: dict[str, str] = {}
    for key, item in raw.items():
        where = join(field, key)
        if not ENV_NAME.match(key):
            raise InvalidInput(f"{where}: {quote(key)} is not a valid environment variable name", field=where)
        if key in reserved_set:
            raise InvalidInput(f"{where}: {key} is set by the workbench or the operator", field=where)
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise InvalidInput(f"{where} must be a string, got {quote(item)}", field=where)
        result[key] = check_text(str(item), where)
    return result


def relative_path(value: object, field: str, *, suffix: str | None = None) -> str:
    """A file path without `..` parts (relative to the job's working directory, or absolute)."""
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


# A Python import target: `package.module:function` (Fairing's and setuptools' entry-point form).
FUNCTION_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*$")


def function_target(value: object, field: str) -> str:
    target = string(value, field)
    if not FUNCTION_TARGET.match(target):
        raise InvalidInput(
            f"{field} {quote(target)} must be 'module:function' (e.g. 'train:main', 'mypkg.train:fit')",
            field=field,
        )
    return target


def string_settings(value: object, field: str) -> dict[str, str]:
    """Algorithm settings: names to values, kept as strings as Katib does."""
    raw = mapping(value, field)
    result: dict[str, str] = {}
    for key, item in raw.items():
        if isinstance(item, bool):
            result[key] = "true" if item else "false"
        elif isinstance(item, (str, int, float)):
            result[key] = str(item)
        else:
            raise InvalidInput(
                f"{join(field, key)} must be a string or number, got {quote(item)}", field=join(field, key)
            )
    return result


PACKAGE_SCHEMES = ("s3", "configmap", "file", "")
PYTHON_KEYWORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)


def package_uri(value: object, field: str) -> str | None:
    """Where shipped code lives: `s3://` (the artifact store), `configmap://NAME[/KEY]`, or a local
    path / `file://` URL (local backend only)."""
    if value is None:
        return None
    uri = string(value, field).strip()
    parts = urlsplit(uri)
    if parts.scheme not in PACKAGE_SCHEMES:
        raise InvalidInput(
            f"{field} {quote(uri)}: scheme {parts.scheme!r} is unsupported (s3://, configmap:// or a path)",
            field=field,
        )
    if parts.scheme in ("s3", "configmap") and not parts.netloc:
        raise InvalidInput(f"{field} {quote(uri)} names no bucket or ConfigMap", field=field)
    if parts.scheme == "configmap":
        validate_dns_label(parts.netloc, field, 253)
    return uri

"""Parsers for what only job specs have: job names, `module:function` targets, shipped-package URIs,
algorithm settings. Everything else a spec holds is checked by the core field rules
(`cube_jupyter.fields`), as profiles and step tags are; every error names the dotted field.
"""

from __future__ import annotations

import keyword
import re
from urllib.parse import urlsplit

from cube_jupyter.errors import InvalidInput, quote
from cube_jupyter.fields import join, mapping, string
from cube_jupyter.names import validate_dns_label
from cube_jupyter.queues import queue_name

# A job name prefixes the names the operators give Services and pods (`<job>-evaluator-12`, and for
# Katib `<experiment>-<8 chars>-worker-0`); Services need DNS-1035 labels of at most 63 characters.
MAX_JOB_NAME = 40
# Names the REST API uses itself: `GET /jobs/config` is the launch forms' vocabulary, not a job.
RESERVED_JOB_NAMES = frozenset({"config"})


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


def queue_choice(body: dict[str, object]) -> tuple[str | None, str | None]:
    """`queue` and `priority`: the Kueue LocalQueue and WorkloadPriorityClass a user picks for one job
    (names here; whether the admin offers them is `CubeQueues.choose`'s, at submit)."""
    queue, priority = (
        None if body.get(key) is None else queue_name(body.get(key), key) for key in ("queue", "priority")
    )
    return queue, priority

"""Check REST responses against `server_ext/openapi.yaml`, the published contract."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SPEC_PATH = Path(__file__).resolve().parents[2] / "server_ext" / "openapi.yaml"


@cache
def _spec() -> dict[str, Any]:
    return yaml.safe_load(SPEC_PATH.read_text())  # type: ignore[no-any-return]


def _resolve(node: Any) -> Any:
    """Inline every local `$ref` (the document has no cycles)."""
    if isinstance(node, dict):
        if "$ref" in node:
            target: Any = _spec()
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            return _resolve(target)
        return {key: _resolve(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_resolve(item) for item in node]
    return node


def assert_response_matches(path: str, method: str, status: int, body: Any) -> None:
    """Fail unless `status` is documented for the operation and `body` fits its schema."""
    operation = _spec()["paths"][path][method.lower()]
    responses = operation["responses"]
    assert str(status) in responses, f"{method} {path} answered {status}, documented: {sorted(responses)}"
    content = _resolve(responses[str(status)]).get("content")
    if content is None:
        assert body is None, f"{method} {path} {status} should have no body, got {body!r}"
        return
    jsonschema.validate(body, content["application/json"]["schema"])

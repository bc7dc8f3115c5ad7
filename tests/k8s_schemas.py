"""Validate rendered Kubernetes objects the way the API server would, without a cluster.

Custom resources are checked against the upstream CRD schemas (`tests/upstream.py`: from the Go
modules that ship them, pinned in `tools/crds/go.mod`); core kinds against kubernetes-validate's
bundled OpenAPI schemas. In strict mode unknown fields fail (CRD schemas alone only prune them), so a
misspelt field in a renderer is caught by the tests instead of silently disappearing on a real
cluster. On top of the schemas it checks what the API server checks outside them: object names,
label and annotation syntax, resource quantities, selector/template agreement, and the CEL duration
rules Istio's CRDs carry.

    from tests.k8s_schemas import validate_object
    validate_object(obj)            # raises AssertionError naming the bad field's path
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema.validators
import kubernetes_validate
from jsonschema.exceptions import ValidationError
from kubernetes_validate.utils import latest_version
from referencing import Registry, Resource

from tests.upstream import crd_documents, crd_files, swagger_files

__all__ = ["ValidationError", "crd_schema", "validate_object", "validate_objects"]

CORE_GROUPS = {"", "apps", "batch", "policy", "autoscaling", "networking.k8s.io", "rbac.authorization.k8s.io"}
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# Kinds whose name also becomes a Service name (RFC 1035: must start with a letter). Kubeflow's
# controller creates a Service named after each Notebook.
DNS1035_NAMED = {("v1", "Service"), ("kubeflow.org/v1", "Notebook")}

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# k8s.io/apimachinery resource.Quantity, as the CRD schemas spell it.
_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY = re.compile(rf"^(\+|-)?{_NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_NUMBER}))?$")
GO_DURATION = re.compile(r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$")
_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_CEL_MIN_DURATION = re.compile(r"^duration\(self\) >= duration\('([^']+)'\)$")
MAX_ANNOTATIONS_BYTES = 256 * 1024


def validate_object(obj: dict[str, Any], strict: bool = True) -> None:
    """Raise AssertionError listing every problem in `obj`, each with the path of the bad field."""
    if not isinstance(obj, dict):
        raise AssertionError(f"a Kubernetes object must be a mapping, got {type(obj).__name__}")
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise AssertionError("apiVersion and kind are required strings")
    validator = _validator(api_version, kind, strict)
    problems = [f"{_error_path(e)}: {e.message}" for e in validator.iter_errors(obj)]
    problems += list(_semantic_problems(obj))
    if problems:
        name = obj.get("metadata", {}).get("name") if isinstance(obj.get("metadata"), dict) else None
        listing = "\n  ".join(sorted(set(problems)))
        raise AssertionError(f"{kind} {name!r} ({api_version}) is invalid:\n  {listing}")


def validate_objects(objects: list[dict[str, Any]], strict: bool = True) -> None:
    for obj in objects:
        validate_object(obj, strict=strict)


def crd_schema(api_version: str, kind: str, strict: bool = True) -> dict[str, Any]:
    """The openAPIV3Schema of a custom resource, with apiVersion/kind/metadata declared at the top."""
    return copy.deepcopy(_crd_schema(api_version, kind, strict))


# --- schema loading (cached: the CRD files are megabytes) -------------------------------------------


@cache
def _validator(api_version: str, kind: str, strict: bool) -> jsonschema.protocols.Validator:
    group = api_version.rpartition("/")[0]
    if group in CORE_GROUPS:
        return _core_validator(api_version, kind, strict)
    schema = _crd_schema(api_version, kind, strict)
    registry: Registry[Any] = Resource.from_contents(_k8s_definitions(strict)) @ Registry()
    return _CRD_VALIDATOR(schema, registry=registry)


def _core_validator(api_version: str, kind: str, strict: bool) -> jsonschema.protocols.Validator:
    """kubernetes-validate's schema for a core kind, for the newest Kubernetes version it ships."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _k8s_schema_dir(strict) / f"{kind.lower()}-{group_version}.json"
    if not path.is_file():
        raise AssertionError(f"kubernetes-validate {latest_version()} has no schema for {api_version} {kind}")
    schema = json.loads(path.read_text())
    registry: Registry[Any] = Resource.from_contents(_k8s_definitions(strict)) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _k8s_schema_dir(strict: bool) -> Path:
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return root / f"v{latest_version()}-local{'-strict' if strict else ''}"


@cache
def _k8s_definitions(strict: bool) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((_k8s_schema_dir(strict) / "_definitions.json").read_text())
    return result


@cache
def _crd_schema(api_version: str, kind: str, strict: bool) -> dict[str, Any]:
    group, _, version = api_version.rpartition("/")
    crd = _find_crd(group, kind)
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    if version not in versions:
        raise AssertionError(f"{kind}.{group} has no version {version!r}; it serves {sorted(versions)}")
    schema = copy.deepcopy(versions[version]["schema"]["openAPIV3Schema"])
    schemaless = not schema.get("properties") and schema.get("x-kubernetes-preserve-unknown-fields")
    if schemaless:
        # Katib's CRD accepts anything (its webhook validates); its swagger.json has the real types.
        swagger = _swagger_schema(version, kind)
        if swagger is None:
            return schema
        schema = swagger
        for definition in schema["definitions"].values():
            _kubernetes_to_jsonschema(definition, strict)
    _kubernetes_to_jsonschema(schema, strict)
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string", "enum": [api_version]}
    properties["kind"] = {"type": "string", "enum": [kind]}
    properties["metadata"] = {"$ref": f"https://kubernetes.io/api/_definitions.json#/$defs/{OBJECT_META}"}
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    if strict:
        schema["additionalProperties"] = False
        schema.pop("x-kubernetes-preserve-unknown-fields", None)
    return schema


def _find_crd(group: str, kind: str) -> dict[str, Any]:
    """The CRD defining group/kind, as a cluster installs it (full schemas, validation patches)."""
    for path in crd_files():
        for doc in crd_documents(path):
            if doc["spec"]["group"] == group and doc["spec"]["names"]["kind"] == kind:
                return doc
    raise AssertionError(f"no CRD for kind {kind!r} in group {group!r} (tests/upstream.py lists them)")


def _swagger_schema(version: str, kind: str) -> dict[str, Any] | None:
    """`{version}.{kind}` from an upstream OpenAPI 2 swagger.json, its `$ref`s to core types
    pointed at kubernetes-validate's definitions; None if no swagger file defines it."""
    for path in swagger_files():
        definitions = json.loads(path.read_text()).get("definitions", {})
        if f"{version}.{kind}" in definitions:
            schema = copy.deepcopy(definitions[f"{version}.{kind}"])
            schema["definitions"] = copy.deepcopy(definitions)
            _point_refs_at_core(schema, set(definitions))
            return schema
    return None


def _point_refs_at_core(node: Any, local: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _point_refs_at_core(item, local)
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/definitions/") and ref[14:] not in local:
        target = ref[14:]
        if target == "v1.unstructured.Unstructured":  # any Kubernetes object, e.g. a trial template
            node.clear()
            node.update({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
            return
        package = "io.k8s.api.core" if target in _CORE_V1_TYPES else "io.k8s.apimachinery.pkg.apis.meta"
        node["$ref"] = f"https://kubernetes.io/api/_definitions.json#/$defs/{package}.{target}"
    for value in node.values():
        _point_refs_at_core(value, local)


_CORE_V1_TYPES = {"v1.Container", "v1.HTTPGetAction", "v1.EnvVar", "v1.Volume", "v1.VolumeMount"}


def _kubernetes_to_jsonschema(node: Any, strict: bool) -> None:
    """Turn OpenAPI v3 `nullable` into JSON Schema and, in strict mode, close every object that lists
    its properties. Subschemas under allOf/anyOf/oneOf/not only constrain values (structural-schema
    rule), so they are left open."""
    if not isinstance(node, dict):
        return
    if node.get("nullable") is True and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    if (
        strict
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        node["additionalProperties"] = False
    for child in (node.get("properties") or {}).values():
        _kubernetes_to_jsonschema(child, strict)
    for key in ("items", "additionalProperties"):
        _kubernetes_to_jsonschema(node.get(key), strict)


# --- CEL rules jsonschema cannot evaluate ------------------------------------------------------------


def _cel_rules(
    validator: jsonschema.protocols.Validator, rules: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    """Evaluate the x-kubernetes-validations rules we recognise; others (rare, mostly cross-field)
    are skipped, so this only ever adds failures the API server would also report."""
    for rule in rules if isinstance(rules, list) else []:
        match = _CEL_MIN_DURATION.match(str(rule.get("rule", "")).strip())
        if match and isinstance(instance, str):
            minimum = _parse_duration(match.group(1))
            value = _parse_duration(instance)
            if value is None or minimum is None or value < minimum:
                yield ValidationError(rule.get("message") or f"failed rule {rule['rule']!r}: {instance!r}")


def _parse_duration(text: str) -> float | None:
    """Seconds in a Go duration ("300s", "1m30s", "1ms"), or None if it is not one."""
    if not GO_DURATION.match(text):
        return None
    sign = -1.0 if text.startswith("-") else 1.0
    return sign * sum(float(n) * _DURATION_UNIT[u] for n, u in _DURATION_PART.findall(text))


_CRD_VALIDATOR: Callable[..., jsonschema.protocols.Validator] = jsonschema.validators.extend(
    jsonschema.Draft4Validator, {"x-kubernetes-validations": _cel_rules}
)


# --- what the API server checks outside the schema -------------------------------------------------


def _semantic_problems(obj: dict[str, Any]) -> Iterator[str]:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        yield from _metadata_problems(metadata, (obj.get("apiVersion"), obj.get("kind")), "metadata")
    yield from _quantity_problems(obj, "")
    yield from _selector_problems(obj)


def _metadata_problems(metadata: dict[str, Any], api_kind: tuple[Any, Any], path: str) -> Iterator[str]:
    name = metadata.get("name")
    if name is None and path == "metadata" and not metadata.get("generateName"):
        yield f"{path}.name: required"
    elif name is not None:
        if api_kind in DNS1035_NAMED:
            if not isinstance(name, str) or len(name) > 63 or not DNS1035_LABEL.match(name):
                yield f"{path}.name: {name!r} is not an RFC 1035 label (a Service name: start with a letter)"
        elif not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
            yield f"{path}.name: {name!r} is not a DNS-1123 subdomain"
    namespace = metadata.get("namespace")
    if namespace is not None and (
        not isinstance(namespace, str) or len(namespace) > 63 or not DNS1123_LABEL.match(namespace)
    ):
        yield f"{path}.namespace: {namespace!r} is not a DNS-1123 label"
    for key, value in (metadata.get("labels") or {}).items():
        yield from _qualified_name_problems(key, f"{path}.labels[{key!r}]")
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            yield f"{path}.labels[{key!r}]: value {value!r} is not a valid label value"
    annotations = metadata.get("annotations") or {}
    for key, value in annotations.items():
        yield from _qualified_name_problems(key, f"{path}.annotations[{key!r}]")
        if not isinstance(value, str):
            yield f"{path}.annotations[{key!r}]: value must be a string, got {value!r}"
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        yield f"{path}.annotations: {size} bytes; the limit is {MAX_ANNOTATIONS_BYTES}"


def _qualified_name_problems(key: Any, path: str) -> Iterator[str]:
    prefix, _, name = str(key).rpartition("/")
    if not isinstance(key, str) or len(name) > 63 or not QUALIFIED_NAME.match(name):
        yield f"{path}: key {key!r} is not a qualified name"
    elif prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        yield f"{path}: key prefix {prefix!r} is not a DNS-1123 subdomain"


def _quantity_problems(node: Any, path: str) -> Iterator[str]:
    """Every `resources.requests` / `resources.limits` value must parse as a resource.Quantity."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _quantity_problems(item, f"{path}[{i}]")
    elif isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "resources" and isinstance(value, dict):
                for bound in ("requests", "limits"):
                    for resource, amount in (value.get(bound) or {}).items():
                        if isinstance(amount, bool) or not QUANTITY.match(str(amount)):
                            yield f"{where}.{bound}[{resource!r}]: {amount!r} is not a quantity"
            yield from _quantity_problems(value, where)


def _selector_problems(obj: dict[str, Any]) -> Iterator[str]:
    """Workloads: the selector must match the pod template's labels, or the API rejects the object."""
    spec = obj.get("spec")
    if obj.get("apiVersion") != "apps/v1" or not isinstance(spec, dict):
        return
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    for key, value in selector.items():
        if labels.get(key) != value:
            yield f"spec.selector.matchLabels[{key!r}]: {value!r} does not match the pod template's labels"
    template_meta = (spec.get("template") or {}).get("metadata")
    if isinstance(template_meta, dict):
        for problem in _metadata_problems(template_meta, (None, None), "spec.template.metadata"):
            if not problem.startswith("spec.template.metadata.name"):
                yield problem


def _error_path(error: ValidationError) -> str:
    """Dotted path of the bad field; for an unexpected property, the path of that property itself."""
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path]
    path = "".join(parts).lstrip(".") or "<root>"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        if extra:
            prefix = "" if path == "<root>" else f"{path}."
            return ", ".join(f"{prefix}{k}" for k in extra)
    return path

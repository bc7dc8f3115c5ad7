"""The serving spec: a model behind an HTTP endpoint, as a KServe `InferenceService` on the cluster or
a local model server speaking the same V1/V2 protocols.

    name: iris
    model_format: sklearn
    storage_uri: s3://models/iris          # or pvc://claim/path, or a local path (local backend)
    resources: {cpu: "1", memory: 2Gi}
    min_replicas: 1
    max_replicas: 4
    scale_metric: concurrency              # rps | cpu | gpu (DCGM GPU utilization, in percent)
    scale_target: 10
    canary_traffic_percent: 20

`ServingSpec.from_dict(raw, user=...)` checks it once, including that a local model path exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from cube_jupyter import fields as f
from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.fields import job_name
from cube_jupyter.jobs.resources import ResourceSpec
from cube_jupyter.names import validate_dns_label

ModelFormat = Literal["sklearn", "xgboost", "pytorch", "onnx", "custom"]
ScaleMetric = Literal["concurrency", "rps", "cpu", "gpu"]
MODEL_FORMATS = ("sklearn", "xgboost", "pytorch", "onnx", "custom")
SCALE_METRICS = ("concurrency", "rps", "cpu", "gpu")
PROTOCOL_VERSIONS = ("v1", "v2")
# KServe serves ONNX with Triton, which speaks only the V2 (Open Inference) protocol.
V2_ONLY_FORMATS = ("onnx",)
STORAGE_SCHEMES = ("s3", "pvc")
PERCENT_METRICS = ("cpu", "gpu")  # targets are utilization percentages
DEFAULT_UTILIZATION_TARGET = 80
# S3 bucket names: 3-63 lower-case letters, digits, dots and hyphens.
S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
RUNTIME_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")

SERVING_KEYS = (
    "name",
    "model_format",
    "storage_uri",
    "image",
    "command",
    "args",
    "resources",
    "min_replicas",
    "max_replicas",
    "scale_metric",
    "scale_target",
    "canary_traffic_percent",
    "protocol_version",
    "runtime_version",
    "env",
)


@dataclass(frozen=True)
class ServingSpec:
    """A validated model deployment."""

    name: str
    user: str
    model_format: ModelFormat
    storage_uri: str | None  # s3://, pvc:// or an absolute local path; None only for custom images
    image: str | None = None  # custom only
    command: tuple[str, ...] | None = None  # custom only
    args: tuple[str, ...] = ()  # custom only
    resources: ResourceSpec = field(default_factory=ResourceSpec)
    min_replicas: int = 1
    max_replicas: int = 1
    scale_metric: ScaleMetric = "concurrency"
    scale_target: int | None = None  # None: the autoscaler's default (percent for cpu and gpu)
    canary_traffic_percent: int | None = None
    protocol_version: Literal["v1", "v2"] = "v1"
    runtime_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def storage_scheme(self) -> str | None:
        """'s3', 'pvc', 'file' (a local path) or None."""
        if self.storage_uri is None:
            return None
        scheme = urlsplit(self.storage_uri).scheme
        return scheme if scheme in STORAGE_SCHEMES else "file"

    @property
    def total_gpus(self) -> int:
        """GPUs held at the most replicas, for the quota."""
        return self.resources.gpu * self.max_replicas

    @classmethod
    def from_dict(cls, raw: object, user: str, *, base_dir: str | Path | None = None) -> ServingSpec:
        """Parse a user's spec; a relative local `storage_uri` is resolved against `base_dir` (the
        caller's working directory by default) and must exist."""
        body = f.mapping(raw, "spec")
        f.reject_unknown(body, SERVING_KEYS, "")
        user = f.string(user, "user")
        name = job_name(body.get("name"))
        model_format = cast(
            ModelFormat, f.choice(body.get("model_format"), "model_format", MODEL_FORMATS, fold_case=True)
        )
        custom = model_format == "custom"
        for key in ("image", "command", "args"):
            if body.get(key) is not None and not custom:
                raise InvalidInput(f"{key} applies only to model_format custom", field=key)
        image = f.optional_image(body.get("image"), "image")
        if custom and image is None:
            raise InvalidInput("model_format custom needs an image (a model server)", field="image")
        storage_raw = body.get("storage_uri")
        if storage_raw is None and not custom:
            raise InvalidInput("storage_uri is required: s3://, pvc:// or a local path", field="storage_uri")
        storage_uri = None if storage_raw is None else parse_storage_uri(storage_raw, base_dir)
        resources = ResourceSpec.from_dict(body.get("resources"), "resources")
        min_replicas = f.integer(body.get("min_replicas", 1), "min_replicas", minimum=0)
        max_replicas = f.integer(body.get("max_replicas", max(min_replicas, 1)), "max_replicas", minimum=1)
        if min_replicas > max_replicas:
            raise InvalidInput(
                f"min_replicas ({min_replicas}) must not exceed max_replicas ({max_replicas})",
                field="min_replicas",
            )
        scale_metric = cast(
            ScaleMetric, f.choice(body.get("scale_metric", "concurrency"), "scale_metric", SCALE_METRICS)
        )
        if scale_metric == "gpu" and resources.gpu < 1:
            raise InvalidInput("scale_metric gpu needs resources.gpu >= 1", field="scale_metric")
        scale_target = _scale_target(body.get("scale_target"), scale_metric)
        canary = body.get("canary_traffic_percent")
        if canary is not None:
            canary = f.integer(canary, "canary_traffic_percent", minimum=0, maximum=100)
        default_protocol = "v2" if model_format in V2_ONLY_FORMATS else "v1"
        protocol = f.choice(
            body.get("protocol_version", default_protocol), "protocol_version", PROTOCOL_VERSIONS
        )
        if protocol != "v2" and model_format in V2_ONLY_FORMATS:
            raise InvalidInput(
                f"{model_format} models are served by Triton, which speaks only protocol v2",
                field="protocol_version",
            )
        runtime_version = f.optional_string(body.get("runtime_version"), "runtime_version")
        if runtime_version is not None and not RUNTIME_VERSION.match(runtime_version):
            raise InvalidInput(
                f"runtime_version {runtime_version!r} must be an image tag (e.g. '1.5.0')",
                field="runtime_version",
            )
        command = None if body.get("command") is None else f.argv(body["command"], "command")
        return cls(
            name=name,
            user=user,
            model_format=model_format,
            storage_uri=storage_uri,
            image=image,
            command=command or None,
            args=() if body.get("args") is None else f.argv(body["args"], "args"),
            resources=resources,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            scale_metric=scale_metric,
            scale_target=scale_target,
            canary_traffic_percent=canary,
            protocol_version=cast(Any, protocol),
            runtime_version=runtime_version,
            env=f.env(body.get("env") or {}, "env"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The normalized spec in the raw format: `from_dict` of it is equal."""
        body: dict[str, Any] = {"name": self.name, "model_format": self.model_format}
        if self.storage_uri is not None:
            body["storage_uri"] = self.storage_uri
        if self.image is not None:
            body["image"] = self.image
        if self.command is not None:
            body["command"] = list(self.command)
        if self.args:
            body["args"] = list(self.args)
        if self.resources.to_dict():
            body["resources"] = self.resources.to_dict()
        body.update(
            min_replicas=self.min_replicas, max_replicas=self.max_replicas, scale_metric=self.scale_metric
        )
        if self.scale_target is not None:
            body["scale_target"] = self.scale_target
        if self.canary_traffic_percent is not None:
            body["canary_traffic_percent"] = self.canary_traffic_percent
        body["protocol_version"] = self.protocol_version
        if self.runtime_version is not None:
            body["runtime_version"] = self.runtime_version
        if self.env:
            body["env"] = dict(self.env)
        return body


def parse_storage_uri(value: object, base_dir: str | Path | None = None) -> str:
    """`s3://bucket[/key]`, `pvc://claim[/path]`, or a local file or directory (a path or file:// URL)
    that must exist; a local one comes back absolute."""
    where = "storage_uri"
    uri = f.string(value, where).strip()
    parts = urlsplit(uri)
    if parts.scheme in STORAGE_SCHEMES:
        if ".." in Path(parts.path).parts or parts.query or parts.fragment:
            raise InvalidInput(f"{where} {uri!r} may not contain '..', a query or a fragment", field=where)
        if parts.scheme == "s3" and not S3_BUCKET.match(parts.netloc):
            raise InvalidInput(f"{where} {uri!r}: {parts.netloc!r} is not an S3 bucket name", field=where)
        if parts.scheme == "pvc":
            try:
                validate_dns_label(parts.netloc, where, 253)
            except InvalidInput:
                raise InvalidInput(
                    f"{where} {uri!r}: {parts.netloc!r} is not a PVC name (pvc://CLAIM/PATH)", field=where
                ) from None
        return uri
    if parts.scheme not in ("", "file"):
        raise InvalidInput(
            f"{where} {uri!r}: scheme {parts.scheme!r} is not supported; use s3://, pvc:// or a local path",
            field=where,
        )
    path = Path(parts.path if parts.scheme == "file" else uri).expanduser()
    if not path.is_absolute():
        path = Path(base_dir or Path.cwd()) / path
    if not path.exists():
        raise InvalidInput(f"{where} {uri!r}: model file not found ({path})", field=where)
    return str(path.resolve())


def _scale_target(value: object, metric: str) -> int | None:
    if value is None:
        return DEFAULT_UTILIZATION_TARGET if metric in PERCENT_METRICS else None
    maximum = 100 if metric in PERCENT_METRICS else None
    return f.integer(value, "scale_target", minimum=1, maximum=maximum)

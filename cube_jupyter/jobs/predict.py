"""Send inputs to a served model over KServe's V1 or V2 REST protocol and return its predictions.

    predict("http://127.0.0.1:40123/v1/models/iris", [[6.8, 2.8, 4.8, 1.4]])          # → [1]
    predict("http://iris.team-a.example.com", [[6.8, 2.8, 4.8, 1.4]], protocol="v2")   # → [1]

The endpoint is a model URL (`…/v1/models/NAME` or `…/v2/models/NAME`, as the local backend reports
it) or a KServe host URL, whose first DNS label is the InferenceService's name; `model=` names the
model when neither says it. V1 sends `{"instances": inputs}` and returns `predictions`; V2 sends the
inputs as one FP32/INT64/BOOL/BYTES tensor (or the tensors given, as dicts) and returns the first
output's data shaped as the output says (every output with `all_outputs=True`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import re
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from cube_jupyter.errors import BackendUnavailable, InvalidInput, NotFound

MODEL_PATH = re.compile(r"^(?P<base>.*?)/v[12]/models/(?P<name>[^/:]+)")
PROTOCOLS = ("v1", "v2")


def predict(
    endpoint: str,
    inputs: Any,
    protocol: str = "v1",
    *,
    model: str | None = None,
    timeout: float = 60.0,
    all_outputs: bool = False,
) -> Any:
    """The model's predictions for `inputs` (a list of instances, or V2 tensors as dicts)."""
    if protocol not in PROTOCOLS:
        raise InvalidInput(f"protocol {protocol!r} is not one of: v1, v2", field="protocol")
    base, name = model_url(endpoint, model)
    if protocol == "v1":
        if not isinstance(inputs, list):
            raise InvalidInput("inputs must be a list of instances", field="inputs")
        reply = _post(f"{base}/v1/models/{quote(name)}:predict", {"instances": inputs}, timeout)
        if "predictions" not in reply:
            raise BackendUnavailable(
                f"model {name!r} answered without predictions: {reply}", field="endpoint"
            )
        return reply["predictions"]
    reply = _post(f"{base}/v2/models/{quote(name)}/infer", {"inputs": v2_tensors(inputs)}, timeout)
    outputs = reply.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        raise BackendUnavailable(f"model {name!r} answered without outputs: {reply}", field="endpoint")
    if all_outputs:
        return {o["name"]: _shaped(o["data"], o["shape"]) for o in outputs}
    return _shaped(outputs[0]["data"], outputs[0]["shape"])


def model_url(endpoint: str, model: str | None = None) -> tuple[str, str]:
    """(base URL, model name) for an endpoint; InvalidInput when the name cannot be known."""
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"endpoint {endpoint!r} must be an http(s) URL", field="endpoint")
    match = MODEL_PATH.match(parts.path)
    path = match.group("base") if match else parts.path.rstrip("/")
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    name = model or (match.group("name") if match else None) or _host_model(parts.hostname)
    if not name:
        raise InvalidInput(
            f"endpoint {endpoint!r} does not say which model: give a model URL (…/v1/models/NAME) or model=",
            field="endpoint",
        )
    return base, name


def _host_model(host: str) -> str | None:
    """KServe hosts are `{name}.{namespace}.{domain}`; an IP or a single label names no model."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.split(".")
    return labels[0] if len(labels) > 2 else None


def v2_tensors(inputs: Any) -> list[dict[str, Any]]:
    """V2 input tensors: given ones (dicts with name, shape, datatype, data) as they are, or one
    tensor `input-0` made from a (nested) list of numbers, booleans or strings."""
    if isinstance(inputs, list) and inputs and all(isinstance(t, dict) for t in inputs):
        return inputs
    if isinstance(inputs, dict):
        return [inputs]
    shape, flat = _flatten(inputs)
    return [{"name": "input-0", "shape": shape, "datatype": _datatype(flat), "data": flat}]


def _flatten(value: Any) -> tuple[list[int], list[Any]]:
    if not isinstance(value, list):
        raise InvalidInput("inputs must be a list (of instances) or V2 tensors", field="inputs")
    if value and all(isinstance(v, list) for v in value):
        shapes_flats = [_flatten(v) for v in value]
        inner = shapes_flats[0][0]
        if any(s != inner for s, _ in shapes_flats):
            raise InvalidInput("inputs are ragged: every instance must have the same shape", field="inputs")
        return [len(value), *inner], [x for _, flat in shapes_flats for x in flat]
    if any(isinstance(v, list) for v in value):
        raise InvalidInput("inputs mix lists and scalars at one level", field="inputs")
    return [len(value)], list(value)


def _datatype(flat: list[Any]) -> str:
    if flat and all(isinstance(v, bool) for v in flat):
        return "BOOL"
    if flat and all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
        return "INT64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat):
        return "FP32"
    return "BYTES"


def _shaped(data: list[Any], shape: list[int]) -> Any:
    """Flat V2 data back into nested lists of `shape`."""
    if len(shape) <= 1:
        return list(data)
    step = math.prod(shape[1:])
    return [_shaped(data[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with _opener(url).open(request, timeout=timeout) as response:
            reply = json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        message = _error_message(exc)
        if exc.code == 404:
            raise NotFound(f"no such model at {url}: {message}", field="name") from None
        if 400 <= exc.code < 500:
            raise InvalidInput(
                f"the model refused the request ({exc.code}): {message}", field="inputs"
            ) from None
        raise BackendUnavailable(f"the model failed ({exc.code}): {message}", field="endpoint") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BackendUnavailable(f"model endpoint {url} is unreachable: {reason}", field="endpoint") from None
    if not isinstance(reply, dict):
        raise BackendUnavailable(
            f"model endpoint {url} answered {reply!r}, not a JSON object", field="endpoint"
        )
    return reply


def _opener(url: str) -> urllib.request.OpenerDirector:
    """No proxy for a loopback model server (a proxy from the environment could not reach it)."""
    host = urlsplit(url).hostname or ""
    loopback = host == "localhost"
    with contextlib.suppress(ValueError):
        loopback = loopback or ipaddress.ip_address(host).is_loopback
    if loopback:
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"null")
    except ValueError:
        return exc.reason if isinstance(exc.reason, str) else str(exc)
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    return str(body)

"""Cluster GPU readings from the DCGM exporter's metrics, through Prometheus's HTTP API.

DCGM labels each GPU with the pod using it (`namespace`, `pod`, `container`). How those labels arrive
depends on the scrape config: as-is with `honor_labels: true`; as `exported_namespace`/`exported_pod`/
`exported_container` with `honor_labels: false`, where the plain ones then name the exporter's own
pod. Hosts come as `Hostname`, `hostname` or only the scrape `instance`; UUIDs as `UUID` or `uuid`.
All of these are read here. The namespace filter is in PromQL, so a big cluster sends only the
caller's series, with every value escaped: user text is never pasted into a query.

A MIG slice is its own device here (DCGM reports each with the parent's UUID plus `GPU_I_ID`; its
`uuid` becomes `<parent UUID>/mig<GPU_I_ID>`), since each slice can belong to a different pod.

One limitation: on an `honor_labels: false` target whose series carry no `exported_*` label at all
(every GPU unallocated), the plain `pod`/`namespace` of the exporter cannot be told from DCGM's.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from cube_jupyter.errors import BackendUnavailable, InvalidInput
from cube_jupyter.gpu.model import GpuDevice, MigInstance, Series
from cube_jupyter.gpu.sources import NoGpuVisible

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # 0..1; DCGM's utilization for MIG slices (no GPU_UTIL)
METRICS = (UTIL, FB_USED, FB_FREE, POWER, TEMP, SM_CLOCK, ENGINE_ACTIVE)

HistoryMetric = Literal["utilization_pct", "memory_used_mib"]
MAX_POINTS = 11000  # Prometheus refuses a range query with more points per series

# Label variants, first present wins.
HOST_LABELS = ("Hostname", "hostname", "instance")
UUID_LABELS = ("UUID", "uuid")
MODEL_LABELS = ("modelName", "modelname")
WORKLOAD_LABELS = ("namespace", "pod", "container")


def promql_string(value: str) -> str:
    """A PromQL string literal holding exactly `value` (JSON's escapes are a subset of PromQL's)."""
    return json.dumps(value, ensure_ascii=False)


def regex_literal(value: str) -> str:
    """`value` as an RE2 regular expression matching only itself (Go's regexp.QuoteMeta)."""
    return "".join("\\" + char if char in "\\.+*?()|[]{}^$" else char for char in value)


def label_matcher(label: str, values: Collection[str]) -> str:
    """`label="v"` for one value, `label=~"v1|v2"` (each value a literal) for several."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return f"{label}={promql_string(ordered[0])}"
    return f"{label}=~{promql_string('|'.join(regex_literal(value) for value in ordered))}"


def selector(metrics: Iterable[str], namespaces: Collection[str] | None) -> str | None:
    """The series of `metrics` in `namespaces` (either label variant); None when no namespace can match."""
    names = list(metrics)
    prefix, matchers = (
        (names[0], []) if len(names) == 1 else ("", [f"__name__=~{promql_string('|'.join(names))}"])
    )
    if namespaces is None:
        return prefix + "{" + ", ".join(matchers) + "}"
    wanted = {namespace for namespace in namespaces if namespace}
    if not wanted:
        return None
    return " or ".join(
        prefix + "{" + ", ".join([*matchers, label_matcher(label, wanted)]) + "}"
        for label in ("namespace", "exported_namespace")
    )


@dataclass(frozen=True)
class _Labels:
    """What one DCGM series says about its GPU, whichever label variant carried it."""

    key: tuple[str, str]  # (host, device uuid) — a MIG slice has its own uuid
    uuid: str
    index: int
    host: str | None
    name: str | None
    mig: tuple[int, str | None] | None  # (GPU instance id, profile)
    namespace: str | None
    pod: str | None
    container: str | None


def _first(labels: dict[str, str], names: Iterable[str]) -> str | None:
    for name in names:
        if labels.get(name):
            return labels[name]
    return None


def _target(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("job", ""), labels.get("instance", "")


def _exported_targets(metrics: Iterable[dict[str, str]]) -> set[tuple[str, str]]:
    """Scrape targets whose DCGM pod labels arrive as exported_* (honor_labels: false)."""
    return {
        _target(labels)
        for labels in metrics
        if any(f"exported_{label}" in labels for label in WORKLOAD_LABELS)
    }


def _parse_labels(labels: dict[str, str], exported: bool) -> _Labels | None:
    uuid = _first(labels, UUID_LABELS)
    if uuid is None:
        return None
    host = _first(labels, HOST_LABELS)
    name = _first(labels, MODEL_LABELS)
    mig = None
    if labels.get("GPU_I_ID"):
        profile = labels.get("GPU_I_PROFILE") or None
        mig = (int(labels["GPU_I_ID"]), profile)
        uuid = f"{uuid}/mig{labels['GPU_I_ID']}"
        if name and profile:
            name = f"{name} MIG {profile}"
    gpu = labels.get("gpu", "")
    workload = [labels.get(f"exported_{label}" if exported else label) or None for label in WORKLOAD_LABELS]
    return _Labels(
        key=(host or "", uuid),
        uuid=uuid,
        index=int(gpu) if gpu.isdigit() else -1,
        host=host,
        name=name,
        mig=mig,
        namespace=workload[0],
        pod=workload[1],
        container=workload[2],
    )


def _value(text: Any) -> float | None:
    try:
        number = float(text)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class PrometheusSource:
    """Reads DCGM exporter metrics from Prometheus: current values (`read`) and history (`history`)."""

    name = "prometheus"

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"prometheus_url {url!r} is not an http(s) URL", field="prometheus_url")
        self._authorization: str | None = None
        if parts.username is not None:
            credentials = (
                f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            )
            self._authorization = "Basic " + base64.b64encode(credentials.encode()).decode()
            netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
            parts = parts._replace(netloc=netloc)
        self.url = urllib.parse.urlunsplit(parts).rstrip("/")  # never holds credentials: it goes in messages
        self.timeout = timeout

    # -- current ---------------------------------------------------------------------------------

    def read(self, namespaces: Collection[str] | None = None) -> list[GpuDevice]:
        """Every GPU DCGM reports now (those of pods in `namespaces` when given); NoGpuVisible when
        Prometheus has no DCGM series at all."""
        expression = selector(METRICS, namespaces)
        results = self._query("/api/v1/query", {"query": expression}) if expression else []
        if not results and (namespaces is None or not self._has_dcgm()):
            raise NoGpuVisible(
                f"Prometheus at {self.url} has no DCGM exporter metrics "
                "(is dcgm-exporter running and scraped?)"
            )
        exported = _exported_targets(result["metric"] for result in results)
        values: dict[tuple[str, str], dict[str, float | None]] = defaultdict(dict)
        labels_by_key: dict[tuple[str, str], _Labels] = {}
        for result in results:
            metric = result["metric"]
            labels = _parse_labels(metric, _target(metric) in exported)
            if labels is None or not _wanted(labels, namespaces):
                continue
            labels_by_key.setdefault(labels.key, labels)
            values[labels.key][metric.get("__name__", "")] = _value(result["value"][1])
        devices = [_device(labels_by_key[key], values[key]) for key in labels_by_key]
        return sorted(devices, key=lambda device: (device.host or "", device.index, device.uuid))

    def _has_dcgm(self) -> bool:
        expression = f"count({selector(METRICS, None)})"
        return bool(self._query("/api/v1/query", {"query": expression}))

    # -- history ---------------------------------------------------------------------------------

    def history(
        self, namespaces: Collection[str] | None, start: float, end: float, step: float
    ) -> list[Series]:
        """Utilization and memory from `start` to `end` every `step` seconds, per GPU (`gpu:<uuid>`)
        and per pod (`pod:<namespace>/<pod>`: mean utilization, summed memory over its GPUs)."""
        if not step > 0:
            raise InvalidInput(f"step must be more than 0 seconds, not {step}", field="step")
        if end < start:
            raise InvalidInput("start must not be after end", field="start")
        if (end - start) / step > MAX_POINTS:
            raise InvalidInput(
                f"{start}..{end} every {step}s is more than {MAX_POINTS} points; use a larger step",
                field="step",
            )
        utilization = selector([UTIL], namespaces)
        if utilization is None:
            return []
        engine = selector([ENGINE_ACTIVE], namespaces)
        queries: dict[HistoryMetric, str | None] = {
            "utilization_pct": f"({utilization}) or (({engine}) * 100)",
            "memory_used_mib": selector([FB_USED], namespaces),
        }
        window = {"start": repr(float(start)), "end": repr(float(end)), "step": repr(float(step))}
        series: list[Series] = []
        for metric, expression in queries.items():
            results = (
                self._query("/api/v1/query_range", {"query": expression, **window}) if expression else []
            )
            series.extend(_history_series(metric, results, namespaces))
        return series

    # -- HTTP ------------------------------------------------------------------------------------

    def _query(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """POST one query to the HTTP API; the `result` list, or BackendUnavailable naming the URL."""
        request = urllib.request.Request(
            self.url + path,
            data=urllib.parse.urlencode(params).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
            method="POST",
        )
        if self._authorization:
            request.add_header("Authorization", self._authorization)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as err:  # Prometheus explains a refused query in a JSON body
            status, body = err.code, err.read()
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            reason = getattr(err, "reason", None) or err
            raise BackendUnavailable(
                f"Prometheus at {self.url} is unreachable: {reason}", field="prometheus_url"
            ) from None
        try:
            payload = json.loads(body)
        except ValueError:
            raise BackendUnavailable(
                f"{self.url} did not answer as Prometheus does (HTTP {status}, not JSON)",
                field="prometheus_url",
            ) from None
        if not isinstance(payload, dict) or payload.get("status") != "success":
            error = payload.get("error") if isinstance(payload, dict) else None
            raise BackendUnavailable(
                f"Prometheus at {self.url} refused the query (HTTP {status}): {error or 'no status success'}",
                field="prometheus_url",
            )
        result = (payload.get("data") or {}).get("result")
        if not isinstance(result, list):
            raise BackendUnavailable(
                f"Prometheus at {self.url} answered without a result", field="prometheus_url"
            )
        return result


def _wanted(labels: _Labels, namespaces: Collection[str] | None) -> bool:
    return namespaces is None or (labels.namespace is not None and labels.namespace in namespaces)


def _device(labels: _Labels, values: dict[str, float | None]) -> GpuDevice:
    used, free = values.get(FB_USED), values.get(FB_FREE)
    total = used + free if used is not None and free is not None else None
    utilization = values.get(UTIL)
    if utilization is None and values.get(ENGINE_ACTIVE) is not None:
        utilization = 100.0 * values[ENGINE_ACTIVE]  # type: ignore[operator]
    mig: tuple[MigInstance, ...] = ()
    if labels.mig is not None:
        gpu_instance, profile = labels.mig
        mig = (MigInstance(gpu_instance, None, None, profile, used, total),)
    return GpuDevice(
        index=labels.index,
        uuid=labels.uuid,
        name=labels.name,
        host=labels.host,
        utilization_pct=utilization,
        memory_used_mib=used,
        memory_total_mib=total,
        temperature_c=values.get(TEMP),
        power_w=values.get(POWER),
        sm_clock_mhz=values.get(SM_CLOCK),
        namespace=labels.namespace,
        pod=labels.pod,
        container=labels.container,
        mig=mig,
    )


def _history_series(
    metric: HistoryMetric, results: list[dict[str, Any]], namespaces: Collection[str] | None
) -> list[Series]:
    """Per-GPU series, then per-pod series aggregated at each evaluation time."""
    exported = _exported_targets(result["metric"] for result in results)
    per_gpu: dict[str, dict[float, float]] = defaultdict(dict)
    per_pod: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        labels = _parse_labels(result["metric"], _target(result["metric"]) in exported)
        if labels is None or not _wanted(labels, namespaces):
            continue
        for timestamp, text in result.get("values", []):
            value = _value(text)
            if value is None:
                continue
            per_gpu[labels.uuid][float(timestamp)] = value
            if labels.namespace and labels.pod:
                per_pod[f"{labels.namespace}/{labels.pod}"][float(timestamp)].append(value)
    combine = sum if metric == "memory_used_mib" else (lambda values: sum(values) / len(values))
    series = [
        Series(f"gpu:{uuid}", metric, tuple(sorted(points.items()))) for uuid, points in per_gpu.items()
    ]
    series += [
        Series(
            f"pod:{pod}", metric, tuple(sorted((t, float(combine(values))) for t, values in points.items()))
        )
        for pod, points in per_pod.items()
    ]
    return sorted(series, key=lambda item: item.key)

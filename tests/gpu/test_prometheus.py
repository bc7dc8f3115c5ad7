"""The Prometheus/DCGM source against a real Prometheus (Debian's) scraping local exporter pages:
a dcgm-exporter page for a 4-GPU node (tests/data/dcgm/exporter-page.txt) and its variations there."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cube_jupyter.errors import BackendUnavailable, InvalidInput
from cube_jupyter.gpu.model import GpuDevice, Series
from cube_jupyter.gpu.prometheus import PrometheusSource
from cube_jupyter.gpu.sources import NoGpuVisible
from tests.gpu.prometheus_server import DCGM_PAGES, NO_DCGM_PAGE, SAMPLE_PAGE, DcgmPrometheus

FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization_pct",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
}


def page_gpus(path: Path) -> dict[str, dict[str, Any]]:
    """What an exporter page says per GPU UUID, parsed independently of the code under test."""
    gpus: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            labels = sample.labels
            gpu = gpus.setdefault(labels.get("UUID") or labels["uuid"], {"labels": labels})
            gpu[sample.name] = sample.value
    return gpus


def by_uuid(devices: list[GpuDevice]) -> dict[str, GpuDevice]:
    return {device.uuid: device for device in devices}


def test_current_values_equal_the_sample_pages(prometheus_url: str) -> None:
    devices = PrometheusSource(prometheus_url).read()

    expected = page_gpus(SAMPLE_PAGE)
    assert sorted(by_uuid(devices)) == sorted(expected)
    for device in devices:
        page = expected[device.uuid]
        for metric, field in FIELDS.items():
            assert getattr(device, field) == page[metric], (device.uuid, field)
        assert device.memory_total_mib == page["DCGM_FI_DEV_FB_USED"] + page["DCGM_FI_DEV_FB_FREE"]
        assert device.index == int(page["labels"]["gpu"])
        assert device.host == page["labels"]["Hostname"] == "gpu-node-1"
        assert device.name == page["labels"]["modelName"]
        assert (device.namespace, device.pod, device.container) == (
            page["labels"]["namespace"] or None,
            page["labels"]["pod"] or None,
            page["labels"]["container"] or None,
        )
    assert [device.index for device in devices] == [0, 1, 2, 3]
    assert devices[3].pod is None  # the unallocated GPU


def test_namespace_filter_returns_only_those_pods_gpus(prometheus_url: str) -> None:
    source = PrometheusSource(prometheus_url)

    assert [(d.index, d.pod) for d in source.read(["cube-alice"])] == [
        (0, "alice-nb-0"),
        (1, "resnet-ddp-worker-0"),
    ]
    assert [d.pod for d in source.read({"cube-bob", "cube-nobody"})] == ["bob-lab-0"]
    assert source.read(["cube-nobody"]) == []
    assert source.read([]) == []
    assert source.read([""]) == []  # an empty namespace never matches the unallocated GPU


def test_lowercase_hostname_and_uuid_labels(dcgm_prometheus: DcgmPrometheus) -> None:
    page = DCGM_PAGES / "lowercase-labels.txt"
    dcgm_prometheus.serve(direct=page)

    devices = PrometheusSource(dcgm_prometheus.url).read()

    expected = page_gpus(page)
    assert sorted(by_uuid(devices)) == sorted(expected)
    assert {device.host for device in devices} == {"gpu-node-2"}
    for device in devices:
        assert device.utilization_pct == expected[device.uuid]["DCGM_FI_DEV_GPU_UTIL"]
    assert [d.pod for d in PrometheusSource(dcgm_prometheus.url).read(["cube-carol"])] == [
        "train-0",
        "train-0",
    ]


def test_honor_labels_false_pod_labels_arrive_as_exported(dcgm_prometheus: DcgmPrometheus) -> None:
    """The sample page scraped with honor_labels: false: DCGM's pod labels become exported_*, and the
    plain ones name the exporter's pod, which must not be taken for the user's."""
    dcgm_prometheus.serve(direct=NO_DCGM_PAGE, relabelled=SAMPLE_PAGE)
    stored = dcgm_prometheus.query('DCGM_FI_DEV_GPU_UTIL{gpu="0"}')[0]["metric"]
    assert (stored["exported_pod"], stored["pod"]) == ("alice-nb-0", "nvidia-dcgm-exporter-7x9kq")
    source = PrometheusSource(dcgm_prometheus.url)

    devices = source.read()

    expected = page_gpus(SAMPLE_PAGE)
    assert [(d.namespace, d.pod, d.container) for d in devices] == [
        (
            gpu["labels"]["namespace"] or None,
            gpu["labels"]["pod"] or None,
            gpu["labels"]["container"] or None,
        )
        for gpu in sorted(expected.values(), key=lambda gpu: gpu["labels"]["gpu"])
    ]
    assert [d.pod for d in source.read(["cube-alice"])] == ["alice-nb-0", "resnet-ddp-worker-0"]
    assert source.read(["gpu-operator"]) == []


def test_exported_labels_written_in_the_page(dcgm_prometheus: DcgmPrometheus) -> None:
    dcgm_prometheus.serve(direct=DCGM_PAGES / "exported-labels.txt", relabelled=NO_DCGM_PAGE)

    devices = PrometheusSource(dcgm_prometheus.url).read()

    assert [(d.host, d.namespace, d.pod, d.container, d.utilization_pct) for d in devices] == [
        ("gpu-node-3", "cube-alice", "alice-nb-1", "notebook", 64),
        ("gpu-node-3", None, None, None, 0),
    ]


def test_mig_slices_are_devices_of_their_own(dcgm_prometheus: DcgmPrometheus) -> None:
    dcgm_prometheus.serve(direct=DCGM_PAGES / "mig.txt", relabelled=NO_DCGM_PAGE)
    source = PrometheusSource(dcgm_prometheus.url)

    parent, erin, frank = source.read()

    uuid = "GPU-7e3a1c55-84d2-4b1f-9c0e-2a6b8d4f1e93"
    assert (parent.uuid, parent.temperature_c, parent.power_w, parent.pod) == (uuid, 47, 96.3, None)
    assert (erin.uuid, erin.pod, erin.name) == (
        f"{uuid}/mig1",
        "erin-nb-0",
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
    )
    assert erin.utilization_pct == pytest.approx(42.0)  # DCGM_FI_PROF_GR_ENGINE_ACTIVE 0.42
    assert (erin.memory_used_mib, erin.memory_total_mib) == (11876, 11876 + 28316)
    assert [(m.gpu_instance_id, m.name) for m in erin.mig] == [(1, "3g.40gb")]
    assert (frank.uuid, frank.namespace, frank.utilization_pct) == (f"{uuid}/mig2", "cube-frank", 0)
    assert [d.uuid for d in source.read(["cube-frank"])] == [f"{uuid}/mig2"]


def test_label_values_are_escaped_not_injected(dcgm_prometheus: DcgmPrometheus) -> None:
    dcgm_prometheus.serve(direct=DCGM_PAGES / "escaping.txt", relabelled=NO_DCGM_PAGE)
    source = PrometheusSource(dcgm_prometheus.url)

    assert [d.pod for d in source.read(['we"ird\\ns'])] == ["odd-0"]
    assert [d.pod for d in source.read(['we"ird\\ns', "team.a"])] == ["odd-0", "a-0"]
    assert [d.pod for d in source.read(["team.a"])] == ["a-0"]  # "." is not a regex wildcard
    assert source.read([".*", "nobody"]) == []
    assert source.read(['x"} or {__name__=~"DCGM.*']) == []
    assert source.read(['x", namespace!="']) == []


def test_no_dcgm_series_is_no_gpu_visible(dcgm_prometheus: DcgmPrometheus) -> None:
    dcgm_prometheus.serve(direct=NO_DCGM_PAGE, relabelled=NO_DCGM_PAGE)
    source = PrometheusSource(dcgm_prometheus.url)

    for namespaces in (None, ["cube-alice"], []):
        with pytest.raises(NoGpuVisible) as caught:
            source.read(namespaces)
        assert caught.value.message.startswith(
            f"No GPU visible: Prometheus at {dcgm_prometheus.url} has no DCGM"
        )


def _points(series: list[Series], key: str, metric: str) -> tuple[tuple[float, float], ...]:
    (found,) = [s for s in series if s.key == key and s.metric == metric]
    return found.points


def test_history_has_a_point_per_step_per_gpu_and_per_pod(dcgm_prometheus: DcgmPrometheus) -> None:
    page = DCGM_PAGES / "lowercase-labels.txt"
    dcgm_prometheus.serve(direct=page, relabelled=NO_DCGM_PAGE)
    since = time.time()
    source = PrometheusSource(dcgm_prometheus.url)
    gpu0 = "GPU-3a9d2c1e-5b7f-4e8a-9c6d-1f2e3a4b5c6d"
    history: list[Series] = []

    def several_points() -> bool:
        history[:] = source.history(["cube-carol", "cube-dave"], since - 1, time.time(), 1.0)
        return len(_points(history, f"gpu:{gpu0}", "utilization_pct")) >= 3

    dcgm_prometheus.wait_until(several_points, 30, "three points of history")

    expected = page_gpus(page)
    keys = {(s.key, s.metric) for s in history}
    gpu_keys = {f"gpu:{uuid}" for uuid, gpu in expected.items() if gpu["labels"]["namespace"]}
    pod_keys = {"pod:cube-carol/train-0", "pod:cube-dave/dave-nb-0"}
    assert keys == {(key, m) for key in gpu_keys | pod_keys for m in ("utilization_pct", "memory_used_mib")}
    for uuid in (u for u, gpu in expected.items() if gpu["labels"]["namespace"]):
        assert {v for _, v in _points(history, f"gpu:{uuid}", "utilization_pct")} == {
            expected[uuid]["DCGM_FI_DEV_GPU_UTIL"]
        }
        assert {v for _, v in _points(history, f"gpu:{uuid}", "memory_used_mib")} == {
            expected[uuid]["DCGM_FI_DEV_FB_USED"]
        }
    train = [gpu for gpu in expected.values() if gpu["labels"]["pod"] == "train-0"]
    assert {v for _, v in _points(history, "pod:cube-carol/train-0", "utilization_pct")} == {
        sum(gpu["DCGM_FI_DEV_GPU_UTIL"] for gpu in train) / 2
    }
    assert {v for _, v in _points(history, "pod:cube-carol/train-0", "memory_used_mib")} == {
        sum(gpu["DCGM_FI_DEV_FB_USED"] for gpu in train)
    }
    times = [t for t, _ in _points(history, f"gpu:{gpu0}", "utilization_pct")]
    # On the query's 1 s grid. A scrape that timed out on a loaded machine marks the series stale,
    # and Prometheus then leaves that step out: a gap of whole steps, never an off-grid point.
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps and all(gap >= 1 and gap == pytest.approx(round(gap)) for gap in gaps), times


def test_history_validates_its_window() -> None:
    source = PrometheusSource("http://127.0.0.1:9")
    with pytest.raises(InvalidInput) as caught:
        source.history(None, 0, 10, 0)
    assert caught.value.field == "step"
    with pytest.raises(InvalidInput) as caught:
        source.history(None, 10, 0, 1)
    assert caught.value.field == "start"
    with pytest.raises(InvalidInput) as caught:
        source.history(None, 0, 86400 * 7, 1)
    assert caught.value.field == "step"


def test_unreachable_prometheus_is_backend_unavailable_naming_the_url(refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"

    with pytest.raises(BackendUnavailable) as caught:
        PrometheusSource(url, timeout=2).read()

    assert caught.value.field == "prometheus_url"
    assert url in caught.value.message
    assert caught.value.status == 503


def test_a_server_that_is_not_prometheus_is_backend_unavailable(dcgm_prometheus: DcgmPrometheus) -> None:
    """The exporter answers a query with an HTML error page, not Prometheus's JSON."""
    url = f"http://127.0.0.1:{dcgm_prometheus.direct.port}"

    with pytest.raises(BackendUnavailable) as caught:
        PrometheusSource(url).read()

    assert caught.value.field == "prometheus_url"
    assert caught.value.message.startswith(f"{url} did not answer as Prometheus does (HTTP ")
    assert caught.value.message.endswith(", not JSON)")


def test_credentials_in_the_url_are_sent_but_never_shown(refused_port: int) -> None:
    port = refused_port
    source = PrometheusSource(f"http://cube:s3cret@127.0.0.1:{port}/prom/")

    assert source.url == f"http://127.0.0.1:{port}/prom"
    with pytest.raises(BackendUnavailable) as caught:
        source.read()
    assert "s3cret" not in caught.value.message


@pytest.mark.parametrize("url", ["localhost:9090", "ftp://prometheus:9090", "http://", ""])
def test_a_url_that_is_not_http_is_invalid_input(url: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        PrometheusSource(url)
    assert caught.value.field == "prometheus_url"

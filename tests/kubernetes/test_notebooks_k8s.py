"""The Kubernetes notebook backend against the KMock API server emulator, for what a real control
plane does not do on demand: an API server that fails every list, one that is not there, and a cache
of 500 servers measured. Everything else it does is proven on the real plane (tests/cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from cube_jupyter.errors import BackendUnavailable
from cube_jupyter.notebooks.kubernetes.backend import KubernetesNotebookBackend
from tests.kubernetes.conftest import connect, make_settings
from tests.kubernetes.emulator import ApiServerEmulator

NOTEBOOKS = "kubeflow.org/v1/notebooks"


async def test_list_failure_at_startup_is_backend_unavailable(
    kmock: ApiServerEmulator, make_backend: Any
) -> None:
    kmock.fail_next("list", NOTEBOOKS, 500, "etcdserver: leader changed", times=None)
    with pytest.raises(BackendUnavailable) as caught:
        await make_backend(make_settings(), sync_timeout=1.0)
    message = caught.value.message
    assert message.startswith("could not load Notebook objects from the Kubernetes API at http://127.0.0.1:")
    assert message.endswith(
        "listing notebooks.kubeflow.org failed: the Kubernetes API answered 500: etcdserver: leader changed"
    )
    assert "Traceback" not in message
    assert len(kmock.requests_of("list", NOTEBOOKS)) >= 2  # it retried with backoff meanwhile


async def test_unreachable_api_is_backend_unavailable() -> None:
    settings = make_settings()
    backend = KubernetesNotebookBackend(
        settings.notebooks, connect(settings, "http://127.0.0.1:9"), sync_timeout=1.0
    )
    try:
        with pytest.raises(
            BackendUnavailable, match=r"the Kubernetes API at http://127.0.0.1:9 is unreachable"
        ):
            await backend.start()
    finally:
        await backend.cluster.close()


async def test_list_latency_with_500_cached_servers() -> None:
    from tests.kubernetes.listbench import measure_list_latency

    result = await measure_list_latency(servers=500, users=50, rounds=20)
    print(result)
    assert result["servers_cached"] == 500
    assert result["api_list_calls_during_measurement"] == 0
    # The user index works, asserted on structure rather than on timings that vary with machine load:
    # one user's listing reads only that user's entries and never walks the whole cache.
    assert result["indexed_entries_per_user"] == 500 // 50
    assert result["full_cache_scans_for_one_user_lists"] == 0

"""The server record users see: what it counts against the GPU quota, and which actions it offers."""

from __future__ import annotations

import pytest

from cube_jupyter.notebooks.spec import NotebookServer, Resources, ServerStatus, server_actions


def server(status: ServerStatus, gpu: int = 2, url: str = "/notebook/ns/nb/") -> NotebookServer:
    return NotebookServer(
        user="alice",
        name="nb",
        profile="gpu",
        status=status,
        url=url,
        resources=Resources(cpu="1", memory="1Gi", gpu=gpu, gpu_resource="nvidia.com/gpu"),
        created="2025-01-01T00:00:00Z",
    )


@pytest.mark.parametrize("status", [s for s in ServerStatus if s != ServerStatus.STOPPED])
def test_every_server_but_a_stopped_one_holds_its_gpus(status: ServerStatus) -> None:
    """A failed pod in CrashLoopBackOff keeps its GPU on Kubernetes: it must count."""
    assert server(status).gpus_held == 2


def test_a_stopped_server_holds_no_gpu() -> None:
    assert server(ServerStatus.STOPPED).gpus_held == 0


@pytest.mark.parametrize(
    ("status", "actions"),
    [
        (ServerStatus.PENDING, ["stop", "delete"]),
        (ServerStatus.RUNNING, ["connect", "stop", "delete"]),
        (ServerStatus.STOPPING, ["delete"]),
        (ServerStatus.STOPPED, ["start", "delete"]),
        (ServerStatus.FAILED, ["stop", "start", "delete"]),
        (ServerStatus.TERMINATING, ["delete"]),
    ],
)
def test_actions_follow_the_status_and_are_in_the_record(status: ServerStatus, actions: list[str]) -> None:
    record = server(status)
    assert record.actions == actions
    assert record.to_dict()["actions"] == actions
    assert record.to_dict()["status"] == status.value


def test_no_connect_without_a_url() -> None:
    assert server_actions(ServerStatus.RUNNING, url="") == ["stop", "delete"]

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


HOLDING_NOTHING = (ServerStatus.STOPPED, ServerStatus.QUEUED)


@pytest.mark.parametrize("status", [s for s in ServerStatus if s not in HOLDING_NOTHING])
def test_every_server_but_a_stopped_or_queued_one_holds_its_gpus(status: ServerStatus) -> None:
    """A failed pod in CrashLoopBackOff keeps its GPU on Kubernetes: it must count."""
    assert server(status).gpus_held == 2


@pytest.mark.parametrize("status", HOLDING_NOTHING)
def test_a_stopped_or_queued_server_holds_no_gpu(status: ServerStatus) -> None:
    """A queued server (local queue) holds nothing until it is admitted."""
    assert server(status).gpus_held == 0


@pytest.mark.parametrize(
    ("status", "actions"),
    [
        (ServerStatus.QUEUED, ["stop", "delete"]),
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

"""A local training runner on a temporary state dir and artifact store, emptied after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cube_jupyter.jobs.local.training import LocalTrainingRunner
from cube_jupyter.jobs.training_spec import TrainingSpec
from cube_jupyter.storage.local import LocalStore

REPLICAS_DIR = Path(__file__).parent / "replicas"
USER = "alice@example.com"


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


@pytest.fixture
def runner(tmp_path: Path, store: LocalStore) -> Iterator[LocalTrainingRunner]:
    runner = LocalTrainingRunner(tmp_path / "state", store=store, mpirun="", stop_grace_seconds=3.0)
    yield runner
    for job in runner.list():
        runner.delete(job.user, job.name)


def training(raw: dict[str, Any]) -> TrainingSpec:
    return TrainingSpec.from_dict(raw, user=USER)

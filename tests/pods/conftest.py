"""Fixtures of the pod harness: the image venvs (built once, cached across sessions), the loopback S3
server, and a cluster whose store credentials pods get only from its Secret."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import Settings, load_settings
from cube_jupyter.images import RUNTIME_IMAGE, image_repository
from tests.pods.harness import Cluster
from tests.pods.images import ImageVenv, runtime_image, torch_image
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, S3Server, s3_server

# A user's image without cube-jupyter: the one examples/jobs/pytorch-ddp.yaml names.
PYTORCH_IMAGE = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
STORE_SECRET = "store-credentials"


@pytest.fixture(scope="session")
def runtime() -> ImageVenv:
    return runtime_image()


@pytest.fixture(scope="session")
def pytorch() -> ImageVenv:
    return torch_image()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def bucket(s3: S3Server) -> str:
    return s3.new_bucket()


def cluster_settings(s3: S3Server, bucket: str, **sections: dict[str, Any]) -> Settings:
    """The workbench's settings for a cluster whose store is the loopback S3 server: pods reach it by
    its endpoint and get the keys from the Secret, never inline."""
    config = Config()
    config.CubeStorage.url = f"s3://{bucket}/cube"
    config.CubeStorage.endpoint = s3.endpoint
    config.CubeStorage.access_key = ACCESS_KEY
    config.CubeStorage.secret_key = SECRET_KEY
    config.CubeStorage.credentials_secret = STORE_SECRET
    for section, values in sections.items():
        for key, value in values.items():
            setattr(config[section], key, value)
    return load_settings(config)


@pytest.fixture
def cluster(tmp_path: Path, runtime: ImageVenv) -> Cluster:
    """A cluster with the runtime image and the store's Secret; a test adds the images it names."""
    return Cluster(
        root=tmp_path / "cluster",
        images={image_repository(RUNTIME_IMAGE): runtime},
        secrets={STORE_SECRET: {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}},
    )

"""Fixtures for the artifact-store tests: a local directory and an S3 bucket on a loopback server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.storage.s3server import S3Server, s3_server


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server

"""Every artifact store keeps the same contract: the local directory and S3 (moto on loopback)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cube_jupyter.errors import InvalidInput, NotFound
from cube_jupyter.storage import ArtifactStore, CubeStorage, open_store
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, S3Server


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ArtifactStore]:
    if request.param == "local":
        yield open_store(str(tmp_path / "artifacts"))
        return
    s3: S3Server = request.getfixturevalue("s3")
    storage = CubeStorage(endpoint=s3.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)
    yield open_store(f"s3://{s3.new_bucket()}/team/pipelines", storage)


def test_put_get_overwrite_exists(store: ArtifactStore) -> None:
    assert not store.exists("runs/r1/outputs/a/x")
    store.put("runs/r1/outputs/a/x", b"\x00first")
    assert store.exists("runs/r1/outputs/a/x")
    assert store.get("runs/r1/outputs/a/x") == b"\x00first"
    store.put("runs/r1/outputs/a/x", b"second")
    assert store.get("runs/r1/outputs/a/x") == b"second"
    store.put("empty", b"")
    assert store.get("empty") == b""


def test_missing_key_is_not_found_naming_the_key(store: ArtifactStore) -> None:
    with pytest.raises(NotFound) as caught:
        store.get("runs/nope/steps/a.ipynb")
    assert caught.value.field == "key"
    assert "runs/nope/steps/a.ipynb" in caught.value.message
    with pytest.raises(NotFound):
        store.get_file("runs/nope", "/dev/null")


def test_list_by_prefix_sorted(store: ArtifactStore) -> None:
    for key in ("runs/r2/outputs/b/y", "runs/r1/outputs/a/x", "runs/r1/steps/a.ipynb", "runs/r10/x"):
        store.put(key, b"1")
    assert store.list("runs/r1/") == ["runs/r1/outputs/a/x", "runs/r1/steps/a.ipynb"]
    assert store.list("runs/r1") == ["runs/r1/outputs/a/x", "runs/r1/steps/a.ipynb", "runs/r10/x"]
    assert store.list() == sorted(
        ["runs/r2/outputs/b/y", "runs/r1/outputs/a/x", "runs/r1/steps/a.ipynb", "runs/r10/x"]
    )
    assert store.list("nothing/") == []


@pytest.mark.parametrize("bad", ["", "/abs", "../up", "a/../../b", "a//b", "a/./b", "sp ace", "a\\b", 3])
def test_bad_keys_are_refused_and_nothing_written(store: ArtifactStore, bad: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        store.put(bad, b"x")  # type: ignore[arg-type]
    assert caught.value.field == "key"
    assert store.list() == []


def test_large_files_round_trip(store: ArtifactStore, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    payload = os.urandom(1 << 20) * 7  # 7 MiB: more than one S3 multipart part
    big.write_bytes(payload)
    store.put_file("runs/r1/outputs/a/model", big)
    back = tmp_path / "back.bin"
    store.get_file("runs/r1/outputs/a/model", back)
    assert back.read_bytes() == payload
    assert store.get("runs/r1/outputs/a/model") == payload


def test_reopened_from_its_url_and_kernel_env_in_another_process_env(
    store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a step's kernel does: reopen the store from `url()` with only `kernel_env()` to help."""
    store.put("runs/r1/outputs/a/x", b"shared")
    for name in ("MINIO_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in store.kernel_env().items():
        monkeypatch.setenv(name, value)
    again = open_store(store.url())
    assert again.url() == store.url()
    assert again.get("runs/r1/outputs/a/x") == b"shared"
    assert store.url("runs/r1/outputs/a/x") == again.url("runs/r1/outputs/a/x")
    assert store.url("runs/r1/outputs/a/x").startswith(store.url() + "/")

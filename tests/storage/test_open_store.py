"""`open_store` picks the backend from the URL and refuses what it cannot open, naming the field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.storage import CubeStorage, default_store_dir, open_store
from cube_jupyter.storage.local import LocalStore


def test_default_is_a_directory_under_the_jupyter_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    for url in (None, "", "  "):
        store = open_store(url)
        assert isinstance(store, LocalStore)
        assert store.root == (tmp_path / "data" / "cube-jupyter" / "artifacts").resolve()
        assert store.root == default_store_dir().resolve()
    assert store.root.is_dir()


def test_configured_url_is_the_default(tmp_path: Path) -> None:
    store = open_store(None, CubeStorage(url=str(tmp_path / "configured")))
    assert store.url() == (tmp_path / "configured").as_uri()


def test_paths_and_file_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("rel/store")
    assert isinstance(relative, LocalStore) and relative.root == tmp_path / "rel" / "store"
    by_url = open_store((tmp_path / "a b").as_uri())  # percent-encoded space
    assert isinstance(by_url, LocalStore) and by_url.root == tmp_path / "a b"
    assert open_store(f"file://localhost{tmp_path}/c").url() == (tmp_path / "c").as_uri()


@pytest.mark.parametrize(
    "bad",
    [
        "http://example.com/x",
        "gs://bucket/x",
        "file://otherhost/x",
        "s3://",
        "s3:///prefix",
        "s3://Bad_Bucket/x",
        "s3://ab/x",
        "s3://bucket/x?versionId=1",
        "s3://bucket/../x",
    ],
)
def test_bad_urls_are_invalid_input_on_store(bad: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        open_store(bad, CubeStorage(endpoint="http://127.0.0.1:9"))
    assert caught.value.field in ("store", "key")
    assert caught.value.status == 400


def test_bad_endpoint_names_the_config_field() -> None:
    with pytest.raises(InvalidInput) as caught:
        open_store("s3://bucket/x", CubeStorage(endpoint="http://host:9000/path"))
    assert caught.value.field == "CubeStorage.endpoint"


def test_local_store_path_through_a_file_is_a_bad_store(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(InvalidInput) as caught:
        open_store(str(blocker / "store"))
    assert caught.value.field == "store" and caught.value.status == 400
    assert str(blocker / "store") in caught.value.message


@pytest.mark.parametrize("system", ["/dev/null", "/proc/self/store", "file:///sys/x", "/dev/shm/../null"])
def test_system_directories_are_no_store_and_no_pid_is_told(system: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        open_store(system)
    assert caught.value.field == "store" and caught.value.status == 400
    assert str(os.getpid()) not in caught.value.message


@pytest.mark.parametrize("bad", ["/tmp/a\x00b", "/tmp/\ud800", "file:///tmp/a%00b", "s3://bucket/a%00b"])
def test_nul_and_lone_surrogates_in_a_store_name_the_field(bad: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        open_store(bad, CubeStorage(endpoint="http://127.0.0.1:9"))
    assert caught.value.field == "store"


def test_a_long_store_is_quoted_short() -> None:
    with pytest.raises(InvalidInput) as caught:
        open_store("gs://" + "x" * 100_000)
    assert len(caught.value.message) < 400

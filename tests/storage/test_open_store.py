"""`open_store` picks the backend from the URL and refuses what it cannot open, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from cube_jupyter.errors import BackendUnavailable, InvalidInput
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


def test_local_store_that_cannot_be_created_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(BackendUnavailable) as caught:
        open_store(str(blocker / "store"))
    assert (blocker / "store").as_uri() in caught.value.message

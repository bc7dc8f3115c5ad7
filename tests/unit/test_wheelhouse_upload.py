"""`python -m cube_jupyter.wheelhouse upload`: the admin's one step that puts the runtime's wheelhouse
where KFP steps import it from, through the same S3 store and environment pods use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cube_jupyter.wheelhouse import LOCK, main
from tests.storage.s3server import ACCESS_KEY, SECRET_KEY, S3Server, s3_server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / LOCK).write_text('cube-jupyter==1.0 ; python_version == "3.12"\n')
    (folder / "cube_jupyter-1.0-py3-none-any.whl").write_bytes(b"wheel")
    return folder


def test_every_file_goes_under_the_prefix_with_the_pods_store_env(
    wheelhouse: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = s3.new_bucket()
    for name, value in {
        "MINIO_ENDPOINT": s3.endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["upload", f"minio://{bucket}/cube/wheels/", "--from", str(wheelhouse)]) == 0
    listed = s3.client().list_objects(bucket, prefix="cube/wheels/", recursive=True)
    assert sorted(o.object_name for o in listed) == [
        "cube/wheels/cube_jupyter-1.0-py3-none-any.whl",
        f"cube/wheels/{LOCK}",
    ]
    assert capsys.readouterr().out == f"uploaded 2 files to minio://{bucket}/cube/wheels/\n"


@pytest.mark.parametrize(
    ("dest", "said"),
    [
        ("gs://ml/wheels", "gcloud storage cp -r"),
        ("/data/wheels", "must be an S3 location"),
        ("s3://ml-artifacts/wheels?x=1", "must look like s3://bucket/prefix"),
    ],
)
def test_a_bad_destination_is_said_in_one_line(wheelhouse: Path, dest: str, said: str) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["upload", dest, "--from", str(wheelhouse)])
    assert str(refused.value).startswith("cube-jupyter: ") and said in str(refused.value)


def test_outside_the_runtime_image_there_is_nothing_to_upload(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["upload", "s3://ml/wheels", "--from", str(tmp_path)])
    assert "no runtime wheelhouse" in str(refused.value) and "runtime image" in str(refused.value)

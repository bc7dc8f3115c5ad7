"""S3 specifics against moto's server on loopback: where endpoint and credentials come from, and a
store that cannot be reached failing with a message that says which fault it was."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import boto3
import pytest

from cube_jupyter.errors import BackendUnavailable, NotFound
from cube_jupyter.storage import CubeStorage, open_store
from cube_jupyter.storage.s3 import S3Store
from tests.storage.s3server import FaultyEndpoint, S3Server

CLEAR = (
    "MINIO_ENDPOINT",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "S3_ENDPOINT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "MINIO_ACCESS_KEY",
    "MINIO_SECRET_KEY",
    "MINIO_ROOT_USER",
    "MINIO_ROOT_PASSWORD",
    "AWS_SESSION_TOKEN",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLEAR:
        monkeypatch.delenv(name, raising=False)


def _set_auth(s3: S3Server, count: str) -> None:
    """moto checks signatures against its IAM users once this many requests have gone by."""
    request = urllib.request.Request(
        f"{s3.endpoint}/moto-api/reset-auth",
        data=count.encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.load(response)["status"] == "ok"


@pytest.fixture
def iam_user(s3: S3Server) -> Iterator[tuple[str, str, str]]:
    """A bucket and an IAM user allowed s3:*, with signature checking switched on while it lives."""
    bucket = s3.new_bucket()
    iam = boto3.client(
        "iam",
        endpoint_url=s3.endpoint,
        region_name="us-east-1",
        aws_access_key_id="setup",
        aws_secret_access_key="setup",
    )
    iam.create_user(UserName="runner")
    iam.put_user_policy(
        UserName="runner",
        PolicyName="s3",
        PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        ),
    )
    key = iam.create_access_key(UserName="runner")["AccessKey"]
    _set_auth(s3, "0")
    try:
        yield bucket, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        _set_auth(s3, "inf")
        iam.delete_access_key(UserName="runner", AccessKeyId=key["AccessKeyId"])
        iam.delete_user_policy(UserName="runner", PolicyName="s3")
        iam.delete_user(UserName="runner")


@pytest.mark.parametrize(
    "names",
    [
        ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
        ("MINIO_ENDPOINT", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"),
        ("S3_ENDPOINT", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"),
    ],
)
def test_endpoint_and_credentials_from_env_vars(
    s3: S3Server, iam_user: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch, names: tuple[str, str, str]
) -> None:
    bucket, access, secret = iam_user
    for name, value in zip(names, (s3.endpoint, access, secret), strict=True):
        monkeypatch.setenv(name, value)
    store = open_store(f"s3://{bucket}/p")
    store.put("k", b"v")
    assert store.get("k") == b"v" and store.list() == ["k"]
    assert store.url("k") == f"s3://{bucket}/p/k"
    assert store.kernel_env()["AWS_ACCESS_KEY_ID"] == access


def test_credentials_from_traits_win_over_env(
    s3: S3Server, iam_user: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, access, secret = iam_user
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    storage = CubeStorage(endpoint=s3.endpoint, access_key=access, secret_key=secret)
    store = open_store(f"s3://{bucket}/p", storage)
    store.put("k", b"v")
    assert store.exists("k")


def test_wrong_secret_is_refused_clearly(s3: S3Server, iam_user: tuple[str, str, str]) -> None:
    bucket, access, _secret = iam_user
    storage = CubeStorage(endpoint=s3.endpoint, access_key=access, secret_key="wrong-secret")
    with pytest.raises(BackendUnavailable) as caught:
        S3Store(bucket, "p", storage).put("k", b"v")
    assert "refused the credentials" in caught.value.message
    assert f"s3://{bucket}/p" in caught.value.message


def test_missing_bucket_is_not_found_on_store(s3: S3Server) -> None:
    with pytest.raises(NotFound) as caught:
        open_store("s3://no-such-bucket-here/p", CubeStorage(endpoint=s3.endpoint))
    assert caught.value.field == "store"
    assert "no-such-bucket-here" in caught.value.message


def test_refused_connection_says_refused_and_names_the_endpoint_setting(refused_port: int) -> None:
    port = refused_port
    with pytest.raises(BackendUnavailable) as caught:
        open_store("s3://bucket/p", CubeStorage(endpoint=f"http://127.0.0.1:{port}", retries=0))
    message = caught.value.message
    assert message.startswith(
        f"artifact store s3://bucket/p at http://127.0.0.1:{port} refused the connection"
    )
    assert "CubeStorage.endpoint" in message
    assert caught.value.status == 503 and caught.value.field == "store"


def test_a_silent_store_times_out_once_naming_the_read_timeout() -> None:
    """Accepts the connection, never answers: reported after one read timeout, not asked again."""
    with FaultyEndpoint(reply=None) as silent:
        storage = CubeStorage(endpoint=f"http://127.0.0.1:{silent.port}", read_timeout=0.3, retries=3)
        with pytest.raises(BackendUnavailable) as caught:
            open_store("s3://bucket/p", storage)
        assert silent.connections == 1
    assert "did not answer within 0.3 s" in caught.value.message
    assert "CubeStorage.read_timeout" in caught.value.message


def test_an_http_error_status_is_retried_then_named() -> None:
    reply = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    with FaultyEndpoint(reply=reply) as failing:
        storage = CubeStorage(endpoint=f"http://127.0.0.1:{failing.port}", retries=2)
        with pytest.raises(BackendUnavailable) as caught:
            open_store("s3://bucket/p", storage)
        assert failing.connections == 3  # the first try and two retries
    assert "answered HTTP 503" in caught.value.message
    assert "CubeStorage.endpoint" in caught.value.message

"""An S3 bucket (MinIO, AWS, any S3 endpoint) as the artifact store, through the `minio` SDK.

The SDK's default HTTP pool waits five minutes and retries five times; a pipeline run that cannot
reach its store should say so in seconds, so the pool here has short timeouts and few retries
(`CubeStorage.connect_timeout`, `read_timeout`, `retries`). A store that accepts connections and
never answers is not asked again: retrying a silence multiplies the wait. Each fault is told apart
(refused, timed out, HTTP status, bad credentials, missing bucket) and names the setting to fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from urllib.parse import urlsplit

import certifi
import urllib3
from minio import Minio
from minio.error import MinioException, S3Error, ServerError

from cube_jupyter.errors import BackendUnavailable, InvalidInput, NotFound
from cube_jupyter.storage.base import validate_key
from cube_jupyter.storage.config import CubeStorage

BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
ENDPOINT_VARS = ("MINIO_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "S3_ENDPOINT")
ACCESS_KEY_VARS = ("AWS_ACCESS_KEY_ID", "MINIO_ACCESS_KEY", "MINIO_ROOT_USER")
SECRET_KEY_VARS = ("AWS_SECRET_ACCESS_KEY", "MINIO_SECRET_KEY", "MINIO_ROOT_PASSWORD")
REGION_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION", "MINIO_REGION")
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}


def _first_env(names: tuple[str, ...]) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def _split_endpoint(endpoint: str, secure: bool) -> tuple[str, bool]:
    """'http://host:9000' → ('host:9000', False); a bare 'host:9000' keeps `secure`."""
    if "://" not in endpoint:
        endpoint = ("https://" if secure else "http://") + endpoint
    parts = urlsplit(endpoint)
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise InvalidInput(
            f"S3 endpoint {endpoint!r} must be 'host[:port]' or 'http(s)://host[:port]' without a path",
            field="CubeStorage.endpoint",
        )
    return parts.netloc, parts.scheme == "https"


class S3Store:
    """Artifacts as objects `{prefix}/{key}` in one bucket; the bucket must already exist."""

    def __init__(self, bucket: str, prefix: str, storage: CubeStorage | None = None) -> None:
        storage = storage or CubeStorage()
        if not BUCKET.match(bucket) or ".." in bucket:
            raise InvalidInput(
                f"store s3://{bucket}: {bucket!r} is not an S3 bucket name "
                "(3-63 lower-case letters, digits, '.' and '-')",
                field="store",
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix and (".." in self.prefix.split("/") or "//" in self.prefix):
            raise InvalidInput(
                f"store s3://{bucket}/{prefix}: the prefix must not contain '..' or '//'", field="store"
            )
        if self.prefix:
            validate_key(self.prefix)
        raw_endpoint = storage.endpoint or _first_env(ENDPOINT_VARS) or "https://s3.amazonaws.com"
        self.endpoint, self.secure = _split_endpoint(raw_endpoint, storage.secure)
        self.region = storage.region or _first_env(REGION_VARS) or "us-east-1"
        self._access_key = storage.access_key or _first_env(ACCESS_KEY_VARS)
        self._secret_key = storage.secret_key or _first_env(SECRET_KEY_VARS)
        self._session_token = os.environ.get("AWS_SESSION_TOKEN") or None
        self._storage = storage
        pool = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=storage.connect_timeout, read=storage.read_timeout),
            maxsize=10,
            cert_reqs="CERT_REQUIRED",
            ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
            retries=urllib3.Retry(
                total=storage.retries,
                read=0,
                backoff_factor=0.2,
                status_forcelist=[500, 502, 503, 504],
            ),
        )
        self._client = Minio(
            self.endpoint,
            access_key=self._access_key or None,
            secret_key=self._secret_key or None,
            session_token=self._session_token,
            secure=self.secure,
            region=self.region,
            http_client=pool,
        )

    def __repr__(self) -> str:
        return f"S3Store({self.url()!r}, endpoint={self.endpoint!r})"

    def check(self) -> None:
        """Fail now, clearly, if the endpoint is unreachable or the bucket missing."""
        with self._errors(""):
            found = self._client.bucket_exists(self.bucket)
        if not found:
            raise NotFound(
                f"artifact store {self.url()}: bucket {self.bucket!r} does not exist at {self._where()}",
                field="store",
            )

    def _where(self) -> str:
        return ("https://" if self.secure else "http://") + self.endpoint

    def _object(self, key: str) -> str:
        validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextmanager
    def _on_object(self, key: str) -> Iterator[str]:
        """The object name of `key`, for SDK calls on it: their failures translated by `_errors`."""
        name = self._object(key)
        with self._errors(key):
            yield name

    @contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        """Translate SDK and network failures into CubeErrors that name the store."""
        try:
            yield
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NotFound") and key:
                raise NotFound(f"artifact {key!r} not found in store {self.url()}", field="key") from None
            if exc.code == "NoSuchBucket":
                raise NotFound(
                    f"artifact store {self.url()}: bucket {self.bucket!r} does not exist at {self._where()}; "
                    "create it, or name another bucket in the store URL (CubeStorage.url)",
                    field="store",
                ) from None
            if exc.code in _DENIED:
                raise BackendUnavailable(
                    f"artifact store {self.url()} at {self._where()} refused the credentials ({exc.code}); "
                    "set CubeStorage.access_key/secret_key or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
                    field="store",
                ) from None
            raise BackendUnavailable(
                f"artifact store {self.url()} at {self._where()} failed: {exc.code}: {exc.message}",
                field="store",
            ) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendUnavailable(
                f"artifact store {self.url()} at {self._where()} {self._fault(exc)}", field="store"
            ) from None

    def _fault(self, exc: BaseException) -> str:
        """What went wrong on the wire, and the setting that fixes it (the end of a sentence)."""
        reason = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason else exc
        endpoint = "check CubeStorage.endpoint (or MINIO_ENDPOINT)"
        if isinstance(reason, urllib3.exceptions.ReadTimeoutError | TimeoutError):
            return (
                f"accepted the connection but did not answer within {self._storage.read_timeout:g} s; "
                f"{endpoint}, or raise CubeStorage.read_timeout"
            )
        if isinstance(reason, urllib3.exceptions.NameResolutionError):
            return f"is unknown: its host name does not resolve; {endpoint}"
        if isinstance(reason, urllib3.exceptions.SSLError):
            return (
                "failed the TLS handshake; for a plain-HTTP endpoint write http:// in CubeStorage.endpoint, "
                "for a private CA set SSL_CERT_FILE"
            )
        # urllib3 makes NewConnectionError a ConnectTimeoutError: ask for the former first.
        if isinstance(reason, urllib3.exceptions.NewConnectionError | ConnectionRefusedError):
            return f"refused the connection (nothing listens there); {endpoint}"
        if isinstance(reason, urllib3.exceptions.ConnectTimeoutError):
            return (
                f"did not accept a connection within {self._storage.connect_timeout:g} s; {endpoint}, "
                "or raise CubeStorage.connect_timeout"
            )
        if isinstance(reason, urllib3.exceptions.ResponseError):
            status = re.search(r"\b([1-5]\d\d)\b", str(reason))
            return f"answered HTTP {status.group(1) if status else 'errors'}; {endpoint} is an S3 service"
        if isinstance(reason, ServerError):
            return f"answered HTTP {reason.status_code}; {endpoint} is an S3 service"
        return f"is unreachable ({type(reason).__name__}); {endpoint}"

    def put(self, key: str, data: bytes) -> None:
        with self._on_object(key) as name:
            self._client.put_object(self.bucket, name, BytesIO(data), len(data))

    def put_file(self, key: str, path: str | Path) -> None:
        with self._on_object(key) as name:
            self._client.fput_object(self.bucket, name, str(path))

    def get(self, key: str) -> bytes:
        with self._on_object(key) as name:
            response = self._client.get_object(self.bucket, name)
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

    def get_file(self, key: str, path: str | Path) -> None:
        with self._on_object(key) as name:
            self._client.fget_object(self.bucket, name, str(path))

    def exists(self, key: str) -> bool:
        try:
            with self._on_object(key) as name:
                self._client.stat_object(self.bucket, name)
        except NotFound as exc:
            if exc.field == "key":
                return False
            raise
        return True

    def list(self, prefix: str = "") -> list[str]:
        validate_key(prefix, prefix=True)
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        with self._errors(""):
            names = [
                obj.object_name
                for obj in self._client.list_objects(self.bucket, prefix=full, recursive=True)
                if obj.object_name
            ]
        return sorted(name[strip:] for name in names)

    def url(self, key: str = "") -> str:
        path = self._object(key) if key else self.prefix
        return f"s3://{self.bucket}/{path}" if path else f"s3://{self.bucket}"

    def kernel_env(self) -> dict[str, str]:
        env = {"MINIO_ENDPOINT": self._where(), "AWS_REGION": self.region}
        if self._access_key:
            env["AWS_ACCESS_KEY_ID"] = self._access_key
            env["AWS_SECRET_ACCESS_KEY"] = self._secret_key
        if self._session_token:
            env["AWS_SESSION_TOKEN"] = self._session_token
        return env

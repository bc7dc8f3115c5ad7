"""Where pipeline artifacts live: the `CubeStorage` traitlets admins set.

    c.CubeStorage.url = "s3://ml-artifacts/pipelines"
    c.CubeStorage.endpoint = "http://minio-service.kubeflow:9000"

Empty endpoint/credentials fall back to the usual MinIO/AWS environment variables, so a step pod
that gets them from a Kubernetes Secret reopens the same store from its URL alone.
"""

from __future__ import annotations

from typing import Any

from traitlets import Bool, Float, Int, Unicode

from cube_jupyter.configurable import CubeConfigurable, checked, dns_name, non_negative, optional, positive

# The keys of `CubeStorage.credentials_secret` pods read as env vars.
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


class CubeStorage(CubeConfigurable):
    """The artifact store of pipeline runs: a local directory (default) or an S3/MinIO bucket."""

    url = Unicode(
        "",
        help="Default store: '' (a directory under the Jupyter data dir), a path or file:// URL, or "
        "s3://bucket/prefix.",
    )
    endpoint = Unicode(
        "",
        help="S3 endpoint, e.g. 'http://minio-service.kubeflow:9000'; '' reads MINIO_ENDPOINT, "
        "AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, S3_ENDPOINT, then uses s3.amazonaws.com.",
    )
    access_key = Unicode(
        "", help="S3 access key; '' reads AWS_ACCESS_KEY_ID, MINIO_ACCESS_KEY, MINIO_ROOT_USER."
    )
    secret_key = Unicode(
        "", help="S3 secret key; '' reads AWS_SECRET_ACCESS_KEY, MINIO_SECRET_KEY, MINIO_ROOT_PASSWORD."
    )
    secure = Bool(
        True, help="Use HTTPS when the endpoint has no scheme (an http:// or https:// endpoint decides)."
    )
    region = Unicode(
        "", help="S3 region; '' reads AWS_REGION, AWS_DEFAULT_REGION, MINIO_REGION, then 'us-east-1'."
    )
    credentials_secret = Unicode(
        "",
        help="Kubernetes Secret (in the run's namespace) whose keys AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY step pods get as env vars; credentials are never inlined in a Workflow.",
    )
    connect_timeout = Float(3.0, help="Seconds to wait for a connection to the S3 endpoint.")
    read_timeout = Float(
        10.0,
        help="Seconds to wait for the S3 endpoint to answer a request; a store silent that long is "
        "reported as timed out (not asked again).",
    )
    retries = Int(
        2, help="Retries of a failed S3 request (refused or dropped connections, 5xx) before giving up."
    )

    _credentials_secret_ok = checked(optional(dns_name), "credentials_secret")
    _timeouts_ok = checked(positive, "connect_timeout", "read_timeout")
    _retries_ok = checked(non_negative, "retries")


def pod_store_env(storage: CubeStorage) -> list[dict[str, Any]]:
    """How a pod (a pipeline step, a job replica) reopens the store from its URL: endpoint and region
    as values, credentials only as references to the Secret (the workbench never reads its values)."""
    env: list[dict[str, Any]] = []
    if storage.endpoint:
        endpoint = storage.endpoint.strip()
        if "://" not in endpoint:
            endpoint = ("https://" if storage.secure else "http://") + endpoint
        env.append({"name": "MINIO_ENDPOINT", "value": endpoint})
    if storage.region:
        env.append({"name": "AWS_REGION", "value": storage.region})
    if storage.credentials_secret:
        for key in CREDENTIAL_KEYS:
            ref = {"name": storage.credentials_secret, "key": key}
            env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    return env

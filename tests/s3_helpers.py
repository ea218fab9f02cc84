"""moto's S3 server on loopback for the tests that need object storage: real HTTP, real multipart uploads, no mock
objects (moto[server] is pinned in requirements-dev.lock: its absence fails, it does not skip)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import boto3
import pytest

# the credentials every S3 test uses (moto accepts any)
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def client(endpoint: str):  # noqa: ANN201 - a boto3 S3 client
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"], region_name=S3_ENV["AWS_DEFAULT_REGION"])


def empty(endpoint: str, bucket: str) -> None:
    """Delete every object of ``bucket``."""
    c = client(endpoint)
    for obj in c.list_objects_v2(Bucket=bucket).get("Contents", []):
        c.delete_object(Bucket=bucket, Key=obj["Key"])


@contextlib.contextmanager
def moto_s3(*buckets: str) -> Iterator[str]:
    """A running server with ``buckets`` created; yields its endpoint URL.  The buckets are emptied and deleted at
    the end: moto's store outlives the server, and the next server of the process would find them."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for b in buckets:
            client(endpoint).create_bucket(Bucket=b)
        try:
            yield endpoint
        finally:
            for b in buckets:
                empty(endpoint, b)
                client(endpoint).delete_bucket(Bucket=b)
    finally:
        server.stop()


def point_at(monkeypatch: pytest.MonkeyPatch, endpoint: str, **extra: str) -> dict[str, str]:
    """Point this process and the ``taxbreak`` processes it starts at ``endpoint`` (plus ``extra`` variables);
    returns the variables set."""
    env = {**S3_ENV, "TAXBREAK_S3_ENDPOINT_URL": endpoint, **extra}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return env

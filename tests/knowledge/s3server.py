"""moto's S3 server on an ephemeral loopback port, speaking the real S3 wire protocol."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def running_s3(monkeypatch: pytest.MonkeyPatch, bucket: str = "switchboard") -> Iterator[str]:
    """Yield the endpoint URL of a fresh S3 server holding an empty `bucket`."""
    server_module = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()

"""A real S3-compatible server for tests: moto's standalone server on 127.0.0.1, a free port.

It speaks the S3 REST API over HTTP like MinIO or AWS; the stores under test reach it through
boto3 with the standard ``AWS_*`` variables (``S3Server.env``), as a deployment would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def env(self) -> dict[str, str]:
        """The variables that point boto3 (and so ``S3ArtifactStore``) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "little-test",
            "AWS_SECRET_ACCESS_KEY": "little-test-secret",
            "AWS_REGION": "us-east-1",
        }

    def client(self) -> Any:
        import boto3

        e = self.env()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=e["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=e["AWS_SECRET_ACCESS_KEY"],
            region_name=e["AWS_REGION"],
        )

    def new_bucket(self) -> str:
        name = f"little-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


@contextmanager
def s3_server() -> Iterator[S3Server]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()

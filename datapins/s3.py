"""An S3 (or MinIO/OSS-style) dataset source, read with boto3.

Credentials come from boto3's own chain (environment variables, a web-identity token
file, the pod's role), never from arguments, so they cannot leak into argv, the lock
file or a log line. The endpoint URL is not pinned in the lock: the same bucket is
reached through different addresses from a laptop and from inside the cluster.
"""

from __future__ import annotations

from typing import Any, Iterator
from urllib.parse import urlparse

from datapins.errors import DataError, DataNotFound, SourceUnavailable
from datapins.sources import CHUNK

__all__ = ["S3Source"]


class S3Source:
    """Objects under s3://bucket/prefix; paths are keys relative to the prefix."""

    def __init__(self, uri: str, endpoint_url: str | None = None) -> None:
        try:
            # boto3 and botocore are in the train and data extras only, not in every image
            import boto3
            import botocore.config
        except ImportError as exc:  # the controller or serve image, a base install
            raise DataError(f"source {uri!r}: reading S3 needs {exc.name}, which this install "
                            "lacks (the tool image has it; elsewhere: pip install "
                            "'paddle-mlops[data]')") from None

        parsed = urlparse(uri)
        if not parsed.netloc:
            raise DataError(f"source {uri!r}: no bucket (s3://BUCKET/PREFIX)")
        self.uri = uri.rstrip("/")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.endpoint_url = endpoint_url
        # One client for all threads (boto3 clients are thread-safe; sessions are not);
        # the pool as wide as the fetch threads that share it.
        config = botocore.config.Config(max_pool_connections=16,
                                        retries={"max_attempts": 3, "mode": "standard"})
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, config=config)

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def _fail(self, exc: Exception, what: str) -> Exception:
        import botocore.exceptions as bx

        if isinstance(exc, bx.ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NoSuchBucket"):
                return DataNotFound(f"{what}: no such object ({code})")
            return DataError(f"{what}: {code or exc}")
        if isinstance(exc, bx.NoCredentialsError):
            return DataError(f"{what}: no S3 credentials in the environment "
                             "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a role)")
        if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectionError)):
            return SourceUnavailable(f"{what}: {self.endpoint_url or 'S3'} did not answer ({exc})")
        return exc

    def list(self, prefix: str) -> list[str]:
        """Keys under prefix, relative to the source prefix."""
        import botocore.exceptions as bx

        start = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._key(prefix.rstrip("/")) + "/")
            for page in pages:
                keys.extend(obj["Key"][start:] for obj in page.get("Contents", []))
        except bx.BotoCoreError as exc:
            raise self._fail(exc, f"{self.uri}/{prefix}") from None
        except bx.ClientError as exc:
            raise self._fail(exc, f"{self.uri}/{prefix}") from None
        return sorted(keys)

    def chunks(self, path: str) -> Iterator[bytes]:
        """Stream one object in 1 MiB chunks."""
        import botocore.exceptions as bx

        what = f"{self.uri}/{path}"
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=self._key(path))["Body"]
        except (bx.BotoCoreError, bx.ClientError) as exc:
            raise self._fail(exc, what) from None
        try:
            yield from body.iter_chunks(CHUNK)
        except bx.BotoCoreError as exc:
            raise self._fail(exc, what) from None
        finally:
            body.close()

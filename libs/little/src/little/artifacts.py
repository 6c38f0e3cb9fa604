"""Content-addressed artifact stores: bytes stored under their sha256.

Two backends share one contract (``ArtifactBackend``): the directory store (``ArtifactStore``,
layout ``<root>/sha256/<first two hex>/<hash>``) for one machine, and the S3 store
(``S3ArtifactStore``, keys ``<prefix>/sha256/<first two hex>/<hash>`` in a bucket) for several.
Either never deletes a blob, never returns bytes it has not verified against their ref, and
never exposes a partial blob: a reader sees the whole blob or none. ``open_artifact_store``
picks one from a location (``s3://bucket/prefix`` or a directory).

The methods block; code on an event loop calls them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from little.errors import (
    ArtifactError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ConfigurationError,
)
from little.events import ArtifactRef

__all__ = ["ArtifactBackend", "ArtifactStore", "S3ArtifactStore", "open_artifact_store"]


def _check_sha256(sha256: str) -> None:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ConfigurationError(f"not a lower-case hex sha256: {sha256!r}")


def _blob_name(sha256: str) -> str:
    _check_sha256(sha256)
    return f"sha256/{sha256[:2]}/{sha256}"


class ArtifactBackend(ABC):
    """Where a world's artifacts live: ``put`` stores bytes under their hash (idempotent),
    ``get`` returns them only after checking hash and size against the ref."""

    @abstractmethod
    def where(self, sha256: str) -> str:
        """Where the blob of this hash is (a path or a URL), for messages."""

    @abstractmethod
    def _read(self, sha256: str) -> bytes | None:
        """The stored bytes of this hash, unchecked; None when there is no such blob."""

    @abstractmethod
    def _write(self, sha256: str, data: bytes) -> None:
        """Store ``data`` under its hash atomically (readers see all of it or nothing)."""

    @abstractmethod
    def exists(self, ref: ArtifactRef) -> bool:
        """Whether a blob is stored under ``ref``'s hash (its content is not checked)."""

    def put(
        self, run_id: str, data: bytes, media_type: str = "application/octet-stream"
    ) -> ArtifactRef:
        """Store ``data`` (idempotent: same bytes, same blob, written once) and return its ref."""
        digest = hashlib.sha256(data).hexdigest()
        ref = ArtifactRef(run_id=run_id, sha256=digest, size=len(data), media_type=media_type)
        if not self.exists(ref):
            self._write(digest, data)
        return ref

    def get(self, ref: ArtifactRef) -> bytes:
        """The bytes ``ref`` names, after checking their size and hash."""
        where = self.where(ref.sha256)
        data = self._read(ref.sha256)
        if data is None:
            raise ArtifactNotFoundError(
                f"artifact {ref.sha256} of run {ref.run_id} is not in the store "
                f"(expected at {where})"
            )
        actual = hashlib.sha256(data).hexdigest()
        if actual != ref.sha256:
            raise ArtifactIntegrityError(
                f"artifact {ref.sha256} of run {ref.run_id} at {where} is corrupt: "
                f"its bytes hash to {actual}"
            )
        if len(data) != ref.size:
            raise ArtifactIntegrityError(
                f"artifact {ref.sha256} of run {ref.run_id} at {where} has {len(data)} bytes "
                f"but its ref says {ref.size}"
            )
        return data

    def verify(self, ref: ArtifactRef) -> None:
        """Raise as ``get`` would if ``ref``'s blob is missing or corrupt."""
        self.get(ref)


class ArtifactStore(ArtifactBackend):
    """The directory store: blobs in ``root`` (created on first write), named by the sha256
    of their content. Written to a temporary file, fsynced, then renamed into place."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path_for(self, sha256: str) -> Path:
        return self.root / _blob_name(sha256)

    def where(self, sha256: str) -> str:
        return str(self.path_for(sha256))

    def _read(self, sha256: str) -> bytes | None:
        try:
            return self.path_for(sha256).read_bytes()
        except FileNotFoundError:
            return None

    def _write(self, sha256: str, data: bytes) -> None:
        path = self.path_for(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{sha256}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # same directory, so atomic
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def exists(self, ref: ArtifactRef) -> bool:
        return self.path_for(ref.sha256).is_file()

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r})"


class S3ArtifactStore(ArtifactBackend):
    """Blobs in an S3-compatible bucket (AWS S3, MinIO, Ceph, SeaweedFS...), under
    ``<prefix>/sha256/<first two hex>/<hash>``.

    The endpoint, region and credentials come from boto3's standard chain: ``AWS_ENDPOINT_URL``
    (or ``AWS_ENDPOINT_URL_S3``), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
    ``AWS_REGION``, ``AWS_PROFILE``, instance roles. A PUT is atomic in S3 (an object appears
    whole or not at all), so no temporary key is needed; a put of a blob already there is a
    HEAD and nothing else. ``client`` (a boto3 S3 client) is for callers that build their own.
    Needs the ``s3`` extra (``pip install 'little-workflow[s3]'``).
    """

    def __init__(self, bucket: str, prefix: str = "", *, client: Any | None = None) -> None:
        if not bucket:
            raise ConfigurationError("an S3 artifact store needs a bucket (s3://bucket/prefix)")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client = client
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, *, client: Any | None = None) -> S3ArtifactStore:
        """The store an ``s3://bucket/prefix`` URL names."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ConfigurationError(f"not an s3://bucket/prefix URL: {url!r}")
        return cls(parts.netloc, parts.path, client=client)

    @property
    def client(self) -> Any:
        """The boto3 S3 client (made on first use; boto3 clients are thread-safe)."""
        with self._lock:
            if self._client is None:
                self._client = _s3_client()
            return self._client

    def key_for(self, sha256: str) -> str:
        name = _blob_name(sha256)
        return f"{self.prefix}/{name}" if self.prefix else name

    def where(self, sha256: str) -> str:
        return f"s3://{self.bucket}/{self.key_for(sha256)}"

    def _read(self, sha256: str) -> bytes | None:
        key = self.key_for(sha256)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
            data: bytes = response["Body"].read()
            return data
        except Exception as exc:
            if _is_missing(exc, key_level=True):
                return None
            raise self._failed("read", sha256, exc) from exc

    def _write(self, sha256: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key_for(sha256), Body=data)
        except Exception as exc:
            raise self._failed("write", sha256, exc) from exc

    def exists(self, ref: ArtifactRef) -> bool:
        key = self.key_for(ref.sha256)
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if _is_missing(exc, key_level=True):
                return False
            raise self._failed("look up", ref.sha256, exc) from exc
        return True

    def _failed(self, what: str, sha256: str, exc: Exception) -> Exception:
        if _is_missing(exc, key_level=False):
            return ConfigurationError(
                f"S3 bucket {self.bucket!r} does not exist (artifact store "
                f"s3://{self.bucket}/{self.prefix}); create it or fix LITTLE_ARTIFACTS_URL"
            )
        return ArtifactError(f"could not {what} artifact {sha256} at {self.where(sha256)}: {exc}")

    def __repr__(self) -> str:
        return f"S3ArtifactStore('s3://{self.bucket}/{self.prefix}')"


def _s3_client() -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "an s3:// artifact store needs boto3: pip install 'little-workflow[s3]'"
        ) from None
    # Standard retries ride out a throttled or briefly unreachable endpoint; checksums only
    # when the operation requires them, which every S3-compatible server understands.
    config = Config(
        retries={"mode": "standard", "max_attempts": 5},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.session.Session().client("s3", config=config)


def _is_missing(exc: Exception, *, key_level: bool) -> bool:
    """Whether ``exc`` (a botocore ClientError) says the key (``key_level``) or the bucket is
    not there. A HEAD has no body, so a missing key is a bare 404 there."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    code = str(response.get("Error", {}).get("Code", ""))
    if code == "NoSuchBucket":
        return not key_level
    if key_level:
        return code in ("NoSuchKey", "404", "NotFound")
    return False


def open_artifact_store(location: str | os.PathLike[str]) -> ArtifactBackend:
    """The store a location names: ``s3://bucket/prefix`` is an S3 bucket, ``file:///dir``
    or a plain path a directory."""
    text = os.fspath(location)
    scheme = urlsplit(text).scheme
    if scheme == "s3":
        return S3ArtifactStore.from_url(text)
    if scheme == "file":
        return ArtifactStore(urlsplit(text).path)
    if scheme and len(scheme) > 1:  # not a Windows drive letter
        raise ConfigurationError(
            f"artifact store {text!r}: unknown scheme {scheme!r} (use s3://bucket/prefix, "
            "file:///dir or a directory)"
        )
    return ArtifactStore(text)

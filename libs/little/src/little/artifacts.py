"""Content-addressed artifact store on a local directory: bytes stored under their sha256.

Owns the layout ``<root>/sha256/<first two hex>/<hash>`` and the check that what is read back
hashes to its ref. Never deletes a blob, never returns bytes it has not verified, and never
writes a blob in place: a reader sees the whole blob or none.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from little.errors import ArtifactIntegrityError, ArtifactNotFoundError, ConfigurationError
from little.events import ArtifactRef

__all__ = ["ArtifactStore"]


class ArtifactStore:
    """Blobs in ``root`` (created on first write), named by the sha256 of their content."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path_for(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ConfigurationError(f"not a lower-case hex sha256: {sha256!r}")
        return self.root / "sha256" / sha256[:2] / sha256

    def put(
        self, run_id: str, data: bytes, media_type: str = "application/octet-stream"
    ) -> ArtifactRef:
        """Store ``data`` (idempotent: same bytes, same blob) and return its ref."""
        digest = hashlib.sha256(data).hexdigest()
        ref = ArtifactRef(run_id=run_id, sha256=digest, size=len(data), media_type=media_type)
        path = self.path_for(digest)
        if path.is_file():
            return ref
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{digest}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # same directory, so atomic
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return ref

    def get(self, ref: ArtifactRef) -> bytes:
        """The bytes ``ref`` names, after checking their size and hash."""
        path = self.path_for(ref.sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ArtifactNotFoundError(
                f"artifact {ref.sha256} of run {ref.run_id} is not in the store (expected at {path})"
            ) from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != ref.sha256:
            raise ArtifactIntegrityError(
                f"artifact {ref.sha256} of run {ref.run_id} at {path} is corrupt: "
                f"its bytes hash to {actual}"
            )
        if len(data) != ref.size:
            raise ArtifactIntegrityError(
                f"artifact {ref.sha256} of run {ref.run_id} at {path} has {len(data)} bytes but "
                f"its ref says {ref.size}"
            )
        return data

    def verify(self, ref: ArtifactRef) -> None:
        """Raise as ``get`` would if ``ref``'s blob is missing or corrupt."""
        self.get(ref)

    def exists(self, ref: ArtifactRef) -> bool:
        """Whether a blob is stored under ``ref``'s hash (its content is not checked)."""
        return self.path_for(ref.sha256).is_file()

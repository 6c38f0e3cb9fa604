"""Where snapshots are kept: the SnapshotStore port (embedded and Kafka stores in little.log).

The snapshot format (``Snapshot``, ``encode_snapshot``, ``decode_snapshot``) is in little.replay.
Every store passes ``little.testing.SnapshotStoreConformance``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["SnapshotStore"]


class SnapshotStore(ABC):
    """The newest snapshot bytes per run."""

    @abstractmethod
    def put(self, run_id: str, payload: bytes) -> None:
        """Store (replace) the run's snapshot: any bytes, empty ones too.

        A store with a size limit documents it and refuses a bigger payload with a
        ``LogError`` naming the run; the run's previous snapshot stays.
        """

    @abstractmethod
    def get(self, run_id: str) -> bytes | None:
        """The run's newest snapshot, if any."""

    def close(self) -> None:  # noqa: B027 - stores without resources need not override
        """Release resources. Idempotent."""

"""Where snapshots are kept: the SnapshotStore port (embedded and Kafka stores in little.log).

The snapshot format (``Snapshot``, ``encode_snapshot``, ``decode_snapshot``) is in little.replay.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["SnapshotStore"]


class SnapshotStore(ABC):
    """The newest snapshot bytes per run."""

    @abstractmethod
    def put(self, run_id: str, payload: bytes) -> None:
        """Store (replace) the run's snapshot."""

    @abstractmethod
    def get(self, run_id: str) -> bytes | None:
        """The run's newest snapshot, if any."""

    def close(self) -> None:  # noqa: B027 - stores without resources need not override
        """Release resources. Idempotent."""

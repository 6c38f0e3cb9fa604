"""Which command offsets the coordinator may commit: pure bookkeeping (no I/O).

``Ledger``: never past a command whose run is not yet durably under way.
"""

from __future__ import annotations

CommandRef = tuple[int, int]
"""(partition, offset) of a command on the commands topic."""


class Ledger:
    """Command offsets per owned partition: the commit point is the first unsettled one."""

    def __init__(self) -> None:
        self._pending: dict[int, set[int]] = {}
        self._next: dict[int, int | None] = {}
        self._committed: dict[int, int] = {}

    def open(self, partition: int) -> None:
        self._pending[partition] = set()
        self._next[partition] = None
        self._committed[partition] = -1

    def received(self, partition: int, offset: int) -> None:
        if partition in self._pending:
            if self._next[partition] is None:  # the group's position: already committed
                self._committed[partition] = offset
            self._pending[partition].add(offset)
            self._next[partition] = max(self._next[partition] or 0, offset + 1)

    def settle(self, partition: int, offset: int) -> int | None:
        """Mark a command handled; returns a new commit point if it moved."""
        pending = self._pending.get(partition)
        if pending is None:
            return None  # the partition was given up: its next owner reads the command again
        pending.discard(offset)
        point = self.point(partition)
        if point is None or point <= self._committed[partition]:
            return None
        self._committed[partition] = point
        return point

    def point(self, partition: int) -> int | None:
        pending = self._pending.get(partition)
        if pending:
            return min(pending)
        return self._next.get(partition)

    def close(self, partition: int) -> int | None:
        """Forget a partition; returns its final commit point if it moved."""
        point = self.point(partition)
        committed = self._committed.pop(partition, -1)
        self._pending.pop(partition, None)
        self._next.pop(partition, None)
        return point if point is not None and point > committed else None

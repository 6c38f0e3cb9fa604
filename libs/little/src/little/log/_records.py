"""The log's value records: what a record is, where it sits, where a cursor moves to.

Frozen, transport-neutral values that the port (``_port``), the appends in flight
(``_pending``) and every backend share. Pure: no I/O, and nothing here imports a backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

Header = tuple[str, bytes]


@dataclass(frozen=True, slots=True)
class Position:
    """Where a record sits in its topic."""

    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """A record to append: Avro bytes plus headers (the envelope mirrored for routing)."""

    payload: bytes
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as read back from the log."""

    run_id: str
    partition: int
    offset: int
    timestamp_ms: int
    payload: bytes = field(repr=False)
    headers: tuple[Header, ...] = field(default=(), repr=False)

    @property
    def position(self) -> Position:
        return Position(self.partition, self.offset)

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class ResetTo:
    """Where to move a consumer group's cursors: one of earliest, latest, offsets, timestamp."""

    earliest: bool = False
    latest: bool = False
    offsets: Mapping[int, int] | None = None
    timestamp: datetime | None = None

    def __post_init__(self) -> None:
        chosen = sum(
            [self.earliest, self.latest, self.offsets is not None, self.timestamp is not None]
        )
        if chosen != 1:
            raise ValueError("ResetTo needs exactly one of earliest, latest, offsets, timestamp")
        if self.timestamp is not None and self.timestamp.tzinfo is None:
            raise ValueError("ResetTo timestamp must be timezone-aware")

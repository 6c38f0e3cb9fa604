"""Snapshots: a run's folded state plus the log position it covers, Avro-encoded.

Replay starts from the newest snapshot that decodes and matches the log, and folds only what
follows it; anything else about a snapshot is a warning and a full refold, never trust.
Pure: encoding and decoding only, no store.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from little.errors import LittleError
from little.events import SINGLE_OBJECT_MAGIC, SchemaVersion, load_schema_version
from little.replay._state import STATE_VERSION, LogPosition, MaterializedRunState


class SnapshotError(LittleError, ValueError):
    """A snapshot that cannot be used; replay falls back to folding the whole run. Terminal
    for that snapshot (a ValueError too, as it was before it joined little's root)."""

    retryable = False


@dataclass(frozen=True)
class Snapshot:
    """A folded state and where in the log it stops."""

    state: MaterializedRunState
    position: LogPosition
    last_event_id: str
    taken_at: datetime

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def last_seq(self) -> int:
        return self.state.last_seq

    @classmethod
    def of(cls, state: MaterializedRunState, *, taken_at: datetime | None = None) -> Snapshot:
        if state.last_position is None or state.last_event_id is None:
            raise SnapshotError(
                f"run {state.run_id}: a snapshot needs a state folded from logged events"
            )
        return cls(state, state.last_position, state.last_event_id, taken_at or datetime.now(UTC))


@cache
def _schema() -> SchemaVersion:
    text = (
        resources.files("little") / "schemas" / "snapshots" / "RunSnapshot" / "v1.avsc"
    ).read_text("utf-8")
    return load_schema_version("RunSnapshot", 1, text)


def encode_snapshot(snapshot: Snapshot) -> bytes:
    schema = _schema()
    out = io.BytesIO()
    out.write(schema.single_object_header)
    record: dict[str, Any] = {
        "run_id": snapshot.run_id,
        "state_version": snapshot.state.state_version,
        "last_seq": snapshot.last_seq,
        "epoch": snapshot.state.epoch,
        "partition": snapshot.position.partition,
        "offset": snapshot.position.offset,
        "last_event_id": snapshot.last_event_id,
        "taken_at": snapshot.taken_at,
        "state_json": snapshot.state.model_dump_json(),
    }
    schemaless_writer(out, schema.parsed, record)
    return out.getvalue()


@dataclass(frozen=True)
class SnapshotOutline:
    """What any snapshot of any state version says of its run, enough to know whether the
    run is live (a snapshot of an older state version cannot stand in for the state, but it
    still tells a coordinator which runs to resume after an upgrade)."""

    run_id: str
    state_version: int
    status: str
    parent_run_id: str | None

    @property
    def terminal(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")


def outline_snapshot(data: bytes) -> SnapshotOutline:
    """The outline of a snapshot whatever its state version; ``SnapshotError`` if the bytes
    are not a RunSnapshot at all."""
    record = _record(data)
    try:
        state = json.loads(record["state_json"])
        return SnapshotOutline(
            run_id=str(record["run_id"]),
            state_version=int(record["state_version"]),
            status=str(state["status"]),
            parent_run_id=state.get("parent_run_id"),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(f"snapshot state is not a run state: {exc}") from exc


def _record(data: bytes) -> Any:
    schema = _schema()
    if data[:2] != SINGLE_OBJECT_MAGIC or data[2:10] != schema.fingerprint:
        raise SnapshotError("not a RunSnapshot v1 (framing or fingerprint differs)")
    try:
        body = io.BytesIO(data[10:])
        record: Any = schemaless_reader(body, schema.parsed, None)
        if body.tell() != len(data) - 10:
            raise SnapshotError("trailing bytes after the snapshot record")
    except SnapshotError:
        raise
    except Exception as exc:
        raise SnapshotError(f"snapshot body does not decode: {type(exc).__name__}: {exc}") from exc
    return record


def decode_snapshot(data: bytes) -> Snapshot:
    """Decode and check a snapshot; raises ``SnapshotError`` saying why it cannot be used."""
    record = _record(data)
    if record["state_version"] != STATE_VERSION:
        raise SnapshotError(
            f"snapshot state version {record['state_version']} is not {STATE_VERSION}"
        )
    try:
        state = MaterializedRunState.model_validate_json(record["state_json"])
    except ValueError as exc:
        raise SnapshotError(f"snapshot state does not validate: {exc}") from exc
    position = LogPosition(partition=record["partition"], offset=record["offset"])
    if (
        state.run_id != record["run_id"]
        or state.last_position != position
        or state.last_event_id != record["last_event_id"]
        or state.last_seq != record["last_seq"]
    ):
        raise SnapshotError("snapshot header and state disagree")
    return Snapshot(state, position, record["last_event_id"], record["taken_at"])

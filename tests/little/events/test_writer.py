"""The compiled Avro writer writes exactly the bytes fastavro writes, or leaves the record to
fastavro: on every schema version's golden vector, on generated events of every type, and on
values outside what it compiles (they fall back, and the bytes are still fastavro's)."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings

from little.events import (
    EVENT_TYPES,
    AgentCallSettled,
    Event,
    EventCodec,
    RunStarted,
    Usage,
    default_catalog,
)
from little.events._catalog import SchemaVersion
from little.events._writer import NotCompiled, compile_writer
from tests.paths import GOLDEN_VECTORS
from tests.strategies import events

CATALOG = default_catalog()
VECTORS = sorted(GOLDEN_VECTORS.glob("*/v*.bin"))
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _version(path: Path) -> SchemaVersion:
    (schema,) = [v for v in CATALOG.versions(path.parent.name) if v.version == int(path.stem[1:])]
    return schema


def _fastavro(schema: SchemaVersion, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema.parsed, record)
    return out.getvalue()


def _compiled(schema: SchemaVersion, record: dict[str, Any]) -> bytes:
    writer = compile_writer(schema.parsed)
    assert writer is not None, f"{schema.event_type} v{schema.version} did not compile"
    out = bytearray()
    writer(record, record["type"], out)
    return bytes(out)


@pytest.mark.parametrize(
    "schema", CATALOG.all_versions(), ids=lambda v: f"{v.event_type}/v{v.version}"
)
def test_every_schema_version_compiles(schema: SchemaVersion) -> None:
    # a schema left to fastavro would still be written right, only slower: say so here
    assert compile_writer(schema.parsed) is not None


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_vector_is_written_byte_for_byte(path: Path) -> None:
    schema = _version(path)
    data = path.read_bytes()
    body = data[len(schema.single_object_header) :]
    record = schemaless_reader(io.BytesIO(body), schema.read_parsed, None)
    assert isinstance(record, dict)
    assert _fastavro(schema, record) == body  # the reference writes the vector...
    assert _compiled(schema, record) == body  # ...and so does the compiled writer


NEWEST = [p for p in VECTORS if _version(p) == CATALOG.latest(p.parent.name)]


@pytest.mark.parametrize("path", NEWEST, ids=lambda p: p.parent.name)
def test_golden_event_of_the_newest_version_encodes_to_its_vector(path: Path) -> None:
    # (the models write the newest version of their type only)
    event = EVENT_TYPES[path.parent.name].model_validate(
        json.loads(path.with_suffix(".json").read_text("utf-8"))
    )
    codec = EventCodec()
    assert codec.encode(event) == path.read_bytes()
    assert codec.encode_with_fastavro(event) == path.read_bytes()


@PROPERTY
@given(events())
def test_any_event_encodes_as_fastavro_writes_it(event: Event) -> None:
    codec = EventCodec()
    assert codec.encode(event) == codec.encode_with_fastavro(event)


def _settled(**fields: Any) -> AgentCallSettled:
    return AgentCallSettled(run_id="run-1", seq=3, ordinal=0, outcome="responded", **fields)


def _left_to_fastavro(event: Event) -> bytes:
    """The bytes ``encode`` writes for an event the compiled writer refuses."""
    schema = CATALOG.latest(event.event_type)
    writer = compile_writer(schema.parsed)
    assert writer is not None
    with pytest.raises(NotCompiled):
        writer(event.__dict__, event.event_type, bytearray())
    return EventCodec().encode(event)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_a_uuid_object_is_left_to_fastavro_which_writes_its_text() -> None:
    event = _settled()
    odd = event.model_copy(update={"event_id": uuid.UUID(event.event_id)})
    assert _left_to_fastavro(odd) == EventCodec().encode(event)


def test_a_naive_time_is_left_to_fastavro() -> None:
    naive = _settled().model_copy(update={"occurred_at": datetime(2026, 1, 2, 3, 4, 5)})
    assert _left_to_fastavro(naive) == EventCodec().encode_with_fastavro(naive)


def test_a_bool_where_a_long_goes_is_left_to_fastavro() -> None:
    odd = _settled().model_copy(update={"ordinal": True})
    assert _left_to_fastavro(odd) == EventCodec().encode_with_fastavro(odd)


def test_a_long_beyond_64_bits_fails_as_fastavro_fails() -> None:
    odd = _settled().model_copy(update={"ordinal": 2**64})
    with pytest.raises(NotCompiled):
        compile_writer(CATALOG.latest(odd.event_type).parsed)(  # type: ignore[misc]
            odd.__dict__, odd.event_type, bytearray()
        )
    with pytest.raises(OverflowError):
        EventCodec().encode_with_fastavro(odd)
    with pytest.raises(OverflowError):
        EventCodec().encode(odd)


def test_a_time_in_another_zone_is_written_as_its_instant() -> None:
    utc = datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC)
    elsewhere = utc.astimezone(timezone(timedelta(hours=-5, minutes=-30)))
    a, b = _settled(occurred_at=utc), _settled(occurred_at=elsewhere)
    b = b.model_copy(update={"event_id": a.event_id})
    assert EventCodec().encode(b) == EventCodec().encode(a) == EventCodec().encode_with_fastavro(b)


def test_arrays_nested_records_and_unions_of_the_newest_run_started() -> None:
    event = RunStarted(
        run_id="r",
        seq=0,
        workflow="w",
        workflow_version="1",
        config_changes=("a: 1 -> 2", "é ✓" * 50),
        source_unsafe_reads=(),
        max_tokens=2**63 - 1,
        max_agent_calls=-(2**63),
    )
    codec = EventCodec()
    assert codec.encode(event) == codec.encode_with_fastavro(event)
    assert codec.decode(codec.encode(event)) == event


def test_usage_inside_a_settlement() -> None:
    event = _settled(usage=Usage(input_tokens=2**40, output_tokens=0, cached_input_tokens=7))
    codec = EventCodec()
    assert codec.encode(event) == codec.encode_with_fastavro(event)

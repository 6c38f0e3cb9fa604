"""The event codec: both framings, schema resolution, the usage rule, and every decode error."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro import schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little.errors import EventDecodeError, EventValidationError
from little.events import (
    EVENT_TYPES,
    AgentCallSettled,
    Event,
    EventCodec,
    ModelResponded,
    RunCancelled,
    RunClaimed,
    Usage,
    default_catalog,
    event_headers,
)
from little.events._codec import RUNS_TOPIC
from tests.paths import GOLDEN_VECTORS
from tests.strategies import events, usage

CATALOG = default_catalog()
GOLDEN = GOLDEN_VECTORS
ALL_TYPES = sorted(EVENT_TYPES)
PROPERTY = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _registry() -> SchemaRegistryClient:
    """A fresh in-memory registry (about 25 ms to create: share one where a test allows)."""
    return SchemaRegistryClient.new_client({"url": "mock://little-tests"})


SHARED_REGISTRY = _registry()


def _responded(**overrides: Any) -> ModelResponded:
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "seq": 4,
        "turn": 1,
        "provider": "openai",
        "model": "gpt-x",
        "request_hash": "a" * 64,
        "usage": Usage(input_tokens=10, output_tokens=5),
    }
    return ModelResponded(**(fields | overrides))


def _write(event_type: str, record: dict[str, Any], version: int | None = None) -> bytes:
    """Bytes for a raw record, written with fastavro directly (bypassing the models)."""
    schema = (
        CATALOG.latest(event_type) if version is None else CATALOG.versions(event_type)[version - 1]
    )
    out = io.BytesIO()
    out.write(schema.single_object_header)
    schemaless_writer(out, schema.parsed, record)
    return out.getvalue()


def _record(event: Event) -> dict[str, Any]:
    return event.model_dump() | {"type": event.event_type}


def _reason(codec: EventCodec, data: Any) -> str:
    with pytest.raises(EventDecodeError) as info:
        codec.decode(data)
    assert str(info.value).startswith(f"cannot decode event ({info.value.reason})")
    return info.value.reason


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("event_type", ALL_TYPES)
@PROPERTY
@given(data=st.data())
def test_single_object_round_trip(event_type: str, data: st.DataObject) -> None:
    event = data.draw(events([event_type]))
    codec = EventCodec()
    encoded = codec.encode(event)
    assert encoded.startswith(CATALOG.latest(event_type).single_object_header)
    decoded = codec.decode(encoded)
    assert decoded == event
    assert type(decoded) is type(event)


@settings(PROPERTY, max_examples=200)
@given(events())
def test_round_trip_of_any_event_in_both_framings(event: Event) -> None:
    assert EventCodec().decode(EventCodec().encode(event)) == event
    registry = SHARED_REGISTRY
    assert (
        EventCodec(registry=registry).decode(EventCodec(registry=registry).encode(event)) == event
    )


@pytest.mark.parametrize("event_type", ALL_TYPES)
@PROPERTY
@given(data=st.data())
def test_confluent_round_trip(event_type: str, data: st.DataObject) -> None:
    event = data.draw(events([event_type]))
    registry = SHARED_REGISTRY
    writer = EventCodec(registry=registry)
    assert writer.framing == "confluent"
    encoded = writer.encode(event)
    assert encoded[0] == 0x00
    (schema_id,) = struct.unpack(">I", encoded[1:5])
    assert registry.get_schema(schema_id).schema_str == CATALOG.latest(event_type).text
    assert writer.decode(encoded) == event
    # another codec sharing the registry resolves the id it has never seen
    assert EventCodec(registry=registry).decode(encoded) == event
    # a registry codec still reads single-object bytes
    assert writer.decode(EventCodec().encode(event)) == event


def test_confluent_subjects_follow_topic_record_name_strategy() -> None:
    registry = _registry()
    codec = EventCodec(registry=registry)
    for cls in EVENT_TYPES.values():
        codec.encode(_sample(cls))
    expected = {f"{RUNS_TOPIC}-{CATALOG.latest(t).full_name}" for t in ALL_TYPES}
    assert set(registry.get_subjects()) == expected
    assert "little.runs.v1-little.events.HarnessModelResponded" in expected
    assert "little.runs.v1-little.events.RunStarted" in expected


def test_schema_is_registered_once_per_type() -> None:
    registry = _registry()
    codec = EventCodec(registry=registry)
    first = codec.encode(_responded())
    second = codec.encode(_responded(seq=5))
    assert first[:5] == second[:5]
    assert registry.get_versions(f"{RUNS_TOPIC}-little.events.HarnessModelResponded") == [1]


def test_single_object_codec_cannot_read_confluent_framing_without_a_registry() -> None:
    encoded = EventCodec(registry=_registry()).encode(_responded())
    assert _reason(EventCodec(), encoded) == EventDecodeError.UNKNOWN_SCHEMA_ID


def _sample(cls: type[Event]) -> Event:
    """An event of ``cls`` with every field set: the newest golden vector's expected event."""
    version = CATALOG.latest(cls.event_type).version
    path = GOLDEN / cls.event_type / f"v{version}.json"
    return cls.model_validate(json.loads(path.read_text("utf-8")))


# -- evolution -----------------------------------------------------------------------------


def test_v1_model_responded_decodes_to_the_v2_model() -> None:
    event = _responded(finish_reason="stop", latency_ms=812)
    record = _record(event)
    del record["finish_reason"], record["latency_ms"]
    data = _write("harness.model.responded", record, version=1)
    assert data.startswith(CATALOG.versions("harness.model.responded")[0].single_object_header)
    decoded = EventCodec().decode(data)
    assert isinstance(decoded, ModelResponded)
    assert decoded.finish_reason is None
    assert decoded.latency_ms is None
    assert decoded == event.model_copy(update={"finish_reason": None, "latency_ms": None})


def test_v2_bytes_written_by_fastavro_decode_like_the_codec_writes_them() -> None:
    event = _responded(finish_reason="length", latency_ms=3)
    assert EventCodec().decode(_write("harness.model.responded", _record(event))) == event


# -- the usage rule ------------------------------------------------------------------------


def test_usage_with_cost_is_rejected() -> None:
    with pytest.raises(EventValidationError, match="cost"):
        Usage(input_tokens=1, output_tokens=1, cost_usd=0.01)  # type: ignore[call-arg]
    with pytest.raises(EventValidationError, match="cost"):
        Usage.model_validate({"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.01})


@pytest.mark.parametrize("key", ["cost_usd", "costUsd", "cost"])
def test_usage_with_cost_is_rejected_inside_an_event(key: str) -> None:
    with pytest.raises(EventValidationError, match="cost"):
        _responded(usage={"input_tokens": 1, "output_tokens": 1, key: 0.5})
    with pytest.raises(EventValidationError, match="cost"):
        AgentCallSettled(
            run_id="run-1",
            seq=0,
            ordinal=0,
            outcome="ok",
            usage={"input_tokens": 1, "output_tokens": 1, key: 0.5},
        )


@PROPERTY
@given(usage())
def test_drawn_usage_is_valid_and_costless(u: Usage) -> None:
    assert not hasattr(u, "cost_usd")
    assert min(u.input_tokens, u.output_tokens, u.cached_input_tokens, u.reasoning_tokens) >= 0


# -- decode errors -------------------------------------------------------------------------


def test_decode_empty_bytes() -> None:
    assert _reason(EventCodec(), b"") == EventDecodeError.NOT_AVRO_FRAMING


def test_decode_not_bytes() -> None:
    assert _reason(EventCodec(), "c301") == EventDecodeError.NOT_AVRO_FRAMING
    assert _reason(EventCodec(), None) == EventDecodeError.NOT_AVRO_FRAMING


@pytest.mark.parametrize("data", [b"\xc3\x02" + bytes(20), b"\x01\x02\x03", b"{}", b"\xc3"])
def test_decode_wrong_magic(data: bytes) -> None:
    assert _reason(EventCodec(), data) == EventDecodeError.NOT_AVRO_FRAMING


def test_decode_unknown_fingerprint() -> None:
    assert (
        _reason(EventCodec(), b"\xc3\x01" + b"\xff" * 8 + b"\x00")
        == EventDecodeError.UNKNOWN_FINGERPRINT
    )


@pytest.mark.parametrize("data", [b"\xc3\x01", b"\xc3\x01\x12\x34", b"\x00", b"\x00\x00\x00\x01"])
def test_decode_truncated_header(data: bytes) -> None:
    assert _reason(EventCodec(), data) == EventDecodeError.TRUNCATED


def test_decode_truncated_body_at_every_length() -> None:
    data = EventCodec().encode(_responded(finish_reason="stop", latency_ms=99, step_path="a/b"))
    for end in range(10, len(data)):
        assert _reason(EventCodec(), data[:end]) == EventDecodeError.TRUNCATED, end


@pytest.mark.parametrize(
    "body", [b"garbage", b"not avro at all, just some words of text", bytes(range(200))]
)
def test_a_valid_header_with_a_garbage_body_is_malformed_not_truncated(body: bytes) -> None:
    header = default_catalog().latest("RunCancelled").single_object_header
    assert _reason(EventCodec(), header + body) == EventDecodeError.MALFORMED


@given(st.binary(min_size=1, max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_bytes_behind_a_valid_header_are_never_called_truncated(body: bytes) -> None:
    """The body's first field is the event id (a uuid string), so garbage shows at once; only
    a body that starts as an event id does and ends early is ``truncated-body``."""
    header = default_catalog().latest("RunCancelled").single_object_header
    if body[:1] == b"\x48":
        return  # may be the start of an event id
    assert _reason(EventCodec(), header + body) == EventDecodeError.MALFORMED


def test_decode_trailing_bytes() -> None:
    data = EventCodec().encode(_responded())
    assert _reason(EventCodec(), data + b"\x00") == EventDecodeError.MALFORMED


def test_decode_confluent_framing_without_registry() -> None:
    assert (
        _reason(EventCodec(), b"\x00\x00\x00\x00\x07" + b"\x00" * 10)
        == EventDecodeError.UNKNOWN_SCHEMA_ID
    )


def test_decode_unknown_schema_id_with_registry() -> None:
    data = b"\x00" + struct.pack(">I", 4242) + b"\x00" * 10
    assert _reason(EventCodec(registry=_registry()), data) == EventDecodeError.UNKNOWN_SCHEMA_ID


def test_decode_a_registered_schema_that_is_not_a_little_event() -> None:
    registry = _registry()
    foreign = '{"type": "record", "name": "Other", "fields": [{"name": "x", "type": "long"}]}'
    schema_id = registry.register_schema("elsewhere-Other", Schema(foreign, "AVRO"))
    data = b"\x00" + struct.pack(">I", schema_id) + b"\x02"
    assert _reason(EventCodec(registry=registry), data) == EventDecodeError.UNKNOWN_TYPE


def test_decode_type_field_that_disagrees_with_its_schema() -> None:
    record = _record(_responded()) | {"type": "harness.model.called"}
    assert (
        _reason(EventCodec(), _write("harness.model.responded", record))
        == EventDecodeError.UNKNOWN_TYPE
    )


def test_decode_invalid_event_negative_tokens() -> None:
    record = _record(_responded())
    record["usage"] = {
        "input_tokens": -1,
        "output_tokens": 5,
        "cached_input_tokens": 0,
        "reasoning_tokens": 0,
    }
    with pytest.raises(EventDecodeError) as info:
        EventCodec().decode(_write("harness.model.responded", record))
    assert info.value.reason == EventDecodeError.INVALID
    assert "input_tokens" in str(info.value)


def test_decode_invalid_event_bad_seq_and_empty_run_id() -> None:
    bad_seq = _record(RunCancelled(run_id="run-1", seq=0)) | {"seq": -2}
    assert _reason(EventCodec(), _write("RunCancelled", bad_seq)) == EventDecodeError.INVALID
    empty_run = _record(RunCancelled(run_id="run-1", seq=0)) | {"run_id": ""}
    assert _reason(EventCodec(), _write("RunCancelled", empty_run)) == EventDecodeError.INVALID


def test_decode_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not-avro-framing"):
        EventCodec().decode(b"nope")


# -- headers -------------------------------------------------------------------------------


def test_headers_mirror_the_envelope() -> None:
    event = RunClaimed(run_id="run-1", owner="w-1", observed_seq=3, epoch=2, session_id="s")
    headers = dict(event_headers(event))
    assert headers["little.type"] == b"RunClaimed"
    assert headers["little.run_id"] == b"run-1"
    assert headers["little.seq"] == b"-1"
    assert headers["little.epoch"] == b"2"
    assert headers["little.event_id"] == event.event_id.encode()
    assert headers["little.session_id"] == b"s"
    assert "little.step_path" not in headers

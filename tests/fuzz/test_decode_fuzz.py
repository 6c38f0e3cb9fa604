"""Fuzzing the decoder: whatever the bytes, ``EventCodec.decode`` returns an event or raises
``EventDecodeError``, never anything else (a consumer must be able to dead-letter any record).

Inputs are random bytes, random bodies behind valid headers, and valid encodings of every type
and schema version (the golden vectors, sparse variants, both framings, fresh hypothesis events)
with random mutations. Derandomized, so CI runs the same >= 10,000 inputs every time.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little.errors import EventDecodeError
from little.events import EVENT_TYPES, Event, EventCodec, default_catalog
from tests.fuzz import examples as fuzz_examples
from tests.strategies import events

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "vectors"
REASONS = {v for k, v in vars(EventDecodeError).items() if k.isupper() and isinstance(v, str)}
CATALOG = default_catalog()

REGISTRY = SchemaRegistryClient.new_client({"url": "mock://little-fuzz"})
REGISTRY_CODEC = EventCodec(registry=REGISTRY)
PLAIN_CODEC = EventCodec()


def _sparse(event: Event) -> Event:
    """``event`` with every optional field at its default (None, empty, False...)."""
    cls = type(event)
    return cls.model_validate(
        {n: getattr(event, n) for n, i in cls.model_fields.items() if i.is_required()}
        | {"event_id": event.event_id, "occurred_at": event.occurred_at}
    )


def _corpus() -> tuple[list[bytes], list[bytes]]:
    """Valid single-object and Confluent encodings of every type (and every golden version)."""
    single, confluent = [], []
    for path in sorted(GOLDEN.glob("*/v*.bin")):
        single.append(path.read_bytes())
        full = EVENT_TYPES[path.parent.name].model_validate(
            json.loads(path.with_suffix(".json").read_text("utf-8"))
        )
        for event in (full, _sparse(full)):
            single.append(PLAIN_CODEC.encode(event))
            confluent.append(REGISTRY_CODEC.encode(event))
    return single, confluent


SINGLE, CONFLUENT = _corpus()
HEADERS = [v.single_object_header for v in CATALOG.all_versions()] + [
    b"\x00" + struct.pack(">I", i) for i in range(len(EVENT_TYPES) + 2)
]


def _decodes_or_raises_decode_error(data: bytes) -> None:
    for codec in (PLAIN_CODEC, EventCodec(), REGISTRY_CODEC):
        try:
            event = codec.decode(data)
        except EventDecodeError as exc:  # anything else fails the test with the input
            reason: str | None = exc.reason
        else:
            assert isinstance(event, Event)
            reason = None
        assert reason is None or reason in REASONS, reason


# -- mutations -----------------------------------------------------------------------------


@st.composite
def _mutate(draw: st.DrawFn, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(["flip", "truncate", "insert", "replace", "delete", "header", "tail"])
        )
        pos = draw(st.integers(0, len(buf)))
        if kind == "flip" and buf:
            i = min(pos, len(buf) - 1)
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del buf[pos:]
        elif kind == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "replace" and buf:
            i = min(pos, len(buf) - 1)
            buf[i] = draw(st.integers(0, 255))
        elif kind == "delete":
            del buf[pos : pos + draw(st.integers(1, 8))]
        elif kind == "header":  # this body behind another type's, version's or framing's header
            body_start = 10 if buf[:2] == b"\xc3\x01" else 5
            buf[:body_start] = draw(st.sampled_from(HEADERS))
        elif kind == "tail":
            buf += draw(st.binary(min_size=1, max_size=8))
    return bytes(buf)


def _run(strategy: st.SearchStrategy[bytes], examples: int) -> int:
    """Run the property over ``examples`` inputs; returns how many inputs it decoded."""
    seen = 0

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy)
    def check(data: bytes) -> None:
        nonlocal seen
        seen += 1
        _decodes_or_raises_decode_error(data)

    check()
    return seen


def _at_least(examples: int) -> Callable[[st.SearchStrategy[bytes]], None]:
    def run(strategy: st.SearchStrategy[bytes]) -> None:
        assert _run(strategy, examples) >= examples

    return run


# -- the fuzz tests (11,000 inputs, each decoded by three codecs) --------------------------


def test_random_bytes() -> None:
    _at_least(fuzz_examples(2000))(st.binary(max_size=300))


def test_random_body_behind_every_valid_header() -> None:
    _at_least(fuzz_examples(2500))(
        st.tuples(st.sampled_from(HEADERS), st.binary(max_size=300)).map(b"".join)
    )


def test_mutated_single_object_encodings() -> None:
    _at_least(fuzz_examples(3000))(st.sampled_from(SINGLE).flatmap(_mutate))


def test_mutated_confluent_encodings() -> None:
    _at_least(fuzz_examples(2000))(st.sampled_from(CONFLUENT).flatmap(_mutate))


def test_mutated_fresh_events_of_every_type() -> None:
    encodings = st.tuples(events(), st.sampled_from([PLAIN_CODEC, REGISTRY_CODEC])).map(
        lambda pair: pair[1].encode(pair[0])
    )
    _at_least(fuzz_examples(1500))(encodings.flatmap(_mutate))


def test_the_corpus_is_valid() -> None:
    """The unmutated seeds decode: the fuzz starts from real records of every type."""
    decoded: set[Any] = set()
    for data in SINGLE + CONFLUENT:
        decoded.add(REGISTRY_CODEC.decode(data).event_type)
    assert decoded == set(EVENT_TYPES)

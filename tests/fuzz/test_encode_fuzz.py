"""Fuzzing the compiled Avro writer against fastavro: whatever record a schema version takes,
the compiled writer writes fastavro's bytes, or refuses it (``NotCompiled``) and the codec
writes it with fastavro.

Records are drawn from each schema itself (every version, not only the newest the models
write), with the edges: the whole long and int ranges, times before 1970 and in other zones,
non-ASCII and long strings, empty and longer arrays, nulls in every union; plus values outside
the types (a bool for a long, a UUID object, a naive time, an int past 64 bits) that must be
refused, never written differently. Derandomized: CI runs the same inputs every time.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from fastavro import schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little.events import default_catalog
from little.events._catalog import SchemaVersion
from little.events._writer import NotCompiled, compile_writer
from tests.fuzz import examples as fuzz_examples

CATALOG = default_catalog()
VERSIONS = CATALOG.all_versions()
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

_ZONES = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-11))]
)
_TIMES = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=_ZONES
)
_STRINGS = st.text(max_size=20) | st.text(max_size=200).map(lambda s: s * 3)


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = st.sampled_from([lo, hi, 0, -1, 1, 63, 64, -64, -65, 127, 128, 8191, 8192])
    return edges | st.integers(lo, hi)


def _odd() -> st.SearchStrategy[Any]:
    """Values of no Avro type the events use as is."""
    return st.sampled_from(
        [True, False, 2**64, -(2**64), uuid.UUID(int=7), datetime(2026, 1, 1), b"x", 1.5]
    )


def _records(schema: Any, named: dict[str, Any], odd: bool) -> st.SearchStrategy[Any]:
    """Values of a parsed-schema node; with ``odd``, one in 20 is one of ``_odd()`` instead
    (so about a third of the records have none)."""
    base = _values(schema, named, odd)
    if not odd:
        return base
    return st.tuples(st.integers(0, 19), base, _odd()).map(lambda t: t[2] if t[0] == 0 else t[1])


def _values(schema: Any, named: dict[str, Any], odd: bool) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.one_of([_records(b, named, odd) for b in schema])
    if isinstance(schema, str):
        if schema in named:
            return _values(named[schema], named, odd)
        schema = {"type": schema}
    kind, logical = schema["type"], schema.get("logicalType")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "int":
        return _ints(*INT32)
    if kind == "long" and logical == "timestamp-micros":
        return _TIMES
    if kind == "long":
        return _ints(*INT64)
    if kind == "string" and logical == "uuid":
        return st.uuids().map(str)
    if kind == "string":
        return _STRINGS
    if kind == "array":
        return st.lists(_records(schema["items"], named, odd), max_size=4)
    if kind == "record":
        named[schema["name"]] = schema
        return st.fixed_dictionaries(
            {f["name"]: _records(f["type"], named, odd) for f in schema["fields"]}
        )
    raise TypeError(f"no strategy for {schema!r}")  # a new Avro type in the schemas: add it


def _reference(schema: SchemaVersion, record: dict[str, Any]) -> bytes | type[BaseException]:
    out = io.BytesIO()
    try:
        schemaless_writer(out, schema.parsed, record)
    except Exception as exc:
        return type(exc)
    return out.getvalue()


def _check(schema: SchemaVersion, record: dict[str, Any], counts: dict[str, int]) -> None:
    writer = compile_writer(schema.parsed)
    assert writer is not None
    out = bytearray()
    try:
        writer(record, record["type"], out)
    except NotCompiled:
        counts["refused"] += 1
        return  # the codec writes it with fastavro: nothing of ours to compare
    counts["written"] += 1
    assert bytes(out) == _reference(schema, record), (schema.event_type, schema.version, record)


def _run(odd: bool, examples: int) -> dict[str, int]:
    counts = {"written": 0, "refused": 0}
    strategies = [st.tuples(st.just(v), _values(v.parsed, {}, odd)) for v in VERSIONS]

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.one_of(strategies))
    def check(case: tuple[SchemaVersion, dict[str, Any]]) -> None:
        schema, record = case
        record["type"] = schema.event_type
        _check(schema, record, counts)

    check()
    return counts


def test_records_of_every_schema_version_are_written_as_fastavro_writes_them() -> None:
    counts = _run(odd=False, examples=fuzz_examples(600))
    assert counts["refused"] == 0  # every valid record takes the compiled path
    assert counts["written"] >= fuzz_examples(600)


def test_odd_values_are_refused_or_written_as_fastavro_writes_them() -> None:
    counts = _run(odd=True, examples=fuzz_examples(600))
    # both sides are exercised: the fallback and the compiled path
    assert counts["refused"] > 0
    assert counts["written"] > 0

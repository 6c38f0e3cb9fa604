"""Hypothesis strategies for little's values, in one module (as attrs keeps them).

``events()`` draws valid events of every type (or of the ``types`` given); ``usage()`` draws
token counts. Strategies are derived from each model's fields, with integer widths taken from
the newest Avro schema, so a new field or a new event type is covered without editing this file.
"""

from __future__ import annotations

import types as _types
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cache
from typing import Any, Union, get_args, get_origin

import annotated_types
from hypothesis import strategies as st

from little._canonical import canonical_json
from little.events import EVENT_TYPES, ArtifactRef, Event, Usage, default_catalog
from little.events._catalog import schema_json

__all__ = ["artifact_refs", "events", "json_texts", "texts", "usage"]

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

MIN_TIME = datetime(2000, 1, 1)
MAX_TIME = datetime(2100, 1, 1)


def texts(min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[str]:
    """Short unicode strings (no surrogates, so always valid UTF-8)."""
    return st.text(min_size=min_size, max_size=max_size)


def json_texts() -> st.SearchStrategy[str]:
    """Small JSON documents as canonical JSON text, as the ``*_json`` fields carry them."""
    leaves = (
        st.none()
        | st.booleans()
        | st.integers(-(2**53), 2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | texts(max_size=6)
    )
    values = st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(texts(max_size=4), inner, max_size=3)
        ),
        max_leaves=5,
    )
    return values.map(canonical_json)


def occurred_at() -> st.SearchStrategy[datetime]:
    """UTC instants with microsecond precision, within 2000-2100."""
    return st.datetimes(min_value=MIN_TIME, max_value=MAX_TIME, timezones=st.just(UTC))


def usage() -> st.SearchStrategy[Usage]:
    count = st.integers(0, INT64[1])
    return st.builds(
        Usage,
        input_tokens=count,
        output_tokens=count,
        cached_input_tokens=count,
        reasoning_tokens=count,
    )


def artifact_refs() -> st.SearchStrategy[ArtifactRef]:
    return st.builds(
        ArtifactRef,
        run_id=texts(min_size=1),
        sha256=st.binary(min_size=32, max_size=32).map(bytes.hex),
        size=st.integers(0, INT64[1]),
        media_type=st.sampled_from(["application/json", "text/plain", "application/octet-stream"]),
    )


def _avro_int_widths(event_type: str) -> dict[str, tuple[int, int]]:
    """Field name -> bounds of its Avro integer type (``int`` or ``long``, maybe nullable)."""
    widths: dict[str, tuple[int, int]] = {}
    for f in schema_json(default_catalog().latest(event_type))["fields"]:
        branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
        if "int" in branches:
            widths[f["name"]] = INT32
        elif "long" in branches:
            widths[f["name"]] = INT64
    return widths


def _for_annotation(
    name: str, annotation: Any, metadata: list[Any], bounds: tuple[int, int]
) -> st.SearchStrategy[Any]:
    origin = get_origin(annotation)
    if origin in (Union, _types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        (only,) = inner
        return st.none() | _for_annotation(name, only, metadata, bounds)
    if origin is tuple:
        item, _ellipsis = get_args(annotation)
        return st.lists(_for_annotation(name, item, [], bounds), max_size=3).map(tuple)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        lo, hi = bounds
        for m in metadata:
            if isinstance(m, annotated_types.Ge):
                lo = max(lo, int(m.ge))  # type: ignore[call-overload]
        return st.integers(lo, hi)
    if annotation is str:
        if name.endswith("_json"):
            return json_texts()
        min_len = max(
            (m.min_length for m in metadata if isinstance(m, annotated_types.MinLen)), default=0
        )
        return texts(min_size=min_len)
    if annotation is datetime:
        return occurred_at()
    if annotation is ArtifactRef:
        return artifact_refs()
    if annotation is Usage:
        return usage()
    raise TypeError(f"no strategy for field {name}: {annotation!r}")  # a new field type: add it


@cache
def _event_strategy(cls: type[Event]) -> st.SearchStrategy[Event]:
    widths = _avro_int_widths(cls.event_type)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, info in cls.model_fields.items():
        fields[name] = _for_annotation(
            name, info.annotation, info.metadata, widths.get(name, INT64)
        )
    fields["event_id"] = st.uuids().map(str)
    fields["seq"] = st.just(-1) if cls.event_type == "RunClaimed" else st.integers(0, INT64[1])
    return st.builds(cls, **fields)


def events(types: Iterable[str | type[Event]] | None = None) -> st.SearchStrategy[Event]:
    """Valid events of the given types (wire names or classes); all types when ``None``."""
    classes = (
        list(EVENT_TYPES.values())
        if types is None
        else [EVENT_TYPES[t] if isinstance(t, str) else t for t in types]
    )
    return st.one_of([_event_strategy(cls) for cls in classes])

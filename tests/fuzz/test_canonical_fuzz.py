"""Fuzzing canonical JSON: whatever the value, ``canonical_json`` writes the text the stdlib
encoder it is defined by writes (every hash in the log is taken over it), or raises what that
encoder raises. orjson writes the plain values; the drawn values mix plain ones with what must
go to the stdlib encoder (floats, integers past 2**53 and past 64 bits, non-string keys, lone
surrogates, subclasses of str and int, and types orjson would write where the stdlib refuses).
Derandomized: CI runs the same inputs every time.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little._canonical import canonical_json
from tests.fuzz import examples as fuzz_examples

STDLIB = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


@dataclasses.dataclass
class Point:
    x: int


def _same(value: Any) -> None:
    try:
        expected: str | type[BaseException] = STDLIB.encode(value)
    except Exception as exc:
        expected = type(exc)
    try:
        got: str | type[BaseException] = canonical_json(value)
    except Exception as exc:
        got = type(exc)
    assert got == expected, value


# any code point: controls, lone surrogates (orjson refuses them), any plane
_TEXT = st.text(st.characters(exclude_categories=()), max_size=12) | st.just("a\ud800b")
_PLAIN_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.sampled_from([2**53, -(2**53), 0, -1])
    | _TEXT
)
_ODD_LEAVES = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([2**53 + 1, -(2**53) - 1, 2**63, 2**64, -(2**64) - 1, 10**30])
    | st.sampled_from(
        [
            Colour.RED,
            Level.HIGH,
            Name("n"),
            uuid.UUID(int=1),
            datetime(2026, 1, 1, tzinfo=UTC),
            Point(1),
            b"bytes",
            {1, 2},
        ]
    )
)
_KEYS = _TEXT | st.sampled_from(["a", "b", "é", "\U0001f600", "\uffff", "A", ""])
_ODD_KEYS = st.sampled_from([1, 2.5, True, None, Name("k")])


def _values(leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[Any]) -> Any:
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=3).map(tuple)
            | st.dictionaries(keys, inner, max_size=4)
        ),
        max_leaves=12,
    )


def _run(strategy: st.SearchStrategy[Any], examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy)
    def check(value: Any) -> None:
        _same(value)

    check()


def test_plain_values() -> None:
    _run(_values(_PLAIN_LEAVES, _KEYS), fuzz_examples(2000))


def test_values_with_what_must_go_to_the_stdlib_encoder() -> None:
    _run(_values(_PLAIN_LEAVES | _ODD_LEAVES, _KEYS | _ODD_KEYS), fuzz_examples(2000))


@pytest.mark.parametrize("depth", [200, 300, 2000])
def test_deep_nesting(depth: int) -> None:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": [value]}
    _same(value)


def test_a_circular_value_raises_as_the_stdlib_encoder_does() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        canonical_json(loop)

"""Events the run writer builds without validation are the events validation builds; any value
validation would change or refuse is left to it, and it does what it did."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from little.errors import EventValidationError
from little.events import (
    AgentCallSettled,
    ArtifactRef,
    Event,
    EventCodec,
    RunStarted,
    StepCompleted,
    Usage,
)
from little.events._trusted import build_event
from tests.strategies import events

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _same(built: Event, validated: Event) -> None:
    assert type(built) is type(validated)
    assert built == validated
    assert list(built.__dict__.items()) == list(validated.__dict__.items())  # order too
    assert built.model_fields_set == validated.model_fields_set
    assert built.model_dump() == validated.model_dump()
    assert repr(built) == repr(validated)
    assert hash(built) == hash(validated)
    assert EventCodec().encode(built) == EventCodec().encode(validated)


@PROPERTY
@given(events())
def test_an_event_of_any_type_is_built_as_validation_builds_it(event: Event) -> None:
    fields = dict(event.__dict__)
    _same(build_event(type(event), dict(fields)), type(event)(**fields))


@PROPERTY
@given(events())
def test_defaults_are_filled_as_validation_fills_them(event: Event) -> None:
    cls = type(event)
    given_fields = {
        n: v for n, v in event.__dict__.items() if cls.model_fields[n].is_required()
    } | {"occurred_at": event.occurred_at}
    built = build_event(cls, dict(given_fields))
    validated = cls(**given_fields)
    assert built.model_fields_set == validated.model_fields_set == set(given_fields)
    same_id = {"event_id": built.event_id}  # (a fresh id each: the same one on both sides)
    _same(built.model_copy(update=same_id), validated.model_copy(update=same_id))


def _settled(**fields: Any) -> dict[str, Any]:
    return {"run_id": "run-1", "seq": 3, "ordinal": 0, "outcome": "ok"} | fields


def test_a_fresh_event_gets_its_own_id_and_time() -> None:
    before = datetime.now(UTC)
    a, b = build_event(AgentCallSettled, _settled()), build_event(AgentCallSettled, _settled())
    assert a.event_id != b.event_id
    assert before <= a.occurred_at <= datetime.now(UTC)
    assert EventCodec().decode(EventCodec().encode(a)) == a


@pytest.mark.parametrize(
    "fields",
    [
        _settled(ordinal=-1),  # ge=0
        _settled(run_id=""),  # min_length
        _settled(event_id="not-a-uuid"),  # the pattern: always validated
        _settled(occurred_at=datetime(2026, 1, 1)),  # naive
        _settled(usage={"input_tokens": 1, "output_tokens": 1, "cost_usd": 1.0}),
        _settled(no_such_field=1),  # extra="forbid"
        {"run_id": "run-1", "seq": 3, "ordinal": 0},  # a required field missing
        _settled(outcome=7),  # not coerced to text
    ],
)
def test_a_value_validation_refuses_is_refused_as_before(fields: dict[str, Any]) -> None:
    with pytest.raises((ValidationError, EventValidationError)) as validated:
        AgentCallSettled(**fields)
    with pytest.raises(type(validated.value)) as built:
        build_event(AgentCallSettled, dict(fields))
    assert str(built.value) == str(validated.value)


@pytest.mark.parametrize(
    ("cls", "fields"),
    [
        (AgentCallSettled, _settled(ordinal=True)),  # a bool where an int goes: 1
        (AgentCallSettled, _settled(model_calls="3")),  # text to int
        (AgentCallSettled, _settled(usage={"input_tokens": 2, "output_tokens": 1})),
        (
            StepCompleted,
            {"run_id": "r", "seq": 1, "step_id": "s", "artifact_refs": []},  # list to tuple
        ),
        (
            StepCompleted,
            {
                "run_id": "r",
                "seq": 1,
                "step_id": "s",
                "artifact_refs": (
                    {"run_id": "r", "sha256": "a" * 64, "size": 1, "media_type": "x"},
                ),
            },
        ),
        (
            RunStarted,
            {
                "run_id": "r",
                "seq": 0,
                "workflow": "w",
                "workflow_version": "1",
                "source_unsafe_reads": ["time.time"],
            },
        ),
    ],
)
def test_a_value_validation_converts_is_converted_as_before(
    cls: type[Event], fields: dict[str, Any]
) -> None:
    validated = cls(**fields)
    built = build_event(cls, dict(fields))
    assert built.model_fields_set == validated.model_fields_set == set(fields)
    same = {"event_id": built.event_id, "occurred_at": built.occurred_at}
    _same(built.model_copy(update=same), validated.model_copy(update=same))


def test_models_in_fields_are_kept() -> None:
    usage = Usage(input_tokens=3, output_tokens=2)
    ref = ArtifactRef(run_id="r", sha256="b" * 64, size=9, media_type="application/json")
    built = build_event(AgentCallSettled, _settled(usage=usage, result_ref=ref))
    assert built.usage is usage
    assert built.result_ref is ref

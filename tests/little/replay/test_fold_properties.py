"""Properties of the one fold over generated runs (crashes, resumes, fenced writers included).

Every expectation is computed here from the generated stream and the facts its generator
knows (which events a fenced writer landed, which claims resumed or were rejected), not from
the fold's own bookkeeping. Deterministic: derandomized, no example database.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from little.events import (
    DecisionRecorded,
    LoggedEvent,
    ModelCalled,
    ModelResponded,
    RunClaimed,
    SessionStarted,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCallStarted,
)
from little.replay import (
    LogPosition,
    MaterializedRunState,
    UsageTotals,
    materialize_run_state_from_events,
    price_usd,
)
from tests.strategies import RUN_TIME_MAX, RUN_TIME_MIN, GeneratedRun, generated_runs, run_streams

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def fold(
    events: Any, *, start: MaterializedRunState | None = None, run_id: str | None = None
) -> MaterializedRunState:
    return materialize_run_state_from_events(events, start=start, run_id=run_id)


def accepted(run: GeneratedRun) -> list[LoggedEvent]:
    """The events the current writer wrote: not claims, not a fenced writer's."""
    return [
        le
        for le in run.events
        if not isinstance(le.event, RunClaimed) and le.event.event_id not in run.zombie_event_ids
    ]


# -- snapshots ---------------------------------------------------------------------------------


@PROPERTY
@given(generated_runs())
def test_folding_a_snapshot_then_the_rest_equals_folding_everything(run: GeneratedRun) -> None:
    stream = list(run.events)
    whole = fold(stream)
    for k in range(len(stream) + 1):
        prefix = fold(stream[:k], run_id=run.run_id)
        assert fold(stream[k:], start=prefix) == whole, f"split at {k}"
        # A snapshot is stored as JSON: it must come back equal, Decimals and all.
        restored = MaterializedRunState.model_validate_json(prefix.model_dump_json())
        assert restored == prefix, f"JSON round trip of the prefix state at {k}"
        assert fold(stream[k:], start=restored) == whole, f"split at {k} through JSON"


@PROPERTY
@given(run_streams())
def test_snapshots_chain(stream: list[LoggedEvent]) -> None:
    """Three pieces (snapshot of a snapshot) fold to the same state as one."""
    third = max(len(stream) // 3, 1)
    first = fold(stream[:third])
    second = fold(stream[third : 2 * third], start=first)
    assert fold(stream[2 * third :], start=second) == fold(stream)


# -- determinism and immutability ----------------------------------------------------------------


def assert_deeply_frozen(value: Any, path: str) -> None:
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            with pytest.raises(ValidationError):
                setattr(value, name, getattr(value, name))
            assert_deeply_frozen(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            assert_deeply_frozen(item, f"{path}[{i}]")
    else:
        assert value is None or isinstance(value, str | int | Decimal | datetime), (
            f"{path} is a mutable {type(value).__name__}"
        )


@PROPERTY
@given(run_streams())
def test_the_fold_is_deterministic_pure_and_its_result_deeply_immutable(
    stream: list[LoggedEvent],
) -> None:
    kept = list(stream)
    before = [(le.partition, le.offset, le.event.model_dump()) for le in stream]
    state = fold(stream)
    assert fold(stream) == state
    assert fold(iter(stream)) == state  # any iterable, read once
    assert [(le.partition, le.offset, le.event.model_dump()) for le in stream] == before
    assert stream == kept
    assert_deeply_frozen(state, "state")


def validated(model: BaseModel) -> BaseModel:
    """``model`` built again by pydantic's validation, from plain values, nested models too."""
    return type(model).model_validate(model.model_dump())


@PROPERTY
@given(run_streams())
def test_the_fold_builds_states_validation_would_accept_and_build_equal(
    stream: list[LoggedEvent],
) -> None:
    # The fold builds states without validating them again (construct/evolve): every value
    # must still be one validation accepts, and behave exactly like a validated state.
    for k in (len(stream) // 2, len(stream)):
        state = fold(stream[k:], start=fold(stream[:k], run_id=stream[0].event.run_id))
        again = validated(state)
        assert again == state
        assert state == again
        assert hash(again) == hash(state)
        assert again.model_dump_json() == state.model_dump_json()
        assert repr(again) == repr(state)
        for a, b in zip(again.steps + again.sessions, state.steps + state.sessions, strict=True):
            assert a == b
            assert hash(a) == hash(b)
            assert list(vars(a)) == list(vars(b))


# -- seq, claims and fencing -------------------------------------------------------------------


@PROPERTY
@given(run_streams())
def test_generated_streams_are_one_runs_records_in_log_order(stream: list[LoggedEvent]) -> None:
    assert len(stream) <= 60
    assert len({le.partition for le in stream}) == 1
    assert all(a.offset < b.offset for a, b in pairwise(stream))
    assert len({le.event.run_id for le in stream}) == 1
    assert all(RUN_TIME_MIN <= le.event.occurred_at <= RUN_TIME_MAX for le in stream)
    first = stream[0].event
    assert isinstance(first, RunClaimed)
    assert first.epoch == 1
    chain = [le.event for le in stream if not isinstance(le.event, RunClaimed)]
    assert not chain or (chain[0].seq, chain[0].type) == (0, "RunStarted")


@PROPERTY
@given(generated_runs())
def test_seq_claims_and_fencing(run: GeneratedRun) -> None:
    state = fold(run.events)
    applied = accepted(run)
    assert [le.event.seq for le in applied] == list(range(len(applied)))  # generator sanity
    assert state.last_seq == len(applied) - 1
    assert state.events_applied == len(applied)
    assert state.fenced_events == len(run.zombie_event_ids)
    assert state.rejected_claims == len(run.rejected_claim_ids)
    assert state.accepted_claims == 1 + len(run.resume_claim_ids)
    assert state.epoch == run.final_epoch
    last = run.events[-1]
    assert state.last_event_id == last.event.event_id
    assert state.last_position is not None
    assert (state.last_position.partition, state.last_position.offset) == (
        last.partition,
        last.offset,
    )


@PROPERTY
@given(generated_runs(), st.data())
def test_copies_of_accepted_events_change_nothing_but_their_count(
    run: GeneratedRun, data: st.DataObject
) -> None:
    """A mirror or a re-produce leaves copies of accepted events later in the partition (same
    event, same id, a later offset): folding with them is folding without them, and they are
    counted, also once a newer claim fenced their writer; at every split point too."""
    applied = accepted(run)
    records = list(run.events)
    sources = data.draw(st.lists(st.sampled_from(applied), max_size=6)) if applied else []
    for source in sources:
        after = records.index(source) + 1
        records.insert(data.draw(st.integers(after, len(records))), source)
    partition = records[0].partition
    log = [  # as the partition holds them: every record at its own offset
        LoggedEvent(event=le.event, partition=partition, offset=i) for i, le in enumerate(records)
    ]
    copy_positions, seen = set(), set()
    for i, le in enumerate(log):
        if le.event.event_id in seen:
            copy_positions.add(i)
        seen.add(le.event.event_id)
    without = [le for i, le in enumerate(log) if i not in copy_positions]
    state = fold(log)
    expected = fold(without)
    assert state.duplicate_events == len(sources)
    assert state.fenced_events == expected.fenced_events == len(run.zombie_event_ids)
    last = log[-1]
    assert state == expected.model_copy(
        update={
            "duplicate_events": len(sources),
            "last_event_id": last.event.event_id,
            "last_position": LogPosition(partition=last.partition, offset=last.offset),
        }
    )
    for k in range(len(log) + 1):
        assert fold(log[k:], start=fold(log[:k], run_id=run.run_id)) == state, f"split at {k}"


# -- usage and cost ------------------------------------------------------------------------------


@dataclass
class Tally:
    """An independent accumulator of usage (no UsageTotals arithmetic)."""

    calls: int = 0
    tokens: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    priced: Decimal = Decimal(0)
    unpriced: int = 0

    def add_call(self, e: ModelResponded) -> None:
        u = e.usage
        self.calls += 1
        for i, n in enumerate(
            (u.input_tokens, u.output_tokens, u.cached_input_tokens, u.reasoning_tokens)
        ):
            self.tokens[i] += n
        cost = price_usd(e.provider, e.model, u, e.occurred_at)
        if cost is None:
            self.unpriced += 1
        else:
            self.priced += cost

    def add_tally(self, other: Tally) -> None:
        self.calls += other.calls
        self.tokens = [a + b for a, b in zip(self.tokens, other.tokens, strict=True)]
        self.priced += other.priced
        self.unpriced += other.unpriced

    def check(self, totals: UsageTotals, where: str) -> None:
        got = (
            totals.calls,
            [
                totals.input_tokens,
                totals.output_tokens,
                totals.cached_input_tokens,
                totals.reasoning_tokens,
            ],
            totals.unpriced_calls,
        )
        assert got == (self.calls, self.tokens, self.unpriced), where
        if self.calls and self.unpriced == self.calls:
            assert totals.cost_usd is None, where
        else:
            assert totals.cost_usd == self.priced, where
            assert isinstance(totals.cost_usd, Decimal), where


def expected_usage(run: GeneratedRun) -> tuple[Tally, Tally, dict[str, Tally], dict[str, Tally]]:
    """(billed, avoided, billed by step, avoided by step) from the stream alone."""
    billed, avoided = Tally(), Tally()
    step_billed: dict[str, Tally] = defaultdict(Tally)
    step_avoided: dict[str, Tally] = defaultdict(Tally)
    for le in run.events:
        e = le.event
        if e.event_id in run.resume_claim_ids:
            # A resume serves everything recorded so far from the log.
            avoided.add_tally(billed)
            for path, tally in step_billed.items():
                step_avoided[path].add_tally(tally)
        elif isinstance(e, ModelResponded) and e.event_id not in run.zombie_event_ids:
            replayed = e.replayed_from_run_id is not None
            (avoided if replayed else billed).add_call(e)
            if e.step_path is not None:
                (step_avoided if replayed else step_billed)[e.step_path].add_call(e)
    return billed, avoided, step_billed, step_avoided


@PROPERTY
@given(generated_runs())
def test_usage_and_cost_come_from_accepted_responses_only(run: GeneratedRun) -> None:
    state = fold(run.events)
    billed, avoided, step_billed, step_avoided = expected_usage(run)
    billed.check(state.usage, "run billed")
    avoided.check(state.avoided_usage, "run avoided")
    for step in state.steps:
        step_billed.get(step.step_path, Tally()).check(step.usage, f"{step.step_path} billed")
        step_avoided.get(step.step_path, Tally()).check(
            step.avoided_usage, f"{step.step_path} avoided"
        )
    assert set(step_billed) | set(step_avoided) <= {s.step_path for s in state.steps}
    for scope in ("usage", "avoided_usage"):
        run_totals: UsageTotals = getattr(state, scope)
        steps: list[UsageTotals] = [getattr(s, scope) for s in state.steps]
        for name in (
            "calls",
            "input_tokens",
            "output_tokens",
            "cached_input_tokens",
            "reasoning_tokens",
            "unpriced_calls",
            "priced_cost_usd",
        ):
            assert sum(getattr(t, name) for t in steps) <= getattr(run_totals, name), name


# -- steps and sessions ---------------------------------------------------------------------------


@PROPERTY
@given(generated_runs())
def test_steps_visits_decisions_and_session_compaction(run: GeneratedRun) -> None:
    state = fold(run.events)
    status: dict[str, str] = {}
    visits: dict[str, int] = defaultdict(int)
    targets: dict[str, str | None] = {}
    pending_target: str | None = None
    session_step: dict[str, str | None] = {}
    compacted: set[str] = set()
    turns: dict[str, set[int]] = defaultdict(set)
    tool_calls: dict[str, set[str]] = defaultdict(set)
    for le in accepted(run):
        e = le.event
        if isinstance(e, StepStarted):
            status[e.step_path or ""] = "running"
        elif isinstance(e, StepCompleted):
            status[e.step_path or ""] = "completed"
            visits[e.step_path or ""] += 1
            compacted |= {s for s, p in session_step.items() if p == e.step_path}
        elif isinstance(e, StepFailed):
            status[e.step_path or ""] = "pending" if e.will_retry else "failed"
        elif isinstance(e, DecisionRecorded):
            targets[e.step_path or ""] = pending_target = e.target
        elif isinstance(e, SessionStarted):
            session_step[e.session_id or ""] = e.step_path
        elif isinstance(e, ModelCalled):
            turns[e.session_id or ""].add(e.turn)
        elif isinstance(e, ToolCallStarted):
            tool_calls[e.session_id or ""].add(e.call_id)

    assert {s.step_path: s.status for s in state.steps} == status
    # A crash right after a failure: the step must read pending (will retry) or failed.
    for k, le in enumerate(run.events):
        e = le.event
        if isinstance(e, StepFailed) and e.event_id not in run.zombie_event_ids:
            failed = fold(run.events[: k + 1]).step(e.step_path or "")
            assert failed is not None
            assert failed.status == ("pending" if e.will_retry else "failed")
    for step in state.steps:
        assert step.visits == visits[step.step_path], step.step_path
        assert step.decision_target == targets.get(step.step_path), step.step_path
        assert step.visits <= step.max_visits, step.step_path
    assert state.pending_decision_target == pending_target

    assert {s.session_id for s in state.sessions} == set(session_step)
    for session in state.sessions:
        sid = session.session_id
        assert session.compacted == (sid in compacted), sid
        assert session.turn_count == len(turns[sid]), sid
        assert session.tool_call_count == len(tool_calls[sid]), sid
        if session.compacted:
            assert (session.turns, session.tool_calls) == ((), ()), sid
        else:  # kept in full, so a resumed step can fast-forward its session
            assert {t.turn for t in session.turns} == turns[sid], sid
            assert {c.call_id for c in session.tool_calls} == tool_calls[sid], sid

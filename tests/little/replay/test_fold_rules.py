"""The fold's rules, one small explicit example each (DESIGN §4-§5, seed 000).

Claims and fencing, seq integrity and its error messages, usage (billed, avoided, per step,
rollups skipped), cost (unpriced, mixed, zero), steps (visits, retries, decisions), session
compaction, empty streams and snapshots; and pricing against the genai-prices library itself.
"""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import genai_prices
import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import types as price_types
from genai_prices.data_snapshot import DataSnapshot, _bundled_snapshot, set_custom_snapshot
from pydantic import ValidationError

from little.errors import RuntimeIntegrityError
from little.events import (
    DecisionRecorded,
    Event,
    LoggedEvent,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    PatchMarked,
    RunCancelled,
    RunClaimed,
    RunCompleted,
    RunFailed,
    RunParked,
    RunStarted,
    SessionCompleted,
    SessionStarted,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCallStarted,
    ToolCallSucceeded,
    Usage,
    ValueRecorded,
)
from little.replay import (
    LogPosition,
    MaterializedRunState,
    ModelTurn,
    StepState,
    StreamIntegrityError,
    UsageTotals,
    _pricing,
    materialize_run_state_from_events,
    price_usd,
)
from little.replay._state import RECENT_EVENT_IDS, construct, evolve

RUN = "run-rules-1"
PARTITION = 3
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


class Log:
    """Builds one run's stream as a partition holds it: each writer has an epoch and its own
    next seq; offsets and times advance with every record."""

    def __init__(self, run_id: str = RUN) -> None:
        self.run_id = run_id
        self.events: list[LoggedEvent] = []
        self.next_seq: dict[int, int] = {}
        self.offset = 100

    def claim(self, epoch: int, observed_seq: int | None = None) -> RunClaimed:
        last = max(self.next_seq.values(), default=0) - 1
        event = RunClaimed(
            run_id=self.run_id,
            epoch=epoch,
            owner=f"worker-{epoch}",
            observed_seq=last if observed_seq is None else observed_seq,
            occurred_at=self._now(),
        )
        self.next_seq.setdefault(epoch, last + 1)
        self._append(event)
        return event

    def add(self, cls: type[Event], epoch: int = 1, seq: int | None = None, **fields: Any) -> Any:
        if seq is None:
            seq = self.next_seq.get(epoch, 0)
        self.next_seq[epoch] = seq + 1
        fields.setdefault("run_id", self.run_id)
        event = cls(seq=seq, epoch=epoch, occurred_at=self._now(), **fields)
        self._append(event)
        return event

    def _now(self) -> datetime:
        return T0 + timedelta(seconds=len(self.events))

    def _append(self, event: Event) -> None:
        self.events.append(LoggedEvent(event=event, partition=PARTITION, offset=self.offset))
        self.offset += 2  # another run's record sits between two of this run's

    def fold(self, **kwargs: Any) -> MaterializedRunState:
        return materialize_run_state_from_events(self.events, **kwargs)


def started(epoch: int = 1) -> Log:
    log = Log()
    log.claim(epoch)
    log.add(RunStarted, epoch, workflow="wf", workflow_version="1")
    return log


def step_started(log: Log, path: str, epoch: int = 1, **fields: Any) -> None:
    log.add(StepStarted, epoch, step_path=path, step_id=path.rsplit("/", 1)[-1], **fields)


def step_completed(log: Log, path: str, epoch: int = 1, **fields: Any) -> None:
    log.add(StepCompleted, epoch, step_path=path, step_id=path.rsplit("/", 1)[-1], **fields)


def session(log: Log, sid: str, path: str | None, epoch: int = 1) -> None:
    log.add(
        SessionStarted,
        epoch,
        step_path=path,
        session_id=sid,
        session_name="worker",
        model="openai:gpt-4o",
        manifest_json="{}",
        manifest_hash="0" * 64,
    )


def model_call(
    log: Log,
    sid: str,
    path: str | None,
    turn: int,
    usage: Usage,
    *,
    provider: str = "openai",
    model: str = "gpt-4o",
    epoch: int = 1,
    replayed_from: str | None = None,
) -> ModelResponded:
    call: dict[str, Any] = {
        "step_path": path,
        "session_id": sid,
        "turn": turn,
        "provider": provider,
    }
    call |= {"model": model, "request_hash": f"h{turn}"}
    log.add(ModelCalled, epoch, message_count=1, **call)
    responded: ModelResponded = log.add(
        ModelResponded, epoch, usage=usage, replayed_from_run_id=replayed_from, **call
    )
    return responded


def usage(i: int, o: int, cached: int = 0, reasoning: int = 0) -> Usage:
    return Usage(
        input_tokens=i, output_tokens=o, cached_input_tokens=cached, reasoning_tokens=reasoning
    )


def cost(provider: str, model: str, u: Usage, at: datetime = T0) -> Decimal:
    price = price_usd(provider, model, u, at)
    assert price is not None
    return price


# -- seq integrity -----------------------------------------------------------------------------


def test_a_seq_gap_names_run_expected_and_found_seq_event_and_position() -> None:
    log = started()
    step_started(log, "a")
    step_completed(log, "a")  # seq 2
    bad = log.add(StepStarted, seq=5, step_path="b", step_id="b")
    with pytest.raises(StreamIntegrityError) as info:
        log.fold()
    message = str(info.value)
    assert RUN in message
    assert "gap" in message
    assert "expected seq 3, found 5" in message
    assert "StepStarted" in message
    assert bad.event_id in message
    assert f"partition {PARTITION} offset {log.events[-1].offset}" in message
    assert isinstance(info.value, RuntimeIntegrityError)
    assert info.value.run_id == RUN
    assert info.value.event == bad
    assert info.value.position is not None
    assert info.value.position.offset == log.events[-1].offset


def test_a_duplicate_seq_is_an_integrity_error() -> None:
    log = started()
    step_started(log, "a")  # seq 1
    log.add(StepCompleted, seq=1, step_path="a", step_id="a")
    with pytest.raises(StreamIntegrityError, match=r"duplicate: expected seq 2, found 1"):
        log.fold()


def copy_of(log: Log, event: Event) -> None:
    """The same event again, later in the partition: what a mirror or a re-produce leaves."""
    log._append(event)


def test_an_exact_copy_of_an_accepted_event_is_skipped_and_counted() -> None:
    log = started()
    step_started(log, "a")  # seq 1
    first = log.events[-1].event
    session(log, "s1", "a")  # seq 2
    step_completed(log, "a")  # seq 3
    clean = log.fold()
    copy_of(log, first)  # seq 1 again, after seq 3
    copy_of(log, log.events[-2].event)  # the last one again
    step_started(log, "b")  # seq 4: the chain goes on
    state = log.fold()
    assert state.duplicate_events == 2
    assert (state.last_seq, state.events_applied) == (4, clean.events_applied + 1)
    assert state.step("a") == clean.step("a")  # not started a second time
    assert state.step("a").attempts == 1  # type: ignore[union-attr]
    assert state.fenced_events == 0


def test_a_copy_of_an_accepted_event_after_a_newer_claim_is_a_duplicate_not_a_zombies() -> None:
    log = started()
    step_started(log, "a")  # seq 1, epoch 1
    first = log.events[-1].event
    log.claim(2)
    copy_of(log, first)  # epoch 1 < 2, but it is the very event accepted at seq 1
    step_started(log, "b", epoch=2)  # seq 2
    state = log.fold()
    assert (state.duplicate_events, state.fenced_events) == (1, 0)


def test_another_event_at_an_accepted_seq_is_an_integrity_error_naming_both() -> None:
    log = started()
    step_started(log, "a")  # seq 1
    accepted = log.events[-1].event
    step_completed(log, "a")  # seq 2
    other = log.add(StepStarted, seq=1, step_path="a", step_id="a")  # same seq, another id
    with pytest.raises(StreamIntegrityError) as info:
        log.fold()
    message = str(info.value)
    assert "seq duplicate: expected seq 3, found 1" in message
    assert f"another event than the one accepted there ({accepted.event_id})" in message
    assert other.event_id in message


def test_a_copy_older_than_the_ids_the_fold_keeps_is_an_integrity_error_saying_so() -> None:
    log = started()
    step_started(log, "a")  # seq 1
    early = log.events[-1].event
    for i in range(RECENT_EVENT_IDS):
        log.add(ValueRecorded, kind="clock", ordinal=i, value_json=str(i))
    copy_of(log, early)
    with pytest.raises(StreamIntegrityError, match="older than the last 64 accepted events"):
        log.fold()


def test_bare_events_fail_without_a_position() -> None:
    log = started()
    log.add(StepStarted, seq=4, step_path="a", step_id="a")
    with pytest.raises(StreamIntegrityError, match="expected seq 1, found 4") as info:
        materialize_run_state_from_events([le.event for le in log.events])
    assert "partition" not in str(info.value)


def test_an_event_of_another_run_is_an_integrity_error() -> None:
    log = started()
    log.add(StepStarted, run_id="run-other", step_path="a", step_id="a")
    with pytest.raises(StreamIntegrityError, match="event of run run-other in the stream of run"):
        log.fold()
    other = Log("run-other")
    other.claim(1)
    with pytest.raises(StreamIntegrityError, match=f"run {RUN}: event of run run-other"):
        materialize_run_state_from_events(other.events, run_id=RUN)  # run_id names the run


def test_a_response_to_a_turn_never_called_is_an_integrity_error() -> None:
    log = started()
    step_started(log, "a")
    session(log, "s1", "a")
    log.add(
        ModelResponded,
        step_path="a",
        session_id="s1",
        turn=0,
        provider="openai",
        model="gpt-4o",
        request_hash="h",
        usage=usage(1, 1),
    )
    with pytest.raises(StreamIntegrityError, match="turn 0, which was never called"):
        log.fold()


def test_a_model_failure_of_a_turn_never_called_is_an_integrity_error() -> None:
    log = started()
    session(log, "s1", None)
    log.add(
        ModelFailed,
        session_id="s1",
        turn=2,
        provider="openai",
        model="gpt-4o",
        request_hash="h",
        error_type="E",
        message="m",
    )
    with pytest.raises(StreamIntegrityError, match="turn 2, which was never called"):
        log.fold()


def test_a_tool_result_for_a_call_never_started_is_an_integrity_error() -> None:
    log = started()
    session(log, "s1", None)
    log.add(ToolCallSucceeded, session_id="s1", call_id="c9", tool="search")
    with pytest.raises(StreamIntegrityError, match="'c9', which never started"):
        log.fold()


def test_a_session_event_for_a_session_never_started_is_an_integrity_error() -> None:
    log = started()
    log.add(
        ModelCalled,
        session_id="ghost",
        turn=0,
        provider="openai",
        model="gpt-4o",
        request_hash="h",
        message_count=1,
    )
    with pytest.raises(StreamIntegrityError, match="session 'ghost', which never started"):
        log.fold()


# -- claims and fencing --------------------------------------------------------------------------


def test_a_claim_with_an_equal_or_lower_epoch_is_rejected_and_counted() -> None:
    log = started()
    log.claim(2)  # a resume: accepted
    log.claim(2)  # a racing claimer computed the same epoch: the first in the log wins
    log.claim(1)  # a stale claimer
    step_started(log, "a", epoch=2)
    state = log.fold()
    assert state.rejected_claims == 2
    assert state.accepted_claims == 2
    assert (state.epoch, state.owner) == (2, "worker-2")
    assert state.last_seq == 1  # claims stand outside the seq chain
    assert state.step("a") is not None


def test_a_zombie_writers_events_are_fenced_counted_and_ignored() -> None:
    log = started()
    step_started(log, "a")  # seq 1, epoch 1
    log.claim(2)  # the new owner continues at seq 2
    session(log, "s1", "a", epoch=1)  # zombie, seq 2
    step_completed(log, "a", epoch=1)  # zombie, seq 3
    step_started(log, "a", epoch=2)  # seq 2
    model_call(log, "s1", "a", 0, usage(10, 10), epoch=1)  # zombie, needs no session
    state = log.fold()
    assert state.fenced_events == 4
    assert state.last_seq == 2
    assert state.events_applied == 3
    step = state.step("a")
    assert step is not None
    assert (step.status, step.visits, step.attempts) == ("running", 0, 2)
    assert state.sessions == ()
    assert state.usage == UsageTotals()


def test_an_event_with_an_epoch_ahead_of_every_accepted_claim_is_an_integrity_error() -> None:
    log = started()
    log.add(StepStarted, epoch=2, seq=1, step_path="a", step_id="a")
    with pytest.raises(StreamIntegrityError, match="epoch 2 is ahead of the accepted claim"):
        log.fold()


def test_an_event_before_any_claim_is_an_integrity_error() -> None:
    log = Log()
    log.add(RunStarted, workflow="wf", workflow_version="1")
    with pytest.raises(StreamIntegrityError, match=r"epoch 1 is ahead .* epoch 0"):
        log.fold()


def test_a_rejected_claimers_events_would_be_an_integrity_error_not_silently_mixed() -> None:
    log = started()
    log.claim(1)  # rejected: the claimer must back off ...
    log.add(StepStarted, epoch=1, seq=1, step_path="late", step_id="late")
    log.add(StepStarted, epoch=1, seq=1, step_path="a", step_id="a")  # ... or the chain breaks
    with pytest.raises(StreamIntegrityError, match="duplicate"):
        log.fold()


# -- usage and cost ------------------------------------------------------------------------------


def test_session_completed_usage_is_a_rollup_and_not_counted_again() -> None:
    log = started()
    step_started(log, "a")
    session(log, "s1", "a")
    first = model_call(log, "s1", "a", 0, usage(1_000, 200))
    second = model_call(log, "s1", "a", 1, usage(3_000, 100, cached=500))
    log.add(SessionCompleted, step_path="a", session_id="s1", turns=2, usage=usage(4_000, 300, 500))
    state = log.fold()
    assert (state.usage.calls, state.usage.input_tokens, state.usage.output_tokens) == (
        2,
        4_000,
        300,
    )
    assert state.usage.cached_input_tokens == 500
    assert state.usage.cost_usd == cost("openai", "gpt-4o", first.usage, first.occurred_at) + cost(
        "openai", "gpt-4o", second.usage, second.occurred_at
    )
    s1 = state.session("s1")
    assert s1 is not None
    assert s1.status == "completed"


def test_an_unknown_model_is_unpriced_not_free() -> None:
    log = started()
    step_started(log, "a")
    session(log, "s1", "a")
    model_call(log, "s1", "a", 0, usage(100, 10), provider="scripted", model="echo")
    state = log.fold()
    for totals in (state.usage, state.steps[0].usage):
        assert totals.calls == 1
        assert totals.unpriced_calls == 1
        assert totals.cost_usd is None
        assert totals.priced_cost_usd == 0


def test_a_known_provider_with_an_unknown_model_is_unpriced() -> None:
    log = started()
    session(log, "s1", None)
    model_call(log, "s1", None, 0, usage(100, 10), provider="openai", model="gpt-nonexistent")
    state = log.fold()
    assert (state.usage.cost_usd, state.usage.unpriced_calls) == (None, 1)


def test_priced_and_unpriced_calls_mix_to_the_priced_sum() -> None:
    log = started()
    session(log, "s1", None)
    priced = model_call(log, "s1", None, 0, usage(10_000, 2_000))
    model_call(log, "s1", None, 1, usage(5_000, 500), provider="scripted", model="echo")
    state = log.fold()
    assert state.usage.calls == 2
    assert state.usage.unpriced_calls == 1
    expected = cost("openai", "gpt-4o", priced.usage, priced.occurred_at)
    assert expected > 0
    assert state.usage.cost_usd == expected
    assert isinstance(state.usage.cost_usd, Decimal)


def test_no_calls_cost_a_true_zero() -> None:
    state = started().fold()
    assert state.usage.calls == 0
    assert state.usage.cost_usd == Decimal(0)
    assert state.usage.cost_usd is not None
    assert isinstance(state.usage.cost_usd, Decimal)
    assert state.avoided_usage.cost_usd == Decimal(0)


def test_usage_is_totalled_per_step_and_for_the_run() -> None:
    log = started()
    session(log, "planner", None)  # a run-level session: counts for the run only
    plan = model_call(log, "planner", None, 0, usage(1_000, 100))
    for path, tokens in (("a", 2_000), ("b", 3_000)):
        step_started(log, path)
        session(log, f"s-{path}", path)
        model_call(log, f"s-{path}", path, 0, usage(tokens, 10), model="gpt-4o-mini")
        model_call(log, f"s-{path}", path, 1, usage(tokens, 20), model="gpt-4o-mini")
    state = log.fold()
    a, b = state.step("a"), state.step("b")
    assert a is not None
    assert b is not None
    assert (a.usage.calls, a.usage.input_tokens, a.usage.output_tokens) == (2, 4_000, 30)
    assert (b.usage.calls, b.usage.input_tokens, b.usage.output_tokens) == (2, 6_000, 30)
    assert (state.usage.calls, state.usage.input_tokens) == (5, 11_000)
    assert a.usage.cost_usd == 2 * cost("openai", "gpt-4o-mini", usage(2_000, 15))
    assert state.usage.cost_usd == (
        a.usage.priced_cost_usd
        + b.usage.priced_cost_usd
        + cost("openai", "gpt-4o", plan.usage, plan.occurred_at)
    )


def test_usage_before_a_resume_is_avoided_after_it() -> None:
    log = started()
    step_started(log, "a")
    session(log, "s1", "a")
    before = model_call(log, "s1", "a", 0, usage(1_000, 100))
    log.add(ModelCalled, step_path="a", session_id="s1", turn=1, provider="openai",
            model="gpt-4o", request_hash="h1", message_count=2)  # fmt: skip
    first_run = log.fold()
    assert first_run.usage.calls == 1
    assert first_run.avoided_usage.calls == 0

    log.claim(2)  # crash; the new owner serves turn 0 from the log, calls turn 1 again
    after = log.add(
        ModelResponded,
        2,
        step_path="a",
        session_id="s1",
        turn=1,
        provider="openai",
        model="gpt-4o",
        request_hash="h1",
        usage=usage(2_000, 50),
    )
    state = log.fold()
    paid_before = cost("openai", "gpt-4o", before.usage, before.occurred_at)
    paid_after = cost("openai", "gpt-4o", after.usage, after.occurred_at)
    assert (state.usage.calls, state.usage.input_tokens) == (2, 3_000)  # billed: both paid
    assert state.usage.cost_usd == paid_before + paid_after
    assert (state.avoided_usage.calls, state.avoided_usage.input_tokens) == (1, 1_000)
    assert state.avoided_usage.cost_usd == paid_before
    step = state.step("a")
    assert step is not None
    assert (step.usage.calls, step.avoided_usage.calls) == (2, 1)
    assert step.avoided_usage.cost_usd == paid_before


def test_a_call_replayed_from_another_run_is_avoided_only() -> None:
    log = started()
    step_started(log, "a")
    session(log, "s1", "a")
    replayed = model_call(log, "s1", "a", 0, usage(4_000, 400), replayed_from="run-golden")
    state = log.fold()
    assert state.usage == UsageTotals()
    assert state.usage.cost_usd == 0
    assert (state.avoided_usage.calls, state.avoided_usage.input_tokens) == (1, 4_000)
    assert state.avoided_usage.cost_usd == cost(
        "openai", "gpt-4o", replayed.usage, replayed.occurred_at
    )
    step = state.step("a")
    assert step is not None
    assert (step.usage.calls, step.avoided_usage.calls) == (0, 1)
    turn = state.sessions[0].turn(0)
    assert turn is not None
    assert turn.replayed_from_run_id == "run-golden"


# -- steps ------------------------------------------------------------------------------------------


def test_visits_count_committed_completions_of_a_step_path() -> None:
    log = started()
    for visit in (1, 2, 3):
        step_started(log, "loop/review", max_visits=3, visit=visit)
        step_completed(log, "loop/review", visit=visit)
    state = log.fold()
    step = state.step("loop/review")
    assert step is not None
    assert (step.visits, step.max_visits, step.attempts, step.status) == (3, 3, 3, "completed")
    assert step.step_id == "review"


def test_a_started_but_uncommitted_visit_is_not_counted() -> None:
    log = started()
    step_started(log, "loop/review", max_visits=3)
    step_completed(log, "loop/review")
    step_started(log, "loop/review", max_visits=3, visit=2)
    step = log.fold().step("loop/review")
    assert step is not None
    assert (step.visits, step.status) == (1, "running")


def test_a_decision_target_is_recorded_on_its_step_and_the_run() -> None:
    log = started()
    step_started(log, "decide")
    log.add(DecisionRecorded, step_path="decide", step_id="decide", target="review")
    step_completed(log, "decide")
    state = log.fold()
    step = state.step("decide")
    assert step is not None
    assert step.decision_target == "review"
    assert state.pending_decision_target == "review"

    step_started(log, "decide", visit=2)
    log.add(DecisionRecorded, step_path="decide", step_id="decide", visit=2, target="publish")
    state = log.fold()
    assert state.pending_decision_target == "publish"  # the most recent decision
    step = state.step("decide")
    assert step is not None
    assert step.decision_target == "publish"


def test_a_failed_step_is_pending_when_it_will_retry_and_failed_otherwise() -> None:
    log = started()
    failure: dict[str, Any] = {"error_type": "Timeout", "message": "slow"}
    step_started(log, "a")
    log.add(StepFailed, step_path="a", step_id="a", will_retry=True, **failure)
    step_started(log, "b")
    log.add(StepFailed, step_path="b", step_id="b", will_retry=False, **failure)
    state = log.fold()
    a, b = state.step("a"), state.step("b")
    assert a is not None
    assert b is not None
    assert (a.status, a.error) == ("pending", "Timeout: slow")
    assert (b.status, b.error) == ("failed", "Timeout: slow")

    step_started(log, "a", attempt=2)
    step_completed(log, "a", attempt=2)
    a = log.fold().step("a")
    assert a is not None
    assert (a.status, a.attempts, a.error) == ("completed", 2, None)


def test_run_status_follows_its_lifecycle() -> None:
    log = Log()
    assert log.fold(run_id=RUN).status == "pending"
    log.claim(1)
    assert log.fold().status == "pending"  # claimed, not started
    log.add(RunStarted, workflow="wf", workflow_version="7", input_json='{"x":1}')
    state = log.fold()
    assert (state.status, state.workflow, state.workflow_version) == ("running", "wf", "7")
    cases: tuple[tuple[type[Event], dict[str, Any], str, str | None], ...] = (
        (RunCompleted, {"output_json": "1"}, "completed", None),
        (RunFailed, {"error_type": "E", "message": "m"}, "failed", "E: m"),
        (RunCancelled, {"reason": "stop"}, "cancelled", "cancelled: stop"),
    )
    for cls, fields, status, error in cases:
        ended = Log()
        ended.events = list(log.events)
        ended.next_seq = dict(log.next_seq)
        ended.add(cls, **fields)
        state = ended.fold()
        assert (state.status, state.error, state.terminal) == (status, error, True)


# -- sessions ----------------------------------------------------------------------------------------


def test_sessions_are_kept_in_full_while_their_step_runs_and_compacted_when_it_completes() -> None:
    log = started()
    step_started(log, "a")
    session(log, "s1", "a")
    model_call(log, "s1", "a", 0, usage(100, 10))
    log.add(ToolCallStarted, step_path="a", session_id="s1", call_id="c1", tool="search",
            turn=0, arguments_json="{}", idempotency_key=f"{RUN}/a/c1")  # fmt: skip
    log.add(ToolCallSucceeded, step_path="a", session_id="s1", call_id="c1", tool="search",
            result_json='"r"')  # fmt: skip
    log.add(ModelCalled, step_path="a", session_id="s1", turn=1, provider="openai",
            model="gpt-4o", request_hash="h1", message_count=3)  # fmt: skip

    running = log.fold()
    s1 = running.session("s1")
    assert s1 is not None
    assert not s1.compacted
    turn0, turn1, call = s1.turn(0), s1.turn(1), s1.tool_call("c1")
    assert turn0 is not None
    assert turn0.status == "responded"
    assert turn0.usage == usage(100, 10)
    assert turn1 is not None
    assert turn1.status == "called"
    assert call is not None
    assert (call.status, call.result_json) == ("succeeded", '"r"')
    assert call.idempotency_key == f"{RUN}/a/c1"
    assert (s1.turn_count, s1.tool_call_count) == (2, 1)

    log.add(ModelResponded, step_path="a", session_id="s1", turn=1, provider="openai",
            model="gpt-4o", request_hash="h1", usage=usage(5, 5))  # fmt: skip
    session(log, "planner", None)  # a run-level session is never compacted by a step
    step_completed(log, "a")
    done = log.fold()
    s1 = done.session("s1")
    assert s1 is not None
    assert s1.compacted
    assert (s1.turns, s1.tool_calls) == ((), ())
    assert (s1.turn_count, s1.tool_call_count) == (2, 1)
    planner = done.session("planner")
    assert planner is not None
    assert not planner.compacted
    assert done.usage.calls == 2  # compaction drops detail, never usage


def test_sessions_of_another_step_stay_in_full() -> None:
    log = started()
    step_started(log, "a")
    step_started(log, "b")
    session(log, "sa", "a")
    session(log, "sb", "b")
    model_call(log, "sb", "b", 0, usage(1, 1))
    step_completed(log, "a")
    state = log.fold()
    sa, sb = state.session("sa"), state.session("sb")
    assert sa is not None
    assert sa.compacted
    assert sb is not None
    assert not sb.compacted
    assert sb.turn(0) is not None


# -- empty streams and snapshots ----------------------------------------------------------------


def test_an_empty_stream_with_a_run_id_is_a_pending_run() -> None:
    state = materialize_run_state_from_events([], run_id=RUN)
    assert state == MaterializedRunState(run_id=RUN)
    assert (state.status, state.last_seq, state.epoch, state.usage.cost_usd) == (
        "pending",
        -1,
        0,
        Decimal(0),
    )
    with pytest.raises(ValueError, match="run_id or start"):
        materialize_run_state_from_events([])


def test_start_continues_from_a_prefix() -> None:
    log = started()
    step_started(log, "a")
    session(log, "s1", "a")
    model_call(log, "s1", "a", 0, usage(100, 10))
    log.claim(2)
    step_completed(log, "a", epoch=2)
    everything = log.fold()
    for k in range(len(log.events) + 1):
        prefix = materialize_run_state_from_events(log.events[:k], run_id=RUN)
        resumed = materialize_run_state_from_events(log.events[k:], start=prefix)
        assert resumed == everything, k
        restored = MaterializedRunState.model_validate_json(prefix.model_dump_json())
        assert materialize_run_state_from_events(log.events[k:], start=restored) == everything
    assert materialize_run_state_from_events([], start=everything) == everything


def test_start_checks_the_seq_chain_across_the_split() -> None:
    log = started()
    step_started(log, "a")
    prefix = log.fold()
    later = Log()
    later.add(StepCompleted, seq=3, step_path="a", step_id="a")
    with pytest.raises(StreamIntegrityError, match="expected seq 2, found 3"):
        materialize_run_state_from_events(later.events, start=prefix)


def test_a_state_with_unpriced_and_priced_usage_survives_json() -> None:
    """cost_usd is derived; the JSON a snapshot stores carries it and must read back."""
    log = started()
    session(log, "s1", None)
    model_call(log, "s1", None, 0, usage(10, 1), provider="scripted", model="echo")
    model_call(log, "s1", None, 1, usage(10_000, 1_000, cached=4_000))
    state = log.fold()
    text = state.model_dump_json()
    assert '"cost_usd"' in text
    assert MaterializedRunState.model_validate_json(text) == state
    assert MaterializedRunState.model_validate(state.model_dump()) == state


# -- pricing ----------------------------------------------------------------------------------------

MODELS = (
    ("openai", "gpt-4o"),
    ("openai", "gpt-4o-mini"),
    ("anthropic", "claude-sonnet-4-5"),
    ("google", "gemini-2.5-pro"),  # tiered: above 200k input tokens every token costs more
)


def library_price(provider: str, model: str, u: Usage, at: datetime) -> Decimal:
    calc = _bundled_snapshot().calc(
        PriceUsage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cached_input_tokens,
        ),
        model,
        provider,
        None,
        at,
    )
    return Decimal(calc.total_price)


@pytest.mark.parametrize(("provider", "model"), MODELS)
def test_price_equals_the_librarys_own_price(provider: str, model: str) -> None:
    rng = random.Random(f"{provider}/{model}")
    for _ in range(60):
        i = rng.choice([rng.randrange(0, 5_000), rng.randrange(0, 400_000), 200_000, 200_001])
        o = rng.choice([0, rng.randrange(0, 50_000)])
        u = usage(i, o, cached=rng.randrange(0, i + 1), reasoning=rng.randrange(0, o + 1))
        at = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(0, 3 * 365 * 86400))
        assert price_usd(provider, model, u, at) == library_price(provider, model, u, at), (u, at)


def test_a_tiered_price_is_not_linearised() -> None:
    at = datetime(2025, 9, 1, tzinfo=UTC)
    below = price_usd("google", "gemini-2.5-pro", usage(200_000, 0), at)
    above = price_usd("google", "gemini-2.5-pro", usage(200_001, 0), at)
    assert below is not None
    assert above is not None
    assert above / 200_001 > below / 200_000  # every token costs more past the tier
    assert above == library_price("google", "gemini-2.5-pro", usage(200_001, 0), at)


def test_a_tier_starting_below_the_linearity_probe_is_still_priced_by_the_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: the fast path took unit rates at 1M tokens and checked linearity at one
    probe (~123k input); an input-only tier starting below the probe (the table has tiers from
    32k) passed that check, and a 50k-token call was charged the tier rate (0.104 vs 0.054)."""
    provider, gpt = _bundled_snapshot().find_provider_model("gpt-4o", None, "openai", None)
    tier = price_types.Tier(start=100_000, price=Decimal(2))
    tiered = dataclasses.replace(
        gpt,
        prices=price_types.ModelPrice(
            input_mtok=price_types.TieredPrices(base=Decimal(1), tiers=[tier]),
            output_mtok=Decimal(4),
        ),
    )
    monkeypatch.setattr(_pricing, "_lookup", lambda _provider, _model: (provider, tiered))
    at = datetime(2025, 1, 1, tzinfo=UTC)
    for i in (50_000, 99_999, 100_000, 100_001, 123_457, 1_000_000):
        u = usage(i, 1_000)
        expected = tiered.calc_price(
            PriceUsage(input_tokens=i, output_tokens=1_000), provider, genai_request_timestamp=at
        ).total_price
        assert price_usd("synthetic", "tiered", u, at) == expected, i
    assert price_usd("synthetic", "tiered", usage(50_000, 1_000), at) == Decimal("0.054")


def test_unknown_providers_and_models_are_unpriced() -> None:
    assert price_usd("scripted", "echo", usage(1, 1), T0) is None
    assert price_usd("openai", "gpt-nonexistent", usage(1, 1), T0) is None


def test_price_ignores_a_custom_snapshot_installed_in_the_library() -> None:
    """genai_prices.update_prices() (or anyone) may install a snapshot for the process; the
    fold must keep pricing from the bundled table, or one log could fold to other dollars."""
    u = usage(120_000, 3_000, cached=20_000)
    at = datetime(2025, 6, 1, tzinfo=UTC)
    expected = {m: library_price(p, m, u, at) for p, m in MODELS}

    bundled = _bundled_snapshot()
    openai = next(p for p in bundled.providers if p.id == "openai")
    dearer = price_types.ModelPrice(input_mtok=Decimal(100), output_mtok=Decimal(100))
    models = [
        dataclasses.replace(m, prices=dearer) if m.id in ("gpt-4o", "gpt-4o-mini") else m
        for m in openai.models
    ]
    modified = DataSnapshot(
        providers=[
            dataclasses.replace(openai, models=models) if p is openai else p
            for p in bundled.providers
        ],
        from_auto_update=True,
    )
    empty = DataSnapshot(providers=[], from_auto_update=True)

    def fresh_caches() -> None:  # so nothing memoised before the swap can hide a lookup
        _pricing._snapshot.cache_clear()
        _pricing._lookup.cache_clear()
        _pricing._rates_by_price.clear()

    try:
        for custom in (modified, empty):
            set_custom_snapshot(custom)
            fresh_caches()
            if custom is modified:  # the library itself now prices from the custom table
                swapped = genai_prices.calc_price(
                    PriceUsage(input_tokens=1_000, output_tokens=0),
                    "gpt-4o",
                    provider_id="openai",
                    genai_request_timestamp=at,
                )
                assert swapped.total_price == Decimal("0.1")
            for provider, model in MODELS:
                assert price_usd(provider, model, u, at) == expected[model], (custom, model)
    finally:
        set_custom_snapshot(None)
        fresh_caches()
    assert price_usd("openai", "gpt-4o", u, at) == expected["gpt-4o"]


# -- building states without validating them again (construct, evolve) -------------------------


def same_instance_shape(a: Any, b: Any) -> None:
    """Equal as pydantic sees it, and built alike: fields in the same order, same fields set,
    same hash, same dumps, and validation of the dump gives it back."""
    assert type(a) is type(b)
    assert a == b
    assert b == a
    assert list(vars(a).items()) == list(vars(b).items())
    assert a.model_fields_set == b.model_fields_set
    assert a.__pydantic_extra__ == b.__pydantic_extra__
    assert a.__pydantic_private__ == b.__pydantic_private__
    assert hash(a) == hash(b)
    assert a.model_dump() == b.model_dump()
    assert a.model_dump_json() == b.model_dump_json()
    assert repr(a) == repr(b)
    assert type(a).model_validate_json(a.model_dump_json()) == a


def test_construct_builds_what_model_construct_builds() -> None:
    usage = Usage(input_tokens=10, output_tokens=2)
    fields: dict[str, Any] = {
        "turn": 2,
        "status": "responded",
        "provider": "openai",
        "model": "gpt-4o",
        "request_hash": "a" * 64,
        "usage": usage,
    }
    built = construct(ModelTurn, **fields)
    same_instance_shape(built, ModelTurn.model_construct(**fields))
    same_instance_shape(built, ModelTurn(**fields))
    # fields given out of declaration order still land in declaration order
    same_instance_shape(
        construct(StepState, status="running", step_id="s", step_path="a/s"),
        StepState(step_path="a/s", step_id="s", status="running"),
    )
    same_instance_shape(
        construct(LogPosition, partition=1, offset=7), LogPosition(partition=1, offset=7)
    )
    with pytest.raises(ValidationError):  # still frozen
        built.turn = 3  # type: ignore[misc]


def test_construct_refuses_a_missing_or_unknown_field() -> None:
    with pytest.raises(TypeError, match=r"missing \['offset'\]"):
        construct(LogPosition, partition=1)
    with pytest.raises(TypeError, match=r"unknown \['page'\]"):
        construct(LogPosition, partition=1, offset=2, page=3)


def test_evolve_builds_what_model_copy_builds() -> None:
    step = StepState(step_path="a/s", step_id="s", status="running", attempts=1)
    changes: dict[str, Any] = {
        "status": "completed",
        "visits": 1,
        "completed_position": LogPosition(partition=0, offset=9),
        "usage": UsageTotals().add(Usage(input_tokens=5, output_tokens=1), Decimal("0.5")),
    }
    evolved = evolve(step, **changes)
    same_instance_shape(evolved, step.model_copy(update=changes))
    assert step.status == "running"  # the original is untouched
    assert StepState.model_validate(evolved.model_dump()) == evolved
    # a state of evolved parts is a plain state: it survives JSON and hashing
    state = construct(
        MaterializedRunState, **{**vars(MaterializedRunState(run_id=RUN)), "steps": (evolved,)}
    )
    same_instance_shape(state, MaterializedRunState.model_validate(state.model_dump()).model_copy())
    assert MaterializedRunState.model_validate_json(state.model_dump_json()) == state


def test_evolve_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match=r"unknown \['stauts'\]"):
        evolve(LogPosition(partition=0, offset=1), stauts="x")


# -- patches (PatchMarked) -------------------------------------------------------------------


def test_a_patch_is_kept_once_per_scope_in_log_order() -> None:
    log = started()
    log.add(PatchMarked, patch_id="rank", scope="")
    log.add(PatchMarked, patch_id="rank", scope="g/a/")
    log.add(PatchMarked, patch_id="rank", scope="", step_path="write", visit=2)
    log.add(PatchMarked, patch_id="rank", scope="")  # the same mark again: the first stands
    log.add(PatchMarked, patch_id="other", scope="")
    state = log.fold()
    assert [(m.patch_id, m.scope, m.step_path, m.visit) for m in state.patches] == [
        ("rank", "", None, None),
        ("rank", "g/a/", None, None),
        ("rank", "", "write", 2),
        ("other", "", None, None),
    ]
    assert state.last_seq == 5  # a mark is an ordinary event of the chain


# -- parking (RunParked) ---------------------------------------------------------------------


def test_a_parked_run_shows_why_until_the_next_claim_takes_it_up() -> None:
    log = started()
    log.claim(2)
    log.add(RunParked, 2, reason="workflow 'wf' v1 is not registered in coordinator c2")
    parked = log.fold()
    assert parked.parked_reason == "workflow 'wf' v1 is not registered in coordinator c2"
    assert parked.status == "running"  # not terminal: another coordinator may run it
    assert not parked.terminal
    log.claim(3)
    taken = log.fold()
    assert taken.parked_reason is None
    assert (taken.epoch, taken.owner) == (3, "worker-3")


def test_a_run_parked_before_it_started_can_still_start() -> None:
    log = Log()
    log.claim(1)
    log.add(RunParked, 1, reason="no workflow 'wf' here", workflow="wf")
    parked = log.fold()
    assert (parked.status, parked.workflow, parked.parked_reason) == (
        "pending",
        None,
        "no workflow 'wf' here",
    )
    log.claim(2)
    log.add(RunStarted, 2, workflow="wf", workflow_version="1")
    run = log.fold()
    assert (run.status, run.workflow, run.parked_reason, run.last_seq) == ("running", "wf", None, 1)

"""Recorded-call replay (seed 003) in the log and the report: RunStarted v2 names the source run
and a refusal, the fold carries both into the state, and the replay envelope computed from the
run's agent calls is in ``little report --json`` (and a line of the text report)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastavro import schemaless_writer

from little._canonical import canonical_hash
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    Event,
    EventCodec,
    LoggedEvent,
    RunClaimed,
    RunCompleted,
    RunStarted,
    Usage,
    default_catalog,
)
from little.replay import (
    STATE_VERSION,
    MaterializedRunState,
    ReplayEnvelope,
    ReplayResult,
    Snapshot,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    materialize_run_state_from_events,
    replay_envelope,
)
from little.report import replay_line, report_data
from tests.paths import GOLDEN_VECTORS

RUN = "run-replay-2"
SOURCE = "run-recorded-1"
T0 = datetime(2026, 10, 6, 14, 0, tzinfo=UTC)
VECTORS = GOLDEN_VECTORS


class Run:
    """One writer's stream of a run, as the log holds it (offsets for snapshots)."""

    def __init__(self, **started: Any) -> None:
        self.events: list[Event] = [RunClaimed(run_id=RUN, owner="w1", observed_seq=-1)]
        self.add(RunStarted, workflow="wf", workflow_version="1", **started)

    def add(self, cls: type[Event], **fields: Any) -> None:
        seq = len(self.events) - 1  # the claim stands outside the seq chain
        at = T0 + timedelta(seconds=len(self.events))
        self.events.append(cls(run_id=RUN, seq=seq, occurred_at=at, **fields))

    def admit(self, ordinal: int, label: str | None = None, occurrence: int = 0) -> None:
        self.add(
            AgentCallAdmitted,
            ordinal=ordinal,
            request_key=canonical_hash(["agent", ordinal]),
            node_phase="agent" if label else None,
            node_label=label,
            node_occurrence=occurrence if label else None,
        )

    def settle(self, ordinal: int, *, replayed: bool = False, miss: str | None = None) -> None:
        self.add(
            AgentCallSettled,
            ordinal=ordinal,
            outcome="ok",
            result_json=json.dumps(f"answer {ordinal}"),
            usage=None if replayed else Usage(input_tokens=100, output_tokens=10),
            replayed=replayed,
            source_run_id=SOURCE if replayed else None,
            miss_reason=miss,
        )

    def logged(self) -> list[LoggedEvent]:
        return [LoggedEvent(event=e, partition=0, offset=10 + i) for i, e in enumerate(self.events)]

    def fold(self) -> MaterializedRunState:
        return materialize_run_state_from_events(self.logged())


def diverged_replay() -> Run:
    """Calls 0 and 1 reused from SOURCE, 2 misses on its key, 3 runs fresh after the latch
    (and settles before 2: parallel), 4 is admitted but never settles."""
    run = Run(replay_source_run_id=SOURCE)
    run.admit(0, "plan")
    run.settle(0, replayed=True)
    run.admit(1, "research")
    run.settle(1, replayed=True)
    run.admit(2, "summarise")
    run.admit(3, "summarise", occurrence=1)
    run.settle(3, miss="diverged")
    run.settle(2, miss="key-mismatch")
    run.admit(4, "review")
    return run


def test_a_replay_carries_its_source_into_the_state_and_the_report() -> None:
    state = diverged_replay().fold()
    assert state.replay_source_run_id == SOURCE
    assert state.replay_refused_reason is None
    report = report_data(ReplayResult.of(state))
    assert report["replay"] == {
        "replayed": True,
        "recorded": True,
        "source_run_id": SOURCE,
        "refused_reason": None,
        "not_recorded_reason": None,
        "replayed_calls": 2,
        "fresh_calls": 2,
        "diverged_at_call": 2,  # the lowest ordinal with a miss, not the first settled
        "diverged_at_node": ["agent", "summarise", 0],
        "miss_reason": "key-mismatch",
        "mode": None,  # (a RunStarted written before v3: no mode recorded)
        "model": None,
        "live_tools": None,
    }
    assert json.loads(json.dumps(report["replay"])) == report["replay"]  # JSON-ready
    envelope = replay_envelope(state)
    assert ReplayEnvelope.model_validate(report["replay"]) == envelope  # and back
    assert envelope.diverged_at_node == ("agent", "summarise", 0)
    assert replay_line(envelope) == (
        f"replay of {SOURCE}: 2/4 agent call(s) reused a recorded run (not fresh evidence); "
        "diverged at call 2 (agent/summarise#0): key-mismatch"
    )
    # replayed calls carry no usage: only the two fresh ones are in the agent calls' usage
    assert [c.usage is None for c in state.agent_calls] == [True, True, False, False, True]


def test_a_replay_that_never_diverged() -> None:
    run = Run(replay_source_run_id=SOURCE)
    for ordinal in range(3):
        run.admit(ordinal, f"step{ordinal}")
        run.settle(ordinal, replayed=True)
    run.add(RunCompleted, output_json="{}")
    envelope = replay_envelope(run.fold())
    assert (envelope.replayed, envelope.recorded) == (True, True)
    assert (envelope.replayed_calls, envelope.fresh_calls) == (3, 0)
    assert envelope.diverged_at_call is None
    assert envelope.diverged_at_node is None
    assert envelope.miss_reason is None
    assert replay_line(envelope) == (
        f"replay of {SOURCE}: 3/3 agent call(s) reused a recorded run (not fresh evidence)"
    )


def test_divergence_at_call_0_serves_nothing() -> None:
    run = Run(replay_source_run_id=SOURCE)
    run.admit(0, "plan")
    run.settle(0, miss="key-mismatch")
    run.admit(1, "act")
    run.settle(1, miss="diverged")
    envelope = replay_envelope(run.fold())
    assert envelope.replayed is False  # a replay that served nothing is not replayed
    assert envelope.recorded is True
    assert (envelope.replayed_calls, envelope.fresh_calls) == (0, 2)
    assert (envelope.diverged_at_call, envelope.diverged_at_node) == (0, ("agent", "plan", 0))
    assert envelope.miss_reason == "key-mismatch"


def test_divergence_at_an_unlabelled_call_has_no_node() -> None:
    run = Run(replay_source_run_id=SOURCE)
    run.admit(0)
    run.settle(0, replayed=True)
    run.admit(1)
    run.settle(1, miss="no-record")
    envelope = replay_envelope(run.fold())
    assert (envelope.diverged_at_call, envelope.diverged_at_node) == (1, None)
    assert envelope.to_json()["diverged_at_node"] is None
    assert replay_line(envelope) == (
        f"replay of {SOURCE}: 1/2 agent call(s) reused a recorded run (not fresh evidence); "
        "diverged at call 1: no-record"
    )


def test_a_refused_replay_runs_fresh_and_says_why() -> None:
    run = Run(replay_source_run_id=SOURCE, replay_refused_reason="replay-unsafe-script")
    run.admit(0, "plan")
    run.settle(0)
    run.admit(1, "summarise")
    run.settle(1)
    state = run.fold()
    assert state.replay_source_run_id == SOURCE
    assert state.replay_refused_reason == "replay-unsafe-script"
    section = report_data(ReplayResult.of(state))["replay"]
    assert section == {
        "replayed": False,
        "recorded": True,
        "source_run_id": SOURCE,
        "refused_reason": "replay-unsafe-script",
        "not_recorded_reason": None,
        "replayed_calls": 0,
        "fresh_calls": 2,
        "diverged_at_call": None,
        "diverged_at_node": None,
        "miss_reason": None,
        "mode": None,
        "model": None,
        "live_tools": None,
    }
    assert replay_line(replay_envelope(state)) == (
        f"replay of {SOURCE} refused: replay-unsafe-script; ran fresh"
    )


def test_a_refused_replay_with_no_calls_yet_is_a_replay_that_recorded_nothing() -> None:
    state = Run(replay_source_run_id=SOURCE, replay_refused_reason="no-recorded-calls").fold()
    envelope = replay_envelope(state)
    assert envelope.is_replay
    assert (envelope.replayed_calls, envelope.fresh_calls) == (0, 0)
    assert (envelope.recorded, envelope.not_recorded_reason) == (False, "no-agent-calls")
    assert replay_line(envelope) == f"replay of {SOURCE} refused: no-recorded-calls; ran fresh"


def test_an_ordinary_run_has_an_envelope_that_says_it_is_not_a_replay() -> None:
    run = Run()
    run.add(RunCompleted, output_json="{}")
    state = run.fold()
    assert state.replay_source_run_id is None
    assert state.replay_refused_reason is None
    envelope = replay_envelope(state)
    assert envelope == ReplayEnvelope()  # the defaults: nothing replayed, nothing recorded
    assert not envelope.is_replay
    assert (envelope.recorded, envelope.not_recorded_reason) == (False, "no-agent-calls")
    assert replay_line(envelope) is None
    assert report_data(ReplayResult.of(state))["replay"] == envelope.to_json()


def test_an_ordinary_run_with_agent_calls_is_recorded_and_fresh() -> None:
    run = Run()
    run.admit(0, "plan")
    run.settle(0)
    run.admit(1, "act")  # in flight: neither served nor fresh
    state = run.fold()
    assert len(state.agent_calls) == 2
    envelope = replay_envelope(state)
    assert (envelope.replayed, envelope.recorded, envelope.not_recorded_reason) == (
        False,
        True,
        None,
    )
    assert (envelope.replayed_calls, envelope.fresh_calls, envelope.diverged_at_call) == (
        0,
        1,
        None,
    )
    assert replay_line(envelope) is None
    assert report_data(ReplayResult.of(state))["replay"]["source_run_id"] is None


def test_a_recorded_failure_counts_as_a_record() -> None:
    run = Run()
    run.admit(0, "plan")
    run.add(AgentCallSettled, ordinal=0, outcome="failed")
    assert replay_envelope(run.fold()).recorded is True


def test_an_unusable_recorded_answer_is_where_the_replay_diverged() -> None:
    run = Run(replay_source_run_id=SOURCE)
    run.admit(0, "plan")
    run.settle(0, replayed=True)
    run.admit(1, "act")
    run.add(
        AgentCallSettled,
        ordinal=1,
        outcome="failed",
        replayed=False,
        source_run_id=SOURCE,
        miss_reason="recorded-result-unusable",
    )
    envelope = replay_envelope(run.fold())
    assert (envelope.replayed_calls, envelope.fresh_calls) == (1, 1)
    assert (envelope.diverged_at_call, envelope.miss_reason) == (1, "recorded-result-unusable")


@pytest.mark.parametrize("split", range(2, 13))
def test_the_envelope_after_a_writers_agent_events_is_the_envelope_of_the_fold(
    split: int,
) -> None:
    """What the runtime does at the end of an execution: the state as claimed, plus the
    agent-call events its writer landed, gives the envelope of the whole fold."""
    events = diverged_replay().logged()
    claimed = materialize_run_state_from_events(events[:split])
    later = [x.event for x in events[split:]]
    assert replay_envelope(claimed, after=later) == replay_envelope(
        materialize_run_state_from_events(events)
    )


def test_the_text_report_prints_the_replay_line(capsys: pytest.CaptureFixture[str]) -> None:
    from little.cli._shell import print_report

    print_report(ReplayResult.of(diverged_replay().fold()))
    out = capsys.readouterr().out
    assert f"replay of {SOURCE}: 2/4 agent call(s) reused a recorded run" in out
    assert "diverged at call 2 (agent/summarise#0): key-mismatch" in out

    print_report(ReplayResult.of(Run().fold()))
    out = capsys.readouterr().out
    assert "status running" in out
    assert "replay of" not in out
    assert "agent call" not in out


@pytest.mark.parametrize("split", range(1, 12))
def test_folding_from_a_prefix_state_keeps_the_replay_fields(split: int) -> None:
    events = diverged_replay().logged()
    prefix = materialize_run_state_from_events(events[:split])
    assert materialize_run_state_from_events(events[split:], start=prefix) == (
        materialize_run_state_from_events(events)
    )


def test_a_snapshot_keeps_the_replay_fields_and_one_of_state_version_1_is_refused() -> None:
    state = Run(replay_source_run_id=SOURCE, replay_refused_reason="source-run-unusable").fold()
    assert decode_snapshot(encode_snapshot(Snapshot.of(state))).state == state
    assert STATE_VERSION == 18  # RunStarted v6, agent.call.* v2, parked, decisions, values, lost,
    # duplicates, waits, patches, start and end times, configuration and compactions, session
    # answers by ref, the scan's verdict, the tools' scopes
    old = state.model_copy(update={"state_version": 1})
    with pytest.raises(SnapshotError, match=f"state version 1 is not {STATE_VERSION}"):
        decode_snapshot(encode_snapshot(Snapshot.of(old)))


# -- the schema ------------------------------------------------------------------------------


def test_run_started_is_written_with_v6_and_round_trips_the_replay_fields() -> None:
    latest = default_catalog().latest("RunStarted")
    assert latest.version == 6
    event = RunStarted(
        config_sha256="cd" * 32,
        config_json='{"v":1}',
        config_changes=("budgets.max_agent_calls: 10 -> 5",),
        run_id=RUN,
        seq=0,
        workflow="wf",
        workflow_version="1",
        replay_source_run_id=SOURCE,
        replay_refused_reason="replay-unsafe-script",
        source_sha256="ab" * 32,
        source_coverage="self-contained",
        replay_mode="full",
        replay_model="anthropic:claude-haiku-4-5",
        replay_live_tools=True,
        source_unsafe_reads=("3: random.shuffle", "helpers:7: time.time"),
        tool_scopes=True,
    )
    codec = EventCodec()
    data = codec.encode(event)
    assert data.startswith(latest.single_object_header)
    assert codec.decode(data) == event
    for verdict in ((), None):  # none found; none recorded
        clean = event.model_copy(update={"source_unsafe_reads": verdict})
        assert codec.decode(codec.encode(clean)) == clean
    logged_before = event.model_copy(update={"tool_scopes": None})
    assert codec.decode(codec.encode(logged_before)) == logged_before


def test_the_v1_golden_vector_decodes_with_no_replay_fields() -> None:
    event = EventCodec().decode((VECTORS / "RunStarted" / "v1.bin").read_bytes())
    assert isinstance(event, RunStarted)
    assert event.replay_source_run_id is None
    assert event.replay_refused_reason is None
    assert event.max_tokens == 55  # the v1 fields are all there


def test_a_record_written_with_v1_folds_as_an_ordinary_run() -> None:
    (v1,) = [v for v in default_catalog().versions("RunStarted") if v.version == 1]
    started = RunStarted(run_id=RUN, seq=0, workflow="wf", workflow_version="1", max_tokens=9)
    record = started.model_dump() | {"type": "RunStarted"}
    out = io.BytesIO()
    out.write(v1.single_object_header)
    schemaless_writer(out, v1.parsed, record)  # v1 knows neither replay field
    decoded = EventCodec().decode(out.getvalue())
    assert decoded == started
    claim = RunClaimed(run_id=RUN, owner="w1", observed_seq=-1)
    state = materialize_run_state_from_events([claim, decoded])
    assert (state.replay_source_run_id, state.replay_refused_reason) == (None, None)
    assert state.max_tokens == 9


def test_a_snapshot_of_another_state_version_still_says_whether_its_run_is_live() -> None:
    """After an upgrade a coordinator cannot use an older snapshot as the state, but it must
    still find the live runs it names (it resumes them from their logs)."""
    from little.replay import outline_snapshot

    state = Run().fold()
    old = state.model_copy(update={"state_version": 4})
    data = encode_snapshot(Snapshot.of(old))
    with pytest.raises(SnapshotError, match=f"state version 4 is not {STATE_VERSION}"):
        decode_snapshot(data)
    outline = outline_snapshot(data)
    assert (outline.run_id, outline.state_version, outline.status) == (
        state.run_id,
        4,
        state.status,
    )
    assert outline.parent_run_id is None
    assert outline.terminal is (state.status in ("completed", "failed", "cancelled"))
    with pytest.raises(SnapshotError, match="not a RunSnapshot"):
        outline_snapshot(b"not a snapshot")

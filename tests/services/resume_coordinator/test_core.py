"""The coordinator's run table, driven directly: plain values in, effects out, no Kafka.

Each transition (claim, lease expiry, wake-up, park or retry, settling a command) and the
routing of a commands record, with ``now`` and the wall clock handed in.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from little.commands import CancelRun, ResumeRun, StartRun, encode_command
from little.errors import LogError
from little.log import partition_for
from little.replay import MaterializedRunState
from little.runtime import ClaimRejectedError, UnknownWorkflowError, WorkflowVersionError
from little_services.resume_coordinator._core import (
    Effects,
    LocalRun,
    RunTable,
    Tracked,
    verdict_of,
)
from little_services.resume_coordinator._intake import Refused, route
from little_services.resume_coordinator._scheduling import Ledger

LEASE = 10.0
PARTITIONS = 4
T0 = 1000.0


def owning_table() -> RunTable:
    table = RunTable(LEASE, PARTITIONS)
    table.assign(range(PARTITIONS))
    return table


def p(run_id: str) -> int:
    return partition_for(run_id, PARTITIONS)


def started(effects: Effects) -> list[tuple[str, str]]:
    return [(entry.run_id, local.reason) for entry, local in effects.started]


def execute(table: RunTable, run_id: str, reason: str = "resume", now: float = T0) -> LocalRun:
    """A run the table starts executing here (as a ResumeRun would)."""
    effects = table.ensure(run_id, p(run_id), reason, now)
    ((_, local),) = effects.started
    return local


# -- claim ---------------------------------------------------------------------------------


def test_a_start_run_executes_the_run_once_and_keeps_its_command_until_it_is_running() -> None:
    table = owning_table()
    start = StartRun.of("r", "wf", {"x": 1})
    effects = table.ensure("r", p("r"), "start", T0, start=start, command=(p("r"), 7))
    assert started(effects) == [("r", "start")]
    assert effects.settle == []  # not durably started yet
    entry, local = effects.started[0]
    assert entry.start is start
    assert entry.lease_until == T0 + LEASE
    assert local.until_running == [(p("r"), 7)]

    again = table.ensure("r", p("r"), "resume", T0 + 1, command=(p("r"), 8))
    assert again.started == []  # one execution per run
    assert local.until_running == [(p("r"), 7), (p("r"), 8)]

    table.running(entry, local, epoch=3)
    assert entry.start is None
    assert entry.epoch == 3
    assert local.running
    # once running, a command for it is handled at once
    assert table.ensure("r", p("r"), "resume", T0 + 2, command=(p("r"), 9)).settle == [(p("r"), 9)]


def test_a_cancel_reaches_the_execution_and_its_command_waits_for_the_end() -> None:
    table = owning_table()
    local = execute(table, "r")
    effects = table.ensure("r", p("r"), "cancel", T0, command=(p("r"), 4), cancel="no more")
    assert effects.started == []
    assert effects.settle == []
    assert local.control.cancelled
    assert local.control.reason == "no more"
    assert local.until_done == [(p("r"), 4)]
    end = table.ended(table.runs["r"], local, "cancelled", T0 + 1)
    assert end.settle == [(p("r"), 4)]
    assert "r" not in table.runs
    assert "r" in table.finished
    assert end.dropped == ["r"]


def test_a_cancel_that_did_not_land_is_carried_to_the_next_execution() -> None:
    table = owning_table()
    local = execute(table, "r")
    table.ensure("r", p("r"), "cancel", T0, command=(p("r"), 4), cancel="stop it")
    end = table.ended(table.runs["r"], local, "log_error", T0 + 1)
    assert end.settle == []  # not cancelled yet: its command waits
    entry = table.runs["r"]
    assert entry.cancel == "stop it"
    assert entry.carried == [(p("r"), 4)]
    nxt = execute(table, "r", "stalled", T0 + 20)
    assert nxt.control.cancelled
    assert nxt.until_done == [(p("r"), 4)]


def test_a_foreign_claim_fences_the_execution_here() -> None:
    table = owning_table()
    local = execute(table, "r")
    table.running(table.runs["r"], local, epoch=2)
    effects = table.on_run_events([(p("r"), "r", "RunClaimed", 3)], T0 + 1)
    assert effects.fenced == [("r", 3, 2)]
    assert local.fenced
    assert local.control.requested
    assert not local.control.cancelled
    assert table.runs["r"].epoch == 3
    # an older or equal claim fences nothing
    other = execute(table, "s")
    table.running(table.runs["s"], other, epoch=5)
    assert table.on_run_events([(p("s"), "s", "RunClaimed", 5)], T0).fenced == []


# -- lease expiry --------------------------------------------------------------------------


def test_a_run_whose_lease_runs_out_with_no_progress_is_taken_up() -> None:
    table = owning_table()
    table.on_run_events([(p("r"), "r", "StepStarted", 1)], T0)  # progress of a run seen
    assert table.due(T0 + LEASE - 0.1, datetime.now(UTC)).started == []
    table.on_run_events([(p("r"), "r", "StepCompleted", 1)], T0 + 5)  # renews the lease
    assert table.due(T0 + LEASE + 1, datetime.now(UTC)).started == []
    effects = table.due(T0 + 5 + LEASE, datetime.now(UTC))
    assert started(effects) == [("r", "stalled")]
    assert [e.run_id for e in effects.stalled] == ["r"]
    # executing here now: it holds its own lease, never stalls
    assert table.due(T0 + 100, datetime.now(UTC)).started == []
    assert table.runs["r"].lease_until == T0 + 100 + LEASE


def test_no_lease_runs_out_on_a_partition_not_owned_or_a_paused_clock() -> None:
    table = owning_table()
    table.on_run_events([(p("r"), "r", "StepStarted", 1)], T0)
    table.hold_leases(T0 + LEASE)  # the loop was paused: everyone gets a full lease again
    assert table.due(T0 + LEASE + 1, datetime.now(UTC)).started == []
    assert table.revoke([p("r")]) == []
    assert table.due(T0 + 10 * LEASE, datetime.now(UTC)).started == []


def test_an_execution_that_stopped_leaves_its_run_to_the_lease() -> None:
    table = owning_table()
    local = execute(table, "r", "resume")
    local.until_running.append((p("r"), 3))
    end = table.ended(table.runs["r"], local, "stopped", T0 + 2)
    assert end.settle == []  # given up: the command is read again by whoever takes the run
    assert table.runs["r"].lease_until == T0 + 2 + LEASE
    assert started(table.due(T0 + 2 + LEASE, datetime.now(UTC))) == [("r", "stalled")]


# -- wake-up -------------------------------------------------------------------------------


def test_a_waiting_run_is_woken_at_its_due_time_not_by_its_lease() -> None:
    table = owning_table()
    local = execute(table, "r")
    wall = datetime(2026, 1, 1, tzinfo=UTC)
    entry = table.runs["r"]
    entry.wake_at = wall + timedelta(minutes=5)
    table.ended(entry, local, "waiting", T0)
    assert entry.waiting
    assert table.due(T0 + 10 * LEASE, wall + timedelta(minutes=4)).started == []
    effects = table.due(T0 + 10 * LEASE, wall + timedelta(minutes=5))
    assert started(effects) == [("r", "timer")]
    assert not entry.waiting
    assert entry.wake_at is None


def test_a_signal_wakes_a_waiting_run_and_one_seen_while_it_executes_wakes_it_after() -> None:
    table = owning_table()
    local = execute(table, "r")
    table.ended(table.runs["r"], local, "waiting", T0)
    effects = table.on_run_events([(p("r"), "r", "SignalSent", 2)], T0 + 1)
    assert started(effects) == [("r", "signal")]

    (_, again) = effects.started[0]
    # a signal lands while it executes: it may have read the log before it
    assert table.on_run_events([(p("r"), "r", "SignalSent", 2)], T0 + 2).started == []
    assert table.runs["r"].wake_pending
    end = table.ended(table.runs["r"], again, "waiting", T0 + 3)
    assert started(end) == [("r", "signal")]


def test_a_sub_runs_signal_wakes_its_top_level_run() -> None:
    table = owning_table()
    local = execute(table, "top")
    table.ended(table.runs["top"], local, "waiting", T0)
    assert started(table.wake("top~child", "signal", T0)) == [("top", "signal")]


def test_a_claim_elsewhere_takes_a_waiting_run_under_a_lease_again() -> None:
    table = owning_table()
    local = execute(table, "r")
    table.running(table.runs["r"], local, epoch=1)
    table.ended(table.runs["r"], local, "waiting", T0)
    table.on_run_events([(p("r"), "r", "RunClaimed", 2)], T0 + 1)
    assert not table.runs["r"].waiting
    assert started(table.due(T0 + 1 + LEASE, datetime.now(UTC))) == [("r", "stalled")]


# -- park or retry -------------------------------------------------------------------------


def test_verdict_of_retries_what_is_retryable_and_parks_the_rest() -> None:
    assert verdict_of(ClaimRejectedError("claim rejected")).parked is None
    assert verdict_of(LogError("log closed")).outcome == "log_error"
    integrity = verdict_of(WorkflowVersionError("started on w v1"))
    assert integrity.outcome == "integrity_error"
    assert integrity.parked == "WorkflowVersionError: started on w v1"
    assert verdict_of(UnknownWorkflowError("w", ["x"], run_id="r")).outcome == "error"
    assert verdict_of(RuntimeError("a bug")).parked == "RuntimeError: a bug"


def test_a_parked_run_waits_for_a_resume_run_and_a_retried_one_for_its_lease() -> None:
    table = owning_table()
    local = execute(table, "parked")
    assert table.failed(table.runs["parked"], RuntimeError("a bug")) == "error"
    table.ended(table.runs["parked"], local, "error", T0)
    assert table.parked == {"parked"}
    assert table.due(T0 + 10 * LEASE, datetime.now(UTC)).started == []  # no lease expiry
    assert started(table.ensure("parked", p("parked"), "resume", T0 + 11 * LEASE)) == [
        ("parked", "resume")
    ]
    assert table.parked == set()
    assert table.runs["parked"].parked is None

    retried = execute(table, "retried")
    assert table.failed(table.runs["retried"], LogError("log closed")) == "log_error"
    table.ended(table.runs["retried"], retried, "log_error", T0)
    assert table.runs["retried"].parked is None
    assert started(table.due(T0 + LEASE, datetime.now(UTC))) == [("retried", "stalled")]


def test_a_lease_or_a_timer_does_not_unpark_only_a_command_does() -> None:
    table = owning_table()
    local = execute(table, "r")
    table.failed(table.runs["r"], RuntimeError("a bug"))
    table.ended(table.runs["r"], local, "error", T0)
    effects = table.ensure("r", p("r"), "stalled", T0 + 1)  # as an adoption or a stall would
    assert effects.started
    assert table.runs["r"].parked == "RuntimeError: a bug"


# -- settle a command ----------------------------------------------------------------------


def test_a_start_runs_command_is_settled_once_when_a_retry_gets_the_run_started() -> None:
    table = owning_table()
    ref = (p("r"), 12)
    start = StartRun.of("r", "wf", {})
    effects = table.ensure("r", p("r"), "start", T0, start=start, command=ref)
    entry, first = effects.started[0]
    # ended before the run started (a log error): the StartRun is still its only input
    end = table.ended(entry, first, "log_error", T0 + 1)
    assert end.settle == []
    assert entry.start_refs == [ref]
    assert entry.start is start
    # read again (a redelivery after a restart, say): the same command, held once more
    second = execute(table, "r", "stalled", T0 + 1 + LEASE)
    assert second.until_running == [ref]
    assert entry.start_refs == []
    table.running(entry, second, epoch=2)
    assert second.until_running == [ref]  # the shell settles these once snapshotted
    second.until_running.clear()
    end = table.ended(entry, second, "completed", T0 + 20)
    assert end.settle == []  # nothing left to settle twice
    assert "r" in table.finished
    assert "r" not in table.runs


def test_the_ledger_settles_a_command_once() -> None:
    ledger = Ledger()
    ledger.open(0)
    ledger.received(0, 5)
    ledger.received(0, 6)
    assert ledger.settle(0, 6) is None
    assert ledger.settle(0, 5) == 7
    assert ledger.settle(0, 5) is None  # twice: the commit point does not move again
    assert ledger.settle(0, 6) is None


def test_commands_of_an_execution_that_ended_are_settled_unless_it_was_given_up() -> None:
    table = owning_table()
    for outcome, settled in (("failed", True), ("abandoned", False), ("error", True)):
        local = execute(table, "r")
        local.until_running.append((p("r"), 1))
        local.until_done.append((p("r"), 2))
        end = table.ended(table.runs["r"], local, outcome, T0)
        assert bool(end.settle) is settled, outcome
        if settled:
            assert sorted(end.settle) == [(p("r"), 1), (p("r"), 2)]


def test_a_run_the_log_does_not_know_is_forgotten_and_its_commands_settled() -> None:
    table = owning_table()
    local = execute(table, "r")
    local.until_running.append((p("r"), 3))
    end = table.ended(table.runs["r"], local, "unknown_run", T0)
    assert end.settle == [(p("r"), 3)]
    assert end.dropped == ["r"]
    assert "r" not in table.runs
    assert "r" not in table.finished


# -- endings and ownership -----------------------------------------------------------------


def test_an_ending_seen_on_the_runs_topic_forgets_the_run_and_an_adoption_skips_it() -> None:
    table = owning_table()
    table.on_run_events([(p("r"), "r", "RunClaimed", 2)], T0)
    assert table.on_run_events([(p("r"), "r", "RunCompleted", 1)], T0).dropped == []  # stale
    assert table.on_run_events([(p("r"), "r", "RunCompleted", 2)], T0).dropped == ["r"]
    assert "r" not in table.runs
    assert "r" in table.finished
    states = [MaterializedRunState(run_id="r"), MaterializedRunState(run_id="q")]
    same = [s for s in states if p(s.run_id) == p("r")]
    assert ("r", "assigned") not in started(table.adopt(p("r"), same, T0 + 1))


def test_an_adopted_run_starts_from_its_snapshot() -> None:
    table = owning_table()
    state = MaterializedRunState(run_id="r")
    ((_entry, local),) = table.adopt(p("r"), [state], T0).started
    assert local.reason == "assigned"
    assert local.known is state
    assert table.adopt((p("r") + 1) % PARTITIONS, [], T0).started == []


def test_a_revoked_partitions_runs_stop_and_are_released() -> None:
    table = owning_table()
    local = execute(table, "r")
    assert table.revoke([p("r")]) == [local]
    assert p("r") not in table.owned
    end = table.ended(table.runs["r"], local, "stopped", T0)
    assert end.started == []
    assert "r" not in table.runs
    table.on_run_events([(p("r"), "s", "StepStarted", 1)], T0)  # not owned: ignored
    assert "s" not in table.runs
    table.assign([p("r")])
    table.on_run_events([(p("r"), "s", "StepStarted", 1)], T0)
    table.release([p("r")])
    assert table.runs == {}


def test_no_execution_starts_while_stopping() -> None:
    table = owning_table()
    local = execute(table, "r")
    table.ended(table.runs["r"], local, "waiting", T0)
    table.stopping = True
    assert table.wake("r", "signal", T0).started == []


def test_a_tracked_record_starts_unparked_and_leased() -> None:
    entry = Tracked("r", 0, T0 + LEASE)
    assert (entry.parked, entry.waiting, entry.local, entry.epoch) == (None, False, None, 0)


# -- routing a commands record -------------------------------------------------------------


def test_a_record_is_routed_to_its_command_or_refused_with_why() -> None:
    run_id = "run-1"
    own = p(run_id)
    value = encode_command(ResumeRun(run_id=run_id))
    assert isinstance(route(own, value, run_id.encode(), PARTITIONS), ResumeRun)
    assert isinstance(route(own, value, None, PARTITIONS), ResumeRun)

    misrouted = route((own + 1) % PARTITIONS, value, run_id.encode(), PARTITIONS)
    assert isinstance(misrouted, Refused)
    assert (misrouted.reason, misrouted.expected) == ("misrouted", own)

    keyed = route(own, encode_command(CancelRun(run_id=run_id)), b"another", PARTITIONS)
    assert isinstance(keyed, Refused)
    assert keyed.reason == "key-mismatch"
    assert keyed.command is not None
    assert keyed.expected is None

    garbage = route(own, b"not a command", None, PARTITIONS)
    assert isinstance(garbage, Refused)
    assert garbage.command is None
    assert garbage.reason == "not-avro-framing"

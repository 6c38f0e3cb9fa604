"""Durable timers and signals on the embedded world (issue 11 items 1 and 2): a wait is
recorded before it waits, a run that cannot go on lets go of itself (``waiting``, held by
nobody), and the run is woken when its due time passes or its signal arrives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import little
from little.events import Event, RunSuspended, SignalSent, WaitEnded, WaitStarted
from little.replay import fold_run, replay_run
from little.runtime import SignalRefusedError, follow, resume, run, send_signal
from tests.little.runtime.waits import flows


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[little.World]:
    monkeypatch.setenv(flows.LOG, str(tmp_path / "steps.jsonl"))
    with little.local_world(tmp_path / "world") as w:
        yield w


def events(world: little.World, run_id: str, *types: type[Event]) -> list[Event]:
    return [x.event for x in world.read_run(run_id) if isinstance(x.event, types)]


def ran(tmp_path: Path) -> list[str]:
    return [s["step"] for s in flows.steps(tmp_path / "steps.jsonl")]


def test_a_short_timer_is_slept_in_the_process_and_recorded(
    world: little.World, tmp_path: Path
) -> None:
    result = asyncio.run(run(world, flows.nap, {"seconds": 0.2}))
    assert result.status == "completed"
    started, ended = events(world, result.run_id, WaitStarted, WaitEnded)
    assert isinstance(started, WaitStarted)
    assert isinstance(ended, WaitEnded)
    assert (started.kind, started.ordinal, ended.outcome) == ("timer", 0, "fired")
    assert started.due_at is not None
    assert ended.occurred_at >= started.due_at
    assert not events(world, result.run_id, RunSuspended)  # held, never let go
    assert ran(tmp_path) == ["before", "after"]


def test_a_long_timer_suspends_the_run_and_follow_wakes_it_at_its_due_time(
    world: little.World, tmp_path: Path
) -> None:
    result = asyncio.run(run(world, flows.nap, {"seconds": 1.0}, hold=0))
    assert result.status == "waiting"
    assert result.waiting_for == ("timer",)
    state, _, _ = fold_run(world, result.run_id)
    assert state.status == "waiting"
    assert state.wake_at == result.wake_at
    (wait,) = state.waits
    assert (wait.kind, wait.outcome, wait.due_at) == ("timer", None, result.wake_at)
    assert ran(tmp_path) == ["before"]

    done = asyncio.run(follow(world, result.run_id, hold=0))
    assert done.status == "completed"
    assert done.output == {"slept": 1.0}
    (ended,) = events(world, result.run_id, WaitEnded)
    assert result.wake_at is not None
    assert ended.occurred_at >= result.wake_at
    assert ran(tmp_path) == ["before", "after"]  # "before" is not run again by the wake-up
    assert len(events(world, result.run_id, WaitStarted)) == 1


def test_a_resume_before_the_due_time_waits_only_for_what_is_left(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, flows.nap, {"seconds": 30}, hold=0))
    again = asyncio.run(resume(world, first.run_id, hold=0))
    assert again.status == "waiting"
    assert again.wake_at == first.wake_at  # the recorded due time, not 30 s from the resume
    assert len(events(world, first.run_id, WaitStarted)) == 1
    assert len(events(world, first.run_id, RunSuspended)) == 2


def test_a_timer_that_came_due_while_nothing_ran_fires_on_the_next_resume(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, flows.nap, {"seconds": 0.3}, hold=0))
    assert first.status == "waiting"
    assert first.wake_at is not None
    while datetime.now(UTC) < first.wake_at:  # nothing runs the run meanwhile
        asyncio.run(asyncio.sleep(0.05))
    done = asyncio.run(resume(world, first.run_id, hold=0))
    assert done.status == "completed"
    assert [e.outcome for e in events(world, first.run_id, WaitEnded)] == ["fired"]  # type: ignore[attr-defined]


def test_a_signal_sent_while_the_run_waits_wakes_it_with_its_payload(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, flows.order, None))
    assert first.status == "waiting"
    assert first.waiting_for == ("signal:approved",)
    assert first.wake_at is None
    asyncio.run(send_signal(world, first.run_id, "approved", {"by": "ana", "ok": True}))
    state, _, _ = fold_run(world, first.run_id)
    assert state.can_wake(datetime.now(UTC))
    done = asyncio.run(follow(world, first.run_id))
    assert done.output == {"decision": {"by": "ana", "ok": True}, "shipped": "ship"}
    assert ran(tmp_path) == ["placed", "ship"]
    (sent,) = events(world, first.run_id, SignalSent)
    (ended,) = events(world, first.run_id, WaitEnded)
    assert isinstance(ended, WaitEnded)
    assert isinstance(sent, SignalSent)
    assert (ended.outcome, ended.signal_id) == ("received", sent.signal_id)


def test_a_signal_sent_before_the_run_waits_is_kept_for_the_wait(world: little.World) -> None:
    first = asyncio.run(run(world, flows.two_signals, None))
    assert first.status == "waiting"
    asyncio.run(send_signal(world, first.run_id, "item", 1))
    asyncio.run(send_signal(world, first.run_id, "item", 2))  # before the second wait began
    done = asyncio.run(follow(world, first.run_id))
    assert done.output == [1, 2]  # taken in the order they were sent
    assert len(events(world, first.run_id, RunSuspended)) == 1


def test_the_same_signal_delivered_twice_is_taken_once(world: little.World) -> None:
    first = asyncio.run(run(world, flows.two_signals, None))
    for _ in range(2):  # a command read twice delivers the same signal id twice
        asyncio.run(send_signal(world, first.run_id, "item", "a", signal_id="sig-1"))
    asyncio.run(send_signal(world, first.run_id, "item", "b"))
    done = asyncio.run(follow(world, first.run_id))
    assert done.output == ["a", "b"]
    state, _, _ = fold_run(world, first.run_id)
    assert next(s.signal_id for s in state.signals) == "sig-1"
    assert len(state.signals) == 2


def test_a_signal_wait_times_out_and_the_workflow_catches_it(world: little.World) -> None:
    first = asyncio.run(run(world, flows.deadline, {"timeout": 0.3}, hold=0))
    assert first.status == "waiting"
    assert first.wake_at is not None
    done = asyncio.run(follow(world, first.run_id, hold=0))
    assert done.output == {"reply": None}
    (ended,) = events(world, first.run_id, WaitEnded)
    assert isinstance(ended, WaitEnded)
    assert ended.outcome == "timed_out"
    assert ended.occurred_at >= first.wake_at
    # the replay of the finished run raises the same timeout: the log says it timed out
    assert asyncio.run(resume(world, first.run_id)).output == {"reply": None}


def test_a_signal_before_the_timeout_wins(world: little.World) -> None:
    first = asyncio.run(run(world, flows.deadline, {"timeout": 60}, hold=0))
    asyncio.run(send_signal(world, first.run_id, "reply", "hi"))
    assert asyncio.run(follow(world, first.run_id, hold=0)).output == {"reply": "hi"}


def test_branches_wait_together_and_the_run_wakes_for_each(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, flows.branches, {"seconds": 0.4}, hold=0))
    assert first.status == "waiting"
    assert set(first.waiting_for) == {"timer", "signal:go"}
    assert first.wake_at is not None
    asyncio.run(send_signal(world, first.run_id, "go", "went"))
    done = asyncio.run(follow(world, first.run_id, hold=0))
    assert done.output == {"a": "a-done", "b": "went"}
    assert ran(tmp_path) == ["a-done"]


def test_a_step_that_sleeps_in_its_own_code_runs_again_up_to_its_wait(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, flows.in_step, {"seconds": 0.3}, hold=0))
    assert first.status == "waiting"
    done = asyncio.run(follow(world, first.run_id, hold=0))
    assert done.output == "done"
    assert ran(tmp_path) == ["slow-start", "slow-start", "slow-end"]
    (started,) = events(world, first.run_id, WaitStarted)
    assert started.step_path == "slow"  # type: ignore[comparison-overlap]


def test_a_sub_run_that_waits_suspends_its_parent_and_a_signal_to_it_wakes_both(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, flows.parent, None))
    assert first.status == "waiting"
    assert first.waiting_for == ("signal:child-go",)
    parent, _, _ = fold_run(world, first.run_id)
    (sub,) = parent.sub_runs
    assert fold_run(world, sub.sub_run_id)[0].status == "waiting"
    asyncio.run(send_signal(world, sub.sub_run_id, "child-go", {"n": 7}))
    done = asyncio.run(follow(world, first.run_id))
    assert done.output == {"n": 7}
    assert fold_run(world, sub.sub_run_id)[0].status == "completed"
    assert ran(tmp_path) == ["after"]


def test_signals_a_run_cannot_take_are_refused_and_nothing_is_recorded(
    world: little.World,
) -> None:
    with pytest.raises(SignalRefusedError, match="run nope is unknown"):
        asyncio.run(send_signal(world, "nope", "approved", 1))
    assert list(world.read_run("nope")) == []

    waiting = asyncio.run(run(world, flows.order, None))
    before = len(list(world.read_run(waiting.run_id)))
    with pytest.raises(SignalRefusedError, match="payload must be JSON"):
        asyncio.run(send_signal(world, waiting.run_id, "approved", {"at": object()}))
    assert len(list(world.read_run(waiting.run_id))) == before

    done = asyncio.run(run(world, flows.nap, {"seconds": 0}))
    assert done.status == "completed"
    with pytest.raises(SignalRefusedError, match="has already ended"):
        asyncio.run(send_signal(world, done.run_id, "approved", 1))
    assert not events(world, done.run_id, SignalSent)


def test_replay_run_of_a_run_that_waited_shows_its_waits_and_signals(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, flows.order, None))
    asyncio.run(send_signal(world, first.run_id, "approved", "yes"))
    asyncio.run(follow(world, first.run_id))
    replayed = replay_run(world, first.run_id)
    state = replayed.state
    assert state.status == "completed"
    ((kind, outcome),) = [(w.kind, w.outcome) for w in state.waits]
    assert (kind, outcome) == ("signal", "received")
    assert [(s.name, s.taken) for s in state.signals] == [("approved", True)]


def test_the_report_and_little_runs_say_what_a_run_waits_for(
    world: little.World, tmp_path: Path
) -> None:
    from little.report import report_data, waiting_line
    from tests.cli import little_cli

    paying = asyncio.run(run(world, flows.pay, None))
    napping = asyncio.run(run(world, flows.nap, {"seconds": 60}, hold=0))
    pay_state, _, _ = fold_run(world, paying.run_id)
    assert waiting_line(pay_state) == (
        'waiting for approval of transfer({"amount":250}): call agent#banker/1:t1'
    )
    nap_state, _, _ = fold_run(world, napping.run_id)
    line = waiting_line(nap_state)
    assert line is not None
    assert line.startswith("waiting for timer (due ")
    assert report_data(replay_run(world, paying.run_id))["waiting"] == waiting_line(pay_state)
    listed = little_cli(
        "runs", "--data-dir", str(tmp_path / "world"), "--status", "waiting", "--json"
    )
    assert listed.returncode == 0, listed.stderr
    rows = {r["run_id"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert set(rows) == {paying.run_id, napping.run_id}
    assert rows[paying.run_id]["detail"] == waiting_line(pay_state)
    shown = little_cli("report", paying.run_id, "--data-dir", str(tmp_path / "world"))
    assert shown.returncode == 0, shown.stderr
    assert "waiting for approval of transfer" in shown.stdout


def test_simulate_ends_each_wait_as_the_golden_run_did_and_diverges_at_another_wait(
    world: little.World,
) -> None:
    from little.runtime import simulate

    first = asyncio.run(run(world, flows.review, {"seconds": 0.2}, hold=0))
    asyncio.run(send_signal(world, first.run_id, "verdict", "ship it"))
    golden = asyncio.run(follow(world, first.run_id, hold=0))
    assert golden.output == {"draft": "a draft", "verdict": "ship it"}

    same = asyncio.run(simulate(world, flows.review, first.run_id))
    assert same.identical, same.divergence
    assert same.result is not None
    assert same.result.output == golden.output  # the golden's signal, no sender, no waiting

    edited = asyncio.run(simulate(world, flows.review_edited, first.run_id))
    assert not edited.identical
    assert edited.divergence is not None
    assert "waits for a signal 'second-opinion'" in edited.divergence.got
    assert "where the golden run has a signal 'verdict'" in edited.divergence.got


def test_two_branches_waiting_on_one_name_take_one_signal_each(world: little.World) -> None:
    first = asyncio.run(run(world, flows.same_name, None))
    assert first.status == "waiting"
    asyncio.run(send_signal(world, first.run_id, "item", 1))
    asyncio.run(send_signal(world, first.run_id, "item", 2))
    done = asyncio.run(follow(world, first.run_id))
    assert done.status == "completed"
    assert sorted(done.output.values()) == [1, 2]  # never the same signal twice


def test_a_signal_for_the_parent_does_not_wake_it_while_its_sub_run_waits(
    world: little.World,
) -> None:
    from little.events import RunClaimed

    first = asyncio.run(run(world, flows.child_then_own, None))
    assert first.status == "waiting"
    asyncio.run(send_signal(world, first.run_id, "go", "mine"))  # kept for the later wait
    again = asyncio.run(resume(world, first.run_id))
    assert again.status == "waiting"  # the sub-run still waits: no claim loop
    claims = events(world, first.run_id, RunClaimed)
    assert len(claims) == 2
    parent, _, _ = fold_run(world, first.run_id)
    asyncio.run(send_signal(world, parent.sub_runs[0].sub_run_id, "child-go", "child's"))
    assert asyncio.run(follow(world, first.run_id)).output == ["child's", "mine"]


def test_a_workflow_that_catches_exception_around_a_wait_cannot_go_past_it(
    world: little.World, tmp_path: Path
) -> None:
    """A suspension is a ``RunInterrupt``, no ``Exception``: the workflow's ``except
    Exception`` never runs, and the run waits (issue 25 item 3; it used to fail instead)."""
    result = asyncio.run(run(world, flows.swallow, None))
    assert result.status == "waiting"
    assert result.waiting_for == ("signal:never",)
    assert ran(tmp_path) == []  # nothing after the wait ran


def test_a_wait_of_no_end_is_a_clear_error(world: little.World) -> None:
    result = asyncio.run(run(world, flows.forever, None))
    assert result.status == "failed"
    assert result.error is not None
    assert "sleep's duration must be a duration of 0 seconds or more" in result.error


def test_a_wait_divergence_the_workflow_catches_is_still_the_divergence(
    world: little.World,
) -> None:
    """A simulated wait that does not match the golden run's is an integrity error: a
    workflow that catches it and goes on as the golden run did is not identical."""
    from little.runtime import simulate

    first = asyncio.run(run(world, flows.review, {"seconds": 0.2}, hold=0))
    asyncio.run(send_signal(world, first.run_id, "verdict", "ship it"))
    assert asyncio.run(follow(world, first.run_id, hold=0)).status == "completed"

    caught = asyncio.run(simulate(world, flows.review_caught, first.run_id))
    assert not caught.identical, caught.lines()
    assert caught.divergence is not None
    assert caught.divergence.got is not None
    assert "waits for a signal 'second-opinion'" in caught.divergence.got

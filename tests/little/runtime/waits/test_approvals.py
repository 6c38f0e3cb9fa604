"""Human approval of tool calls (issue 11 item 3): a tool declared ``requires_approval`` (or
a session's policy) makes the session record the request (tool, arguments, call id) before
the tool runs and wait, durably; an approval lets it run, a rejection reaches the model as the
tool's error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

import little
from little.errors import CapabilityDriftError
from little.events import (
    AgentCallSettled,
    SessionStarted,
    ToolCallStarted,
    WaitEnded,
    WaitStarted,
)
from little.replay import fold_run
from little.runtime import SignalRefusedError, decide_approval, follow, resume, run
from tests.little.runtime.waits import flows


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[little.World]:
    monkeypatch.setenv(flows.LOG, str(tmp_path / "steps.jsonl"))
    with little.local_world(tmp_path / "world") as w:
        yield w


def transfers(tmp_path: Path) -> list[int]:
    return [s["amount"] for s in flows.steps(tmp_path / "steps.jsonl") if s["step"] == "transfer"]


def asked(world: little.World, run_id: str) -> WaitStarted:
    (request,) = [x.event for x in world.read_run(run_id) if isinstance(x.event, WaitStarted)]
    assert isinstance(request, WaitStarted)
    return request


def test_the_request_is_recorded_before_the_tool_runs_and_approval_lets_it_run(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, flows.pay, None))
    assert first.status == "waiting"
    request = asked(world, first.run_id)
    call_id = "agent#banker/1:t1"
    assert (request.kind, request.name) == ("approval", call_id)
    assert first.waiting_for == (f"approval:{call_id}",)
    assert request.details_json is not None
    assert '"tool":"transfer"' in request.details_json
    assert '"arguments":{"amount":250}' in request.details_json
    assert transfers(tmp_path) == []  # nothing ran before a person said yes
    assert not [x for x in world.read_run(first.run_id) if isinstance(x.event, ToolCallStarted)]

    asyncio.run(decide_approval(world, first.run_id, call_id, approved=True))
    done = asyncio.run(follow(world, first.run_id))
    assert done.output == 'done: {"sent":250}'
    assert transfers(tmp_path) == [250]
    (ended,) = [x.event for x in world.read_run(first.run_id) if isinstance(x.event, WaitEnded)]
    assert isinstance(ended, WaitEnded)
    assert ended.outcome == "approved"
    state, _, _ = fold_run(world, first.run_id)
    assert state.usage.calls == 2  # the model's first turn was served on the resume, not paid again


def test_a_rejection_reaches_the_model_as_the_tools_error_and_the_tool_never_runs(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, flows.pay, None))
    call_id = asked(world, first.run_id).name
    asyncio.run(
        decide_approval(world, first.run_id, call_id, approved=False, reason="over the limit")
    )
    done = asyncio.run(follow(world, first.run_id))
    assert done.output == 'done: {"error":"rejected by a person: over the limit"}'
    assert transfers(tmp_path) == []


def test_a_decision_nobody_asked_for_or_given_twice_is_refused(world: little.World) -> None:
    first = asyncio.run(run(world, flows.pay, None))
    call_id = asked(world, first.run_id).name
    with pytest.raises(SignalRefusedError, match="asked for no approval of call 'nope'"):
        asyncio.run(decide_approval(world, first.run_id, "nope", approved=True))
    asyncio.run(decide_approval(world, first.run_id, call_id, approved=True))
    with pytest.raises(SignalRefusedError, match="already decided"):
        asyncio.run(decide_approval(world, first.run_id, call_id, approved=False))
    assert asyncio.run(follow(world, first.run_id)).status == "completed"


def test_a_replay_serves_the_approved_exchange_whole_and_asks_nothing(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, flows.pay, None))
    asyncio.run(
        decide_approval(world, first.run_id, asked(world, first.run_id).name, approved=True)
    )
    recorded = asyncio.run(follow(world, first.run_id))
    assert transfers(tmp_path) == [250]

    again = asyncio.run(run(world, flows.pay, None, replay_from=first.run_id))
    assert again.status == "completed"  # the exchange was served: no approval to wait for
    assert again.output == recorded.output
    assert again.replay is not None
    assert again.replay.replayed_calls == 1
    assert not [x for x in world.read_run(again.run_id) if isinstance(x.event, WaitStarted)]
    assert transfers(tmp_path) == [250]  # and the tool did not run again


def test_two_approvals_in_one_session_each_wait_for_their_own_decision(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, flows.pay_twice, None))
    assert first.waiting_for == ("approval:agent#banker/1:t0",)
    asyncio.run(decide_approval(world, first.run_id, "agent#banker/1:t0", approved=True))
    second = asyncio.run(resume(world, first.run_id))
    assert second.waiting_for == ("approval:agent#banker/2:t1",)  # the first is not asked again
    asyncio.run(decide_approval(world, first.run_id, "agent#banker/2:t1", approved=True))
    done = asyncio.run(follow(world, first.run_id))
    assert done.output == "both done"
    assert transfers(tmp_path) == [100, 200]


def test_a_decision_that_is_not_a_yes_or_no_is_refused(world: little.World) -> None:
    from little.runtime import send_signal

    first = asyncio.run(run(world, flows.pay, None))
    call_id = asked(world, first.run_id).name
    for bad in ("false", {"approved": "no"}, None):
        with pytest.raises(SignalRefusedError, match="needs a decision"):
            asyncio.run(send_signal(world, first.run_id, f"approval:{call_id}", bad))
    assert fold_run(world, first.run_id)[0].signals == ()


@pytest.fixture
def gated() -> Iterator[dict[str, bool]]:
    flows.GATED.update(tool=False, session=False)
    yield flows.GATED
    flows.GATED.update(tool=False, session=False)


def settled_misses(world: little.World, run_id: str) -> list[str | None]:
    return [
        e.miss_reason for x in world.read_run(run_id) if isinstance(e := x.event, AgentCallSettled)
    ]


@pytest.mark.parametrize("where", ["tool", "session"])
def test_a_replay_under_a_new_approval_misses_naming_it_and_waits_for_the_person(
    world: little.World, tmp_path: Path, gated: dict[str, bool], where: str
) -> None:
    """Seed 003: a call that may block on a person never shares a record with one that may
    not. Recorded with a plain tool, replayed with the tool declared ``requires_approval``
    (or the session asking before every call): not served, the miss names the approval, and
    the transfer waits for a person before it runs."""
    source = asyncio.run(run(world, flows.pay_gated, None))
    assert source.status == "completed"
    assert transfers(tmp_path) == [250]
    gated[where] = True
    with structlog.testing.capture_logs() as logs:
        replay = asyncio.run(run(world, flows.pay_gated, None, replay_from=source.run_id))
    assert replay.status == "waiting", replay.error
    assert replay.replay is not None
    assert replay.replay.replayed_calls == 0
    assert replay.waiting_for == ("approval:agent#banker/1:t1",)
    assert transfers(tmp_path) == [250]  # it waits for the person before it runs
    (changed,) = [e for e in logs if e["event"] == "replay_session_configuration_changed"]
    assert changed["changed"] == ["approval"]
    asyncio.run(decide_approval(world, replay.run_id, "agent#banker/1:t1", approved=True))
    done = asyncio.run(follow(world, replay.run_id))
    assert done.status == "completed"
    assert transfers(tmp_path) == [250, 250]
    assert settled_misses(world, replay.run_id) == ["configuration-changed"]
    assert done.replay is not None
    assert (done.replay.replayed_calls, done.replay.miss_reason) == (0, "configuration-changed")


def test_a_replay_without_the_approval_it_was_recorded_with_misses_too(
    world: little.World, tmp_path: Path, gated: dict[str, bool]
) -> None:
    gated["tool"] = True
    source = asyncio.run(run(world, flows.pay_gated, None))
    asyncio.run(decide_approval(world, source.run_id, "agent#banker/1:t1", approved=True))
    assert asyncio.run(follow(world, source.run_id)).status == "completed"
    gated["tool"] = False
    replay = asyncio.run(run(world, flows.pay_gated, None, replay_from=source.run_id))
    assert replay.status == "completed"
    assert settled_misses(world, replay.run_id) == ["configuration-changed"]
    unchanged = asyncio.run(run(world, flows.pay_gated, None, replay_from=replay.run_id))
    assert unchanged.replay is not None
    assert unchanged.replay.replayed_calls == 1  # the same approvals: served as ever


def test_a_run_recorded_before_approvals_were_keyed_resumes_and_still_waits(
    world: little.World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run waiting for an approval, logged by code whose session manifest had no approval
    part, resumes under today's code: its agent call keeps its recorded key (no
    CapabilityDriftError, no SessionDivergedError) and the transfer ran only once approved."""
    import little.runtime._session as session_module

    with monkeypatch.context() as old_code:
        old_code.setattr(session_module, "approval_manifest", lambda tools, approval: None)
        first = asyncio.run(run(world, flows.pay, None))
    assert first.status == "waiting"
    (started,) = [
        e for x in world.read_run(first.run_id) if isinstance(e := x.event, SessionStarted)
    ]
    assert "approval" not in started.manifest_json
    asyncio.run(decide_approval(world, first.run_id, "agent#banker/1:t1", approved=True))
    done = asyncio.run(follow(world, first.run_id))
    assert done.status == "completed", done.error
    assert transfers(tmp_path) == [250]


def test_a_resume_that_drops_the_approval_its_run_recorded_is_refused(
    world: little.World, tmp_path: Path, gated: dict[str, bool]
) -> None:
    gated["tool"] = True
    first = asyncio.run(run(world, flows.pay_gated, None))
    assert first.status == "waiting"
    gated["tool"] = False
    with pytest.raises(CapabilityDriftError, match=r"changed: approval"):
        asyncio.run(resume(world, first.run_id))
    assert transfers(tmp_path) == []


def test_a_simulation_serves_an_approved_tool_call_as_recorded_and_asks_no_one(
    world: little.World, tmp_path: Path
) -> None:
    """A person approved the transfer once: a simulation does not run it again (nobody is
    there to ask), serves its recorded result and says why."""
    from little.runtime import simulate

    first = asyncio.run(run(world, flows.pay, None))
    asyncio.run(
        decide_approval(world, first.run_id, asked(world, first.run_id).name, approved=True)
    )
    assert asyncio.run(follow(world, first.run_id)).status == "completed"
    assert transfers(tmp_path) == [250]

    sim = asyncio.run(simulate(world, flows.pay, first.run_id))
    assert sim.identical, sim.lines()
    assert transfers(tmp_path) == [250]  # the approved transfer did not run again
    served = "agent call 0 (agent#banker): tool transfer (call 1:t1): needs a person's approval"
    assert sim.tools_served == (f"{served}, served from the golden run",)
    assert sim.tools_run == ()


def test_a_simulation_serves_a_rejected_tool_call_as_recorded(
    world: little.World, tmp_path: Path
) -> None:
    from little.runtime import simulate

    first = asyncio.run(run(world, flows.pay, None))
    call_id = asked(world, first.run_id).name
    asyncio.run(decide_approval(world, first.run_id, call_id, approved=False, reason="no"))
    assert asyncio.run(follow(world, first.run_id)).status == "completed"

    sim = asyncio.run(simulate(world, flows.pay, first.run_id))
    assert sim.identical, sim.lines()
    assert transfers(tmp_path) == []  # it never ran: not when recorded, not now
    served = "agent call 0 (agent#banker): tool transfer (call 1:t1): rejected by a person"
    assert sim.tools_served == (f"{served} when recorded, served from the golden run",)

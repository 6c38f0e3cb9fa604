"""Tool calls of a Pydantic AI agent under ``durable``: recorded by default; a side-effecting
tool (tool metadata) is never served from a recorded run; a tool that needs approval becomes
little's durable approval wait (the run suspends, a person decides, the run resumes); the
framework's ``ModelRetry`` is recorded as the tool's failure and raised again when served."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import little
from little.events import (
    AgentCallSettled,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    WaitStarted,
)
from little.runtime import decide_approval, follow, run, send_signal
from tests.little.integrations.pydantic_ai import workflows as wf


def _events(world: little.World, run_id: str) -> list[Any]:
    return [r.event for r in world.read_run(run_id)]


def test_a_side_effecting_tool_is_never_served_from_a_recorded_run(tmp_path: Path) -> None:
    flow = wf.version("effects", metadata={"side_effecting": True})
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, flow, "Kafka"))
        assert source.status == "completed", source.error
        wf.COUNTS.clear()
        replay = asyncio.run(run(world, flow, "Kafka", replay_from=source.run_id))
        assert replay.status == "completed", replay.error
        events = _events(world, replay.run_id)
    settled = [
        (e.ordinal, e.replayed, e.miss_reason) for e in events if isinstance(e, AgentCallSettled)
    ]
    assert settled[0] == (0, False, "side-effecting-call")
    assert [e.replayed for e in events if isinstance(e, AgentCallSettled)] == [False, False]
    assert wf.COUNTS["tool:search"] == 1  # the effect is made again, never reused
    (started,) = [e for e in events if isinstance(e, ToolCallStarted)]
    assert started.idempotency_key == f"{replay.run_id}/research/1:call-1"


def test_a_tool_needing_approval_waits_durably_and_runs_once_approved(tmp_path: Path) -> None:
    wf.COUNTS.clear()
    flow = wf.version("approval", requires_approval=True)
    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(run(world, flow, "Kafka"))
        assert first.status == "waiting", first.error
        (asked,) = [e for e in _events(world, first.run_id) if isinstance(e, WaitStarted)]
        assert asked.kind == "approval"
        assert asked.name == "research#researcher/1:call-1"
        assert asked.details_json is not None
        assert '"tool":"search"' in asked.details_json
        assert wf.COUNTS == {"model": 1}  # nothing ran before a person said yes

        asyncio.run(decide_approval(world, first.run_id, asked.name, approved=True))
        done = asyncio.run(follow(world, first.run_id))
        events = _events(world, first.run_id)
    assert done.status == "completed", done.error
    assert done.output["first"] == "answer to [Brief me on Kafka] using facts(Brief me on Kafka)"
    assert wf.COUNTS == {"model": 3, "tool:search": 1}  # turn 1 served on the resume
    (started,) = [e for e in events if isinstance(e, ToolCallStarted)]
    assert started.call_id == "1:call-1~approved"


def test_a_rejected_tool_call_never_runs_and_the_model_is_told(tmp_path: Path) -> None:
    wf.COUNTS.clear()
    flow = wf.version("approval", requires_approval=True)
    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(run(world, flow, "Kafka"))
        (asked,) = [e for e in _events(world, first.run_id) if isinstance(e, WaitStarted)]
        asyncio.run(decide_approval(world, first.run_id, asked.name, approved=False, reason="no"))
        done = asyncio.run(follow(world, first.run_id))
    assert done.status == "completed", done.error
    assert done.output["first"] == ("answer to [Brief me on Kafka] using rejected by a person: no")
    assert "tool:search" not in wf.COUNTS


def test_a_model_retry_is_recorded_as_the_tools_failure_and_raised_again_on_resume(
    tmp_path: Path,
) -> None:
    """The tool asks the model to retry once; the run then waits for a signal, so the resume
    serves the first call turn by turn from the log, the retry raised again: no tool or model
    runs again, and the conversation it rebuilds is the recorded one (same request hashes)."""
    wf.COUNTS.clear()
    flow = wf.version("retry", retry_once=True, pause=True)
    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(run(world, flow, "Kafka"))
        assert first.status == "waiting", first.error
        before = dict(wf.COUNTS)
        asyncio.run(send_signal(world, first.run_id, "go"))
        done = asyncio.run(follow(world, first.run_id))
        events = _events(world, first.run_id)
    assert done.status == "completed", done.error
    failed = [e for e in events if isinstance(e, ToolCallFailed)]
    assert [(e.tool, e.error_type) for e in failed] == [("search", "ModelRetry")]
    assert [e.tool for e in events if isinstance(e, ToolCallSucceeded)] == ["search"]
    assert done.output["first"] == (
        "answer to [Brief me on Kafka] using facts(Brief me on Kafka again)"
    )
    assert before == {"model": 3, "tool:search": 2}  # the retried call, then the good one
    assert wf.COUNTS == {"model": 4, "tool:search": 2}  # the resume: the second call only


def test_a_tool_raising_approval_required_waits_durably_and_runs_once_approved(
    tmp_path: Path,
) -> None:
    """Pydantic AI's ``ApprovalRequired`` raised by the tool itself: recorded as the call's
    failure (its class), the run waits for a person, and once approved the framework calls the
    tool again, as a call of its own; the resume raises the recorded one again, not the tool."""
    wf.COUNTS.clear()
    flow = wf.version("asks", ask_approval=True)
    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(run(world, flow, "Kafka"))
        assert first.status == "waiting", first.error
        (asked,) = [e for e in _events(world, first.run_id) if isinstance(e, WaitStarted)]
        assert asked.name == "research#researcher/1:call-1"
        assert wf.COUNTS == {"model": 1, "tool:asked": 1}
        asyncio.run(decide_approval(world, first.run_id, asked.name, approved=True))
        done = asyncio.run(follow(world, first.run_id))
        events = _events(world, first.run_id)
    assert done.status == "completed", done.error
    assert done.output["first"] == "answer to [Brief me on Kafka] using facts(Brief me on Kafka)"
    failed = [(e.call_id, e.error_type) for e in events if isinstance(e, ToolCallFailed)]
    assert failed == [("1:call-1", "ApprovalRequired")]
    assert [e.call_id for e in events if isinstance(e, ToolCallSucceeded)] == ["1:call-1~approved"]
    # the resume served the first attempt's ApprovalRequired: the tool was not asked again
    assert wf.COUNTS == {"model": 3, "tool:asked": 1, "tool:search": 1}

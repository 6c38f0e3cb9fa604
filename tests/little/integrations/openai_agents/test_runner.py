"""``LittleRunner.run``: a runner call is one agent call, its model requests and tool calls
recorded through the kernel, served on a replay of the run with zero invocations."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.chat import chat_example, model_exchanges
from little.errors import RuntimeIntegrityError
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    LoggedEvent,
    ModelCalled,
    ModelResponded,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
)
from little.runtime import execute, run, send_signal, simulate
from tests.little.integrations.openai_agents import agents_support as s

TICKET = {"ticket": "Where is my order A1?", "followup": "Thanks, and when does it arrive?"}


@pytest.fixture
def calls_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "calls"
    d.mkdir()
    monkeypatch.setenv(s.CALLS_ENV, str(d))
    return d


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "data") as w:
        yield w


def events(world: little.World, run_id: str, cls: type[Any]) -> list[Any]:
    return [e for x in world.read_run(run_id) if isinstance(e := x.event, cls)]


def answers(world: little.World, run_id: str) -> list[Any]:
    """The tool calls' outcomes on the log: results and failures."""
    outcomes = (ToolCallSucceeded, ToolCallFailed)
    return [e for x in world.read_run(run_id) if isinstance(e := x.event, outcomes)]


def test_a_runner_call_is_one_agent_call_with_its_requests_and_tools_recorded(
    world: little.World, calls_dir: Path
) -> None:
    result = asyncio.run(run(world, s.triage, TICKET))
    assert result.status == "completed", result.error
    assert result.output == {
        "first": "order A1 shipped (re: Where is my order A1?)",
        "second": "order A1 shipped (re: Where is my order A1?)",
    }
    admitted = events(world, result.run_id, AgentCallAdmitted)
    assert [(a.node_label, a.node_occurrence) for a in admitted] == [
        ("triage", 0),
        ("triage.2", 0),
    ]
    settled = events(world, result.run_id, AgentCallSettled)
    assert [(c.outcome, c.model_calls) for c in settled] == [("succeeded", 2), ("succeeded", 2)]
    called = events(world, result.run_id, ModelCalled)
    responded = events(world, result.run_id, ModelResponded)
    assert len(called) == len(responded) == 4
    assert [c.model for c in called] == ["gpt-4o-mini"] * 4
    # usage mapped, cached and reasoning tokens included
    assert (responded[0].usage.input_tokens, responded[0].usage.cached_input_tokens) == (20, 2)
    assert responded[0].usage.reasoning_tokens == 1
    started = events(world, result.run_id, ToolCallStarted)
    assert [t.tool for t in started] == ["lookup_order", "lookup_order"]
    assert len(events(world, result.run_id, ToolCallSucceeded)) == 2
    assert len(s.calls(calls_dir, "model")) == 4
    assert len(s.calls(calls_dir, "tool")) == 2


def test_a_replay_of_the_run_serves_every_call_with_zero_invocations(
    world: little.World, calls_dir: Path
) -> None:
    first = asyncio.run(run(world, s.triage, TICKET))
    assert first.status == "completed", first.error
    before = (len(s.calls(calls_dir, "model")), len(s.calls(calls_dir, "tool")))
    again = asyncio.run(run(world, s.triage, TICKET, replay_from=first.run_id))
    assert again.status == "completed", again.error
    assert again.output == first.output
    assert (len(s.calls(calls_dir, "model")), len(s.calls(calls_dir, "tool"))) == before
    assert [(c.replayed, c.miss_reason) for c in events(world, again.run_id, AgentCallSettled)] == [
        (True, None),
        (True, None),
    ]
    keys = [a.request_key for a in events(world, first.run_id, AgentCallAdmitted)]
    assert [a.request_key for a in events(world, again.run_id, AgentCallAdmitted)] == keys


def test_two_fresh_runs_build_equal_request_hashes(world: little.World, calls_dir: Path) -> None:
    one = asyncio.run(run(world, s.triage, TICKET))
    two = asyncio.run(run(world, s.triage, TICKET))
    hashes = [c.request_hash for c in events(world, one.run_id, ModelCalled)]
    assert len(set(hashes)) == 4
    assert [c.request_hash for c in events(world, two.run_id, ModelCalled)] == hashes


def test_a_replay_with_the_second_calls_input_edited_serves_the_first_and_runs_the_second(
    world: little.World, calls_dir: Path
) -> None:
    first = asyncio.run(run(world, s.triage, TICKET))
    assert first.status == "completed", first.error
    before = len(s.calls(calls_dir, "model"))
    edited = {**TICKET, "followup": "Can I change the address?"}
    again = asyncio.run(run(world, s.triage, edited, replay_from=first.run_id))
    assert again.status == "completed", again.error
    assert again.output == first.output  # the fake answers from the first message
    assert [(c.replayed, c.miss_reason) for c in events(world, again.run_id, AgentCallSettled)] == [
        (True, None),
        (False, "key-mismatch"),
    ]
    # the second call ran fresh: both of its model requests, none of the first's
    assert len(s.calls(calls_dir, "model")) == before + 2
    sessions = {c.session_id for c in events(world, again.run_id, ModelCalled)}
    assert sessions == {"handle#triage.2"}


def test_the_per_run_prompt_cache_key_never_reaches_the_hash(
    world: little.World, calls_dir: Path
) -> None:
    responses = {**TICKET, "api": "responses"}
    one = asyncio.run(run(world, s.triage, responses))
    two = asyncio.run(run(world, s.triage, responses))
    assert one.status == two.status == "completed", (one.error, two.error)
    keys = [c["prompt_cache_key"] for c in s.calls(calls_dir, "model")]
    # the SDK sent a key per runner call (agents-sdk:run:<uuid4>): four calls, four keys
    assert len(keys) == 8
    assert all(k and k.startswith("agents-sdk:run:") for k in keys)
    assert len(set(keys)) == 4
    hashes = [c.request_hash for c in events(world, one.run_id, ModelCalled)]
    assert [c.request_hash for c in events(world, two.run_id, ModelCalled)] == hashes
    admitted = [a.request_key for a in events(world, one.run_id, AgentCallAdmitted)]
    assert [a.request_key for a in events(world, two.run_id, AgentCallAdmitted)] == admitted
    again = asyncio.run(run(world, s.triage, responses, replay_from=one.run_id))
    assert [c.replayed for c in events(world, again.run_id, AgentCallSettled)] == [True, True]
    assert len(s.calls(calls_dir, "model")) == 8


def test_a_handoff_is_recorded_in_the_same_session_with_each_requests_own_model(
    world: little.World, calls_dir: Path
) -> None:
    ticket = {"ticket": "A question about my invoice"}
    first = asyncio.run(run(world, s.handoff_flow, ticket))
    assert first.status == "completed", first.error
    assert first.output["agent"] == "billing"
    called = events(world, first.run_id, ModelCalled)
    assert [(c.session_id, c.model) for c in called] == [
        ("handle#triage", "gpt-4o-mini"),
        ("handle#triage", "gpt-4.1-mini"),
    ]
    before = len(s.calls(calls_dir, "model"))
    again = asyncio.run(run(world, s.handoff_flow, ticket, replay_from=first.run_id))
    assert again.output == first.output
    assert len(s.calls(calls_dir, "model")) == before
    assert [c.replayed for c in events(world, again.run_id, AgentCallSettled)] == [True]


def test_a_chat_export_rebuilds_each_runner_calls_requests_checked_against_their_hashes(
    world: little.World, calls_dir: Path
) -> None:
    """Each answered request of each runner call (a session each) rebuilt from the logged
    items and heads, link by link, as chat examples; an altered record is refused."""
    result = asyncio.run(run(world, s.triage, TICKET))
    rows = list(world.read_run(result.run_id))
    exchanges = model_exchanges(rows, world.artifacts.get)
    assert [(x.session_id, x.turn, x.native_format) for x in exchanges] == [
        ("handle#triage", 1, "openai-agents"),
        ("handle#triage", 2, "openai-agents"),
        ("handle#triage.2", 1, "openai-agents"),
        ("handle#triage.2", 2, "openai-agents"),
    ]
    second = chat_example(exchanges[1])
    assert second["messages"][0] == {"role": "system", "content": "You triage support tickets."}
    assert second["messages"][1] == {"role": "user", "content": TICKET["ticket"]}
    assert second["messages"][2]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert second["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_2",  # the fake model's id: call_<messages sent>
        "content": "order A1 shipped",
    }
    assert [t["function"]["name"] for t in second["tools"]] == ["lookup_order"]
    # the follow-up runner call resends the first call's items, then the new question
    follow = chat_example(exchanges[2])["messages"]
    assert follow[-2] == {"role": "user", "content": TICKET["followup"]}
    assert follow[:5] == second["messages"]

    altered = [
        LoggedEvent(
            r.event.model_copy(
                update={
                    "appended_messages_json": (r.event.appended_messages_json or "").replace(
                        "shipped", "lost"
                    )
                }
            )
            if isinstance(r.event, ModelCalled)
            else r.event,
            r.partition,
            r.offset,
        )
        for r in rows
    ]
    with pytest.raises(RuntimeIntegrityError, match="do not hash to its request_hash"):
        model_exchanges(altered, world.artifacts.get)


def test_a_chat_export_follows_a_handoff_to_the_next_agents_instructions(
    world: little.World, calls_dir: Path
) -> None:
    ticket = {"ticket": "A question about my invoice"}
    result = asyncio.run(run(world, s.handoff_flow, ticket))
    assert result.status == "completed", result.error
    exchanges = model_exchanges(world.read_run(result.run_id), world.artifacts.get)
    systems = [chat_example(x)["messages"][0]["content"] for x in exchanges]
    assert len(set(systems)) == 2, systems  # the head changed at the handoff: a new link item


def test_an_agent_used_as_a_tool_through_little_runner_is_an_agent_call_of_its_own(
    world: little.World, calls_dir: Path
) -> None:
    """The lead's tool runs the expert through ``LittleRunner``: its call is admitted and
    settled inside the lead's tool call, as a session and node of its own; a replay serves the
    lead's call whole, never running the expert."""
    ticket = {"ticket": "Where is my order A1?"}
    first = asyncio.run(run(world, s.delegation_flow, ticket))
    assert first.status == "completed", first.error
    kinds = [
        (type(r.event).__name__, r.event.session_id)
        for r in world.read_run(first.run_id)
        if isinstance(r.event, AgentCallAdmitted | AgentCallSettled | ToolCallStarted)
        and r.event.session_id in ("handle#lead", "handle#expert")
    ]
    assert kinds == [
        ("AgentCallAdmitted", "handle#lead"),
        ("ToolCallStarted", "handle#lead"),
        ("AgentCallAdmitted", "handle#expert"),
        ("ToolCallStarted", "handle#expert"),
        ("AgentCallSettled", "handle#expert"),
        ("AgentCallSettled", "handle#lead"),
    ]
    labels = [e.node_label for e in events(world, first.run_id, AgentCallAdmitted)]
    assert labels == ["lead", "expert"]
    before = len(s.calls(calls_dir, "model"))
    again = asyncio.run(run(world, s.delegation_flow, ticket, replay_from=first.run_id))
    assert again.output == first.output
    assert len(s.calls(calls_dir, "model")) == before
    assert [c.replayed for c in events(world, again.run_id, AgentCallSettled)] == [True]


def test_an_agent_as_tool_runs_its_agent_as_an_agent_call_of_its_own(
    world: little.World, calls_dir: Path
) -> None:
    """The SDK's ``expert.as_tool()`` in the lead's tools: the expert's run is admitted and
    settled inside the lead's tool call, a session and node of its own, each of its requests
    recorded; a replay serves the lead's call whole, never running the expert."""
    ticket = {"ticket": "Where is my order A1?"}
    first = asyncio.run(run(world, s.as_tool_flow, ticket))
    assert first.status == "completed", first.error
    assert first.output == ("order A1 shipped (re: Where is order A1?) (re: Where is my order A1?)")
    logged = list(world.read_run(first.run_id))
    kinds = [
        (type(r.event).__name__, r.event.session_id)
        for r in logged
        if isinstance(r.event, AgentCallAdmitted | AgentCallSettled | ToolCallStarted)
    ]
    assert kinds == [
        ("AgentCallAdmitted", "handle#lead"),
        ("ToolCallStarted", "handle#lead"),
        ("AgentCallAdmitted", "handle#expert"),
        ("ToolCallStarted", "handle#expert"),
        ("AgentCallSettled", "handle#expert"),
        ("AgentCallSettled", "handle#lead"),
    ]
    requests = [r.event.session_id for r in logged if isinstance(r.event, ModelCalled)]
    assert requests == ["handle#lead", "handle#expert", "handle#expert", "handle#lead"]
    labels = [e.node_label for e in events(world, first.run_id, AgentCallAdmitted)]
    assert labels == ["lead", "expert"]
    before = len(s.calls(calls_dir, "model"))
    assert before == 4
    again = asyncio.run(run(world, s.as_tool_flow, ticket, replay_from=first.run_id))
    assert again.output == first.output
    assert len(s.calls(calls_dir, "model")) == before  # zero invocations
    assert [c.replayed for c in events(world, again.run_id, AgentCallSettled)] == [True]


def test_a_simulation_of_an_agent_as_tool_run_is_identical_invoking_nothing(
    world: little.World, calls_dir: Path
) -> None:
    first = asyncio.run(run(world, s.as_tool_flow, {"ticket": "Where is my order A1?"}))
    assert first.status == "completed", first.error
    before = len(s.calls(calls_dir, "model"))
    simulated = asyncio.run(simulate(world, s.as_tool_flow, first.run_id))
    assert simulated.divergence is None, simulated.lines()
    assert simulated.result is not None
    assert simulated.result.output == first.output
    assert len(s.calls(calls_dir, "model")) == before


def test_an_agent_as_tool_streaming_to_on_stream_is_recorded_the_same(
    world: little.World, calls_dir: Path
) -> None:
    """``as_tool(on_stream=...)`` runs the agent through ``Runner.run_streamed``: a
    ``LittleRunner.run_streamed`` call, its events handed to the callback as they come."""
    ticket = {"ticket": "Where is my order A1?", "stream": True}
    first = asyncio.run(run(world, s.as_tool_flow, ticket))
    assert first.status == "completed", first.error
    said = " ".join(first.output.split())  # streamed word by word, each with its space
    assert said == "order A1 shipped (re: Where is order A1?) (re: Where is my order A1?)"
    labels = [e.node_label for e in events(world, first.run_id, AgentCallAdmitted)]
    assert labels == ["lead", "expert"]
    (streamed,) = s.calls(calls_dir, "streamed")
    assert "run_item_stream_event" in streamed["events"]
    assert len(s.calls(calls_dir, "model")) == 4


@pytest.mark.parametrize(
    ("flow", "named", "swallow"),
    [
        (s.as_tool_flow, "UnsupportedFeatureError: agent.as_tool() of agent 'expert'", None),
        (s.delegation_flow, "UnsupportedFeatureError: little.integrations.openai_agents", None),
        (s.delegation_flow, "UnsupportedFeatureError: little.integrations.openai_agents", "answer"),
        (s.delegation_flow, "UnsupportedFeatureError: little.integrations.openai_agents", "wrap"),
    ],
    ids=["as_tool", "runner-in-a-tool", "caught-and-answered", "wrapped"],
)
def test_an_agent_run_refused_inside_a_tool_ends_the_run_call_answering_no_tool_call(
    world: little.World, calls_dir: Path, flow: Any, named: str, swallow: str | None
) -> None:
    """What ``LittleRunner`` refuses is refused for the agent an ``as_tool()`` tool runs, or a
    function tool runs through ``LittleRunner.run``, in one line, and it ends the outer call:
    it passes the SDK's failure formatter (never the tool's error string, which the lead's
    model would read and go on from), the lead's tool call is answered by nothing on the log,
    and the expert never runs. Whatever the tool does with it: a tool that catches it and
    answers for it, or raises its own error from it, does not make it the tool's result."""
    ticket = {"ticket": "Where is my order A1?", "refuse": "session", "swallow": swallow}
    failed = asyncio.run(run(world, flow, ticket))
    assert failed.status == "failed"
    assert failed.error is not None
    assert named in failed.error
    assert "session= (SDK-managed history)" in failed.error
    assert [t.tool for t in events(world, failed.run_id, ToolCallStarted)] == ["lookup_order"]
    assert answers(world, failed.run_id) == []
    assert [e.node_label for e in events(world, failed.run_id, AgentCallAdmitted)] == ["lead"]
    assert len(s.calls(calls_dir, "model")) == 1  # the lead's first request only


def test_a_replay_of_a_run_refused_inside_an_agent_as_tool_is_refused_again(
    world: little.World, calls_dir: Path
) -> None:
    """Nothing of the refusal is recorded as the lead's tool call's answer (nor in the failed
    lead call's result), so a replay of the failed run runs the tool call again and is refused
    the same way: the lead is never asked with an answer of it."""
    ticket = {"ticket": "Where is my order A1?", "refuse": "session"}
    failed = asyncio.run(run(world, s.as_tool_flow, ticket))
    assert failed.status == "failed"
    (settled,) = events(world, failed.run_id, AgentCallSettled)
    assert settled.outcome == "failed"
    assert "UnsupportedFeatureError" not in (settled.result_json or "")
    again = asyncio.run(run(world, s.as_tool_flow, ticket, replay_from=failed.run_id))
    assert again.status == "failed"
    assert again.error is not None
    assert "agent.as_tool() of agent 'expert'" in again.error
    assert answers(world, again.run_id) == []
    # the lead's first request only (asked again: a failed call is not served), never one
    # carrying the tool's answer
    assert [c["messages"] for c in s.calls(calls_dir, "model")] == [2, 2]


def test_an_agent_run_in_a_tool_and_by_its_step_keeps_its_numbering_when_served_whole(
    world: little.World, calls_dir: Path
) -> None:
    """The expert runs inside the lead's tool (``handle#expert``) and then by the step itself
    (``handle#expert.2``). A replay and a simulation serving the lead's call whole (the tool
    not run) and a resume after the step's wait (the lead's call served from the log) still
    number the step's own expert call ``expert.2``: it is served, nothing invoked again."""
    ticket = {"ticket": "Where is my order A1?"}
    first = asyncio.run(run(world, s.delegation_then_direct_flow, ticket))
    assert first.status == "completed", first.error
    admitted = [(e.session_id, e.scope) for e in events(world, first.run_id, AgentCallAdmitted)]
    assert admitted == [
        ("handle#lead", ""),
        ("handle#expert", "#0/1:call_2/"),
        ("handle#expert.2", ""),
    ]
    before = len(s.calls(calls_dir, "model"))
    again = asyncio.run(run(world, s.delegation_then_direct_flow, ticket, replay_from=first.run_id))
    assert again.status == "completed", again.error
    assert again.output == first.output
    assert [c.replayed for c in events(world, again.run_id, AgentCallSettled)] == [True, True]
    simulated = asyncio.run(simulate(world, s.delegation_then_direct_flow, first.run_id))
    assert simulated.divergence is None, simulated.lines()
    assert len(s.calls(calls_dir, "model")) == before  # zero invocations

    waiting = {**ticket, "wait": True}
    parked = asyncio.run(execute(world, "r", s.delegation_then_direct_flow, waiting))
    assert parked.status == "waiting", parked.error
    asyncio.run(send_signal(world, "r", "resume"))
    before = len(s.calls(calls_dir, "model"))
    done = asyncio.run(execute(world, "r", s.delegation_then_direct_flow))
    assert done.status == "completed", done.error
    assert done.output == first.output
    assert len(s.calls(calls_dir, "model")) == before  # the resume invoked nothing

"""A Pydantic AI agent's ``MCPToolset`` under ``durable`` (a real MCP server,
``tests/mcp_notes_server.py``, over stdio through the FastMCP client): the server's listing is
recorded once per agent call as the tool call ``mcp:notes/tools/list`` and each call of its tools
as ``mcp:notes/<tool>``; a resume asks the server nothing it answered before; a replay never
serves the agent's call (a server's state is not in the log); what cannot be recorded is refused
with one line."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import little
from little.errors import UnsupportedFeatureError
from little.events import AgentCallSettled, SessionStarted, ToolCallStarted, ToolCallSucceeded
from little.examples.research import _log_call
from little.integrations.pydantic_ai import durable
from little.runtime import StepContext, WorkflowContext, resume, run, send_signal, workflow
from tests.paths import REPO

SERVER = REPO / "tests" / "mcp_notes_server.py"
NOTES_LOG = "MCP_NOTES_LOG"
MODEL_CALLS: list[list[str]] = []
"""The tools the model was told, per request made in this process."""


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A prompt: call the server's ``add`` tool; a tool's result: say it."""
    MODEL_CALLS.append(sorted(t.name for t in info.function_tools))
    _log_call("model", n=len(messages))  # for the crash tests' children: survives a SIGKILL
    usage = RequestUsage(input_tokens=10, output_tokens=5)
    returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if not returns:
        call = ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="call_1")
        return ModelResponse(parts=[call], usage=usage)
    return ModelResponse(parts=[TextPart(f"the sum is {returns[0].content}")], usage=usage)


def _notes(server_id: str | None = "notes", **kwargs: Any) -> MCPToolset[Any]:
    # the stdio client passes the server a bare environment: the log's path given here
    transport = StdioTransport(
        command=sys.executable, args=[str(SERVER)], env={NOTES_LOG: os.environ[NOTES_LOG]}
    )
    return MCPToolset(transport, id=server_id, **kwargs)


def _agent(toolsets: list[Any]) -> Agent[None, str]:
    return Agent(FunctionModel(_answer), name="calc", toolsets=toolsets)


@workflow("tests.pyai.mcp")
async def mcp_flow(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    async def handle(step: StepContext) -> str:
        agent = durable(step, _agent([_notes()]))
        result = await agent.run("Add 2 and 3.")
        if input.get("pause"):  # the run waits (holding no process) until the signal "go"
            await step.wait_for_signal("go")
        return str(result.output)

    out: str = await ctx.step("handle", handle)
    return out


REFUSED: dict[str, Any] = {
    "no id": lambda: durable_in(_agent([_notes(None)])),
    "two of one id": lambda: durable_in(_agent([_notes(), _notes().prefixed("x")])),
    "instructions": lambda: durable_in(_agent([_notes(include_instructions=True)])),
    "per run": lambda: ("run", _agent([]), {"toolsets": [_notes()]}),
}


def durable_in(agent: Agent[None, str]) -> tuple[str, Agent[None, str], dict[str, Any]]:
    return ("durable", agent, {})


@workflow("tests.pyai.mcp_refused")
async def refused_flow(ctx: WorkflowContext, which: str) -> str:
    async def attempt(step: StepContext) -> str:
        try:
            _, agent, kwargs = REFUSED[which]()
            await durable(step, agent).run("Add 2 and 3.", **kwargs)
        except UnsupportedFeatureError as exc:
            return str(exc)
        return "ran"

    out: str = await ctx.step("attempt", attempt)
    return out


@pytest.fixture
def notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "notes.jsonl"
    monkeypatch.setenv(NOTES_LOG, str(log))
    MODEL_CALLS.clear()
    return log


def _served(log: Path) -> list[str]:
    """What the server answered (listings and tool calls), from its own log."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [line["kind"] + ":" + line.get("tool", "") for line in lines]


def _events(world: little.World, run_id: str) -> list[Any]:
    return [r.event for r in world.read_run(run_id)]


def test_mcp_tools_are_listed_and_called_through_the_log(tmp_path: Path, notes: Path) -> None:
    with little.local_world(tmp_path / "w") as world:
        done = asyncio.run(run(world, mcp_flow, {}))
        assert done.status == "completed", done.error
        events = _events(world, done.run_id)
    assert done.output == "the sum is 5"
    started = [(e.call_id, e.tool) for e in events if isinstance(e, ToolCallStarted)]
    assert started == [
        ("0:mcp:notes/tools/list", "mcp:notes/tools/list"),
        ("1:call_1", "mcp:notes/add"),
    ]
    results = [e.result_json for e in events if isinstance(e, ToolCallSucceeded)]
    listed = json.loads(results[0] or "[]")  # the tool definitions the server's listing gave
    assert sorted(t["name"] for t in listed) == ["add", "shout"]
    assert json.loads(results[1] or "null") == 5
    assert MODEL_CALLS == [["add", "shout"], ["add", "shout"]]  # the model was told them
    (session,) = [e for e in events if isinstance(e, SessionStarted)]
    manifest = json.loads(session.manifest_json)
    assert manifest["mcp_servers"] == ["notes"]
    assert manifest["side_effecting"] == ["mcp:notes"]
    assert _served(notes) == ["list:", "call:add"]


def test_a_resume_asks_the_server_nothing_it_answered(tmp_path: Path, notes: Path) -> None:
    """The step runs again after a wait: the call's listing and tool call come from the log."""
    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(run(world, mcp_flow, {"pause": True}))
        assert first.status == "waiting", first.error
        asyncio.run(send_signal(world, first.run_id, "go", None))
        done = asyncio.run(resume(world, first.run_id))
        assert done.status == "completed", done.error
    assert done.output == "the sum is 5"
    assert _served(notes) == ["list:", "call:add"]
    assert len(MODEL_CALLS) == 2


def test_a_replay_never_serves_an_agent_holding_an_mcp_server(tmp_path: Path, notes: Path) -> None:
    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(run(world, mcp_flow, {}))
        again = asyncio.run(run(world, mcp_flow, {}, replay_from=first.run_id))
        assert again.status == "completed", again.error
        settled = [
            (e.replayed, e.miss_reason)
            for e in _events(world, again.run_id)
            if isinstance(e, AgentCallSettled)
        ]
    assert settled == [(False, "side-effecting-call")]
    assert _served(notes) == ["list:", "call:add", "list:", "call:add"]


@pytest.mark.parametrize(
    ("which", "named"),
    [
        ("no id", "an MCPToolset without id= is refused under little"),
        ("two of one id", "two MCPToolsets of id 'notes' is refused under little"),
        ("instructions", "MCPToolset 'notes' include_instructions=True is refused under little"),
        ("per run", "an MCPToolset in the run's toolsets= is refused under little"),
    ],
)
def test_an_mcp_toolset_that_cannot_be_recorded_is_refused_naming_it(
    tmp_path: Path, notes: Path, which: str, named: str
) -> None:
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, refused_flow, which))
    assert result.status == "completed", result.error
    assert named in result.output
    assert "\n" not in result.output
    assert MODEL_CALLS == []
    assert _served(notes) == []  # the server was asked nothing

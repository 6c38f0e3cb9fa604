"""An Agents SDK agent's MCP servers under ``LittleRunner`` (a real MCP server,
``tests/mcp_notes_server.py``, over stdio): the server's ``list_tools`` is recorded as the tool
call ``mcp:notes/tools/list`` and each call of its tools as ``mcp:notes/<tool>``; a resume
asks the server nothing it answered before; a replay never serves the agent's call (a
server's state is not in the log)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel
from agents.mcp import MCPServerStdio

import little
from little.events import AgentCallSettled, SessionStarted, ToolCallStarted, ToolCallSucceeded
from little.integrations.openai_agents import LittleRunner
from little.runtime import StepContext, WorkflowContext, resume, run, send_signal, workflow
from tests.little.integrations.openai_agents import agents_support as s
from tests.paths import REPO

SERVER = REPO / "tests" / "mcp_notes_server.py"
NOTES_LOG = "MCP_NOTES_LOG"


def _answer(request: httpx2.Request) -> httpx2.Response:
    """A user message last: call the server's ``add`` tool; a tool result last: say it."""
    body = json.loads(request.content)
    messages = body["messages"]
    s.log_call(
        "model", messages=len(messages), tools=[t["function"]["name"] for t in body["tools"]]
    )
    last = messages[-1]
    if last["role"] == "user":
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
        }
        message: dict[str, Any] = {"content": None, "tool_calls": [call]}
    else:
        content = last["content"]  # the SDK hands an MCP result on as content parts
        said = content if isinstance(content, str) else "".join(p["text"] for p in content)
        message = {"content": f"the sum is {said}"}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return httpx2.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "created": 1747900000,
            "model": "gpt-4o-mini",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "refusal": None, **message},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    )


def _agent(server: MCPServerStdio) -> Agent[Any]:
    client = openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="https://api.openai.com/v1",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(_answer)),
    )
    return Agent(
        name="calc",
        instructions="Use the tools.",
        model=OpenAIChatCompletionsModel("gpt-4o-mini", openai_client=client),
        mcp_servers=[server],
    )


@workflow("oa.mcp")
async def mcp_flow(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    async def handle(step: StepContext) -> str:
        # the stdio client passes the server a bare environment: the log's path given here
        params: Any = {
            "command": sys.executable,
            "args": [str(SERVER)],
            "env": {NOTES_LOG: os.environ[NOTES_LOG]},
        }
        async with MCPServerStdio(params=params, name="notes") as server:
            result = await LittleRunner.run(step, _agent(server), "Add 2 and 3.", max_turns=4)
        if input.get("pause"):  # the run waits (holding no process) until the signal "go"
            await step.wait_for_signal("go")
        return str(result.final_output)

    out: str = await ctx.step("handle", handle)
    return out


@pytest.fixture
def notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "notes.jsonl"
    monkeypatch.setenv(NOTES_LOG, str(log))
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv(s.CALLS_ENV, str(calls))
    return log


def _served(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [
        json.loads(line)["kind"] + ":" + json.loads(line).get("tool", "")
        for line in log.read_text().splitlines()
    ]


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
    assert json.loads(results[0] or "[]")[0]["name"] == "add"  # the listing, as the server gave it
    # the model was told the server's tools; the manifest names the server
    assert all("add" in c["tools"] for c in s.calls(tmp_path / "calls", "model"))
    (session,) = [e for e in events if isinstance(e, SessionStarted)]
    assert json.loads(session.manifest_json)["agents"]["calc"]["mcp_servers"] == ["notes"]
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
    assert len(s.calls(tmp_path / "calls", "model")) == 2


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

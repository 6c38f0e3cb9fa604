"""MCP servers as an agent session's tools (issue 28 item 5): ``tools=[mcp(server)]`` lists the
server's tools as a recorded call and calls them as recorded tool calls named
``mcp:<server>/<tool>``; a resume builds the same tools from the log without the server. A real
MCP server (``tests/mcp_notes_server.py``, the ``mcp`` package's ``MCPServer``) runs as a child
process over stdio; the model is the real ``openai`` or ``anthropic`` client over an ``httpx2``
``MockTransport`` answering in the provider's wire format."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

import little
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
)
from little.harness import McpError, McpServer, mcp
from little.runtime import execute, resume, run
from tests.little.harness.mcp_workflows import Crash, Provider, mcp_workflow
from tests.paths import REPO

SERVER = REPO / "tests" / "mcp_notes_server.py"


def stdio(log: Path, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(SERVER)], env={"MCP_NOTES_LOG": str(log), **env}
    )


def served(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def tool_events(world: little.World, run_id: str) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for logged in world.read_run(run_id):
        e = logged.event
        if isinstance(e, ToolCallStarted):
            out.append(("started", e.tool, e.call_id))
        elif isinstance(e, ToolCallSucceeded):
            out.append(("succeeded", e.tool, e.result_json or ""))
        elif isinstance(e, ToolCallFailed):
            out.append(("failed", e.tool, e.message))
    return out


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_servers_tools_are_listed_as_a_recorded_call_and_called_as_recorded_tool_calls(
    tmp_path: Path, provider: str
) -> None:
    log = tmp_path / "server.jsonl"
    model = Provider(provider, "mcp__notes__add", {"a": 2, "b": 3})
    servers = [mcp(stdio(log), name="notes")]
    wf = mcp_workflow(model, servers, crash_once=True)
    run_id = f"run_{uuid.uuid4().hex}"
    with little.local_world(tmp_path / "world") as world:
        with pytest.raises(Crash):
            asyncio.run(execute(world, run_id, wf, "2 + 3?"))
        # the model was told the server's tools under names every provider accepts
        assert model.tools_sent(0) == ["mcp__notes__add", "mcp__notes__shout"]
        sent = model.recorded.body(0)
        schema = (
            sent["tools"][0]["function"]["parameters"]
            if provider == "openai"
            else sent["tools"][0]["input_schema"]
        )
        assert schema["required"] == ["a", "b"]
        assert tool_events(world, run_id) == [
            ("started", "mcp:notes/tools/list", "0:tools/list"),
            ("succeeded", "mcp:notes/tools/list", tool_events(world, run_id)[1][2]),
            ("started", "mcp:notes/add", "1:call_1" if provider == "openai" else "1:toolu_1"),
            ("succeeded", "mcp:notes/add", '"5"'),
        ]
        assert [(e["kind"], e.get("tool")) for e in served(log)] == [
            ("list", None),
            ("call", "add"),
        ]
        assert model.recorded.calls == 2

        # the resume reads the listing and the call from the log: the server is not asked (it
        # lists another tool now, and could be gone), and the model is not asked again
        servers[:] = [mcp(stdio(log, MCP_NOTES_EXTRA="1"), name="notes")]
        result = asyncio.run(resume(world, run_id, wf))
        assert (result.status, result.output) == ("completed", 'told: "5"')
        assert len(served(log)) == 2
        assert model.recorded.calls == 2


def test_a_resume_needs_no_server_at_all(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    model = Provider("openai", "mcp__notes__add", {"a": 1, "b": 1})
    servers: list[McpServer] = [mcp(stdio(log), name="notes")]
    wf = mcp_workflow(model, servers, crash_once=True)
    run_id = f"run_{uuid.uuid4().hex}"
    with little.local_world(tmp_path / "world") as world:
        with pytest.raises(Crash):
            asyncio.run(execute(world, run_id, wf, "1 + 1?"))
        missing = StdioServerParameters(command=str(tmp_path / "no-such-server"))
        servers[:] = [mcp(missing, name="notes")]
        result = asyncio.run(resume(world, run_id, wf))
        assert (result.status, result.output) == ("completed", 'told: "2"')


def test_a_server_is_side_effecting_unless_declared_otherwise(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    for declared, expected in ((None, True), (False, False)):
        model = Provider("openai", "mcp__notes__add", {"a": 1, "b": 2})
        server = (
            mcp(stdio(log), name="notes")
            if declared is None
            else mcp(stdio(log), name="notes", side_effecting=declared)
        )
        wf = mcp_workflow(model, [server])
        with little.local_world(tmp_path / f"world-{declared}") as world:
            result = asyncio.run(run(world, wf, "1 + 2?"))
            assert result.status == "completed"
            admitted = [
                x.event
                for x in world.read_run(result.run_id)
                if isinstance(x.event, AgentCallAdmitted)
            ]
            assert [a.side_effecting for a in admitted] == [expected]


def test_a_tool_error_from_the_server_is_the_tools_recorded_failure_told_to_the_model(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.jsonl"
    model = Provider("anthropic", "mcp__notes__shout", {"text": ""})
    wf = mcp_workflow(model, [mcp(stdio(log), name="notes")])
    with little.local_world(tmp_path / "world") as world:
        result = asyncio.run(run(world, wf, "shout nothing"))
        assert result.status == "completed"
        events = tool_events(world, result.run_id)
        assert events[2][:2] == ("started", "mcp:notes/shout")
        assert events[3][:2] == ("failed", "mcp:notes/shout")
        assert "ToolError" in str(result.output)


def test_a_server_that_cannot_be_listed_fails_the_session_naming_it(tmp_path: Path) -> None:
    model = Provider("openai", "mcp__notes__add", {"a": 1, "b": 2})
    missing = StdioServerParameters(command=str(tmp_path / "no-such-server"))
    wf = mcp_workflow(model, [mcp(missing, name="gone")])
    with little.local_world(tmp_path / "world") as world:
        result = asyncio.run(run(world, wf, "1 + 2?"))
        assert result.status == "failed"
        assert "McpError" in str(result.error)
        assert "'gone' could not be listed" in str(result.error)
        assert [e[:2] for e in tool_events(world, result.run_id)] == [
            ("started", "mcp:gone/tools/list"),
            ("failed", "mcp:gone/tools/list"),
        ]
        assert model.recorded.calls == 0


def test_server_names_and_the_names_the_model_is_told() -> None:
    assert mcp(StdioServerParameters(command="python", args=["-u", "srv/notes.py"])).name == "notes"
    assert mcp("http://tools.example:8000/mcp").name == "tools.example"
    with pytest.raises(little.errors.ConfigurationError, match="no '/' or ':'"):
        mcp("http://x/mcp", name="a/b")
    long = mcp("http://x/mcp", name="s" * 40)._tool({"name": "t" * 40})
    assert len(long.name) == 64
    assert long.name.startswith("mcp__ssss")
    assert long.recorded_as == f"mcp:{'s' * 40}/{'t' * 40}"
    assert McpError.retryable


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The notes server over streamable HTTP, a child process of its own; its URL and log."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "http-server.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env={**os.environ, "MCP_NOTES_LOG": str(log)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # until it accepts connections (it imports, then binds)
            assert proc.poll() is None, "the MCP server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server did not listen in 60 s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_server_over_streamable_http(tmp_path: Path, http_server: tuple[str, Path]) -> None:
    url, log = http_server
    model = Provider("openai", "mcp__notes__add", {"a": 20, "b": 22})
    wf = mcp_workflow(model, [mcp(url, name="notes")])
    with little.local_world(tmp_path / "world") as world:
        result = asyncio.run(run(world, wf, "20 + 22?"))
        assert (result.status, result.output) == ("completed", 'told: "42"')
        assert [e[:2] for e in tool_events(world, result.run_id)] == [
            ("started", "mcp:notes/tools/list"),
            ("succeeded", "mcp:notes/tools/list"),
            ("started", "mcp:notes/add"),
            ("succeeded", "mcp:notes/add"),
        ]
        assert [(e["kind"], e.get("tool")) for e in served(log)] == [
            ("list", None),
            ("call", "add"),
        ]


def test_a_replay_lists_the_server_again_and_is_served_only_if_it_lists_the_same_tools(
    tmp_path: Path,
) -> None:
    """A recorded-call replay (``replay_from``) of a session holding a server declared not
    side-effecting: the listed schemas are the session's configuration, so the same listing
    lets the agent call be served (the tool is not called), another one misses it."""
    log = tmp_path / "server.jsonl"
    servers: list[McpServer] = [mcp(stdio(log), name="notes", side_effecting=False)]
    model = Provider("openai", "mcp__notes__add", {"a": 3, "b": 4})
    wf = mcp_workflow(model, servers)

    def settled(world: little.World, run_id: str) -> list[tuple[bool, str | None]]:
        return [
            (x.event.replayed, x.event.miss_reason)
            for x in world.read_run(run_id)
            if isinstance(x.event, AgentCallSettled)
        ]

    with little.local_world(tmp_path / "world") as world:
        first = asyncio.run(run(world, wf, "3 + 4?"))
        assert first.output == 'told: "7"'
        same = asyncio.run(run(world, wf, "3 + 4?", replay_from=first.run_id))
        assert same.output == 'told: "7"'
        assert settled(world, same.run_id) == [(True, None)]
        assert [e["kind"] for e in served(log)] == ["list", "call", "list"]
        assert model.recorded.calls == 2

        servers[:] = [mcp(stdio(log, MCP_NOTES_EXTRA="1"), name="notes", side_effecting=False)]
        changed = asyncio.run(run(world, wf, "3 + 4?", replay_from=first.run_id))
        assert changed.output == 'told: "7"'
        assert settled(world, changed.run_id) == [(False, "configuration-changed")]
        assert [e["kind"] for e in served(log)] == ["list", "call", "list", "list", "call"]

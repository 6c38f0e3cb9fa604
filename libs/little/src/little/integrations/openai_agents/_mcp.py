"""An Agents SDK agent's MCP servers under little: each server's ``list_tools`` is recorded as
a tool call of the runner call's session (``mcp:<server>/tools/list``, once per call, before the
first request that needs it), its tools are built from that listing (the SDK's own
``MCPUtil.to_function_tool``), and each call of one is a recorded tool call named
``mcp:<server>/<tool>``. A server's state is not in the log, so its calls are side-effecting
(never answered from a recorded run; a resume still serves each finished call from this run's
own log, and asks the server only for the call in flight), and so is an agent holding one."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from agents import Agent
from agents.mcp import MCPServer
from agents.mcp.util import MCPUtil
from agents.run_context import RunContextWrapper
from agents.tool import Tool, default_tool_error_function
from mcp.types import Tool as MCPTool

from little.errors import ConfigurationError, UnsupportedFeatureError
from little.harness import Tool as LittleTool
from little.harness import ToolCallRequest
from little.integrations.openai_agents._model import Exchange
from little.integrations.openai_agents._tools import little_tool, recorded_tool

__all__ = ["check_servers", "recorded_mcp_tools"]


def check_servers(agent: Agent[Any], where: str) -> list[str]:
    """The names of ``agent``'s MCP servers, refusing what cannot be recorded."""
    names = [str(server.name) for server in agent.mcp_servers]
    if len(set(names)) != len(names):
        raise UnsupportedFeatureError(
            f"{where}: agent {agent.name!r} has two MCP servers of one name; their tool calls "
            "are recorded as mcp:<server>/<tool>: name them apart"
        )
    if agent.mcp_config.get("include_server_in_tool_names"):
        raise UnsupportedFeatureError(
            f"{where}: agent {agent.name!r}: mcp_config include_server_in_tool_names is not "
            "supported under little (its calls are recorded as mcp:<server>/<tool> anyway)"
        )
    return names


async def _listing(
    x: Exchange, server: MCPServer, run_context: RunContextWrapper[Any], agent: Agent[Any]
) -> list[dict[str, Any]]:
    found = x.mcp_listings.get(server.name)
    if found is not None:
        return found
    name = f"mcp:{server.name}/tools/list"

    async def list_tools(_arguments: dict[str, Any], _ctx: Any) -> Any:
        tools = await server.list_tools(run_context, agent)
        return [t.model_dump(mode="json", exclude_none=True) for t in tools]

    text = await x.recorder.tool_call(
        x.chain.turns, ToolCallRequest(name, name, {}), LittleTool(name, list_tools)
    )
    value = json.loads(text or "null")
    if not isinstance(value, list):
        error = value.get("error") if isinstance(value, dict) else value
        raise ConfigurationError(f"MCP server {server.name!r}: list_tools failed: {error}")
    x.mcp_listings[server.name] = value
    return value


def recorded_mcp_tools(
    agent: Agent[Any], x: Exchange, where: str
) -> Callable[[RunContextWrapper[Any]], Coroutine[Any, Any, list[Tool]]]:
    """``agent.get_mcp_tools`` for the run's clone of ``agent``: its servers' tools, listed
    through the log, each call recorded."""
    servers = list(agent.mcp_servers)
    strict = bool(agent.mcp_config.get("convert_schemas_to_strict", False))
    on_error = agent.mcp_config.get("failure_error_function", default_tool_error_function)

    async def get_mcp_tools(run_context: RunContextWrapper[Any]) -> list[Tool]:
        tools: list[Tool] = []
        for server in servers:
            for entry in await _listing(x, server, run_context, agent):
                tool = MCPUtil.to_function_tool(
                    MCPTool.model_validate(entry),
                    server,
                    strict,
                    agent,
                    failure_error_function=on_error,
                )
                recorded = recorded_tool(
                    little_tool(tool, side_effecting=True),
                    x,
                    agent.name,
                    where,
                    recorded_name=f"mcp:{server.name}/{entry['name']}",
                )
                tools.append(recorded)
        return tools

    return get_mcp_tools

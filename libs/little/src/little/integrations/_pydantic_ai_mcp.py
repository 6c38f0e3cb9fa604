"""Pydantic AI's ``MCPToolset`` under ``durable`` (``little.integrations.pydantic_ai``): each
server of a run is wrapped (``swap_servers``) so that its tools come from its listing, recorded
once per agent call as the tool call ``mcp:<id>/tools/list`` (``record_listing``) and read back
from the log on a resume; each tool is marked (``MCP_TOOL``) to be recorded as
``mcp:<id>/<tool>``, side-effecting. What cannot be recorded is refused (``mcp_servers``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from pydantic import TypeAdapter
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset

from little.errors import ConfigurationError
from little.harness import Tool, ToolCallRequest, ToolContext
from little.integrations._common import refuse
from little.runtime import Recorder

__all__ = [
    "MCP_TOOL",
    "SIDE_EFFECTING",
    "RecordedMCP",
    "is_mcp",
    "mcp_leaves",
    "mcp_servers",
    "record_listing",
    "swap_servers",
]

SIDE_EFFECTING = "side_effecting"
"""The tool metadata key (``@agent.tool(metadata={"side_effecting": True})``) marking a tool
whose calls change the world: a call of an agent holding one is never served from a recorded
run (replay reuses answers, not effects)."""

MCP_TOOL = "little_mcp"
"""The tool metadata key little sets on an MCP server's tool: the name its calls are recorded
under (``mcp:<id>/<tool>``)."""

TOOL_DEFS: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])

Listing = Callable[[str, AbstractToolset[Any], RunContext[Any]], Awaitable[list[ToolDefinition]]]
"""A server's tool definitions for the run: ``(server id, the MCPToolset, context)``."""


def _refuse(feature: str, why: str) -> NoReturn:
    raise refuse("pydantic_ai", feature, why)


def is_mcp(toolset: AbstractToolset[Any]) -> bool:
    """An ``MCPToolset`` (none can exist before ``pydantic_ai.mcp`` was imported: checked
    without importing it, which would import the MCP client)."""
    mcp = sys.modules.get("pydantic_ai.mcp")
    return mcp is not None and isinstance(toolset, mcp.MCPToolset)


def mcp_leaves(toolset: AbstractToolset[Any]) -> list[Any]:
    """The ``MCPToolset``s in ``toolset`` (itself, or wrapped)."""
    found: list[Any] = []
    toolset.apply(lambda leaf: found.append(leaf) if is_mcp(leaf) else None)
    return found


def mcp_servers(toolsets: Sequence[AbstractToolset[Any]], where: str) -> list[str]:
    """The ids of the MCP servers among ``toolsets`` (wrapped ones too), refusing what cannot be
    recorded: a server without an explicit ``id=`` (its calls are recorded as
    ``mcp:<id>/<tool>``), two of one id, and server instructions (``include_instructions``)."""
    ids: list[str] = []
    for toolset in toolsets:
        for leaf in mcp_leaves(toolset):
            server = leaf._explicit_id  # the id it was given, not one derived from a URL
            if not server:
                _refuse(
                    f"{where}: an MCPToolset without id=",
                    "its calls are recorded as mcp:<id>/<tool>; give it id=",
                )
            if server in ids:
                _refuse(
                    f"{where}: two MCPToolsets of id {server!r}",
                    "their calls are recorded as mcp:<id>/<tool>; give them ids apart",
                )
            if leaf.include_instructions:
                _refuse(
                    f"{where}: MCPToolset {server!r} include_instructions=True",
                    "a server's instructions reach the model unrecorded",
                )
            ids.append(server)
    return ids


@dataclass
class RecordedMCP(WrapperToolset[Any]):
    """An ``MCPToolset`` of one recorded run: its tools built from ``listing``, each marked to
    be recorded as ``mcp:<id>/<tool>`` and side-effecting. One of a call served whole
    (``served``) never connects."""

    listing: Listing | None = None
    server: str = ""
    served: bool = False

    async def __aenter__(self) -> Any:
        if not self.served:
            await self.wrapped.__aenter__()
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        return None if self.served else await self.wrapped.__aexit__(*args)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        assert self.listing is not None
        mcp: Any = self.wrapped
        tools: dict[str, ToolsetTool[Any]] = {}
        for tool_def in await self.listing(self.server, self.wrapped, ctx):
            metadata = {
                **(tool_def.metadata or {}),
                MCP_TOOL: f"mcp:{self.server}/{tool_def.name}",
                SIDE_EFFECTING: True,
            }
            tools[tool_def.name] = mcp.tool_for_tool_def(
                replace(tool_def, metadata=metadata), ctx=ctx
            )
        return tools


def swap_servers(
    toolset: AbstractToolset[Any], known: set[str], where: str, listing: Listing, served: bool
) -> AbstractToolset[Any] | None:
    """``toolset`` with each MCP server a ``RecordedMCP`` (None: it holds none the manifest
    names); one the manifest does not name (given per run, or by a capability) is refused."""

    def swap(leaf: AbstractToolset[Any]) -> AbstractToolset[Any]:
        if not is_mcp(leaf):
            return leaf
        (server,) = mcp_servers([leaf], where)
        if server not in known:
            _refuse(
                f"MCPToolset {server!r} not among the agent's toolsets",
                "an MCP server given per run or by a capability is not in the session's "
                "manifest; give it to the Agent",
            )
        return RecordedMCP(leaf, listing=listing, server=server, served=served)

    return toolset.visit_and_replace(swap) if known else None


async def record_listing(
    recorder: Recorder, turn: int, server: str, toolset: AbstractToolset[Any], ctx: RunContext[Any]
) -> Any:
    """``server``'s tool definitions (JSON), listed through the log: the tool call
    ``mcp:<server>/tools/list`` of ``turn``, answered from the log on a resume. A failure
    raises the server's exception when it was just made, else the recorded one's text."""
    name = f"mcp:{server}/tools/list"
    failed: list[Exception] = []

    async def list_tools(_arguments: dict[str, Any], _ctx: ToolContext) -> Any:
        try:
            tools = await toolset.get_tools(ctx)
        except Exception as exc:
            failed.append(exc)
            raise
        return TOOL_DEFS.dump_python([t.tool_def for t in tools.values()], mode="json")

    outcome = await recorder.tool_call_outcome(
        turn, ToolCallRequest(name, name, {}), Tool(name, list_tools)
    )
    if failed:
        raise failed[0]
    if outcome.error is not None:
        raise ConfigurationError(
            f"MCP server {server!r}: listing its tools failed: {outcome.error}"
        )
    return json.loads(outcome.content or "[]")

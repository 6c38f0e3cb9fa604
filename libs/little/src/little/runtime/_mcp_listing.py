"""An MCP server's listing, recorded: what tools an agent session holding ``mcp(server)`` has.

The listing is a recorded tool call (``mcp:<server>/tools/list``, call id ``0:tools/list``) of a
session of its own, ``<session>~mcp:<server>`` (as a compaction's summary is an agent call of
``<session>~compact<n>``), made when the session opens and before its manifest is built: the
listed tools' schemas are part of the manifest, so a server that lists other tools in a
replay is a changed configuration, while a resume reads the listing from the log and builds
the very same tools without asking the server.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from little.errors import ConfigurationError
from little.harness import McpError, McpServer, Tool, ToolCallRequest, ToolContext
from little.runtime._recording import Recorder

if TYPE_CHECKING:
    from little.runtime._execution import Execution
    from little.runtime._model_turns import SessionStep

__all__ = ["list_mcp_server"]


async def list_mcp_server(
    execution: Execution, step: SessionStep, of_session: str, of_name: str, server: McpServer
) -> list[Tool]:
    """The tools ``server`` gives the session ``of_session`` (named ``of_name``): its recorded
    listing, or one made now and recorded. A listing that failed raises ``McpError`` (the
    failure is recorded; a new visit of the step lists again)."""
    name = f"{of_name}~mcp:{server.name}"
    session_id = f"{of_session}~mcp:{server.name}"
    if session_id in step._sessions:
        raise ConfigurationError(
            f"run {execution.run_id}: step {step.step_path} session {of_name!r} holds two "
            f"MCP servers named {server.name!r}; name them apart (mcp(..., name=...))"
        )
    step._sessions.add(session_id)
    manifest = {"mcp_server": server.name}
    recorder = Recorder(execution, step, session_id, "mcp", server.name, manifest, False)
    await recorder.start(name, None)

    async def listing(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return await server.list_tools()

    lister = Tool(server.list_name, listing, recorded_name=server.list_name)
    try:
        content = await recorder.tool_call(
            0, ToolCallRequest(server.list_call_id, server.list_name, {}), lister
        )
    except BaseException as exc:
        await recorder.finish(0, None, exc)
        raise
    found = json.loads(content or "null")
    if not isinstance(found, list):
        error = found.get("error") if isinstance(found, dict) else found
        refused = McpError(
            f"run {execution.run_id}: session {of_session}: tools of MCP server "
            f"{server.name!r}: {error}"
        )
        await recorder.finish(0, None, refused)
        raise refused
    await recorder.finish(0, {"tools": [t.get("name") for t in found]}, None)
    return server.tools_from(found)

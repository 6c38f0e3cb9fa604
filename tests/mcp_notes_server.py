"""A real MCP server for the tests (the ``mcp`` package's ``MCPServer``, FastMCP in mcp 1.x):
``python tests/mcp_notes_server.py`` serves it over stdio, ``... http PORT`` over streamable
HTTP. Every request it serves is appended to ``$MCP_NOTES_LOG`` (JSON lines), so a test in
another process counts listings and calls; ``$MCP_NOTES_EXTRA=1`` lists one tool more (the
server changed since a run listed it)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")


def _log(kind: str, **fields: Any) -> None:
    path = os.environ.get("MCP_NOTES_LOG")
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "kind": kind, **fields}) + "\n")
            f.flush()
            os.fsync(f.fileno())


_list_tools = server.list_tools


async def list_tools() -> Any:
    _log("list")
    return await _list_tools()


server.list_tools = list_tools  # type: ignore[method-assign]


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _log("call", tool="add", a=a, b=b)
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text; refuses an empty one."""
    _log("call", tool="shout", text=text)
    if not text:
        raise ValueError("nothing to shout")
    return text.upper()


if os.environ.get("MCP_NOTES_EXTRA") == "1":

    @server.tool()
    def whisper(text: str) -> str:
        """Lower-case a text."""
        return text.lower()


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")

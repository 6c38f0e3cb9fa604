"""MCP servers as an agent session's tools: ``tools=[little.harness.mcp(server)]``.

A server (``StdioServerParameters``: a command started as a child process and spoken to over
its stdin/stdout; a URL: streamable HTTP; or anything the ``mcp`` package's ``Client`` takes)
is listed once per session and each of its tools becomes a ``Tool``: told to the model under a
name every provider accepts (``mcp__<server>__<tool>``) and recorded as ``mcp:<server>/<tool>``.
The session records the listing as a call of its own (``mcp:<server>/tools/list``), so a
resume builds the same tools from the log whatever the server says today, and connects to
the server only when a call has to be made. Every tool of a server is side-effecting unless
the server is declared otherwise (``mcp(server, side_effecting=False)``): little cannot know
what a server's tools do, and replay reuses answers, not effects.

The ``mcp`` package is imported when a connection is made, never when ``little`` is.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

from little.errors import ConfigurationError, LittleError
from little.harness._tools import Tool, ToolContext, ToolError

__all__ = ["LIST_CALL_ID", "McpError", "McpServer", "mcp"]

LIST_CALL_ID = "tools/list"
"""The call id of a session's recorded listing of a server (turn 0 of its listing session)."""
_SAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # OpenAI's limit for a function name (Anthropic's is 128)


class McpError(LittleError):
    """An MCP server could not be listed (it did not start, or refused): the session cannot
    be opened. Retryable: the same server, later, may answer."""

    retryable = True


def _safe(text: str) -> str:
    return _SAFE.sub("_", text) or "_"


def _model_name(server: str, tool: str) -> str:
    """The name the model is told: ``mcp__<server>__<tool>``, in the characters providers
    accept, cut with a hash suffix when over 64 characters (so two long names stay apart)."""
    name = f"mcp__{_safe(server)}__{_safe(tool)}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9]}_{digest}"


def _default_name(server: Any) -> str | None:
    if isinstance(server, str):
        return urlparse(server).hostname
    args = getattr(server, "args", None)
    command = getattr(server, "command", None)
    if isinstance(command, str):
        scripts = [a for a in args or () if isinstance(a, str) and not a.startswith("-")]
        return Path(scripts[-1] if scripts else command).stem
    name = getattr(server, "name", None)
    return name if isinstance(name, str) else None


class McpServer:
    """One MCP server an agent session holds as tools (made by ``mcp(...)``).

    The connection is opened on first use by a task of its own (the ``mcp`` client's task
    group lives and ends there, whichever task asks) and closed by ``aclose()``, which the
    session calls when it ends; a later use connects again."""

    list_call_id: ClassVar[str] = LIST_CALL_ID
    """The call id of the recorded listing of a server's tools."""

    def __init__(self, server: Any, *, name: str, side_effecting: bool = True) -> None:
        self.server = server
        self.name = name
        self.side_effecting = side_effecting
        self._client: Any = None
        self._holder: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._listed: dict[str, dict[str, Any]] = {}
        """The listing the session's tools were built from (recorded, or made now)."""

    def __repr__(self) -> str:
        return f"mcp({self.name!r}, side_effecting={self.side_effecting})"

    @property
    def list_name(self) -> str:
        """The recorded name of the listing call."""
        return f"mcp:{self.name}/tools/list"

    # -- the connection --------------------------------------------------------------------

    async def _connected(self) -> Any:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                self._closing = asyncio.Event()
                self._holder = asyncio.create_task(self._hold(ready, self._closing))
                try:
                    self._client = await ready
                except BaseException:
                    await self.aclose()
                    raise
            return self._client

    async def _hold(self, ready: asyncio.Future[Any], closing: asyncio.Event) -> None:
        try:
            from mcp import Client
        except ImportError as exc:
            ready.set_exception(
                ConfigurationError(
                    f"{self!r} needs the mcp package: pip install 'little-workflow[mcp]' ({exc})"
                )
            )
            return
        try:
            async with Client(self.server) as client:
                self._seed(client)
                ready.set_result(client)
                await closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)

    def _seed(self, client: Any) -> None:
        """Tell the ``mcp`` client the output schemas of the listing the session holds (it
        validates a tool's structured result against them), so a resume that serves the
        listing from the log does not have the client list the server again for them. The
        client keeps them in a private cache: without it (another ``mcp`` version) the client
        lists again, which changes nothing recorded."""
        schemas = getattr(getattr(client, "session", None), "_tool_output_schemas", None)
        if isinstance(schemas, dict):
            for tool, entry in self._listed.items():
                schemas.setdefault(tool, entry.get("outputSchema"))

    async def aclose(self) -> None:
        """Close the connection, if one is open (the server's child process ends with it)."""
        holder, closing = self._holder, self._closing
        self._client = self._holder = self._closing = None
        if closing is not None:
            closing.set()
        if holder is not None:
            await holder

    # -- what the session records ------------------------------------------------------------

    async def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools now (every page), as JSON: ``name``, ``description``,
        ``inputSchema``. Recorded by the session; a resume reads the record instead."""
        try:
            client = await self._connected()
            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(
                    t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools
                )
                cursor = page.next_cursor
                if not cursor:
                    return tools
        except (ConfigurationError, McpError):
            raise
        except Exception as exc:
            raise McpError(
                f"MCP server {self.name!r} could not be listed: {type(exc).__name__}: {exc}"
            ) from exc

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Call ``tool``: its text (the text blocks joined), else its structured content,
        else its content blocks as JSON; a result the server marks as an error raises
        ``ToolError`` with its text (the model is told it as the tool's error)."""
        client = await self._connected()
        result = await client.call_tool(tool, arguments)
        blocks = [
            b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content
        ]
        texts = [b["text"] for b in blocks if b.get("type") == "text"]
        if result.is_error:
            raise ToolError("\n".join(texts) or f"MCP tool {tool!r} of {self.name!r} failed")
        if texts and len(texts) == len(blocks):
            return "\n".join(texts)
        if result.structured_content is not None:
            return result.structured_content
        return blocks

    def tools_from(self, listing: Sequence[dict[str, Any]]) -> list[Tool]:
        """The session's tools for a listing (recorded or fresh): each calls the server."""
        self._listed = {str(entry["name"]): entry for entry in listing}
        return [self._tool(entry) for entry in listing]

    def _tool(self, entry: dict[str, Any]) -> Tool:
        tool = str(entry["name"])

        async def call(arguments: dict[str, Any], ctx: ToolContext) -> Any:
            return await self.call(tool, arguments)

        return Tool(
            _model_name(self.name, tool),
            call,
            str(entry.get("description") or ""),
            dict(entry.get("inputSchema") or {"type": "object"}),
            side_effecting=self.side_effecting,
            recorded_name=f"mcp:{self.name}/{tool}",
        )


def mcp(server: Any, *, name: str | None = None, side_effecting: bool = True) -> McpServer:
    """An MCP server as tools of an agent session: ``tools=[mcp(server)]``.

    ``server``: ``mcp.StdioServerParameters(command=..., args=[...])`` (a child process over
    stdio), a URL (``http://host:port/mcp``, streamable HTTP), or anything else the ``mcp``
    package's ``Client`` takes. ``name`` (default: the script's or command's stem, the URL's
    host) names it in the recorded calls, ``mcp:<name>/<tool>``. ``side_effecting``: whether its
    tools change the world (default True: a session holding it is never answered from a
    recorded run)."""
    chosen = name if name is not None else _default_name(server)
    if not chosen:
        raise ConfigurationError(f"mcp({server!r}): give the server a name=")
    if "/" in chosen or ":" in chosen:
        raise ConfigurationError(f"mcp server name {chosen!r}: no '/' or ':' (it names calls)")
    return McpServer(server, name=chosen, side_effecting=side_effecting)

"""Agent sessions with recorded model and tool calls, models and tools."""

from little.harness._model import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCallRequest,
    ToolSpec,
    count_invocations,
)
from little.harness._session import AgentSession, ToolError, workflow_tool
from little.harness._tools import Tool, ToolContext, tool

__all__ = [
    "AgentSession",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ScriptedModel",
    "Tool",
    "ToolCallRequest",
    "ToolContext",
    "ToolError",
    "ToolSpec",
    "count_invocations",
    "tool",
    "workflow_tool",
]

"""What an agent session is made of: models (scripted, OpenAI, Anthropic), tools, and the parts
of a message's content (text, images, documents).

Pure of the runtime: the recorded session that drives them (``AgentSession``, opened with
``step.session(...)``) lives in ``little.runtime``, which imports this package, never the
reverse.
"""

from little.harness._mcp import McpError, McpServer, mcp
from little.harness._model import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelStreamItem,
    OutputSchema,
    ScriptedModel,
    StreamingModel,
    ToolCallRequest,
    ToolSpec,
    count_invocations,
)
from little.harness._providers import model_from_spec
from little.harness._retry import ProviderFailure, RetryPolicy
from little.harness._tools import Tool, ToolContext, ToolError, tool
from little.harness.content import (
    Content,
    Document,
    DocumentUrl,
    Image,
    ImageUrl,
    Part,
    Text,
)

__all__ = [
    "Content",
    "Document",
    "DocumentUrl",
    "Image",
    "ImageUrl",
    "McpError",
    "McpServer",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamItem",
    "OutputSchema",
    "Part",
    "ProviderFailure",
    "RetryPolicy",
    "ScriptedModel",
    "StreamingModel",
    "Text",
    "Tool",
    "ToolCallRequest",
    "ToolContext",
    "ToolError",
    "ToolSpec",
    "count_invocations",
    "mcp",
    "model_from_spec",
    "tool",
]

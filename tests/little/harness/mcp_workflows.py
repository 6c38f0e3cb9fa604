"""The MCP tests' workflow and provider, in a module of their own with few imports: a
recorded-call replay reuses a run only when the replay-safety scan can follow every module
the workflow's code imports (the test modules import the fork server, which it cannot).

``Provider`` is the real ``openai`` or ``anthropic`` client over an ``httpx2``
``MockTransport``: turn 1 asks for one tool call, turn 2 answers with the tool's result as it
was given (so the answer shows what the model was told)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import anthropic
import httpx2
import openai

import little
from little.harness import McpServer
from little.harness.adapters import AnthropicModel, OpenAIModel
from little.runtime import StepContext, WorkflowContext, workflow

_NAMES = itertools.count()  # each workflow a name of its own (no uuid: the scan refuses it)


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing records it."""


def chat_completion(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-mcp",
        "object": "chat.completion",
        "created": 1747900000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, **message},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


def anthropic_message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": "msg_mcp",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 5},
    }


class Recorded:
    """The requests a provider was sent."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    @property
    def calls(self) -> int:
        return len(self.requests)

    def body(self, i: int) -> Any:
        return json.loads(self.requests[i].content)


class Provider:
    """A provider over a mock transport: turn 1 asks for one tool call, turn 2 answers with the
    tool's result as it was given (so the answer shows what the model was told)."""

    def __init__(self, provider: str, tool: str, arguments: dict[str, Any]) -> None:
        self.provider = provider
        self.tool = tool
        self.arguments = arguments
        self.recorded = Recorded()

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.recorded.requests.append(request)
        body = json.loads(request.content)
        last = body["messages"][-1]
        if self.provider == "openai":
            if last["role"] == "tool":
                reply = chat_completion({"content": f"told: {last['content']}"}, "stop")
            else:
                call = {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": self.tool, "arguments": json.dumps(self.arguments)},
                }
                reply = chat_completion({"content": None, "tool_calls": [call]}, "tool_calls")
        else:
            blocks = last["content"] if isinstance(last["content"], list) else []
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if results:
                reply = anthropic_message(
                    [{"type": "text", "text": f"told: {results[0]['content']}"}], "end_turn"
                )
            else:
                use = {"type": "tool_use", "id": "toolu_1", "name": self.tool}
                reply = anthropic_message([{**use, "input": self.arguments}], "tool_use")
        return httpx2.Response(200, json=reply, headers={"request-id": "req_test"})

    def model(self) -> Any:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))
        if self.provider == "openai":
            client = openai.AsyncOpenAI(api_key="sk-test", http_client=http)
            return OpenAIModel("gpt-4o-mini", client=client)
        made = anthropic.AsyncAnthropic(api_key="sk-ant-test", http_client=http)
        return AnthropicModel("claude-haiku-4-5", client=made)

    def tools_sent(self, i: int) -> list[str]:
        body = self.recorded.body(i)
        if self.provider == "openai":
            return [t["function"]["name"] for t in body.get("tools", [])]
        return [t["name"] for t in body.get("tools", [])]


def mcp_workflow(
    provider: Provider, servers: list[McpServer], *, crash_once: bool = False
) -> little.runtime.Workflow:
    """``servers`` is read at each execution: a test may put another server there for the
    resume (the same name, a changed or missing server)."""
    crashed: list[bool] = []

    async def ask(step: StepContext, prompt: str) -> str | None:
        async with step.session("agent", model=provider.model(), tools=list(servers)) as agent:
            answer = await agent.run(prompt)
        if crash_once and not crashed:
            crashed.append(True)
            raise Crash
        return answer

    async def flow(ctx: WorkflowContext, prompt: str) -> Any:
        return await ctx.step("ask", ask, prompt)

    return workflow(f"mcp-{next(_NAMES)}", version="1")(flow)

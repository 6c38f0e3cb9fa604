"""The Agents SDK driving a fake OpenAI: the real ``openai`` client over an
``httpx2.MockTransport`` answering Chat Completions JSON (and SSE when asked to stream) with
usage blocks. No network. Every model request and tool invocation that really happens is
appended to a file in ``$OA_TEST_CALLS_DIR``, so counts survive a SIGKILL.

The fake model is a function of the request: a user message last -> one ``lookup_order`` tool
call (or ``refund`` when the message says so); a tool result last -> a text answer naming the
tool's output and the first user message. Deterministic, so a resumed process gets the same
answers; registered workflows: ``oa.triage`` (two runner calls in one step, the second
continuing the first's history) and ``oa.refund`` (a side-effecting tool gated by a person).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx2
import openai
from agents import (
    Agent,
    Model,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    function_tool,
    set_tracing_disabled,
)
from pydantic import BaseModel

from little.integrations.openai_agents import LittleRunner, little_tool
from little.runtime import BudgetExceededError, StepContext, WorkflowContext, workflow

set_tracing_disabled(True)

CALLS_ENV = "OA_TEST_CALLS_DIR"


def log_call(kind: str, **fields: Any) -> None:
    directory = os.environ.get(CALLS_ENV)
    if not directory:
        return
    with open(Path(directory) / f"{kind}.jsonl", "a") as f:
        f.write(json.dumps(fields) + "\n")
        f.flush()
        os.fsync(f.fileno())


def calls(directory: Path, kind: str) -> list[dict[str, Any]]:
    path = directory / f"{kind}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _usage(messages: list[Any]) -> dict[str, Any]:
    prompt = 10 * len(messages)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": 5,
        "total_tokens": prompt + 5,
        "prompt_tokens_details": {"cached_tokens": 2, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 1, "audio_tokens": 0},
    }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [])


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message for a Chat Completions request body."""
    messages = body["messages"]
    last = messages[-1]
    tools = [t["function"]["name"] for t in body.get("tools") or []]
    invoice = last["role"] == "user" and "invoice" in _text(last["content"])
    if invoice and "transfer_to_billing" in tools:  # a handoff, then billing answers
        return {
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{len(messages)}",
                    "type": "function",
                    "function": {"name": "transfer_to_billing", "arguments": "{}"},
                }
            ],
        }
    if last["role"] == "user":
        said = _text(last["content"])
        tool = "refund" if "refund" in said else "lookup_order"
        # two calls at once (the SDK runs them in parallel) when the ticket names two orders
        orders = ["A1", "B2"] if "B2" in said else ["A1"]
        return {
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{len(messages)}" + ("" if i == 0 else f"_{i}"),
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"order": order})},
                }
                for i, order in enumerate(orders)
            ],
        }
    first = next(_text(m["content"]) for m in messages if m["role"] == "user")
    results = []
    for m in reversed(messages):
        if m["role"] != "tool":
            break
        results.insert(0, _text(m["content"]))
    return {"content": f"{'; '.join(results)} (re: {first})"}


def _responses(body: dict[str, Any]) -> httpx2.Response:
    """The Responses API: input items in, output items out."""
    items = body["input"]
    messages = [
        {"role": "user", "content": i["content"]}
        if i.get("role") == "user"
        else {"role": "tool", "content": i["output"]}
        if i.get("type") == "function_call_output"
        else {"role": "assistant", "content": None}
        for i in items
    ]
    message = answer({"messages": messages})
    log_call(
        "model",
        messages=len(messages),
        stream=bool(body.get("stream")),
        prompt_cache_key=body.get("prompt_cache_key"),
    )
    output: list[dict[str, Any]] = [
        {
            "type": "function_call",
            "id": f"fc_{len(messages)}",
            "call_id": call["id"],
            "name": call["function"]["name"],
            "arguments": call["function"]["arguments"],
            "status": "completed",
        }
        for call in message.get("tool_calls") or []
    ]
    if message.get("content"):
        output.append(
            {
                "type": "message",
                "id": f"msg_{len(messages)}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": message["content"], "annotations": []}],
            }
        )
    u = _usage(messages)
    usage = {
        "input_tokens": u["prompt_tokens"],
        "output_tokens": u["completion_tokens"],
        "total_tokens": u["total_tokens"],
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens_details": {"reasoning_tokens": 1},
    }
    response = {
        "id": f"resp_{len(messages)}",
        "object": "response",
        "created_at": 1747900000,
        "model": "gpt-4o-mini",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "status": "completed",
        "usage": usage,
    }
    if not body.get("stream"):
        return httpx2.Response(200, json=response)
    # the Responses SSE: each item added, a message's text in word deltas, done; completed
    events: list[dict[str, Any]] = []
    for index, item in enumerate(output):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        if item["type"] == "message":
            for word in item["content"][0]["text"].split(" "):
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": word + " ",
                        "logprobs": [],
                    }
                )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    sse = [
        f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': i})}\n\n".encode()
        for i, e in enumerate(events)
    ]
    deltas = [i for i, e in enumerate(events) if e["type"] == "response.output_text.delta"]
    return httpx2.Response(
        200,
        content=_gated(sse, bool(deltas), deltas[0] if deltas else 0),
        headers={"content-type": "text/event-stream"},
    )


def handler(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    if request.url.path.endswith("/responses"):
        return _responses(body)
    message = answer(body)
    log_call("model", messages=len(body["messages"]), stream=bool(body.get("stream")))
    usage = _usage(body["messages"])
    base = {"id": "chatcmpl-1", "created": 1747900000, "model": "gpt-4o-mini-2024-07-18"}
    if not body.get("stream"):
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return httpx2.Response(
            200,
            json={
                **base,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "refusal": None, **message},
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                ],
                "usage": usage,
            },
        )
    chunks: list[dict[str, Any]] = []
    if message.get("content"):
        for word in message["content"].split(" "):
            chunks.append({"role": "assistant", "content": word + " "})
    for i, call in enumerate(message.get("tool_calls") or []):
        chunks.append({"tool_calls": [{"index": i, **call}]})
    lines = [
        {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]}
        for d in chunks
    ]
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    lines.append(
        {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
        }
    )
    lines.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    events = [f"data: {json.dumps(line)}\n\n".encode() for line in lines] + [b"data: [DONE]\n\n"]
    gated = bool(message.get("content"))  # a text answer: its first delta is awaited
    return httpx2.Response(
        200, content=_gated(events, gated), headers={"content-type": "text/event-stream"}
    )


LIVE: dict[str, asyncio.Event] = {}
"""``LIVE["first delta"]``, when set up: the stream holds its rest until the consumer has seen
its first delta (set by the workflow), so a stream that is buffered never ends."""


async def _gated(events: list[bytes], gated: bool, after: int = 0) -> AsyncIterator[bytes]:
    """``events``, held after the one at ``after`` (the first text delta) when ``gated``."""
    gate = LIVE.get("first delta") if gated else None
    for i, event in enumerate(events):
        yield event
        if i == after and gate is not None:
            await asyncio.wait_for(gate.wait(), timeout=30)  # a failure guard, not a pause


def model(api: str = "chat", name: str = "gpt-4o-mini") -> Model:
    """The SDK's own OpenAI model (Chat Completions, or Responses) over the fake."""
    client = openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="https://api.openai.com/v1",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    if api == "responses":
        return OpenAIResponsesModel(name, openai_client=client)
    return OpenAIChatCompletionsModel(name, openai_client=client)


class OrderQuestion(BaseModel):
    order: str


@function_tool
def lookup_order(order: str) -> str:
    """Look up an order's status."""
    log_call("tool", tool="lookup_order", order=order)
    return f"order {order} shipped"


@function_tool
def refund(order: str) -> str:
    """Refund an order."""
    log_call("tool", tool="refund", order=order)
    return f"order {order} refunded"


@function_tool
def lookup_order_over_budget(order: str) -> str:
    """Look up an order's status (a nested agent call inside spends the run's budget)."""
    log_call("tool", tool="lookup_order", order=order)
    raise BudgetExceededError("the nested agent call would exceed max_tokens")


def triage_agent(api: str = "chat") -> Agent[Any]:
    return Agent(
        name="triage",
        instructions="You triage support tickets.",
        model=model(api),
        tools=[lookup_order],
    )


@function_tool(needs_approval=True)
def refund_gated(order: str) -> str:
    """Refund an order."""
    log_call("tool", tool="refund", order=order)
    return f"order {order} refunded"


async def _needs_a_person(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
    return bool(params.get("order") == "A1")


def refund_agent(gate: str) -> Agent[Any]:
    """``gate``: "little" (little_tool's requires_approval), "sdk" (the SDK's own
    needs_approval), "none" (side-effecting, no person asked)."""
    if gate == "sdk":
        tool = little_tool(refund_gated, side_effecting=True)
        tool.name = "refund"
    elif gate == "sdk-callable":  # the SDK's needs_approval as a function of the arguments
        tool = little_tool(refund, side_effecting=True)
        tool.needs_approval = _needs_a_person
    else:
        tool = little_tool(refund, side_effecting=True, requires_approval=gate == "little")
    return Agent(name="refunds", instructions="You refund orders.", model=model(), tools=[tool])


@workflow("oa.triage")
async def triage(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    async def handle(step: StepContext) -> dict[str, Any]:
        agent = triage_agent(input.get("api", "chat"))
        first = await LittleRunner.run(step, agent, input["ticket"], max_turns=4)
        follow = [*first.to_input_list(), {"role": "user", "content": input["followup"]}]
        second = await LittleRunner.run(step, agent, follow, max_turns=4)
        return {"first": first.final_output, "second": second.final_output}

    result: dict[str, Any] = await ctx.step("handle", handle)
    return result


@workflow("oa.refund")
async def refund_flow(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    async def handle(step: StepContext) -> str:
        agent = refund_agent(input["gate"])
        result = await LittleRunner.run(step, agent, input["ticket"], max_turns=4)
        return str(result.final_output)

    out: str = await ctx.step("handle", handle)
    return out


@workflow("oa.triage_over_budget")
async def triage_over_budget(ctx: WorkflowContext, input: dict[str, Any]) -> Any:
    async def handle(step: StepContext) -> Any:
        agent = triage_agent().clone(tools=[lookup_order_over_budget])
        agent.tools[0].name = "lookup_order"
        result = await LittleRunner.run(step, agent, input["ticket"], max_turns=4)
        return result.final_output

    return await ctx.step("handle", handle)


@workflow("oa.stream")
async def stream_flow(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    async def handle(step: StepContext) -> dict[str, Any]:
        agent = triage_agent(input.get("api", "chat"))
        streamed = LittleRunner.run_streamed(step, agent, input["ticket"], max_turns=4)
        deltas: list[str] = []
        async for event in streamed.stream_events():
            if (
                event.type == "raw_response_event"
                and event.data.type == "response.output_text.delta"
            ):
                deltas.append(event.data.delta)
                if "first delta" in LIVE:
                    LIVE["first delta"].set()
        return {"deltas": deltas, "final": streamed.final_output}

    result: dict[str, Any] = await ctx.step("handle", handle)
    return result


def refused_call(step: StepContext, feature: str) -> Any:
    """The runner call that uses ``feature``, which little refuses."""
    agent = triage_agent()
    kwargs: dict[str, Any] = {}
    if feature == "previous_response_id":
        kwargs["previous_response_id"] = "resp_123"
    elif feature == "auto_previous_response_id":
        kwargs["auto_previous_response_id"] = True
    elif feature == "conversation_id":
        kwargs["conversation_id"] = "conv_123"
    elif feature == "session":
        from agents.memory import SQLiteSession

        kwargs["session"] = SQLiteSession("s1")
    elif feature == "local shell":
        from agents import LocalShellTool

        agent = agent.clone(tools=[LocalShellTool(executor=lambda request: "")])
    elif feature == "computer":
        from agents import ComputerTool

        agent = agent.clone(tools=[ComputerTool(computer=object())])  # type: ignore[arg-type]
    elif feature == "realtime":
        from agents.realtime import RealtimeAgent

        agent = RealtimeAgent(name="voice")  # type: ignore[assignment]
    elif feature == "mcp":
        from agents.mcp import MCPServerStdio

        # two servers of one name: their calls (mcp:<server>/<tool>) could not be told apart
        servers = [MCPServerStdio(params={"command": "true"}, name="x") for _ in range(2)]
        agent = agent.clone(mcp_servers=list(servers))
    elif feature == "handoff object":
        from agents import handoff

        agent = agent.clone(handoffs=[handoff(triage_agent())])
    return LittleRunner.run(step, agent, "hi", **kwargs)


@workflow("oa.refused")
async def refused(ctx: WorkflowContext, input: dict[str, Any]) -> Any:
    async def handle(step: StepContext) -> Any:
        return (await refused_call(step, input["feature"])).final_output

    return await ctx.step("handle", handle)


def handoff_agent() -> Agent[Any]:
    billing = Agent(
        name="billing",
        instructions="You answer billing questions.",
        model=model("chat", "gpt-4.1-mini"),
        tools=[lookup_order],
    )
    return Agent(
        name="triage",
        instructions="You triage support tickets.",
        model=model(),
        tools=[lookup_order],
        handoffs=[billing],
    )


@workflow("oa.handoff")
async def handoff_flow(ctx: WorkflowContext, input: dict[str, Any]) -> Any:
    async def handle(step: StepContext) -> Any:
        result = await LittleRunner.run(step, handoff_agent(), input["ticket"], max_turns=6)
        return {"agent": result.last_agent.name, "output": result.final_output}

    return await ctx.step("handle", handle)


@workflow("oa.stream_stopped")
async def stream_stopped(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    """The consumer reads the first event, then closes the stream."""

    async def handle(step: StepContext) -> str:
        streamed = LittleRunner.run_streamed(step, triage_agent(), input["ticket"], max_turns=4)
        async with aclosing(streamed.stream_events()) as events:
            async for _ in events:
                break
        return "stopped"

    out: str = await ctx.step("handle", handle)
    return out


@workflow("oa.delegation")
async def delegation_flow(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    """An agent as another's tool: the lead's ``lookup_order`` tool runs the expert agent
    through ``LittleRunner`` (an agent call of its own, inside the lead's tool call).
    ``refuse``: "session" gives that runner call a session, which little refuses; ``swallow``:
    the tool catches what the runner raises and answers for it ("answer") or raises its own
    error from it ("wrap"), as a tool's own error handling would."""

    async def handle(step: StepContext) -> str:
        expert = Agent(
            name="expert", instructions="You know orders.", model=model(), tools=[lookup_order]
        )
        options: dict[str, Any] = {}
        if input.get("refuse") == "session":
            from agents.memory import SQLiteSession

            options["session"] = SQLiteSession("s1")

        @function_tool(name_override="lookup_order")
        async def ask_expert(order: str) -> str:
            """Ask the order expert."""
            log_call("tool", tool="ask_expert", order=order)
            question = f"Where is order {order}?"
            swallow = input.get("swallow")
            try:
                answer = await LittleRunner.run(step, expert, question, max_turns=4, **options)
            except Exception as exc:
                if swallow == "answer":
                    return f"the expert is unavailable ({type(exc).__name__})"
                if swallow == "wrap":
                    raise RuntimeError("the expert is unavailable") from exc
                raise
            return str(answer.final_output)

        lead = Agent(name="lead", instructions="You lead.", model=model(), tools=[ask_expert])
        result = await LittleRunner.run(step, lead, input["ticket"], max_turns=4)
        return str(result.final_output)

    out: str = await ctx.step("handle", handle)
    return out


@workflow("oa.as_tool")
async def as_tool_flow(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    """An agent as another's tool through the SDK's own ``agent.as_tool()``: the expert's run
    inside the lead's ``lookup_order`` tool call is an agent call of its own. ``gate``: the
    expert's own ``lookup_order`` waits for a person; ``refuse``: "session" gives the tool a
    session, which little refuses."""

    async def handle(step: StepContext) -> str:
        tool = lookup_order
        if input.get("gate"):  # the expert's tool waits for a person
            tool = little_tool(lookup_order, requires_approval=True)
        expert = Agent(name="expert", instructions="You know orders.", model=model(), tools=[tool])
        seen: list[str] = []

        def on_stream(event: Any) -> None:  # the SDK streams the agent's run to it
            seen.append(event["event"].type)

        options: dict[str, Any] = {}
        if input.get("stream"):
            options["on_stream"] = on_stream
        if input.get("refuse") == "session":
            from agents.memory import SQLiteSession

            options["session"] = SQLiteSession("s1")
        ask_expert = expert.as_tool(
            "lookup_order",
            "Ask the order expert.",
            parameters=OrderQuestion,
            input_builder=lambda options: f"Where is order {options['params']['order']}?",
            **options,
        )
        lead = Agent(name="lead", instructions="You lead.", model=model(), tools=[ask_expert])
        result = await LittleRunner.run(step, lead, input["ticket"], max_turns=4)
        if input.get("stream"):
            log_call("streamed", events=seen)
        return str(result.final_output)

    out: str = await ctx.step("handle", handle)
    return out


@workflow("oa.delegation_then_direct")
async def delegation_then_direct_flow(ctx: WorkflowContext, input: dict[str, Any]) -> list[str]:
    """The expert run both inside the lead's tool (``LittleRunner`` in a tool) and by the step
    itself after the lead answered, then a wait for the signal ``resume`` when asked to: the
    step's own expert call is numbered (``expert.2``) whether or not the lead's tool runs."""

    async def handle(step: StepContext) -> list[str]:
        expert = Agent(
            name="expert", instructions="You know orders.", model=model(), tools=[lookup_order]
        )

        @function_tool(name_override="lookup_order")
        async def ask_expert(order: str) -> str:
            """Ask the order expert."""
            answer = await LittleRunner.run(step, expert, f"Where is order {order}?", max_turns=4)
            return str(answer.final_output)

        lead = Agent(name="lead", instructions="You lead.", model=model(), tools=[ask_expert])
        first = await LittleRunner.run(step, lead, input["ticket"], max_turns=4)
        second = await LittleRunner.run(step, expert, "And order A1, directly?", max_turns=4)
        if input.get("wait"):
            await step.wait_for_signal("resume")
        return [str(first.final_output), str(second.final_output)]

    out: list[str] = await ctx.step("handle", handle)
    return out

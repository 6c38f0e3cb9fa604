"""Workflows for the Pydantic AI adapter's tests (registered on import), over the real framework
driving a ``FunctionModel``: every real model and tool invocation is counted in this process
(``COUNTS``) and, for the crash tests' children, logged to ``$LITTLE_EXAMPLE_CALLS_DIR`` (so the
counts survive a SIGKILL). No clock, randomness or uuid read: the module passes the replay scan.

``research``: one step, one durable agent, two runs: "Brief me on <topic>" (the model calls the
``search`` tool, then answers) and a follow-up over the first run's messages, whose prompt a
version may edit (``follow_up``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent, ApprovalRequired, ModelRetry, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import RequestUsage

from little.examples.research import _log_call
from little.integrations.pydantic_ai import durable
from little.runtime import StepContext, WorkflowContext, workflow

NAME = "tests.pyai.research"
FOLLOW_UP = "Shorter."
COUNTS: Counter[str] = Counter()
"""Real invocations in this process: ``model``, ``tool:<name>``."""
STREAMED: list[list[str]] = []
"""The deltas each streamed run handed its consumer, in order."""
TIMELINE: list[str] = []
"""The streamed words as the model produced them and the consumer got them, interleaved."""


def _prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Brief prompts ask ``search`` first; a tool's result or any other prompt is answered."""
    COUNTS["model"] += 1
    prompt = _prompt(messages)
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart | RetryPromptPart)]
    _log_call("model", prompt=prompt, after_tool=bool(returns), n=len(messages))
    usage = RequestUsage(input_tokens=100 + len(messages), output_tokens=20)
    tools = {t.name.removesuffix("_gated") for t in info.function_tools}
    retried = [p for p in returns if getattr(p, "outcome", "retried") == "retried"]
    if not returns and " and " in prompt and "search" in tools:  # two calls in one turn
        first, second = prompt.removeprefix("Brief me on ").split(" and ")
        calls = [
            ToolCallPart("search", {"q": q}, tool_call_id=f"call-{len(messages)}-{i}")
            for i, q in enumerate((first, second))
        ]
        return ModelResponse(parts=calls, usage=usage)
    if (retried or not returns) and prompt.startswith("Brief") and "search" in tools:
        q = prompt + (" again" if retried else "")
        name = next(t.name for t in info.function_tools if t.name.startswith("search"))
        call = ToolCallPart(name, {"q": q}, tool_call_id=f"call-{len(messages)}")
        return ModelResponse(parts=[call], usage=usage)
    used = " + ".join(str(p.content) for p in returns)
    text = f"answer to [{prompt}]" + (f" using {used}" if returns else "")
    return ModelResponse(parts=[TextPart(text)], usage=usage)


async def stream_answer(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """The same answer, streamed word by word."""
    response = answer(messages, info)
    (part,) = response.parts
    if isinstance(part, ToolCallPart):
        yield {0: _delta(part)}
        return
    assert isinstance(part, TextPart)
    words = part.content.split(" ")
    for i, word in enumerate(words):
        TIMELINE.append(f"produced {i}")
        yield word if i == 0 else " " + word


def _delta(part: ToolCallPart) -> Any:
    from pydantic_ai.models.function import DeltaToolCall

    return DeltaToolCall(part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id)


class Recover(AbstractCapability[Any]):
    """A user's error hook that answers for a failed model request (swallowing the error)."""

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: Any, error: Exception
    ) -> ModelResponse:
        COUNTS["recovered"] += 1
        return ModelResponse(parts=[TextPart("recovered")])


def researcher(
    recover: bool = False,
    retry_once: bool = False,
    ask_approval: bool = False,
    **tool_kwargs: Any,
) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        FunctionModel(answer, stream_function=stream_answer),
        name="researcher",
        instructions="Be brief.",
        capabilities=[Recover()] if recover else [],
    )

    if ask_approval:  # the tool itself asks for a person (ApprovalRequired) unless approved

        @agent.tool  # type: ignore[untyped-decorator]
        def search_gated(ctx: RunContext[None], q: str) -> str:
            if not ctx.tool_call_approved:
                COUNTS["tool:asked"] += 1
                raise ApprovalRequired()
            return search(q)

        def search(q: str) -> str:
            COUNTS["tool:search"] += 1
            _log_call("tool", tool="search", q=q)
            return f"facts({q})"

        return agent

    @agent.tool_plain(**tool_kwargs)  # type: ignore[untyped-decorator]
    def search(q: str) -> str:
        COUNTS["tool:search"] += 1
        _log_call("tool", tool="search", q=q)
        if retry_once and not q.endswith(" again"):
            raise ModelRetry("search again")
        return f"facts({q})"

    return agent


def research_flow(
    follow_up: str = FOLLOW_UP,
    stream: bool = False,
    recover: bool = False,
    retry_once: bool = False,
    pause: bool = False,
    iterate: bool = False,
    ask_approval: bool = False,
    stream_first: bool = False,
    **tool_kwargs: Any,
) -> Any:
    async def research(step: StepContext, topic: str) -> dict[str, Any]:
        agent = durable(step, researcher(recover, retry_once, ask_approval, **tool_kwargs))
        if stream_first:  # the first call streamed (its search, then its streamed answer)
            streamed: list[str] = []
            async with agent.run_stream(f"Brief me on {topic}") as s:
                async for delta in s.stream_text(delta=True, debounce_by=None):
                    streamed.append(delta)
                first_output = await s.get_output()
            STREAMED.append(streamed)
            first: Any = s
        elif iterate:  # the graph driven node by node
            async with agent.iter(f"Brief me on {topic}") as agent_run:
                async for _node in agent_run:
                    pass
            first = agent_run.result
            assert first is not None
            first_output = first.output
        else:
            first = await agent.run(f"Brief me on {topic}")
            first_output = first.output
        if pause:  # the run waits (holding no process) until the signal "go"
            await step.wait_for_signal("go")
        if not stream:
            second = await agent.run(follow_up, message_history=first.all_messages())
            return {"first": first_output, "second": second.output}
        deltas: list[str] = []
        async with agent.run_stream(follow_up, message_history=first.all_messages()) as s:
            async for delta in s.stream_text(delta=True, debounce_by=None):
                TIMELINE.append(f"consumed {len(deltas)}")
                deltas.append(delta)
            output = await s.get_output()
        STREAMED.append(deltas)
        return {"first": first_output, "second": output}

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        return await ctx.step("research", research, topic)

    return flow


_VERSIONS: dict[str, Any] = {}


def version(v: str, **edits: Any) -> Any:
    """The research workflow as version ``v`` (``follow_up=``, ``stream=``, tools), registered
    once per process (a version's edits are fixed by its first registration)."""
    if v not in _VERSIONS:
        _VERSIONS[v] = workflow(NAME, version=v)(research_flow(**edits))
    return _VERSIONS[v]


version("1")


# -- nested agents: an agent as another's tool ---------------------------------------------

NESTED = "tests.pyai.delegation"


def lead_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The lead agent delegates the prompt to its ``ask_expert`` tool, then answers with it."""
    COUNTS["model:lead"] += 1
    returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    _log_call(
        "model", prompt=f"lead {_prompt(messages)}", after_tool=bool(returns), n=len(messages)
    )
    usage = RequestUsage(input_tokens=50, output_tokens=10)
    if not returns:
        call = ToolCallPart("ask_expert", {"question": _prompt(messages)}, tool_call_id="x1")
        return ModelResponse(parts=[call], usage=usage)
    return ModelResponse(parts=[TextPart(f"lead: {returns[0].content}")], usage=usage)


def expert_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    COUNTS["model:expert"] += 1
    _log_call("model", prompt=f"expert {_prompt(messages)}", after_tool=False, n=len(messages))
    usage = RequestUsage(input_tokens=30, output_tokens=5)
    return ModelResponse(parts=[TextPart(f"expert on [{_prompt(messages)}]")], usage=usage)


@workflow(NESTED, version="1")
async def nested(ctx: WorkflowContext, topic: str) -> Any:
    """One step: the lead agent's tool runs the expert agent, both under ``durable`` (each its
    own session and node name in the step)."""

    async def research(step: StepContext, topic: str) -> str:
        lead: Agent[None, str] = Agent(FunctionModel(lead_answer), name="lead")
        expert: Agent[None, str] = Agent(FunctionModel(expert_answer), name="expert")

        @lead.tool_plain
        async def ask_expert(question: str) -> str:
            COUNTS["tool:ask_expert"] += 1
            _log_call("tool", tool="ask_expert", q=question)
            answered = await durable(step, expert).run(question)
            return str(answered.output)

        result = await durable(step, lead).run(f"About {topic}")
        return str(result.output)

    return await ctx.step("research", research, topic)


@workflow(NESTED + ".then", version="1")
async def nested_then(ctx: WorkflowContext, topic: str) -> Any:
    """``nested``, then one more agent call in the same step after the lead's."""

    async def research(step: StepContext, topic: str) -> str:
        lead: Agent[None, str] = Agent(FunctionModel(lead_answer), name="lead")
        expert: Agent[None, str] = Agent(FunctionModel(expert_answer), name="expert")

        @lead.tool_plain
        async def ask_expert(question: str) -> str:
            return str((await durable(step, expert).run(question)).output)

        result = await durable(step, lead).run(f"About {topic}")
        closing = await durable(step, expert, name="closing").run("Close.")
        return f"{result.output} / {closing.output}"

    return await ctx.step("research", research, topic)

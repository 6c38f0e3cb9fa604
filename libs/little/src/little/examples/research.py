"""The reference research workflow: steps, a parallel group, an agent session with tools, and
a sub-run. ``make demo`` crashes and resumes it; the crash tests enumerate its crash points.

The model is a ScriptedModel standing in for ``openai:gpt-4o-mini`` (so the report prices it);
its invocation log and the tools' log let tests count real invocations across processes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from little.errors import ConfigurationError
from little.events import Usage
from little.harness import (
    Model,
    ModelResponse,
    ScriptedModel,
    ToolCallRequest,
    ToolContext,
    tool,
)
from little.runtime import StepContext, Workflow, WorkflowContext, workflow

__all__ = [
    "CALLS_DIR",
    "MODEL_LATENCY",
    "REAL_MODEL",
    "RESEARCH_BRIEF",
    "SCRIPT",
    "fetch",
    "gather",
    "investigate",
    "model",
    "plan",
    "research",
    "search",
    "summarise",
    "write",
    "write_brief",
]

CALLS_DIR = "LITTLE_EXAMPLE_CALLS_DIR"
"""Where the example's model and tools log their real invocations (one JSON line each)."""

MODEL_LATENCY = "LITTLE_EXAMPLE_MODEL_LATENCY"
REAL_MODEL = "LITTLE_EXAMPLE_MODEL"
"""``openai:<model>`` or ``anthropic:<model>`` to run the example against a real model."""


def _calls_dir() -> Path | None:
    d = os.environ.get(CALLS_DIR)
    return Path(d) if d else None


def _log_call(kind: str, **fields: Any) -> None:
    d = _calls_dir()
    if d is None:
        return
    d.mkdir(parents=True, exist_ok=True)
    with (d / f"{kind}.jsonl").open("a") as f:
        f.write(json.dumps({"pid": os.getpid(), **fields}) + "\n")
        f.flush()
        os.fsync(f.fileno())


SCRIPT = (
    ModelResponse(
        tool_calls=(ToolCallRequest("c1", "search", {"q": "kafka log"}),),
        usage=Usage(input_tokens=1_200, output_tokens=80),
        finish_reason="tool_calls",
    ),
    ModelResponse(
        tool_calls=(
            ToolCallRequest("c2", "search", {"q": "kafka partitions"}),
            ToolCallRequest("c3", "fetch", {"url": "https://kafka.apache.org/documentation/"}),
        ),
        usage=Usage(input_tokens=1_900, output_tokens=120, cached_input_tokens=1_200),
        finish_reason="tool_calls",
    ),
    ModelResponse(
        content="Kafka is a partitioned, replicated commit log; consumers track offsets.",
        usage=Usage(input_tokens=2_600, output_tokens=300, cached_input_tokens=1_900),
        finish_reason="stop",
    ),
)


def model() -> Model:
    real = os.environ.get(REAL_MODEL)
    if real:
        provider, _, name = real.partition(":")
        if provider == "openai":
            from little.harness.adapters.openai import OpenAIModel

            return OpenAIModel(name)
        if provider == "anthropic":
            from little.harness.adapters.anthropic import AnthropicModel

            return AnthropicModel(name)
        raise ConfigurationError(f"{REAL_MODEL}={real!r}: use openai:<model> or anthropic:<model>")
    d = _calls_dir()
    return ScriptedModel(
        SCRIPT,
        provider="openai",
        name="gpt-4o-mini",
        latency=float(os.environ.get(MODEL_LATENCY, "0")),
        invocation_log=(d / "model.jsonl") if d else None,
    )


@tool(
    description="Search the web.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)
def search(args: dict[str, Any], ctx: ToolContext) -> list[str]:
    _log_call("tools", tool="search", call_id=ctx.call_id, key=ctx.idempotency_key)
    return [f"result for {args['q']} #{i}" for i in range(3)]


@tool(
    description="Fetch a page.",
    parameters={"type": "object", "properties": {"url": {"type": "string"}}},
)
def fetch(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    _log_call("tools", tool="fetch", call_id=ctx.call_id, key=ctx.idempotency_key)
    return {"url": args["url"], "text": "Kafka stores records in partitions, in order."}


def plan(step: StepContext, topic: str) -> list[str]:
    _log_call("steps", step=step.step_path)
    return [f"{topic}: history", f"{topic}: design"]


async def gather(branch: WorkflowContext, angle: str) -> str:
    def note(step: StepContext) -> str:
        _log_call("steps", step=step.step_path)
        return f"notes on {angle}"

    return str(await branch.step("notes", note))


async def investigate(step: StepContext, questions: list[str]) -> str | None:
    _log_call("steps", step=step.step_path)
    async with step.session(
        "agent", model=model(), tools=[search, fetch], system="Be brief."
    ) as agent:
        return await agent.run(f"Answer: {'; '.join(questions)}", max_turns=6)


def write(step: StepContext, findings: str, notes: dict[str, str], summary: str) -> str:
    _log_call("steps", step=step.step_path)
    return f"REPORT\n{findings}\n{json.dumps(notes, sort_keys=True)}\n{summary}"


@workflow("summarise", version="1")
async def summarise(ctx: WorkflowContext, text: str) -> str:
    def shorten(step: StepContext, t: str) -> str:
        _log_call("steps", step=f"summarise:{step.step_path}")
        return t.split(";")[0][:80]

    return str(await ctx.step("shorten", shorten, text))


async def _research(ctx: WorkflowContext, topic: str, write_stage: Callable[..., str]) -> str:
    questions = await ctx.step("plan", plan, topic)
    notes = await ctx.parallel(
        "background",
        {
            "history": lambda b: gather(b, "history"),
            "design": lambda b: gather(b, "design"),
        },
    )
    findings = await ctx.step("investigate", investigate, questions)
    summary = await ctx.start_workflow("summarise", findings or "")
    return str(await ctx.step("write", write_stage, findings, notes, summary))


@workflow("research", version="1")
async def research(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    return await _research(ctx, input["topic"], write)


def write_brief(step: StepContext, findings: str, notes: dict[str, str], summary: str) -> str:
    """The last stage, edited: a brief instead of the full report."""
    _log_call("steps", step=step.step_path)
    return f"BRIEF: {summary} ({len(notes)} notes)"


async def _research_brief(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    return await _research(ctx, input["topic"], write_brief)


RESEARCH_BRIEF = Workflow("research", "1-brief", _research_brief)
"""``research`` with its last stage edited, for the demo's recorded-call replay. Not
registered, so looking up ``research`` still gives version 1."""

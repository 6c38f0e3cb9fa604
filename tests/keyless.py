"""A workflow on the real OpenAI adapter, for resuming and replaying with no key and no network.

A test records it through a mock HTTP transport (``MODEL`` replaced); a child process imports
this module as it is: ``OpenAIModel("gpt-4o-mini")`` with no key, no client and an unreachable
base URL, so any call that was not served from the log fails the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from little.harness import Model, tool
from little.harness.adapters import OpenAIModel
from little.runtime import StepContext, WorkflowContext, workflow

NAME = "tests.keyless.weather"
MODEL: Callable[[], Model] = lambda: OpenAIModel("gpt-4o-mini")  # noqa: E731
CRASH_AFTER_SESSION: list[bool] = []  # a test appends True to crash once, after the answer


# The tools live here, not in the adapter tests that use them too: a replay of this workflow
# scans the project modules it imports, and those tests read the clock and make uuids.
@tool(
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
def get_weather(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"city": args["city"], "temp": 18}


@tool(description="Local time.", parameters={"type": "object", "properties": {"tz": {}}})
def get_time(args: dict[str, Any], ctx: Any) -> str:
    return "19:05"


class Crash(BaseException):
    """The process dies between the session's answer and its step's completion."""


@workflow(NAME, version="1")
async def weather(ctx: WorkflowContext, input: dict[str, Any]) -> Any:
    async def ask(step: StepContext, city: str) -> str | None:
        async with step.session(
            "a", model=MODEL(), tools=[get_weather, get_time], system="Be brief."
        ) as agent:
            answer: str | None = await agent.run(f"Weather and time in {city}?")
        if CRASH_AFTER_SESSION:
            CRASH_AFTER_SESSION.clear()
            raise Crash
        return answer

    return await ctx.step("ask", ask, input["city"])

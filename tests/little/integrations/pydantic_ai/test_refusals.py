"""What the adapter cannot record and replay is refused at the call, with one line naming the
feature, never run unrecorded: server-side conversation state, a Conversation object, a
workspace, a realtime session."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import little
from little.errors import UnsupportedFeatureError
from little.integrations.pydantic_ai import durable
from little.runtime import StepContext, WorkflowContext, run, workflow
from tests.little.integrations.pydantic_ai import workflows as wf

ATTEMPTS: dict[str, Any] = {
    "previous_response_id": lambda a: a.run(
        "hi", model_settings={"openai_previous_response_id": "resp_1"}
    ),
    "conversation": lambda a: a.run("hi", conversation=object()),
    "workspace": lambda a: a.run("hi", workspace="new"),
    "realtime": lambda a: a.realtime(),
}


async def _attempt(step: StepContext, which: str) -> str:
    agent = durable(step, wf.researcher())
    try:
        attempt = ATTEMPTS[which](agent)
        if asyncio.iscoroutine(attempt):
            await attempt
    except UnsupportedFeatureError as exc:
        return str(exc)
    return "ran"


@workflow("tests.pyai.refusals")
async def refusals(ctx: WorkflowContext, which: str) -> str:
    return await ctx.step("attempt", _attempt, which)


@pytest.mark.parametrize(
    ("which", "named"),
    [
        ("previous_response_id", "openai_previous_response_id is refused under little"),
        ("conversation", "conversation= is refused under little"),
        ("workspace", "workspace= is refused under little"),
        ("realtime", "a realtime session is refused under little"),
    ],
)
def test_a_feature_a_replay_cannot_reproduce_is_refused_naming_it(
    tmp_path: Path, which: str, named: str
) -> None:
    wf.COUNTS.clear()
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, refusals, which))
    assert result.status == "completed", result.error
    assert result.output.startswith("little.integrations.pydantic_ai: ")
    assert named in result.output
    assert "\n" not in result.output
    assert wf.COUNTS == {}  # nothing ran unrecorded

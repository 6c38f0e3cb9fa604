"""Workflows for the compaction tests, in a module of their own that passes the replay-safety
scan: one agent session asked several prompts in turn, under a compaction policy the test
chooses (``POLICY``, read when the step runs, as an edited deployment would), optionally
waiting for a signal between two exchanges (so a test can resume it in the same process)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from little.events import Usage
from little.harness import ModelRequest, ModelResponse
from little.runtime import CompactionPolicy, StepContext, WorkflowContext, workflow

NAME = "tests.compaction.chat"
USAGE = Usage(input_tokens=100, output_tokens=20)
SYSTEM = "Answer briefly."
REQUESTS: list[tuple[str, ModelRequest]] = []
"""Every request a model of this module was sent in this process: (label, request)."""
INVOCATIONS: dict[str, int] = {}


def trim(max_messages: int = 4, keep_last: int = 2) -> CompactionPolicy:
    return CompactionPolicy(max_messages=max_messages, keep_last=keep_last)


def summarising(max_messages: int = 4, keep_last: int = 2) -> CompactionPolicy:
    return CompactionPolicy(
        max_messages=max_messages,
        keep_last=keep_last,
        summarize=True,
        summary_model=EchoModel("summary"),
    )


POLICY: dict[str, Any] = {"policy": trim()}
"""The policy the next execution's session uses (a test swaps it to edit the deployment)."""


class EchoModel:
    """A deterministic model: its answer is a function of the request alone (the last user
    message; for a summary, how many messages it summarises), so a resumed or replayed
    request gets the same answer. Real invocations are counted, and appended to
    ``LITTLE_EXAMPLE_CALLS_DIR/compaction-<label>.jsonl`` when set (the crash test)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.provider = "openai"
        self.name = "gpt-4o-mini"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        REQUESTS.append((self.label, request))
        INVOCATIONS[self.label] = INVOCATIONS.get(self.label, 0) + 1
        _log_call(self.label)
        last = next(m for m in reversed(request.messages) if m.get("role") == "user")
        content = str(last.get("content"))
        if self.label == "summary":
            answer = f"summary of {len(json.loads(content))} message(s)"
        else:
            answer = f"answer to {content}"
        return ModelResponse(content=answer, usage=USAGE, finish_reason="stop")


def _log_call(label: str) -> None:
    """One line per real invocation, fsynced (a crash test's child is SIGKILLed at once)."""
    calls_dir = os.environ.get("LITTLE_EXAMPLE_CALLS_DIR")
    if calls_dir:
        Path(calls_dir).mkdir(parents=True, exist_ok=True)
        with (Path(calls_dir) / f"compaction-{label}.jsonl").open("a") as f:
            f.write(json.dumps({"pid": os.getpid()}) + "\n")
            f.flush()
            os.fsync(f.fileno())


async def chat(step: StepContext, prompts: list[str], pause_after: int | None) -> list[Any]:
    answers: list[Any] = []
    model = EchoModel("chat")
    async with step.session("chat", model=model, system=SYSTEM, compact=POLICY["policy"]) as s:
        for i, prompt in enumerate(prompts):
            answers.append(await s.run(prompt))
            if pause_after is not None and i == pause_after:
                await step.wait_for_signal("go")
    return answers


@workflow(NAME)
async def conversation(ctx: WorkflowContext, input: dict[str, Any]) -> Any:
    return await ctx.step("chat", chat, input["prompts"], input.get("pause_after"))

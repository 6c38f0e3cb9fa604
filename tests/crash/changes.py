"""Workflows for the code-change crash tests: one pipeline as it was, and as changed.

The old code searches and summarizes; the change ranks the facts between the two. A form
(``FORMS``) is a deploy: which code it registers under which version, so a crash test can
start a run on one deploy, SIGKILL it, and resume the run in a process of another.

* ``old``: the old code, as v1.
* ``patched-first``: the change guarded by ``ctx.patched("rank-facts")`` around the whole
  pipeline (the patch is asked before the first step), still v1.
* ``patched-later``: the change guarded by the patch where it happens, after the first step.
* ``versioned``: the change as a new version, v2, with v1 kept ``resume_only``.
* ``v2-only``: v2 alone (v1 is gone).

Every step appends ``{"run": ..., "step": ...}`` to ``$LITTLE_EXAMPLE_CALLS_DIR/steps.jsonl``,
so a test sees which steps really ran, in which process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from little.runtime import StepContext, WorkflowContext, workflow

PATCHED = "tests.crash.changes.patched"
VERSIONED = "tests.crash.changes.versioned"


def _ran(step: StepContext, name: str) -> None:
    base = os.environ.get("LITTLE_EXAMPLE_CALLS_DIR")
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
        with (Path(base) / "steps.jsonl").open("a") as f:
            f.write(json.dumps({"run": step.run_id, "step": name}) + "\n")


def search(step: StepContext, topic: str) -> list[str]:
    _ran(step, "search")
    return [f"{topic} offsets", f"{topic} logs", f"{topic} brokers"]


def rank(step: StepContext, facts: list[str]) -> list[str]:
    _ran(step, "rank")
    return sorted(facts)


def summarize(step: StepContext, facts: list[str]) -> str:
    _ran(step, "summarize")
    return " / ".join(facts)


async def old(ctx: WorkflowContext, topic: str) -> str:
    facts = await ctx.step("search", search, topic)
    return str(await ctx.step("summarize", summarize, facts))


async def new(ctx: WorkflowContext, topic: str) -> str:
    facts = await ctx.step("search", search, topic)
    facts = await ctx.step("rank", rank, facts)
    return str(await ctx.step("summarize", summarize, facts))


async def patched_first(ctx: WorkflowContext, topic: str) -> str:
    if ctx.patched("rank-facts"):
        return await new(ctx, topic)
    return await old(ctx, topic)


async def patched_later(ctx: WorkflowContext, topic: str) -> str:
    facts = await ctx.step("search", search, topic)
    if ctx.patched("rank-facts"):
        facts = await ctx.step("rank", rank, facts)
    return str(await ctx.step("summarize", summarize, facts))


def deploy(form: str) -> None:
    """Register ``form``'s code (in a fresh process: a deploy)."""
    if form == "old":
        workflow(PATCHED, version="1")(old)
        workflow(VERSIONED, version="1")(old)
    elif form == "patched-first":
        workflow(PATCHED, version="1")(patched_first)
    elif form == "patched-later":
        workflow(PATCHED, version="1")(patched_later)
    elif form == "versioned":
        workflow(VERSIONED, version="1", resume_only=True)(old)
        workflow(VERSIONED, version="2")(new)
    elif form == "v2-only":
        workflow(VERSIONED, version="2")(new)
    else:
        raise SystemExit(f"unknown form {form!r}")


FORMS = ("old", "patched-first", "patched-later", "versioned", "v2-only")

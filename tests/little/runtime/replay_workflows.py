"""Workflows for the recorded-call replay tests, in a module of their own that passes the
replay-safety scan (no clock, randomness or uuid reads): a three-stage pipeline whose later
stages read the earlier stages' answers, in versions that edit one stage's prompt."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from little.events import Usage
from little.harness import ModelResponse, ScriptedModel, ToolCallRequest, ToolContext, tool
from little.runtime import StepContext, WorkflowContext, workflow

NAME = "tests.replay.pipeline"
USAGE = Usage(input_tokens=100, output_tokens=20)
MODELS: dict[str, list[ScriptedModel]] = {}
"""Every model each stage built in this process, by stage: tests count real invocations."""
FAIL: set[str] = set()
"""Stages whose model fails when invoked (a recorded failure)."""
WRITES: list[str] = []


class ModelDown(Exception):
    pass


class FailingModel(ScriptedModel):
    async def complete(self, request: Any) -> ModelResponse:
        self.invocations += 1
        raise ModelDown("the model is down")


def _calls_log(stage: str) -> Path | None:
    """Where a child process of the crash tests logs its real invocations (by stage)."""
    calls_dir = os.environ.get("LITTLE_EXAMPLE_CALLS_DIR")
    if not calls_dir:
        return None
    Path(calls_dir).mkdir(parents=True, exist_ok=True)
    return Path(calls_dir) / f"replay-{stage}.jsonl"


def invocations(stage: str) -> int:
    return sum(m.invocations for m in MODELS.get(stage, []))


@tool(description="Write the report to disk.", side_effecting=True)
def write_report(args: dict[str, Any], ctx: ToolContext) -> str:
    WRITES.append(str(args.get("text")))
    return "written"


async def ask(
    step: StepContext, stage: str, prompt: str, writes: bool = False, latency: float = 0.0
) -> str | None:
    if stage in FAIL:
        model: ScriptedModel = FailingModel((), provider="openai", name="gpt-4o-mini")
    elif writes:
        model = ScriptedModel(
            (
                ModelResponse(
                    tool_calls=(ToolCallRequest("w1", "write_report", {"text": prompt}),),
                    usage=USAGE,
                    finish_reason="tool_calls",
                ),
                ModelResponse(content=f"{stage} done", usage=USAGE, finish_reason="stop"),
            ),
            provider="openai",
            name="gpt-4o-mini",
            invocation_log=_calls_log(stage),
        )
    else:
        answer = f"{stage}: answer to [{prompt}]"
        model = ScriptedModel(
            (ModelResponse(content=answer, usage=USAGE, finish_reason="stop"),),
            provider="openai",
            name="gpt-4o-mini",
            latency=latency,
            invocation_log=_calls_log(stage),
        )
    MODELS.setdefault(stage, []).append(model)
    tools = [write_report] if writes else []
    async with step.session(stage, model=model, tools=tools, system="Be brief.") as agent:
        return await agent.run(prompt)


def pipeline(prompts: dict[str, str], writes: str | None = None) -> Any:
    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        research = await ctx.step(
            "research", ask, "research", prompts["research"] + topic, writes == "research"
        )
        outline = await ctx.step(
            "outline", ask, "outline", prompts["outline"] + str(research), writes == "outline"
        )
        final = await ctx.step(
            "write", ask, "write", prompts["write"] + str(outline), writes == "write"
        )
        return [research, outline, final]

    return flow


BASE = {"research": "Find facts about ", "outline": "Outline: ", "write": "Write up: "}


def version(v: str, writes: str | None = None, **edits: str) -> Any:
    """Register the pipeline as version ``v`` with some stages' prompts edited."""
    return workflow(NAME, version=v)(pipeline({**BASE, **edits}, writes))


FANNED = "tests.replay.fanned"
FAN_BASE = {"a": "Angle A on ", "b": "Angle B on ", "merge": "Merge: "}


def fanned(v: str, slow: str = "a", **edits: str) -> Any:
    """Two parallel branches of two calls each, then a call that merges them. Branch a's
    model is slower (``slow``), so a fresh run admits a1, b1, b2, a2: a replay that serves
    calls (which take no time) admits them in another order, and must still serve them by
    place."""
    prompts = {**FAN_BASE, **edits}

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        def branch(name: str, latency: float) -> Any:
            async def run_branch(bctx: WorkflowContext) -> Any:
                first = await bctx.step(
                    "first", ask, f"{name}1", prompts[name] + topic, False, latency
                )
                return await bctx.step(
                    "second", ask, f"{name}2", f"Deepen: {first}", False, latency
                )

            return run_branch

        late = {"a": 0.05 if slow == "a" else 0.0, "b": 0.05 if slow == "b" else 0.0}
        angles = await ctx.parallel(
            "fan", {"a": branch("a", late["a"]), "b": branch("b", late["b"])}
        )
        merged = await ctx.step("merge", ask, "merge", prompts["merge"] + str(angles))
        return [angles, merged]

    return workflow(FANNED, version=v)(flow)


HANDOFF = "tests.replay.handoff"
HANDOFF_BASE = {"a1": "Angle A on ", "b1": "Angle B on ", "a2": "Go on with: "}


def handoff(v: str, **edits: str) -> Any:
    """Two parallel branches taking turns, so every run admits a1, b1, a2 in that order:
    branch b asks once a1 answered, and branch a asks again once b1 answered. a2's request
    reads a1's answer only (edit b1: a2's own request is unchanged)."""
    prompts = {**HANDOFF_BASE, **edits}

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        b_may_ask, a_may_go_on = asyncio.Event(), asyncio.Event()

        async def branch_a(bctx: WorkflowContext) -> Any:
            first = await bctx.step("first", ask, "a1", prompts["a1"] + topic)
            b_may_ask.set()
            await a_may_go_on.wait()
            return [first, await bctx.step("second", ask, "a2", prompts["a2"] + str(first))]

        async def branch_b(bctx: WorkflowContext) -> Any:
            await b_may_ask.wait()
            answer = await bctx.step("first", ask, "b1", prompts["b1"] + topic)
            a_may_go_on.set()
            return answer

        return await ctx.parallel("turns", {"a": branch_a, "b": branch_b})

    return workflow(HANDOFF, version=v)(flow)


SESSION = "tests.replay.two_exchanges"


@tool(description="Look a word up.")
def look_up(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"{args.get('q')}: a word"


def two_exchanges(v: str, second: str) -> Any:
    """One session, two exchanges: the first calls a tool (two turns), the second does not
    (one turn); ``second`` is the second exchange's prompt (edit it to make that call fresh)."""

    async def talk(step: StepContext) -> list[str | None]:
        model = ScriptedModel(
            (
                ModelResponse(
                    tool_calls=(ToolCallRequest("c1", "look_up", {"q": "kafka"}),),
                    usage=USAGE,
                    finish_reason="tool_calls",
                ),
                ModelResponse(content="kafka is a log", usage=USAGE, finish_reason="stop"),
                ModelResponse(content="in short: a log", usage=USAGE, finish_reason="stop"),
            ),
            provider="openai",
            name="gpt-4o-mini",
        )
        MODELS.setdefault("talk", []).append(model)
        async with step.session("talk", model=model, tools=[look_up]) as agent:
            first = await agent.run("What is kafka? Look it up.")
            return [first, await agent.run(second)]

    async def flow(ctx: WorkflowContext, _: Any) -> Any:
        return await ctx.step("talk", talk)

    return workflow(SESSION, version=v)(flow)


LONG = "tests.replay.long_answers"


def long_answers(v: str) -> Any:
    """Two sessions, one exchange each, with answers too long to sit in a record (artifacts):
    the first exchange's error is caught by the workflow, which goes on to the second session
    (whose request does not depend on the first: a replay could serve it on its own)."""

    def model(answer: str) -> ScriptedModel:
        made = ScriptedModel(
            (ModelResponse(content=answer * 70_000, usage=USAGE, finish_reason="stop"),),
            provider="openai",
            name="gpt-4o-mini",
        )
        MODELS.setdefault("long", []).append(made)
        return made

    async def talk(step: StepContext) -> list[str | None]:
        async with step.session("first", model=model("a")) as agent:
            try:
                first: str | None = await agent.run("Say a lot.")
            except Exception as exc:  # the workflow carries on without the first answer
                first = f"failed: {type(exc).__name__}"
        async with step.session("second", model=model("b")) as agent:
            second = await agent.run("Say more.")
        return [None if first is None else first[:40], None if second is None else second[:3]]

    async def flow(ctx: WorkflowContext, _: Any) -> Any:
        return await ctx.step("talk", talk)

    return workflow(LONG, version=v)(flow)


DATED = "tests.replay.dated"


def dated(v: str, extra_random: bool = False, random_first: bool = False) -> Any:
    """The pipeline with recorded values in its prompts, as the README advises: the run's date
    (``ctx.now()``, the run's scope) in research's prompt and a request id (``step.uuid4()``,
    the step's scope) in outline's. ``extra_random`` asks for a ``ctx.random()`` the recorded
    run never asked for, between outline and write (write's prompt does not use it);
    ``random_first`` asks for a random where the recorded run read the clock."""

    async def research(step: StepContext, prompt: str) -> str | None:
        return await ask(step, "research", prompt)

    async def outline(step: StepContext, prompt: str) -> str | None:
        return await ask(step, "outline", f"[{step.uuid4()}] {prompt}")

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        if random_first:
            ctx.random()
        day = ctx.now().isoformat()
        found = await ctx.step("research", research, f"As of {day}, find facts about {topic}")
        planned = await ctx.step("outline", outline, f"Outline: {found}")
        if extra_random:
            ctx.random()
        final = await ctx.step("write", ask, "write", f"Write up: {planned}")
        return [found, planned, final]

    return workflow(DATED, version=v)(flow)


def reshaped(v: str, outline_step: str = "outline", review: bool = False) -> Any:
    """The pipeline with its structure edited, its prompts not: the outline step renamed (a
    call at the same place under another node), or a fourth stage after write (a call the
    record never had)."""

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        research = await ctx.step("research", ask, "research", BASE["research"] + topic)
        outline = await ctx.step(outline_step, ask, "outline", BASE["outline"] + str(research))
        final = await ctx.step("write", ask, "write", BASE["write"] + str(outline))
        if review:
            final = await ctx.step("review", ask, "review", f"Review: {final}")
        return [research, outline, final]

    return workflow(NAME, version=v)(flow)


def callless(v: str) -> Any:
    """The pipeline's workflow, in a version that makes no agent call."""

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        return await ctx.step("research", lambda step: f"nothing to ask about {topic}")

    return workflow(NAME, version=v)(flow)


TOLERANT = "tests.replay.tolerant"


def tolerant(v: str) -> Any:
    """Outline's failure is caught and the run goes on; write's request reads research only,
    so it is the same whether outline answered or failed."""

    async def outline(step: StepContext, prompt: str) -> str:
        try:
            return str(await ask(step, "outline", prompt))
        except ModelDown:
            return "no outline"

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        research = await ctx.step("research", ask, "research", BASE["research"] + topic)
        planned = await ctx.step("outline", outline, BASE["outline"] + str(research))
        final = await ctx.step("write", ask, "write", BASE["write"] + str(research))
        return [research, planned, final]

    return workflow(TOLERANT, version=v)(flow)


STAGED = "tests.replay.five_stages"
STAGES = ("gather", "analyse", "outline", "draft", "polish")
STAGE_PROMPTS = {
    "gather": "Gather sources on ",
    "analyse": "Analyse: ",
    "outline": "Outline: ",
    "draft": "Draft from: ",
    "polish": "Polish: ",
}


def five_stages(v: str, **edits: str) -> Any:
    """The issue's main scenario: a five-stage pipeline, each stage reading the one before
    (edit ``draft``, stage 4, to re-run it and the stage after it)."""
    prompts = {**STAGE_PROMPTS, **edits}

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        answers: list[str | None] = []
        previous = topic
        for stage in STAGES:
            answer = await ctx.step(stage, ask, stage, prompts[stage] + previous)
            answers.append(answer)
            previous = str(answer)
        return answers

    return workflow(STAGED, version=v)(flow)


RETRIED = "tests.replay.retried"
FAIL_ONCE: set[str] = set()
"""Runs whose ``research`` step fails once, after its agent call answered (then is retried)."""


def retried(v: str) -> Any:
    """A retried step that makes an agent call: attempt 1 fails after the call answered (once
    per run named in ``FAIL_ONCE``), attempt 2 asks again and succeeds."""
    from little.runtime import Retry

    async def research(step: StepContext, topic: str) -> str | None:
        answer = await ask(step, "research", f"[{step.now().isoformat()}] Find facts about {topic}")
        if step.run_id in FAIL_ONCE:
            FAIL_ONCE.discard(step.run_id)
            raise ModelDown("the answer did not parse")
        return answer

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        found = await ctx.step("research", research, topic, retry=Retry(max_attempts=2))
        return [found, await ctx.step("write", ask, "write", f"Write up: {found}")]

    return workflow(RETRIED, version=v)(flow)


LOOPED = "tests.replay.looped"


def looped(v: str) -> Any:
    """One step visited twice (a loop), reading the clock into its prompt on each visit."""

    async def draft(step: StepContext, n: int) -> str | None:
        return await ask(step, "draft", f"Draft {n} at {step.now().isoformat()}")

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        return [await ctx.step("draft", draft, n, max_visits=2) for n in (1, 2)]

    return workflow(LOOPED, version=v)(flow)


PARENT = "tests.replay.parent"
CHILD = "tests.replay.child"


def parent(v: str, sketch: str = "Sketch ", research: str = BASE["research"]) -> Any:
    """Research, a sub-run (its own agent call, in a run of its own), then write, whose
    request does not read the sub-run's answer. The sub-run's workflow is registered as
    version ``v`` too, asking ``sketch`` (edit it to change the sub-run only; edit
    ``research`` to change the parent's first call only: the sub-run's input is the topic)."""

    async def child(ctx: WorkflowContext, topic: str) -> Any:
        return await ctx.step("sketch", ask, "sketch", f"{sketch}{topic}")

    workflow(CHILD, version=v)(child)

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        found = await ctx.step("research", ask, "research", research + topic)
        sketch = await ctx.start_workflow(CHILD, topic)
        return [found, sketch, await ctx.step("write", ask, "write", f"Write up: {found}")]

    return workflow(PARENT, version=v)(flow)


NESTED = "tests.replay.nested"
NESTED_CHILD = "tests.replay.nested_child"


def nested(v: str, child: str = "Summarise: ", sub: bool = True) -> Any:
    """A run whose middle stage is a sub-run holding an agent call (stage ``sum``): a
    simulation simulates the sub-run against the golden run's. ``child`` is the sub-run's
    prompt; ``sub=False`` calls the stage in the run itself instead."""

    async def summary(ctx: WorkflowContext, text: str) -> Any:
        return await ctx.step("sum", ask, "sum", child + text)

    workflow(NESTED_CHILD, version=v)(summary)

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        first = await ctx.step("research", ask, "research", BASE["research"] + topic)
        if sub:
            short = await ctx.start_workflow(NESTED_CHILD, first)
        else:
            short = await ctx.step("sum", ask, "sum", child + str(first))
        return await ctx.step("write", ask, "write", BASE["write"] + str(short))

    return workflow(NESTED, version=v)(flow)


TOOLED = "tests.replay.tooled"
LOOKUPS: list[str] = []
"""Every real invocation of ``tooled``'s look-up tool in this process."""


def tooled(
    v: str, looked_up: str = "{q}: a word", writes: bool = False, catches: bool = False
) -> Any:
    """One stage whose model looks a word up (and, with ``writes``, then writes the report with
    the side-effecting tool) before answering; ``looked_up`` is what the look-up tool returns
    (edit it to make the tool's code return something else). ``catches``: the stage catches
    any exception of its exchange and answers what the model would have."""

    @tool(description="Look a word up.")
    def look_up(args: dict[str, Any], ctx: ToolContext) -> str:
        LOOKUPS.append(ctx.call_id)
        return looked_up.format(q=args.get("q"))

    async def define(step: StepContext, word: str) -> str | None:
        calls = [ToolCallRequest("l1", "look_up", {"q": word})]
        if writes:
            calls.append(ToolCallRequest("w1", "write_report", {"text": word}))
        model = ScriptedModel(
            (
                ModelResponse(tool_calls=tuple(calls), usage=USAGE, finish_reason="tool_calls"),
                ModelResponse(content=f"{word} is a log", usage=USAGE, finish_reason="stop"),
            ),
            provider="openai",
            name="gpt-4o-mini",
        )
        MODELS.setdefault("define", []).append(model)
        tools = [look_up, write_report] if writes else [look_up]
        async with step.session("define", model=model, tools=tools) as agent:
            if not catches:
                return await agent.run(f"Define {word}. Look it up.")
            try:
                return await agent.run(f"Define {word}. Look it up.")
            except Exception:
                return f"{word} is a log"

    async def flow(ctx: WorkflowContext, word: str) -> Any:
        return await ctx.step("define", define, word)

    return workflow(TOOLED, version=v)(flow)


VALIDATED = "tests.replay.validated"
VALIDATIONS: list[str] = []
"""Every verdict ``validated``'s validator reached in this process."""


def validated(v: str, needs: str = "Kafka") -> Any:
    """A drafted answer (an agent call), then a validator (a decision step) that passes it when
    it names ``needs`` (edit ``needs`` to change the validator's rule only), then the step
    its verdict names."""

    def check(step: StepContext, draft: str) -> str:
        verdict = "publish" if needs in draft else "revise"
        VALIDATIONS.append(verdict)
        return verdict

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        draft = str(await ctx.step("draft", ask, "draft", f"Draft a post on {topic}"))
        verdict = await ctx.decide("validate", check, draft)
        return await ctx.step(str(verdict), lambda step: f"{verdict}: {draft}")

    return workflow(VALIDATED, version=v)(flow)

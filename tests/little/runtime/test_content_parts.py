"""Images and documents in native sessions (issue 28 item 4): a prompt or a tool's result may be
a list of parts; bytes over ``INLINE_BYTES`` go to the artifact store and the record names them
by sha256 (so the request hash and the call's key cover them); the model is handed the bytes,
on a resume too (loaded from the store); a replay serves the same parts with no invocation and
misses on an edited image."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.errors import ConfigurationError
from little.events import (
    AgentCallSettled,
    ArtifactRef,
    ModelCalled,
    ToolCallSucceeded,
    Usage,
)
from little.harness import (
    Document,
    DocumentUrl,
    Image,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    Text,
    ToolCallRequest,
    ToolContext,
    tool,
)
from little.harness.content import INLINE_BYTES
from little.runtime import StepContext, WorkflowContext, execute, run, workflow
from tests.worlds import world_of_param

USAGE = Usage(input_tokens=10, output_tokens=5)
SMALL = b"\x89PNG tiny"
PHOTO = bytes(range(256)) * 80  # 20,480 bytes: over the inline limit
SCAN = b"%PDF-1.7 " + b"x" * 30_000
REQUESTS: list[ModelRequest] = []
TOOL_RUNS: list[str] = []


class Recording(ScriptedModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        REQUESTS.append(request)
        return await super().complete(request)


class Crash(BaseException):
    """Stands in for the process dying in the model call: not an Exception."""


_worlds = itertools.count()
SUFFIX = 0
"""Workflow names are new in each world (a test runs on two): deterministic, no randomness
(which a replay's source scan would refuse)."""


def named(name: str) -> str:
    return f"{name}.w{SUFFIX}"


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def world(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[little.World]:
    """The embedded world, and Kafka (its artifact store a directory, as a deployment's)."""
    global SUFFIX
    SUFFIX = next(_worlds)
    REQUESTS.clear()
    TOOL_RUNS.clear()
    with world_of_param(request, tmp_path, f"parts-{unique}.") as w:
        yield w


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[little.World]:
    REQUESTS.clear()
    with little.local_world(tmp_path / "world") as w:
        yield w


def events(world: little.World, run_id: str) -> list[little.Event]:
    return [x.event for x in world.read_run(run_id)]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@tool(description="Photograph the page.")
def photograph(args: dict[str, Any], ctx: ToolContext) -> Any:
    TOOL_RUNS.append(ctx.call_id)
    return ["the page", Image(PHOTO, "image/png")]


SCRIPT = [
    ModelResponse(
        tool_calls=(ToolCallRequest("c1", "photograph", {}),),
        usage=USAGE,
        finish_reason="tool_calls",
    ),
    ModelResponse(content="a receipt for 12 EUR", usage=USAGE, finish_reason="stop"),
]


def flow(name: str, prompt: Any, version: str = "1") -> Any:
    async def ask(step: StepContext, _: None) -> Any:
        async with step.session("agent", model=Recording(SCRIPT), tools=[photograph]) as agent:
            return await agent.run(prompt)

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    return workflow(named(name), version=version)(wf)


PROMPT = ["What is this?", Image(SMALL, "image/png"), Document(SCAN, name="scan.pdf")]


def test_parts_in_the_prompt_and_in_a_tool_result_reach_the_model_with_their_bytes(
    world: little.World,
) -> None:
    result = asyncio.run(run(world, flow("tests.parts.basic", PROMPT), None))
    assert result.status == "completed", result.error
    assert result.output == "a receipt for 12 EUR"
    first, second = REQUESTS
    assert first.messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "media_type": "image/png", "data": b64(SMALL)},
            {
                "type": "document",
                "media_type": "application/pdf",
                "name": "scan.pdf",
                "artifact": {"sha256": digest(SCAN), "size": len(SCAN)},
                "data": b64(SCAN),  # handed to the model with its bytes
            },
        ],
    }
    tool_message = second.messages[2]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == [
        {"type": "text", "text": "the page"},
        {
            "type": "image",
            "media_type": "image/png",
            "artifact": {"sha256": digest(PHOTO), "size": len(PHOTO)},
            "data": b64(PHOTO),
        },
    ]


def test_big_bytes_go_to_the_artifact_store_and_the_events_hold_their_ref(
    world: little.World,
) -> None:
    result = asyncio.run(run(world, flow("tests.parts.store", PROMPT), None))
    assert result.status == "completed", result.error
    log = events(world, result.run_id)
    called = [e for e in log if isinstance(e, ModelCalled)]
    appended = json.loads(called[0].appended_messages_json or "")
    small, scan = appended[0]["content"][1:]
    assert small["data"] == b64(SMALL)  # small bytes stay inline
    assert "data" not in scan
    assert scan["artifact"] == {"sha256": digest(SCAN), "size": len(SCAN)}
    assert b64(SCAN) not in (called[0].appended_messages_json or "")
    (succeeded,) = [e for e in log if isinstance(e, ToolCallSucceeded)]
    recorded = json.loads(succeeded.result_json or "")
    assert recorded == {
        "$parts": [
            {"type": "text", "text": "the page"},
            {
                "type": "image",
                "media_type": "image/png",
                "artifact": {"sha256": digest(PHOTO), "size": len(PHOTO)},
            },
        ]
    }
    # the next request appends the tool message as recorded: the ref, not the bytes
    assert json.loads(called[1].appended_messages_json or "")[1]["content"] == recorded["$parts"]
    for data, media in ((SCAN, "application/pdf"), (PHOTO, "image/png")):
        ref = ArtifactRef(
            run_id=result.run_id, sha256=digest(data), size=len(data), media_type=media
        )
        assert world.artifacts.get(ref) == data
    assert len(SMALL) <= INLINE_BYTES < min(len(PHOTO), len(SCAN))


def test_a_replay_serves_the_parts_with_no_invocation_and_an_edited_image_misses(
    world: little.World,
) -> None:
    source = asyncio.run(run(world, flow("tests.parts.replay", PROMPT), None))
    assert source.status == "completed", source.error
    REQUESTS.clear()
    TOOL_RUNS.clear()

    same = asyncio.run(
        run(world, flow("tests.parts.replay", PROMPT, "2"), None, replay_from=source.run_id)
    )
    assert same.output == "a receipt for 12 EUR"
    assert (REQUESTS, TOOL_RUNS) == ([], [])  # served: no model call, no tool call
    assert same.replay is not None
    assert same.replay.replayed_calls == 1
    (settled,) = [e for e in events(world, same.run_id) if isinstance(e, AgentCallSettled)]
    assert settled.replayed
    recorded = json.loads(settled.result_json or "")["messages"]
    assert recorded[0]["content"][2]["artifact"]["sha256"] == digest(SCAN)

    edited = SCAN[:-1] + b"y"  # one byte of the document changed
    changed = asyncio.run(
        run(
            world,
            flow("tests.parts.replay", [*PROMPT[:2], Document(edited, name="scan.pdf")], "3"),
            None,
            replay_from=source.run_id,
        )
    )
    assert changed.status == "completed", changed.error
    assert changed.replay is not None
    assert (changed.replay.replayed_calls, changed.replay.miss_reason) == (0, "key-mismatch")
    assert len(REQUESTS) == 2  # asked afresh, with the edited bytes
    assert REQUESTS[0].messages[0]["content"][2]["data"] == b64(edited)

    REQUESTS.clear()
    picture = [*PROMPT[:1], Image(SMALL[:-1] + b"!", "image/png"), PROMPT[2]]
    small_edit = asyncio.run(
        run(world, flow("tests.parts.replay", picture, "4"), None, replay_from=source.run_id)
    )
    assert small_edit.replay is not None
    assert small_edit.replay.replayed_calls == 0
    assert len(REQUESTS) == 2  # an inline image edited misses too


RESUMED = "run_parts_resume"


def test_a_resume_rebuilds_the_same_request_from_the_refs(world: little.World) -> None:
    """Killed in turn 2 (after the tool's image was recorded): the resume serves turn 1 and
    the tool call from the log, rebuilds turn 2's request (the same hash) and hands the model
    the same bytes, read back from the artifact store."""
    dying = {"on": True}

    class Dying(Recording):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            if dying["on"] and len(request.messages) > 1:
                raise Crash
            return await super().complete(request)

    async def ask(step: StepContext, _: None) -> Any:
        async with step.session("agent", model=Dying(SCRIPT), tools=[photograph]) as agent:
            return await agent.run(PROMPT)

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    flow_ = workflow(named("tests.parts.resume"), version="1")(wf)
    with pytest.raises(Crash):
        asyncio.run(execute(world, RESUMED, flow_, None))
    assert (len(REQUESTS), TOOL_RUNS) == (1, ["1:c1"])
    dying["on"] = False
    done = asyncio.run(execute(world, RESUMED, flow_, None))
    assert done.output == "a receipt for 12 EUR"
    assert TOOL_RUNS == ["1:c1"]  # served from the log
    assert len(REQUESTS) == 2  # only turn 2 asked again
    assert REQUESTS[1].messages[2]["content"][1]["data"] == b64(PHOTO)
    assert REQUESTS[1].messages[0]["content"][2]["data"] == b64(SCAN)
    called = [e for e in events(world, RESUMED) if isinstance(e, ModelCalled)]
    assert [e.turn for e in called] == [1, 2, 2]
    assert called[1].request_hash == called[2].request_hash


def test_a_streamed_exchange_hands_the_model_the_parts(world: little.World) -> None:
    async def ask(step: StepContext, _: None) -> Any:
        model = Recording([["It is ", "a photo."]])
        async with step.session("agent", model=model) as agent:
            return [d async for d in agent.stream(["What?", Image(PHOTO, "image/png")])]

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    result = asyncio.run(run(world, workflow(named("tests.parts.stream"), version="1")(wf), None))
    assert result.status == "completed", result.error
    assert result.output == ["It is ", "a photo."]
    called = [e for e in events(world, result.run_id) if isinstance(e, ModelCalled)]
    assert digest(PHOTO) in (called[0].appended_messages_json or "")


def test_urls_text_parts_and_data_urls(world: little.World) -> None:
    async def ask(step: StepContext, _: None) -> Any:
        async with step.session("agent", model=Recording(SCRIPT[1:])) as agent:
            return await agent.run(
                [
                    Text("Compare"),
                    ImageUrl("https://example.com/a.png"),
                    ImageUrl("data:image/gif;base64," + b64(b"GIF89a")),
                    DocumentUrl("https://example.com/r.pdf", name="r.pdf"),
                ]
            )

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    result = asyncio.run(run(world, workflow(named("tests.parts.urls"), version="1")(wf), None))
    assert result.status == "completed", result.error
    assert REQUESTS[0].messages[0]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "image", "url": "https://example.com/a.png"},
        {"type": "image", "media_type": "image/gif", "data": b64(b"GIF89a")},
        {"type": "document", "url": "https://example.com/r.pdf", "name": "r.pdf"},
    ]


_bad = itertools.count()


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([], "content is a string or a non-empty list of parts"),
        (["Look", b"\x89PNG"], "part 1 is a bytes, not a string.*give bytes as Image"),
        ([Image(SMALL, "png")], "part 0: Image needs a media type such as image/png"),
        ([Image(SMALL, "application/pdf")], "an Image's media type is image/\\*"),
        ([ImageUrl("data:image/png,raw")], "data:<media type>;base64,<data>"),
        ([{"type": "text", "text": "hi"}], "part 0 is a dict"),
    ],
)
def test_bad_content_is_refused_naming_the_part(
    embedded: little.World, prompt: Any, message: str
) -> None:
    async def ask(step: StepContext, _: None) -> Any:
        async with step.session("agent", model=Recording(SCRIPT[1:])) as agent:
            with pytest.raises(ConfigurationError, match=message) as raised:
                await agent.run(prompt)
            return str(raised.value)

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    result = asyncio.run(
        run(embedded, workflow(f"tests.parts.bad{next(_bad)}", version="1")(wf), None)
    )
    assert result.status == "completed", result.error
    assert "session" in result.output
    assert "prompt" in result.output
    assert REQUESTS == []  # nothing was asked


def test_a_panel_leg_may_be_asked_with_parts(world: little.World) -> None:
    async def ask(step: StepContext, _: None) -> Any:
        answer = [ModelResponse(content="seen", usage=USAGE, finish_reason="stop")]
        async with (
            step.session("a", model=Recording(answer)) as a,
            step.session("b", model=Recording(answer)) as b,
        ):
            return await step.panel([(a, ["Judge it.", Image(PHOTO, "image/png")]), (b, "Text.")])

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("judge", ask, None)

    result = asyncio.run(run(world, workflow(named("tests.parts.panel"), version="1")(wf), None))
    assert result.status == "completed", result.error
    assert result.output == ["seen", "seen"]
    contents = sorted(str(r.messages[0]["content"])[:40] for r in REQUESTS)
    assert contents == ["Text.", "[{'type': 'text', 'text': 'Judge it.'}, "]
    (with_image,) = [r for r in REQUESTS if isinstance(r.messages[0]["content"], list)]
    assert with_image.messages[0]["content"][1]["data"] == b64(PHOTO)
    appended = [
        e.appended_messages_json or ""
        for e in events(world, result.run_id)
        if isinstance(e, ModelCalled)
    ]
    assert sum(digest(PHOTO) in text for text in appended) == 1

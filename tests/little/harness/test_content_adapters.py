"""Images and documents over the real ``openai`` and ``anthropic`` clients (issue 28 item 4):
each provider gets its native form (OpenAI ``image_url`` and ``file`` content parts with
``data:`` URLs, a tool result's images in a user message after the turn's results; Anthropic
``image`` and ``document`` blocks with a ``base64`` or ``url`` source, in ``tool_result`` too),
the bytes of a part kept in the artifact store read back for the wire; no network (an
``httpx2.MockTransport``)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

import little
from little.errors import ConfigurationError
from little.harness import (
    Document,
    DocumentUrl,
    Image,
    ImageUrl,
    Model,
    ModelRequest,
    ToolContext,
    tool,
)
from little.harness.adapters.openai import ATTACHED
from little.runtime import StepContext, WorkflowContext, run, workflow
from tests.little.harness.test_adapters import (
    Recorded,
    anthropic_message,
    anthropic_model,
    chat_completion,
    openai_model,
)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 60  # 15 KiB: kept in the artifact store
PDF = b"%PDF-1.7\n" + b"0123456789" * 1000
TINY = b"GIF89a tiny"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@tool(description="Photograph the page.")
def photograph(args: dict[str, Any], ctx: ToolContext) -> Any:
    return ["page 1", Image(PNG, "image/png")]


@tool(description="Fetch the scan.")
def fetch_scan(args: dict[str, Any], ctx: ToolContext) -> Any:
    return Document(PDF, name="scan.pdf")


PROMPT = [
    "What do these say?",
    ImageUrl("https://example.com/receipt.jpg"),
    Image(TINY, "image/gif"),
    Document(PDF, name="invoice.pdf"),
]


def reading(name: str, model: Model) -> Any:
    async def ask(step: StepContext, _: None) -> Any:
        tools = [photograph, fetch_scan]
        async with step.session("agent", model=model, tools=tools) as agent:
            return await agent.run(PROMPT)

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    return workflow(name, version="1")(wf)


def openai_calls() -> dict[str, Any]:
    return chat_completion(
        {
            "content": None,
            "tool_calls": [
                {
                    "id": "call_P",
                    "type": "function",
                    "function": {"name": "photograph", "arguments": "{}"},
                },
                {
                    "id": "call_S",
                    "type": "function",
                    "function": {"name": "fetch_scan", "arguments": "{}"},
                },
            ],
        },
        "tool_calls",
        prompt_tokens=900,
        completion_tokens=20,
    )


def test_openai_gets_image_url_and_file_parts_and_tool_images_in_a_user_message(
    tmp_path: Path,
) -> None:
    answer = chat_completion(
        {"content": "Two receipts."}, "stop", prompt_tokens=1500, completion_tokens=4
    )
    recorded = Recorded((200, openai_calls()), (200, answer))
    with little.local_world(tmp_path) as world:
        result = asyncio.run(
            run(world, reading("tests.parts.openai", openai_model(recorded)), None)
        )
    assert result.status == "completed", result.error
    assert result.output == "Two receipts."
    first = recorded.body(0)
    assert first["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What do these say?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/receipt.jpg"}},
                {"type": "image_url", "image_url": {"url": f"data:image/gif;base64,{b64(TINY)}"}},
                {
                    "type": "file",
                    "file": {
                        "filename": "invoice.pdf",
                        "file_data": f"data:application/pdf;base64,{b64(PDF)}",
                    },
                },
            ],
        }
    ]
    second = recorded.body(1)
    assert second["messages"][0] == first["messages"][0]  # the stored bytes read back, the same
    assert second["messages"][2:] == [
        {"role": "tool", "tool_call_id": "call_P", "content": [{"type": "text", "text": "page 1"}]},
        {"role": "tool", "tool_call_id": "call_S", "content": [{"type": "text", "text": ATTACHED}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Tool call call_P returned:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}},
                {"type": "text", "text": "Tool call call_S returned:"},
                {
                    "type": "file",
                    "file": {
                        "filename": "scan.pdf",
                        "file_data": f"data:application/pdf;base64,{b64(PDF)}",
                    },
                },
            ],
        },
    ]


def test_anthropic_gets_image_and_document_blocks_in_the_prompt_and_in_tool_results(
    tmp_path: Path,
) -> None:
    calls = anthropic_message(
        [
            {"type": "tool_use", "id": "toolu_P", "name": "photograph", "input": {}},
            {"type": "tool_use", "id": "toolu_S", "name": "fetch_scan", "input": {}},
        ],
        "tool_use",
        input_tokens=900,
        output_tokens=30,
    )
    answer = anthropic_message(
        [{"type": "text", "text": "Two receipts."}], "end_turn", input_tokens=1500, output_tokens=4
    )
    recorded = Recorded((200, calls), (200, answer))
    with little.local_world(tmp_path) as world:
        flow = reading("tests.parts.anthropic", anthropic_model(recorded))
        result = asyncio.run(run(world, flow, None))
    assert result.status == "completed", result.error
    pdf_source = {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)}
    prompt = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What do these say?"},
            {
                "type": "image",
                "source": {"type": "url", "url": "https://example.com/receipt.jpg"},
            },
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/gif", "data": b64(TINY)},
            },
            {"type": "document", "source": pdf_source, "title": "invoice.pdf"},
        ],
    }
    assert recorded.body(0)["messages"] == [prompt]
    second = recorded.body(1)["messages"]
    assert second[0] == prompt
    assert second[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_P",
                "content": [
                    {"type": "text", "text": "page 1"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)},
                    },
                ],
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_S",
                "content": [{"type": "document", "source": pdf_source, "title": "scan.pdf"}],
            },
        ],
    }


def user(content: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(None, ({"role": "user", "content": content},), ())


def test_document_urls_and_plain_text_where_each_provider_takes_them() -> None:
    url_doc = {"type": "document", "url": "https://example.com/r.pdf", "name": "r.pdf"}
    text_doc = {"type": "document", "media_type": "text/plain", "data": b64("héllo".encode())}
    recorded = Recorded(
        (
            200,
            anthropic_message(
                [{"type": "text", "text": "ok"}], "end_turn", input_tokens=9, output_tokens=1
            ),
        )
    )
    asyncio.run(anthropic_model(recorded).complete(user([url_doc, text_doc])))
    assert recorded.body(0)["messages"][0]["content"] == [
        {
            "type": "document",
            "source": {"type": "url", "url": "https://example.com/r.pdf"},
            "title": "r.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "héllo"},
        },
    ]
    # Chat Completions takes no document by URL: refused before anything is sent
    with pytest.raises(ConfigurationError, match="takes a document as its bytes, not by URL"):
        asyncio.run(openai_model(Recorded()).complete(user([url_doc])))
    word = {"type": "document", "media_type": "application/msword", "data": b64(b"doc")}
    with pytest.raises(
        ConfigurationError, match=r"PDF .* or plain text .*, not 'application/msword'"
    ):
        asyncio.run(anthropic_model(Recorded()).complete(user([word])))


def test_the_openai_adapter_refuses_a_document_url_as_the_turns_recorded_failure(
    tmp_path: Path,
) -> None:
    recorded = Recorded()

    async def ask(step: StepContext, _: None) -> Any:
        async with step.session("agent", model=openai_model(recorded)) as agent:
            return await agent.run(["Read it.", DocumentUrl("https://example.com/r.pdf")])

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, workflow("tests.parts.docurl", version="1")(wf), None))
        failed = [
            e.event for e in world.read_run(result.run_id) if e.event.type == "harness.model.failed"
        ]
    assert result.status == "failed"
    assert "takes a document as its bytes" in str(result.error)
    assert recorded.calls == 0
    assert [(f.error_type, f.retryable) for f in failed] == [("ConfigurationError", False)]

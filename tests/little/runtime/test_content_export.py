"""``little export --format chat-jsonl`` of a session with images and documents (issue 28 item
4): the parts written back as chat content parts, bytes as ``data:`` URLs (read back from the
artifact store where the log names them by digest)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.runtime import run
from tests.little.runtime.test_chat_export import export
from tests.little.runtime.test_content_parts import PHOTO, PROMPT, SCAN, SMALL, b64, digest, flow


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "world") as w:
        yield w


def test_the_chat_export_writes_the_parts_back_with_their_bytes(
    world: little.World, tmp_path: Path
) -> None:
    result = asyncio.run(run(world, flow("tests.parts.export", PROMPT), None))
    assert result.status == "completed", result.error
    code, lines, err = export(tmp_path / "world", result.run_id)
    assert code == 0, err
    assert len(lines) == 2
    prompt = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(SMALL)}"}},
            {
                "type": "file",
                "file": {
                    "filename": "scan.pdf",
                    "file_data": f"data:application/pdf;base64,{b64(SCAN)}",  # from the store
                },
            },
        ],
    }
    assert lines[0]["messages"][0] == prompt
    assert lines[1]["messages"][0] == prompt
    assert lines[1]["messages"][2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": [
            {"type": "text", "text": "the page"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PHOTO)}"}},
        ],
    }
    assert lines[1]["messages"][3] == {"role": "assistant", "content": "a receipt for 12 EUR"}


def test_a_golden_file_keeps_the_blobs_its_parts_name(world: little.World, tmp_path: Path) -> None:
    from little.golden import read_golden, write_golden

    result = asyncio.run(run(world, flow("tests.parts.golden", PROMPT), None))
    assert result.status == "completed", result.error
    write_golden(world, result.run_id, tmp_path / "run.golden.avro")
    kept = read_golden(tmp_path / "run.golden.avro").artifacts
    # the two stored parts (the prompt's PDF, the tool's photo), named only inside messages
    assert {kept[digest(SCAN)].data, kept[digest(PHOTO)].data} == {SCAN, PHOTO}


def test_a_golden_file_takes_only_parts_for_parts(world: little.World, tmp_path: Path) -> None:
    """A step's own output shaped like a stored part (an ``artifact`` digest and a media type,
    but no part ``type``) is the step's data, not a blob to copy."""
    from little.golden import write_golden
    from little.runtime import StepContext, WorkflowContext, workflow

    lookalike = {"artifact": {"sha256": "0" * 64, "size": 3}, "media_type": "text/plain"}

    async def attach(step: StepContext) -> dict[str, object]:
        return {"attachment": lookalike}

    @workflow("tests.parts.lookalike", version="1")
    async def flow_with_lookalike(ctx: WorkflowContext, _: object) -> object:
        return await ctx.step("attach", attach)

    result = asyncio.run(run(world, flow_with_lookalike, None))
    assert result.status == "completed", result.error
    golden = write_golden(world, result.run_id, tmp_path / "lookalike.golden.avro")
    assert golden.artifacts == {}

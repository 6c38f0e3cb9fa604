"""``little export --format chat-jsonl`` of a Pydantic AI session: its native messages rebuilt
from the log's deltas and checked link by link against the recorded request hashes, then
written in the chat fine-tuning shape; a served call's links rebuilt from its record; an
altered record refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import little
from little import _framework_chat
from little.chat import chat_example, model_exchanges
from little.errors import RuntimeIntegrityError
from little.events import LoggedEvent, ModelCalled
from little.integrations.pydantic_ai import STAMPS
from little.runtime import run
from tests.little.integrations.pydantic_ai import workflows as wf

SYSTEM = {"role": "system", "content": "Be brief."}
BRIEF = {"role": "user", "content": "Brief me on Kafka"}
ASK = {
    "role": "assistant",
    "tool_calls": [
        {
            "id": "call-1",
            "type": "function",
            "function": {"name": "search", "arguments": '{"q":"Brief me on Kafka"}'},
        }
    ],
}
FACTS = {"role": "tool", "tool_call_id": "call-1", "content": "facts(Brief me on Kafka)"}
FIRST = {
    "role": "assistant",
    "content": "answer to [Brief me on Kafka] using facts(Brief me on Kafka)",
}


def _rows(world: little.World, run_id: str) -> list[LoggedEvent]:
    return list(world.read_run(run_id))


def test_the_export_strips_what_the_adapter_strips() -> None:
    assert _framework_chat.PYDANTIC_AI_STAMPS == STAMPS


def test_each_answered_request_is_rebuilt_checked_and_written_as_a_chat_example(
    tmp_path: Path,
) -> None:
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, wf.version("1"), "Kafka"))
        assert result.status == "completed", result.error
        exchanges = model_exchanges(_rows(world, result.run_id), world.artifacts.get)
    assert [(x.turn, x.native_format) for x in exchanges] == [
        (1, "pydantic-ai"),
        (2, "pydantic-ai"),
        (3, "pydantic-ai"),
    ]
    examples = [chat_example(x) for x in exchanges]
    assert examples[0]["messages"] == [SYSTEM, BRIEF, ASK]
    assert examples[1]["messages"] == [SYSTEM, BRIEF, ASK, FACTS, FIRST]
    # the follow-up carries the first call's whole history (message_history)
    assert examples[2]["messages"] == [
        SYSTEM,
        BRIEF,
        ASK,
        FACTS,
        FIRST,
        {"role": "user", "content": "Shorter."},
        {"role": "assistant", "content": "answer to [Shorter.]"},
    ]
    # the request's tools are the manifest's (checked against the turn's tools hash)
    assert [t["function"]["name"] for t in examples[0]["tools"]] == ["search"]


def test_a_replay_exports_the_fresh_call_chained_after_the_served_one(tmp_path: Path) -> None:
    """The first call served whole logs no request; its links are rebuilt from its record, and
    the edited call's first request must chain from them (else the export refuses)."""
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, wf.version("1"), "Kafka"))
        edited = wf.version("export-edited", follow_up="In five words.")
        replay = asyncio.run(run(world, edited, "Kafka", replay_from=source.run_id))
        assert replay.status == "completed", replay.error
        exchanges = model_exchanges(_rows(world, replay.run_id), world.artifacts.get)
    (only,) = exchanges  # the served call's requests were answered in the source run
    assert only.messages[-1] == {"role": "user", "content": "In five words."}
    assert chat_example(only)["messages"][:5] == [SYSTEM, BRIEF, ASK, FACTS, FIRST]


def _altered(rows: list[LoggedEvent], turn: int, edit: Any) -> list[LoggedEvent]:
    out = []
    for row in rows:
        e = row.event
        if isinstance(e, ModelCalled) and e.turn == turn:
            e = e.model_copy(update={"appended_messages_json": edit(e.appended_messages_json)})
        out.append(LoggedEvent(e, row.partition, row.offset))
    return out


def test_an_altered_request_record_is_refused(tmp_path: Path) -> None:
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, wf.version("1"), "Kafka"))
        rows = _rows(world, result.run_id)
        load = world.artifacts.get
        altered = _altered(rows, 2, lambda text: text.replace("facts(", "lies("))
        with pytest.raises(RuntimeIntegrityError, match="do not hash to its request_hash"):
            model_exchanges(altered, load)

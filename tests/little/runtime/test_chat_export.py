"""``little export <run> --format chat-jsonl`` (issue 15 item 5): one line per answered model
call, its full request rebuilt from the logged deltas (system prompt, every message, tools)
and its answer, in the chat fine-tuning shape; held against the requests the model was really
sent, across two exchanges of one session with tool calls, and in a replay whose first
exchange was served from the record (no model call logged for it)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.chat import chat_message
from little.events import LoggedEvent, ModelCalled, SessionStarted
from little.harness import ModelRequest
from little.runtime import run
from tests.cli import little_cli
from tests.little.runtime import chat_workflows as cw

_versions = itertools.count()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    cw.REQUESTS.clear()
    with little.local_world(tmp_path / "w") as w:
        yield w


def export(data_dir: Path, run_id: str, *extra: str) -> tuple[int, list[dict[str, Any]], str]:
    out = little_cli(
        "export", run_id, "--format", "chat-jsonl", "--data-dir", str(data_dir), *extra
    )
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    return out.returncode, lines, out.stderr


def sent(request: ModelRequest) -> list[dict[str, Any]]:
    """What the model was sent, in the fine-tuning shape: the system prompt, then each
    message."""
    return [{"role": "system", "content": request.system}] + [
        chat_message(m) for m in request.messages
    ]


def test_each_answered_call_is_one_line_holding_the_request_the_model_was_sent(
    world: little.World, tmp_path: Path
) -> None:
    result = asyncio.run(run(world, cw.glossary(f"c{next(_versions)}"), None))
    assert result.status == "completed"
    assert len(cw.REQUESTS) == 4  # two exchanges of two turns

    code, lines, err = export(tmp_path / "w", result.run_id)
    assert code == 0, err
    assert len(lines) == 4
    for line, request, answer in zip(lines, cw.REQUESTS, cw.SCRIPT, strict=True):
        assert line["messages"][:-1] == sent(request)  # rebuilt from deltas alone
        assert line["messages"][-1] == chat_message(answer.as_message())
        assert line["tools"] == [
            {"type": "function", "function": t.as_json()} for t in request.tools
        ]
    # the second turn in full, as a trainer reads it
    assert lines[1] == {
        "messages": [
            {"role": "system", "content": cw.SYSTEM},
            {"role": "user", "content": "What is Kafka?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "d1",
                        "type": "function",
                        "function": {"name": "define", "arguments": '{"word":"kafka"}'},
                    },
                    {
                        "id": "d2",
                        "type": "function",
                        "function": {"name": "define", "arguments": '{"word":"topic"}'},
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "d1",
                "content": '{"meaning":"kafka: a term of logs","word":"kafka"}',
            },
            {
                "role": "tool",
                "tool_call_id": "d2",
                "content": '{"meaning":"topic: a term of logs","word":"topic"}',
            },
            {"role": "assistant", "content": "Kafka: a log of topics."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "define",
                    "description": "Look a word up.",
                    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
                },
            }
        ],
    }
    # the second exchange's first request holds the whole first exchange
    assert lines[2]["messages"][: len(lines[1]["messages"])] == lines[1]["messages"]
    assert lines[2]["messages"][len(lines[1]["messages"])] == {
        "role": "user",
        "content": "And an offset?",
    }

    to_file = tmp_path / "out" / "chat.jsonl"
    out = little_cli(
        "export",
        result.run_id,
        "--format",
        "chat-jsonl",
        "--output",
        str(to_file),
        "--data-dir",
        str(tmp_path / "w"),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"wrote {to_file}: 4 model call(s) of 1 session(s)\n"
    assert [json.loads(x) for x in to_file.read_text().splitlines()] == lines


def test_a_fresh_call_after_a_served_exchange_holds_the_whole_conversation(
    world: little.World, tmp_path: Path
) -> None:
    """In a replay the first exchange is served from the record: no model call of the replay
    logs its messages, yet the fresh second exchange's requests are rebuilt whole."""
    source = asyncio.run(run(world, cw.glossary(f"c{next(_versions)}"), None))
    cw.REQUESTS.clear()
    edited = cw.glossary(f"c{next(_versions)}", second="And a partition?")
    replay = asyncio.run(run(world, edited, None, replay_from=source.run_id))
    assert replay.status == "completed"
    assert replay.replay is not None
    assert replay.replay.replayed_calls == 1
    assert len(cw.REQUESTS) == 2  # the second exchange's two turns only

    code, lines, err = export(tmp_path / "w", replay.run_id)
    assert code == 0, err
    assert [line["messages"][:-1] for line in lines] == [sent(r) for r in cw.REQUESTS]
    assert lines[0]["messages"][-2] == {"role": "user", "content": "And a partition?"}


def test_a_step_tried_again_exports_each_answered_call_of_both_attempts(
    world: little.World, tmp_path: Path
) -> None:
    """The model fails the first attempt's second request: the step is tried again and its
    session opened anew (turn 1 again). The first attempt's answered call is an exchange too
    (the model answered it); the failed one has no line."""
    result = asyncio.run(run(world, cw.glossary(f"c{next(_versions)}", fail_at=2), None))
    assert result.status == "completed"
    assert len(cw.REQUESTS) == 6  # 1 answered + 1 failed, then the 4 of the second attempt
    code, lines, err = export(tmp_path / "w", result.run_id)
    assert code == 0, err
    answered = [cw.REQUESTS[0], *cw.REQUESTS[2:]]
    assert [line["messages"][:-1] for line in lines] == [sent(r) for r in answered]
    assert lines[0]["messages"][:-1] == lines[1]["messages"][:-1]  # the same first request
    assert lines[0]["messages"][-1] == chat_message(cw.FIRST_ATTEMPT[0].as_message())
    assert lines[1]["messages"][-1] == chat_message(cw.SCRIPT[0].as_message())


def _copy(events: list[LoggedEvent], to: Path, change: Any) -> str:
    """The run's events, some changed, as the only run of a new world at ``to``."""
    with little.local_world(to) as other:
        other.append([change(e.event) for e in events])
    return events[0].event.run_id


def test_a_record_that_does_not_hash_to_its_request_is_refused(
    world: little.World, tmp_path: Path
) -> None:
    result = asyncio.run(run(world, cw.glossary(f"c{next(_versions)}"), None))
    events = list(world.read_run(result.run_id))

    def altered(e: Any) -> Any:
        if isinstance(e, ModelCalled) and e.turn == 2:
            text = str(e.appended_messages_json).replace("a term of logs", "a term of art")
            return e.model_copy(update={"appended_messages_json": text})
        return e

    run_id = _copy(events, tmp_path / "altered", altered)
    code, lines, err = export(tmp_path / "altered", run_id)
    assert code == 1
    assert lines == []
    (turn_2,) = [e.event for e in events if isinstance(e.event, ModelCalled) and e.event.turn == 2]
    assert err == (
        f"error: run {run_id}: session ask#glossary: turn 2's appended messages do not hash to "
        f"its request_hash {turn_2.request_hash[:12]}...: the record was altered or the chain "
        "changed\n"
    )


def test_a_session_logged_without_its_system_prompt_is_refused_unless_allowed(
    world: little.World, tmp_path: Path
) -> None:
    """Sessions logged before harness.session.started v2 have their prompt's hash only."""
    result = asyncio.run(run(world, cw.glossary(f"c{next(_versions)}"), None))

    def as_v1(e: Any) -> Any:
        if isinstance(e, SessionStarted):
            return e.model_copy(update={"system_json": None, "system_ref": None})
        return e

    run_id = _copy(list(world.read_run(result.run_id)), tmp_path / "old", as_v1)
    code, lines, err = export(tmp_path / "old", run_id)
    assert code == 1
    assert err.startswith(
        f"error: run {run_id}: session(s) ask#glossary were logged before system prompts were"
    )
    assert err.rstrip().endswith("pass --allow-missing-system to export them without it")
    code, lines, err = export(tmp_path / "old", run_id, "--allow-missing-system")
    assert code == 0, err
    assert [line["messages"][:-1] for line in lines] == [sent(r)[1:] for r in cw.REQUESTS]

"""Context compaction as a recorded event (issue 15 item 8): a session's compaction policy
trims or summarises its history before an exchange; the result is recorded
(``harness.session.compacted``), a resume reuses it, a summary is a recorded agent call, the
request hash chain and the chat-jsonl export hold across it, and a changed policy refuses a
resume and rebuilds in a replay."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.chat import chat_example, model_exchanges
from little.errors import CapabilityDriftError, ConfigurationError
from little.events import AgentCallSettled, ModelCalled, SessionCompacted, SessionStarted
from little.replay import Snapshot, decode_snapshot, encode_snapshot, replay_run
from little.runtime import CompactionPolicy, resume, run, send_signal, simulate
from tests.little.runtime import compaction_workflows as cw

PROMPTS = [f"p{i}" for i in range(6)]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    cw.REQUESTS.clear()
    cw.INVOCATIONS.clear()
    cw.POLICY["policy"] = cw.trim()
    with little.local_world(tmp_path) as w:
        yield w


def events_of(world: little.World, run_id: str, cls: Any) -> list[Any]:
    return [e for x in world.read_run(run_id) if isinstance(e := x.event, cls)]


def chat_requests(label: str = "chat") -> list[list[dict[str, Any]]]:
    return [list(r.messages) for lab, r in cw.REQUESTS if lab == label]


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def answer(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"answer to {content}"}


def test_a_trim_policy_compacts_before_the_exchange_that_finds_the_history_over_its_limit(
    world: little.World,
) -> None:
    result = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS}))
    assert result.status == "completed"
    assert result.output == [f"answer to p{i}" for i in range(6)]
    requests = chat_requests()
    # exchanges 0..2 grow the history to 6 messages (> 4): exchange 3 keeps the last 2
    assert requests[2] == [user("p0"), answer("p0"), user("p1"), answer("p1"), user("p2")]
    assert requests[3] == [user("p2"), answer("p2"), user("p3")]
    assert requests[4] == [user("p2"), answer("p2"), user("p3"), answer("p3"), user("p4")]
    assert requests[5] == [user("p4"), answer("p4"), user("p5")]
    compactions = events_of(world, result.run_id, SessionCompacted)
    assert [(c.exchange, c.replaced_messages, c.summary_session_id) for c in compactions] == [
        (3, 6, None),
        (5, 6, None),
    ]
    first = compactions[0]
    assert json.loads(first.history_json or "") == [user("p2"), answer("p2")]
    assert json.loads(first.policy_json) == {
        "keep_last": 2,
        "max_chars": None,
        "max_messages": 4,
        "summarize": False,
    }
    # the policy is part of the session's configuration: in its manifest
    (started,) = events_of(world, result.run_id, SessionStarted)
    assert json.loads(started.manifest_json)["compaction"] == json.loads(first.policy_json)
    # the next request chains from the compaction's link
    called = events_of(world, result.run_id, ModelCalled)
    assert called[3].previous_request_hash == first.history_hash
    assert first.previous_request_hash == called[2].request_hash
    # the fold keeps the compactions only while the step runs: the committed step's session
    # is folded down to counts
    state = replay_run(world, result.run_id).state
    session = state.session("chat#chat")
    assert session is not None
    assert session.history == ()


def test_the_chat_export_rebuilds_every_request_across_a_compaction(
    world: little.World,
) -> None:
    result = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS}))
    exchanges = model_exchanges(world.read_run(result.run_id), world.artifacts.get)
    assert [list(x.messages) for x in exchanges] == chat_requests()
    assert [x.request_hash for x in exchanges] == [
        e.request_hash for e in events_of(world, result.run_id, ModelCalled)
    ]
    line = chat_example(exchanges[3])
    assert line["messages"] == [
        {"role": "system", "content": cw.SYSTEM},
        user("p2"),
        answer("p2"),
        user("p3"),
        answer("p3"),
    ]


def test_an_altered_compaction_record_is_refused_by_the_export(world: little.World) -> None:
    result = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS}))
    items = list(world.read_run(result.run_id))
    for i, item in enumerate(items):
        e = item.event
        if isinstance(e, SessionCompacted):
            forged = e.model_copy(update={"history_json": json.dumps([user("p9")])})
            items[i] = little.LoggedEvent(forged, item.partition, item.offset)
            break
    with pytest.raises(little.RuntimeIntegrityError, match="does not hash to its history_hash"):
        model_exchanges(items, world.artifacts.get)


def test_a_resume_reuses_the_recorded_compaction_and_calls_no_model_again(
    world: little.World,
) -> None:
    cw.POLICY["policy"] = cw.summarising()
    first = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS, "pause_after": 3}))
    assert first.status == "waiting"
    assert cw.INVOCATIONS == {"chat": 4, "summary": 1}
    state = replay_run(world, first.run_id).state
    session = state.session("chat#chat")
    assert session is not None
    assert [c.exchange for c in session.history] == [3]
    # a snapshot keeps it (STATE_VERSION 15)
    assert decode_snapshot(encode_snapshot(Snapshot.of(state))).state == state
    asyncio.run(send_signal(world, first.run_id, "go"))
    resumed = asyncio.run(resume(world, first.run_id, cw.conversation))
    assert resumed.status == "completed"
    # exchanges 0..3 and the summary before 3 were served from the log (nothing invoked
    # again); 4 and 5 and their summaries are new (a summary keeps the history at 4
    # messages, so each later exchange finds 6 and compacts)
    assert cw.INVOCATIONS == {"chat": 6, "summary": 3}
    compactions = events_of(world, first.run_id, SessionCompacted)
    assert [c.exchange for c in compactions] == [3, 4, 5]  # the first not recorded again
    assert compactions[0].summary_session_id == "chat#chat~compact3"
    summary = "summary of 4 message(s)"  # the first summary, its ack, p2 and its answer
    assert chat_requests()[4] == [
        user(f"Summary of the earlier conversation:\n{summary}"),
        {"role": "assistant", "content": "Understood."},
        user("p3"),
        answer("p3"),
        user("p4"),
    ]
    exchanges = model_exchanges(world.read_run(first.run_id), world.artifacts.get)
    assert len(exchanges) == 9  # six chat requests and three summaries, each rebuilt


def test_a_summary_is_a_recorded_agent_call_that_a_replay_serves(world: little.World) -> None:
    cw.POLICY["policy"] = cw.summarising()
    first = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS}))
    assert cw.INVOCATIONS == {"chat": 6, "summary": 3}
    cw.POLICY["policy"] = cw.summarising()  # the same configuration, built again
    second = asyncio.run(
        run(world, cw.conversation, {"prompts": PROMPTS}, replay_from=first.run_id)
    )
    assert second.output == first.output
    assert cw.INVOCATIONS == {"chat": 6, "summary": 3}  # no model call: all served
    assert second.replay is not None
    assert second.replay.replayed_calls == 9
    assert second.replay.fresh_calls == 0
    mine = events_of(world, second.run_id, SessionCompacted)
    theirs = events_of(world, first.run_id, SessionCompacted)
    assert [c.history_hash for c in mine] == [c.history_hash for c in theirs]


def test_a_changed_compaction_policy_refuses_a_resume_naming_it(world: little.World) -> None:
    first = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS, "pause_after": 3}))
    assert first.status == "waiting"
    asyncio.run(send_signal(world, first.run_id, "go"))
    cw.POLICY["policy"] = cw.trim(keep_last=3)  # the deployment's policy changed
    with pytest.raises(CapabilityDriftError, match=r"changed: compaction"):
        asyncio.run(resume(world, first.run_id, cw.conversation))
    assert cw.INVOCATIONS == {"chat": 4}


def test_a_changed_compaction_policy_rebuilds_in_a_replay(world: little.World) -> None:
    first = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS}))
    cw.POLICY["policy"] = cw.trim(max_messages=6)
    second = asyncio.run(
        run(world, cw.conversation, {"prompts": PROMPTS}, replay_from=first.run_id)
    )
    assert second.status == "completed"
    assert cw.INVOCATIONS == {"chat": 12}  # nothing served: every call ran again
    settled = events_of(world, second.run_id, AgentCallSettled)
    assert settled[0].miss_reason == "configuration-changed"
    assert [c.exchange for c in events_of(world, second.run_id, SessionCompacted)] == [4]


def test_a_policy_needs_a_limit_and_sane_values() -> None:
    with pytest.raises(ConfigurationError, match="needs a limit"):
        CompactionPolicy()
    with pytest.raises(ConfigurationError, match="max_messages=0"):
        CompactionPolicy(max_messages=0)
    with pytest.raises(ConfigurationError, match="keep_last=-1"):
        CompactionPolicy(max_chars=100, keep_last=-1)


def test_a_character_limit_compacts_by_the_history_canonical_json(world: little.World) -> None:
    cw.POLICY["policy"] = CompactionPolicy(max_chars=120, keep_last=2)
    result = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS}))
    compactions = events_of(world, result.run_id, SessionCompacted)
    assert compactions, "the history outgrew 120 characters"
    for c in compactions:
        assert c.replaced_messages > 2
    exchanges = model_exchanges(world.read_run(result.run_id), world.artifacts.get)
    assert [list(x.messages) for x in exchanges] == chat_requests()


def test_a_compacting_run_simulates_identically_against_itself(world: little.World) -> None:
    """Simulation checks every served turn's request hash against the golden run's: the
    chain relinked at each compaction must come out the same, and a summary is served."""
    cw.POLICY["policy"] = cw.summarising()
    golden = asyncio.run(run(world, cw.conversation, {"prompts": PROMPTS}))
    sim = asyncio.run(simulate(world, cw.conversation, golden.run_id))
    assert sim.identical, sim.lines()
    assert cw.INVOCATIONS == {"chat": 6, "summary": 3}  # the golden run's only
    cw.POLICY["policy"] = cw.summarising(keep_last=3)  # another configuration diverges
    edited = asyncio.run(simulate(world, cw.conversation, golden.run_id))
    assert not edited.identical
    assert "configuration-changed" in "\n".join(edited.lines())


def test_a_large_compacted_history_is_an_artifact_that_resume_and_export_read(
    world: little.World,
) -> None:
    big = [f"{i}" + "x" * 40_000 for i in range(5)]  # each answer repeats its prompt: 80 KB
    cw.POLICY["policy"] = CompactionPolicy(max_chars=200_000, keep_last=2)
    first = asyncio.run(run(world, cw.conversation, {"prompts": big, "pause_after": 3}))
    assert first.status == "waiting"
    (compaction,) = events_of(world, first.run_id, SessionCompacted)
    assert compaction.history_json is None
    assert compaction.history_ref is not None  # above the inline limit: in the artifact store
    asyncio.run(send_signal(world, first.run_id, "go"))
    done = asyncio.run(resume(world, first.run_id, cw.conversation))
    assert done.status == "completed"
    assert cw.INVOCATIONS == {"chat": 5}
    exchanges = model_exchanges(world.read_run(first.run_id), world.artifacts.get)
    assert [list(x.messages) for x in exchanges] == chat_requests()

"""Full replay (issue 15 item 5): a NEW run of the workflow against a recorded run, linked to
it and marked full; every model call live from the model the user names, every tool call
answered from the recorded run's receipts unless live tools are asked for."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.errors import ConfigurationError
from little.events import RunStarted, SessionStarted, ToolCallFailed, ToolCallSucceeded
from little.runtime import ExecutionStopped, FullReplay, RunControl, execute, resume, run
from tests.cli import little_cli
from tests.little.runtime import full_replay_workflows as fw

SAME = "tests.little.runtime.full_replay_workflows:same_calls"
NEW = "tests.little.runtime.full_replay_workflows:new_calls"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    fw.LOOKUPS.clear()
    fw.REQUESTS.clear()
    fw.STOP.clear()
    with little.local_world(tmp_path / "world") as w:
        yield w


def recorded(world: little.World) -> str:
    result = asyncio.run(run(world, fw.research, "kafka"))
    assert result.status == "completed"
    assert fw.LOOKUPS == ["kafka"]
    fw.LOOKUPS.clear()
    return result.run_id


def events(world: little.World, run_id: str) -> list[little.Event]:
    return [e.event for e in world.read_run(run_id)]


def test_a_full_replay_is_a_new_linked_run_asking_the_named_model_and_serving_tools(
    world: little.World,
) -> None:
    source = recorded(world)
    before = len(events(world, source))
    result = asyncio.run(little.replay_in_mode(world, source, mode="full", model=SAME))
    assert result.status == "completed"
    assert result.output == "kafka, in other words"  # the named model's answer
    assert result.run_id != source
    assert fw.LOOKUPS == []  # the tool was not executed again
    assert len(fw.REQUESTS) == 2  # both turns asked the named model, live
    tool_message = fw.REQUESTS[1].messages[-1]
    assert tool_message["content"] == json.dumps("facts about kafka")  # the recorded result
    started = next(e for e in events(world, result.run_id) if isinstance(e, RunStarted))
    assert (started.replay_source_run_id, started.replay_mode) == (source, "full")
    assert (started.replay_model, started.replay_live_tools) == (SAME, False)
    served = [e for e in events(world, result.run_id) if isinstance(e, ToolCallSucceeded)]
    assert [(e.tool, e.replayed_from_run_id) for e in served] == [("lookup", source)]
    state = little.replay_run(world, result.run_id).state
    assert state.replay_mode == "full"
    sessions = [e for e in events(world, result.run_id) if isinstance(e, SessionStarted)]
    assert [e.model for e in sessions] == ["anthropic:claude-haiku-4-5"]  # not the workflow's
    assert state.usage.calls == 2  # billed: live calls of the new model
    assert state.avoided_usage.calls == 0  # nothing of the source was served as an answer
    assert len(events(world, source)) == before  # the recorded run is only read


def test_a_tool_call_the_recorded_run_never_made_fails_as_the_tools_error(
    world: little.World,
) -> None:
    source = recorded(world)
    result = asyncio.run(little.replay_in_mode(world, source, mode="full", model=NEW))
    assert result.status == "completed"
    assert fw.LOOKUPS == []
    failed = [e for e in events(world, result.run_id) if isinstance(e, ToolCallFailed)]
    assert [(e.tool, e.error_type) for e in failed] == [("lookup", "ToolNotRecorded")]
    assert '{"query":"raft"}' in failed[0].message
    assert source in failed[0].message
    seen = json.loads(fw.REQUESTS[2].messages[-1]["content"])  # what the model was told
    assert seen["error"].startswith("ToolNotRecorded:")


def test_live_tools_run_every_tool(world: little.World) -> None:
    source = recorded(world)
    result = asyncio.run(
        little.replay_in_mode(world, source, mode="full", model=NEW, live_tools=True)
    )
    assert result.status == "completed"
    assert fw.LOOKUPS == ["kafka", "raft"]
    served = [e for e in events(world, result.run_id) if isinstance(e, ToolCallSucceeded)]
    assert [e.replayed_from_run_id for e in served] == [None, None]


def test_a_stopped_full_replay_resumes_with_its_recorded_model_and_receipts(
    world: little.World,
) -> None:
    source = recorded(world)
    control = RunControl()
    fw.STOP["stop"] = control
    with pytest.raises(ExecutionStopped):
        asyncio.run(
            execute(
                world,
                "full-1",
                fw.research,
                "kafka",
                replay_from=source,
                full_replay=FullReplay(NEW),
                control=control,
            )
        )
    fw.STOP.clear()
    asked = len(fw.REQUESTS)
    # resumed with no model given: the run's RunStarted names it
    result = asyncio.run(resume(world, "full-1"))
    assert result.status == "completed"
    assert result.output == "kafka and raft"
    assert fw.LOOKUPS == []
    assert len(fw.REQUESTS) > asked  # the named model, rebuilt from the log, answered
    served = [e for e in events(world, "full-1") if isinstance(e, ToolCallSucceeded)]
    assert [e.replayed_from_run_id for e in served] == [source]  # the receipt, once


def test_a_full_replay_is_refused_up_front_when_it_cannot_be_made(world: little.World) -> None:
    source = recorded(world)
    with pytest.raises(ConfigurationError, match="'nosuch'"):
        asyncio.run(little.replay_in_mode(world, source, mode="full", model="nosuch"))
    with pytest.raises(ConfigurationError, match="target-changed"):
        asyncio.run(
            little.replay_in_mode(world, source, mode="full", model=SAME, workflow=fw.other)
        )
    with pytest.raises(ConfigurationError, match="for mode full"):
        asyncio.run(little.replay_in_mode(world, source, model=SAME))  # type: ignore[call-overload]
    assert world.run_ids() == [source]  # nothing was started


def test_little_replay_full_from_the_command_line(world: little.World, tmp_path: Path) -> None:
    source = recorded(world)
    world.close()
    done = little_cli(
        "replay",
        source,
        "--mode",
        "full",
        "--model",
        SAME,
        "--workflows",
        "tests.little.runtime.full_replay_workflows",
        "--data-dir",
        str(tmp_path / "world"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["status"] == "completed"
    assert row["replay"]["source_run_id"] == source
    assert (row["replay"]["mode"], row["replay"]["model"]) == ("full", SAME)


def broken() -> None:
    raise RuntimeError("no model today")


def test_a_model_name_that_builds_nothing_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from little.harness import model_from_spec

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="needs ANTHROPIC_API_KEY in the environment"):
        model_from_spec("anthropic:claude-haiku-4-5")
    with pytest.raises(ConfigurationError, match=r"broken\(\) raised RuntimeError: no model"):
        model_from_spec("tests.little.runtime.test_full_replay:broken")
    with pytest.raises(ConfigurationError, match="has no 'nope'"):
        model_from_spec("tests.little.runtime.full_replay_workflows:nope")


def test_the_full_replay_does_the_recorded_task_under_its_budgets(world: little.World) -> None:
    source = asyncio.run(run(world, fw.research, "kafka", max_agent_calls=7)).run_id
    result = asyncio.run(little.replay_in_mode(world, source, mode="full", model=SAME))
    assert fw.REQUESTS[0].messages[0]["content"] == "research kafka"  # the source's input
    started = next(e for e in events(world, result.run_id) if isinstance(e, RunStarted))
    assert started.max_agent_calls == 7


def test_a_resumed_full_replay_takes_each_sessions_own_receipts(world: little.World) -> None:
    fw.NUMBERED.clear()
    source = asyncio.run(run(world, fw.twice, None)).run_id
    assert fw.NUMBERED == ["same", "same"]  # step one's call said 1, step two's said 2
    fw.NUMBERED.clear()
    control = RunControl()
    fw.STOP["stop"] = control
    echo = "tests.little.runtime.full_replay_workflows:echoes_tool"
    with pytest.raises(ExecutionStopped):
        asyncio.run(
            execute(
                world,
                "full-twice",
                fw.twice,
                replay_from=source,
                full_replay=FullReplay(echo),
                control=control,
            )
        )
    assert asyncio.run(resume(world, "full-twice")).status == "completed"
    assert fw.NUMBERED == []
    served = [e for e in events(world, "full-twice") if isinstance(e, ToolCallSucceeded)]
    assert [(e.step_path, e.result_json) for e in served] == [
        ("one", '"result 1"'),
        ("two", '"result 2"'),  # step two's own receipt, though step one ran before the stop
    ]


def test_a_sub_run_of_a_full_replay_is_a_full_replay_of_the_recorded_sub_run(
    world: little.World,
) -> None:
    source = asyncio.run(run(world, fw.parent, "kafka"))
    assert source.status == "completed"
    assert fw.LOOKUPS == ["kafka"]
    fw.LOOKUPS.clear()
    result = asyncio.run(little.replay_in_mode(world, source.run_id, mode="full", model=SAME))
    assert result.status == "completed"
    assert fw.LOOKUPS == []  # the sub-run's tool was served too
    (source_child,) = little.replay_run(world, source.run_id).state.sub_runs
    (child,) = little.replay_run(world, result.run_id).state.sub_runs
    started = next(e for e in events(world, child.sub_run_id) if isinstance(e, RunStarted))
    assert (started.replay_mode, started.replay_source_run_id) == (
        "full",
        source_child.sub_run_id,
    )
    sessions = [e for e in events(world, child.sub_run_id) if isinstance(e, SessionStarted)]
    assert [e.model for e in sessions] == ["anthropic:claude-haiku-4-5"]


def test_an_existing_run_is_never_taken_for_a_full_replay(world: little.World) -> None:
    source = recorded(world)
    with pytest.raises(ConfigurationError, match="is not this full replay"):
        asyncio.run(
            little.replay_in_mode(world, source, mode="full", model=SAME, new_run_id=source)
        )
    first = asyncio.run(little.replay_in_mode(world, source, mode="full", model=SAME))
    with pytest.raises(ConfigurationError, match="replay_model"):
        asyncio.run(
            little.replay_in_mode(world, source, mode="full", model=NEW, new_run_id=first.run_id)
        )


def sessions_of(world: little.World, run_id: str) -> dict[str, str]:
    return {e.session_name: e.model for e in events(world, run_id) if isinstance(e, SessionStarted)}


def test_a_full_replay_keeps_each_sessions_own_model_unless_told_otherwise(
    world: little.World,
) -> None:
    source = asyncio.run(run(world, fw.pair, "kafka"))
    assert source.status == "completed"
    fw.LOOKUPS.clear()
    own = {"researcher": "openai:gpt-4o", "writer": "openai:gpt-4o-mini"}
    assert sessions_of(world, source.run_id) == own
    # one agent's model changed: the other keeps the model its code names
    result = asyncio.run(
        little.replay_in_mode(world, source.run_id, mode="full", model=[f"researcher={SAME}"])
    )
    assert result.status == "completed", result.error
    assert result.output == ["kafka, in other words", "a write-up"]
    assert sessions_of(world, result.run_id) == {**own, "researcher": "anthropic:claude-haiku-4-5"}
    assert [r.messages[0]["content"] for r in fw.REQUESTS] == ["research kafka"] * 2
    assert fw.LOOKUPS == []  # tools still served from the receipts
    started = next(e for e in events(world, result.run_id) if isinstance(e, RunStarted))
    assert (started.replay_mode, started.replay_model) == ("full", f"researcher={SAME}")
    # no model named: every session keeps its own
    fw.REQUESTS.clear()
    kept = asyncio.run(little.replay_in_mode(world, source.run_id, mode="full"))
    assert kept.status == "completed", kept.error
    assert kept.output == source.output
    assert sessions_of(world, kept.run_id) == own
    assert fw.REQUESTS == []
    started = next(e for e in events(world, kept.run_id) if isinstance(e, RunStarted))
    assert (started.replay_mode, started.replay_model) == ("full", None)
    # one model for every session not named, beside a session's own
    both = asyncio.run(
        little.replay_in_mode(world, source.run_id, mode="full", model=[NEW, f"writer={SAME}"])
    )
    assert both.status == "completed", both.error
    assert both.output == ["kafka and raft", "kafka, in other words"]
    started = next(e for e in events(world, both.run_id) if isinstance(e, RunStarted))
    assert started.replay_model == f"{NEW} writer={SAME}"


def test_a_stopped_mapped_full_replay_resumes_with_its_recorded_models(
    world: little.World,
) -> None:
    source = asyncio.run(run(world, fw.pair, "kafka")).run_id
    control = RunControl()
    fw.STOP["stop"] = control
    with pytest.raises(ExecutionStopped):
        asyncio.run(
            execute(
                world,
                "full-map",
                fw.pair,
                replay_from=source,
                full_replay=FullReplay([f"researcher={NEW}"]),
                control=control,
            )
        )
    fw.STOP.clear()
    result = asyncio.run(resume(world, "full-map"))
    assert result.status == "completed", result.error
    assert result.output == ["kafka and raft", "a write-up"]
    assert sessions_of(world, "full-map") == {
        "researcher": "anthropic:claude-haiku-4-5",
        "writer": "openai:gpt-4o-mini",
    }


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (["nosuch=" + SAME], "no session named 'nosuch' (its sessions: researcher, writer)"),
        (["writer="], "'writer=' names no model"),
        (["=" + SAME], "names no session"),
        ([SAME, NEW], "two models for every session"),
        (["writer=" + SAME, "writer=" + NEW], "two models for session 'writer'"),
    ],
)
def test_a_bad_model_mapping_is_refused_before_anything_is_written(
    world: little.World, models: list[str], message: str
) -> None:
    source = asyncio.run(run(world, fw.pair, "kafka")).run_id
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        asyncio.run(little.replay_in_mode(world, source, mode="full", model=models))
    assert world.run_ids() == [source]


def test_little_replay_full_maps_sessions_to_models_from_the_command_line(
    world: little.World, tmp_path: Path
) -> None:
    source = asyncio.run(run(world, fw.pair, "kafka")).run_id
    world.close()
    common = ("--workflows", "tests.little.runtime.full_replay_workflows")
    common += ("--data-dir", str(tmp_path / "world"))
    done = little_cli(
        "replay", source, "--mode", "full", "--model", f"writer={SAME}", *common, "--json"
    )
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["status"] == "completed"
    assert row["replay"]["model"] == f"writer={SAME}"
    kept = little_cli("replay", source, "--mode", "full", *common, "--json")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["replay"]["model"] is None
    for bad, says in (
        (("--model", f"editor={SAME}"), "no session named 'editor'"),
        (("--model", "writer="), "'writer=' names no model"),
        (("--model", SAME, "--model", NEW), "two models for every session"),
    ):
        refused = little_cli("replay", source, "--mode", "full", *bad, *common)
        assert refused.returncode != 0
        assert says in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

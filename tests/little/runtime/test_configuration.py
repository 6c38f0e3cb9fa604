"""What makes replay deterministic (issue 15 item 7): the run's configuration is hashed into
``RunStarted`` v4; a replay under another configuration is refused naming what changed
(strict) or proceeds and says so (repairable: recorded, shown by ``little report``); a resume
told other budgets is refused naming them; a run logged before v4 has its configuration
derived from its recorded fields."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.errors import ConfigurationError
from little.events import AgentCallSettled, RunStarted
from little.replay import (
    configuration_changes,
    configuration_json,
    replay_run,
    state_configuration,
)
from little.report import configuration_data, configuration_line
from little.runtime import run, send_signal
from tests.cli import little_cli
from tests.little.runtime import compaction_workflows as cw
from tests.little.runtime import replay_workflows as rw

_versions = itertools.count()


def fresh_version(**kwargs: Any) -> Any:
    return rw.version(f"c{next(_versions)}", **kwargs)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    rw.MODELS.clear()
    rw.FAIL.clear()
    rw.WRITES.clear()
    with little.local_world(tmp_path / "world") as w:
        yield w


def started(world: little.World, run_id: str) -> RunStarted:
    (e,) = [e for x in world.read_run(run_id) if isinstance(e := x.event, RunStarted)]
    return e


def served(world: little.World, run_id: str) -> list[bool]:
    return [
        e.replayed for x in world.read_run(run_id) if isinstance(e := x.event, AgentCallSettled)
    ]


def test_a_run_records_its_configuration_and_its_hash(world: little.World) -> None:
    wf = fresh_version()
    result = asyncio.run(run(world, wf, "Kafka", max_agent_calls=10))
    e = started(world, result.run_id)
    assert e.config_json is not None
    assert e.config_sha256 == hashlib.sha256(e.config_json.encode()).hexdigest()
    config = json.loads(e.config_json)
    assert config == {
        "v": 1,
        "workflow": rw.NAME,
        "workflow_version": wf.version,
        "source_sha256": e.source_sha256,
        "source_coverage": "self-contained",
        "budgets": {"max_agent_calls": 10, "max_tokens": None},
    }
    assert e.config_changes == ()  # not a replay
    state = replay_run(world, result.run_id).state
    assert state.config_sha256 == e.config_sha256
    # the recorded configuration is the one its fields derive
    assert configuration_json(state_configuration(state) or {}) == (e.config_json, e.config_sha256)
    data = configuration_data(state)
    assert data is not None
    assert data["recorded"] is True
    assert data["sha256"] == e.config_sha256


def test_a_repairable_replay_under_other_budgets_proceeds_and_says_so(
    world: little.World, tmp_path: Path
) -> None:
    wf = fresh_version()
    first = asyncio.run(run(world, wf, "Kafka", max_agent_calls=10))
    second = asyncio.run(
        run(world, wf, "Kafka", max_agent_calls=5, max_tokens=900, replay_from=first.run_id)
    )
    assert second.status == "completed"
    assert served(world, second.run_id) == [True, True, True]  # it proceeded
    e = started(world, second.run_id)
    assert e.replay_refused_reason is None
    assert e.config_changes == (
        "budgets.max_agent_calls: 10 -> 5",
        "budgets.max_tokens: none -> 900",
    )
    state = replay_run(world, second.run_id).state
    assert configuration_line(state) == (
        f"configuration changed from {first.run_id}: budgets.max_agent_calls: 10 -> 5; "
        "budgets.max_tokens: none -> 900 (replay proceeded, repairable mode)"
    )
    world.close()
    data_dir = str(tmp_path / "world")
    out = little_cli("report", second.run_id, "--data-dir", data_dir)
    assert out.returncode == 0, out.stderr
    assert "budgets.max_agent_calls: 10 -> 5" in out.stdout
    assert "(replay proceeded, repairable mode)" in out.stdout
    out = little_cli("report", second.run_id, "--json", "--data-dir", data_dir)
    report = json.loads(out.stdout)
    assert report["configuration"]["changes_from_source"] == list(e.config_changes)
    assert report["configuration"]["sha256"] == e.config_sha256


def test_a_strict_replay_under_other_budgets_is_refused_naming_what_changed(
    world: little.World,
) -> None:
    wf = fresh_version()
    first = asyncio.run(run(world, wf, "Kafka", max_agent_calls=10))
    second = asyncio.run(
        run(world, wf, "Kafka", max_agent_calls=5, replay_from=first.run_id, replay_mode="strict")
    )
    assert second.status == "completed"
    e = started(world, second.run_id)
    assert e.replay_refused_reason == "configuration-changed"
    assert e.config_changes == ("budgets.max_agent_calls: 10 -> 5",)
    assert served(world, second.run_id) == [False, False, False]  # ran fresh
    assert rw.invocations("research") == 2
    state = replay_run(world, second.run_id).state
    line = configuration_line(state)
    assert line is not None
    assert line.endswith("budgets.max_agent_calls: 10 -> 5 (replay refused)")


def test_a_strict_replay_under_the_same_configuration_is_served(world: little.World) -> None:
    wf = fresh_version()
    first = asyncio.run(run(world, wf, "Kafka", max_agent_calls=10))
    second = asyncio.run(
        run(world, wf, "Kafka", max_agent_calls=10, replay_from=first.run_id, replay_mode="strict")
    )
    assert served(world, second.run_id) == [True, True, True]
    e = started(world, second.run_id)
    assert (e.replay_refused_reason, e.config_changes) == (None, ())
    assert e.config_sha256 == started(world, first.run_id).config_sha256
    assert configuration_line(replay_run(world, second.run_id).state) is None


def test_a_repairable_replay_of_an_edited_source_lists_the_source_change(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, fresh_version(), "Kafka"))
    edited = asyncio.run(
        run(world, fresh_version(write="Write it up: "), "Kafka", replay_from=first.run_id)
    )
    changes = started(world, edited.run_id).config_changes
    # another version of the same module: the version changed, the bytes did not
    assert len(changes) == 1
    assert changes[0].startswith("workflow_version: ")


def test_a_resume_told_other_budgets_is_refused_before_claiming(world: little.World) -> None:
    cw.REQUESTS.clear()
    cw.INVOCATIONS.clear()
    cw.POLICY["policy"] = cw.trim()
    paused = {"prompts": ["p0", "p1", "p2"], "pause_after": 0}
    first = asyncio.run(run(world, cw.conversation, paused, run_id="r-budget", max_agent_calls=10))
    assert first.status == "waiting"
    asyncio.run(send_signal(world, first.run_id, "go"))
    before = len(list(world.read_run(first.run_id)))
    with pytest.raises(ConfigurationError) as caught:
        asyncio.run(run(world, cw.conversation, paused, run_id="r-budget", max_agent_calls=5))
    assert "configuration changed: budgets.max_agent_calls: 10 -> 5" in str(caught.value)
    assert len(list(world.read_run(first.run_id))) == before  # nothing appended: no claim
    assert cw.INVOCATIONS == {"chat": 1}
    # the same budgets (a StartRun sent again) or none (a resume) are no change
    again = asyncio.run(run(world, cw.conversation, paused, run_id="r-budget", max_agent_calls=10))
    assert again.status == "completed"
    assert cw.INVOCATIONS == {"chat": 3}


def test_a_source_logged_before_run_started_v4_has_its_configuration_derived(
    world: little.World,
) -> None:
    wf = fresh_version()
    first = asyncio.run(run(world, wf, "Kafka", max_agent_calls=10))
    # the same run as a writer before v4 logged it: no configuration fields on RunStarted
    old_events = []
    for item in world.read_run(first.run_id):
        e = item.event.model_copy(update={"run_id": "old-run"})
        if isinstance(e, RunStarted):
            e = e.model_copy(update={"config_sha256": None, "config_json": None})
        old_events.append(e)
    world.append(old_events)
    old = replay_run(world, "old-run").state
    assert old.config_sha256 is None
    data = configuration_data(old)
    assert data is not None
    assert data["recorded"] is False
    assert data["sha256"] == started(world, first.run_id).config_sha256  # derived, exactly
    strict = asyncio.run(
        run(world, wf, "Kafka", max_agent_calls=10, replay_from="old-run", replay_mode="strict")
    )
    assert served(world, strict.run_id) == [True, True, True]
    assert started(world, strict.run_id).config_changes == ()


def test_configuration_changes_name_each_part_and_shorten_hashes() -> None:
    before = {"v": 1, "source_sha256": "a" * 64, "budgets": {"max_tokens": None, "x": 1}}
    after = {"v": 2, "source_sha256": "b" * 64, "budgets": {"max_tokens": 5, "x": 1}}
    assert configuration_changes(before, after) == (
        "budgets.max_tokens: none -> 5",
        f"source_sha256: {'a' * 12}... -> {'b' * 12}...",
    )
    assert configuration_changes(before, before) == ()

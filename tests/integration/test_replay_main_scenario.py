"""Issue 16's main scenario, on the embedded world and on the real broker: a five-stage
pipeline whose stage 4 prompt is edited and re-run against its record. Stages 1-3 are served
from the record, 4 and 5 run fresh, and the models' own invocation logs show exactly that."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.events import AgentCallSettled
from little.harness import count_invocations
from little.replay import replay_run
from little.runtime import run
from tests.little.runtime import replay_workflows as rw
from tests.worlds import world_of_param

_versions = itertools.count()


@pytest.fixture(
    params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)],
)
def world(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[little.World]:
    rw.MODELS.clear()
    with world_of_param(request, tmp_path, f"t.{unique}.") as w:
        yield w


def test_editing_stage_four_of_five_re_runs_stages_four_and_five_only(
    world: little.World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls_dir = tmp_path / "calls"
    monkeypatch.setenv("LITTLE_EXAMPLE_CALLS_DIR", str(calls_dir))
    first = asyncio.run(run(world, rw.five_stages(f"m{next(_versions)}"), "Kafka"))
    assert first.status == "completed"

    edited = rw.five_stages(f"m{next(_versions)}", draft="Draft a short post from: ")
    second = asyncio.run(run(world, edited, "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    assert second.output[:3] == first.output[:3]
    assert second.output[3].startswith("draft: answer to [Draft a short post from: ")

    # what each model really did, from its own log: one call per stage in the recorded run,
    # and one more for stages 4 and 5 only
    invoked = {
        s: sum(count_invocations(calls_dir / f"replay-{s}.jsonl").values()) for s in rw.STAGES
    }
    assert invoked == {"gather": 1, "analyse": 1, "outline": 1, "draft": 2, "polish": 2}
    marks = [
        (e.step_path, e.replayed, e.miss_reason)
        for x in world.read_run(second.run_id)
        if isinstance(e := x.event, AgentCallSettled)
    ]
    assert marks == [
        ("gather", True, None),
        ("analyse", True, None),
        ("outline", True, None),
        ("draft", False, "key-mismatch"),
        ("polish", False, "diverged"),
    ]
    state = replay_run(world, second.run_id).state
    assert (state.usage.calls, state.avoided_usage.calls) == (2, 3)

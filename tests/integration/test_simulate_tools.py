"""Simulation runs tool code and compares it with the receipt (issue 26 item 7), on the
embedded world and on the real broker: the golden run is read from the world's log (on Kafka,
its partition and the run index), the simulation runs in a sandbox of its own."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.runtime import run, simulate
from tests.little.runtime import replay_workflows as rw
from tests.worlds import world_of_param

_versions = itertools.count()


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def world(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[little.World]:
    rw.MODELS.clear()
    rw.LOOKUPS.clear()
    rw.WRITES.clear()
    with world_of_param(request, tmp_path, f"t.{unique}.") as w:
        yield w


def test_an_edited_tool_diverges_at_its_call_and_a_side_effecting_one_is_served(
    world: little.World,
) -> None:
    golden = asyncio.run(run(world, rw.tooled(f"k{next(_versions)}", writes=True), "kafka"))
    assert golden.status == "completed"
    assert (rw.LOOKUPS, rw.WRITES) == (["1:l1"], ["kafka"])

    same = asyncio.run(
        simulate(world, rw.tooled(f"k{next(_versions)}", writes=True), golden.run_id)
    )
    assert same.identical, same.lines()
    assert (rw.LOOKUPS, rw.WRITES) == (["1:l1", "1:l1"], ["kafka"])
    assert same.tools_run == ("agent call 0 (define#define): tool look_up (call 1:l1)",)
    assert same.tools_served == (
        "agent call 0 (define#define): tool write_report (call 1:w1): side-effecting, served "
        "from the golden run",
    )

    edited = rw.tooled(f"k{next(_versions)}", looked_up="ERROR", writes=True)
    sim = asyncio.run(simulate(world, edited, golden.run_id))
    d = sim.divergence
    assert d is not None, sim.lines()
    assert d.ordinal == 0
    assert d.got == (
        'agent call 0 (define#define): tool look_up (call 1:l1) returned "ERROR" but the '
        'golden run recorded "kafka: a word"'
    )
    assert sim.lines()[0] == f"diverged from {golden.run_id} at trace entry {d.index}:"
    assert rw.invocations("define") == 2  # the golden run's two model calls only
    assert rw.WRITES == ["kafka"]


def test_a_tool_divergence_the_workflow_catches_is_still_the_divergence(
    world: little.World,
) -> None:
    golden = asyncio.run(run(world, rw.tooled(f"k{next(_versions)}", catches=True), "kafka"))
    assert golden.status == "completed"
    edited = rw.tooled(f"k{next(_versions)}", looked_up="ERROR", catches=True)
    sim = asyncio.run(simulate(world, edited, golden.run_id))
    assert sim.divergence is not None, sim.lines()  # latched: the catch does not hide it
    assert sim.divergence.got is not None
    assert 'tool look_up (call 1:l1) returned "ERROR"' in sim.divergence.got

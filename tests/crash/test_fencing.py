"""Fencing (DESIGN §4): a resumer claims the run with a higher epoch; the old owner becomes a
zombie whose later events the fold ignores and counts. Two claims with the same epoch: the
first in the log wins and the second claimer backs off.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import Event, LoggedEvent, RunClaimed, RunCompleted, RunStarted, StepStarted
from little.examples.research import research
from little.replay import fold_run, replay_run
from little.runtime import ClaimRejectedError, claim, execute
from little.runtime._writer import RunWriter
from tests.crash.support import (
    REPO,
    RESEARCH_INPUT,
    Scenario,
    finish,
    spawn,
    start_args,
)
from tests.crash.workflows import GATE

RUN_ID = "run_fenced"
OUTPUT = {"answer": "done", "squared": 49}


def test_a_zombie_writer_is_fenced_by_the_resumer(tmp_path: Path) -> None:
    sc = Scenario(tmp_path)
    gate = tmp_path / "gate"
    # A: blocks inside its first model call until the gate opens
    a = spawn(sc.data_dir, RUN_ID, *start_args("gated", None), env=sc.env(**{GATE: gate}))
    try:
        deadline = time.monotonic() + 60
        while not any(e.event.type == "harness.model.called" for e in _events(sc)):
            assert a.poll() is None, finish(a).describe()
            assert time.monotonic() < deadline, "A never reached its first model call"
            time.sleep(0.05)
        # B: resumes the same run while A is mid-call (claims epoch 2) and completes it
        b = finish(spawn(sc.data_dir, RUN_ID, "resume", env=sc.env()))
    finally:
        gate.touch()  # A wakes up and carries on, not knowing it was fenced
        a_done = finish(a)
    assert b.returncode == 0, b.describe()
    assert b.result == {"status": "completed", "output": OUTPUT, "error": None}
    assert a_done.returncode == 0, a_done.describe()
    assert a_done.result["output"] == OUTPUT  # the zombie believes it finished the run

    logged = _events(sc)
    (b_claim,) = [le for le in logged if isinstance(le.event, RunClaimed) and le.event.epoch == 2]
    late = [
        le.event
        for le in logged
        if le.offset > b_claim.offset and le.event.epoch == 1 and le.event.type != "RunClaimed"
    ]
    # A kept appending with epoch 1 after B's claim, to the end of the run
    assert [e.type for e in late][:2] == ["harness.model.responded", "harness.tool_call.started"]
    assert isinstance(late[-1], RunCompleted)

    state = sc.fold(RUN_ID)
    assert state.fenced_events == len(late)
    assert state.status == "completed"
    assert state.epoch == 2
    assert state.owner is not None
    assert f"/{b.pid}/" in state.owner  # B's run, not A's
    assert state.accepted_claims == 2
    assert state.rejected_claims == 0
    assert json.loads(state.output_json or "null") == OUTPUT
    # contiguous seq among accepted events: A's up to B's claim, then B's
    accepted = [
        le.event
        for le in logged
        if le.event.type != "RunClaimed" and (le.event.epoch == 2 or le.offset < b_claim.offset)
    ]
    assert [e.seq for e in accepted] == list(range(len(accepted)))
    assert state.last_seq == len(accepted) - 1
    (completed,) = [e for e in accepted if isinstance(e, RunCompleted)]
    assert completed.epoch == 2
    # B invoked the call A was blocked in again; A's late turn 2 is a zombie's spend
    turns = [(e["turn"], e["pid"]) for e in sc.calls("model")]
    assert sorted(turns) == sorted([(1, a.pid), (1, b.pid), (2, b.pid), (2, a.pid)])

    # the sub-run: B ran it; A found it completed in its own log and wrote nothing to it
    (sub,) = state.sub_runs
    sub_state = sc.fold(sub.sub_run_id)
    assert sub_state.status == "completed"
    assert (sub_state.accepted_claims, sub_state.fenced_events) == (1, 0)
    sub_events = [le.event for le in sc.events(sub.sub_run_id)]
    (sub_claim,) = [e for e in sub_events if isinstance(e, RunClaimed)]
    assert f"/{b.pid}/" in sub_claim.owner
    assert {e.producer for e in sub_events if e is not sub_claim} == {
        e.producer for e in accepted if e.epoch == 2
    }
    assert [e["pid"] for e in sc.calls("steps") if e["step"] == "square:compute"] == [b.pid]

    with little.local_world(sc.data_dir) as world:
        replayed = replay_run(world, RUN_ID)
    assert replayed.state == state
    assert replayed.pending_step_paths == ()
    assert set(replayed.completed_step_paths) == {"ask", "start_workflow/square.1"}

    little_cli = str(Path(sys.executable).with_name("little"))
    report = subprocess.run(
        [little_cli, "report", RUN_ID, "--data-dir", str(sc.data_dir), "--json"],
        cwd=REPO,
        env=sc.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["status"] == "completed"
    assert data["epoch"] == 2
    assert data["fenced_events"] == state.fenced_events
    assert data["billed"]["calls"] == 2  # the log's two responses; A's late ones are fenced


def _events(sc: Scenario) -> list[LoggedEvent]:
    return sc.events(RUN_ID)


class RacingWorld:
    """The real embedded world, where another writer's append lands just before this
    claimer's first append (between the fold it took its epoch from and its claim)."""

    def __init__(self, inner: little.World, meanwhile: Callable[[], Awaitable[Any]]) -> None:
        self.inner = inner
        self.meanwhile: Callable[[], Awaitable[Any]] | None = meanwhile

    def submit(self, events: list[Event], *, after: Any = None) -> Any:
        if self.meanwhile is None:
            return self.inner.submit(events, after=after)
        meanwhile, self.meanwhile = self.meanwhile, None

        async def after_the_other_writer() -> Any:
            await meanwhile()  # lands first, then this append is submitted
            return await self.inner.submit(events)

        return asyncio.ensure_future(after_the_other_writer())

    def read_run(self, run_id: str, *, after: Any = None) -> Iterator[LoggedEvent]:
        return self.inner.read_run(run_id, after=after)

    @property
    def artifacts(self) -> Any:
        return self.inner.artifacts

    @property
    def snapshots(self) -> Any:
        return self.inner.snapshots


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "data") as w:
        yield w


def test_a_second_claim_with_the_same_epoch_is_rejected(world: little.World) -> None:
    # both claimers folded an empty run and claim epoch 1; A's claim lands first
    racing = RacingWorld(world, lambda: claim(world, RUN_ID, "A"))
    with pytest.raises(ClaimRejectedError, match="rejected"):
        asyncio.run(claim(racing, RUN_ID, "B"))  # type: ignore[arg-type]

    logged = list(world.read_run(RUN_ID))
    assert [(e.event.type, e.event.epoch) for e in logged] == [("RunClaimed", 1)] * 2
    assert [e.event.owner for e in logged if isinstance(e.event, RunClaimed)] == ["A", "B"]
    state, _, _ = fold_run(world, RUN_ID)
    assert (state.epoch, state.owner) == (1, "A")
    assert (state.accepted_claims, state.rejected_claims) == (1, 1)


def test_a_rejected_claimer_backs_off_without_writing(world: little.World) -> None:
    racing = RacingWorld(world, lambda: claim(world, RUN_ID, "A"))
    with pytest.raises(ClaimRejectedError):
        asyncio.run(execute(racing, RUN_ID, research, RESEARCH_INPUT, owner="B"))
    # B wrote its (rejected) claim and nothing else
    assert [type(e.event) for e in world.read_run(RUN_ID)] == [RunClaimed, RunClaimed]
    # A still owns epoch 1 and can run the workflow from its claim
    state, _, _ = fold_run(world, RUN_ID)
    assert state.owner == "A"
    assert state.last_seq == -1


def test_a_claim_folds_what_the_old_owner_landed_just_before_it(world: little.World) -> None:
    """B takes its epoch from a fold at seq 0; A lands seq 1 before B's claim: B continues at
    seq 2, and A's later seq 2 (epoch 1) is fenced."""
    _, a = asyncio.run(claim(world, RUN_ID, "A"))
    asyncio.run(a.emit(RunStarted, workflow="w", workflow_version="1", input_json="null"))

    async def a_lands_one_more() -> None:
        await a.emit(StepStarted, step_path="s", step_id="s")

    racing = RacingWorld(world, a_lands_one_more)
    state, b = asyncio.run(claim(racing, RUN_ID, "B"))  # type: ignore[arg-type]
    assert (state.epoch, state.owner, state.last_seq) == (2, "B", 1)
    assert isinstance(b, RunWriter)
    assert (b.epoch, b.next_seq) == (2, 2)
    asyncio.run(a.emit(StepStarted, step_path="t", step_id="t"))  # the zombie's seq 2
    asyncio.run(b.emit(StepStarted, step_path="u", step_id="u"))  # B's seq 2
    state, _, _ = fold_run(world, RUN_ID)
    assert state.fenced_events == 1
    assert state.last_seq == 2
    assert state.epoch == 2
    assert [s.step_path for s in state.steps] == ["s", "u"]

"""Deterministic simulation against a golden run (issue 15 item 6): the current workflow code
re-executed with every call served from the golden run's record, never invoking a model;
identical, or the first divergence with what re-running from it would spend."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

import little
from little.runtime import run, simulate
from little.runtime._recorded import SIMULATING
from tests.little.runtime import replay_workflows as rw
from tests.paths import REPO

_versions = itertools.count()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    rw.MODELS.clear()
    rw.FAIL.clear()
    with little.local_world(tmp_path) as w:
        yield w


def invoked() -> dict[str, int]:
    return {stage: rw.invocations(stage) for stage in ("research", "outline", "write")}


def golden(world: little.World) -> str:
    result = asyncio.run(run(world, rw.version(f"g{next(_versions)}"), "Kafka"))
    assert result.status == "completed"
    return result.run_id


def test_the_unchanged_workflow_simulates_identically_and_invokes_nothing(
    world: little.World,
) -> None:
    run_id = golden(world)
    events = len(list(world.read_run(run_id)))
    sim = asyncio.run(simulate(world, rw.version(f"g{next(_versions)}"), run_id))
    assert sim.identical, sim.lines()
    assert sim.lines() == [f"identical to {run_id}"]
    assert sim.result is not None
    assert sim.result.status == "completed"
    assert invoked() == {"research": 1, "outline": 1, "write": 1}  # the golden run's only
    assert len(list(world.read_run(run_id))) == events  # the golden world is only read
    assert list(world.read_run(sim.result.run_id)) == []  # the simulated run is not in it
    assert SIMULATING.get() is None


def test_an_edited_prompt_diverges_at_its_call_and_says_what_re_running_costs(
    world: little.World,
) -> None:
    run_id = golden(world)
    edited = rw.version(f"g{next(_versions)}", write="Write a short post from: ")
    sim = asyncio.run(simulate(world, edited, run_id))
    assert not sim.identical
    d = sim.divergence
    assert d is not None
    assert d.ordinal == 2
    assert d.expected is not None
    assert d.expected.startswith("agent call write/write#0 request ")
    assert d.got == "agent call 2 (write/write#0) would be invoked: key-mismatch"
    assert sim.calls_after == 1
    assert sim.cost_after is not None
    assert sim.lines()[-1] == (
        f"re-running from call 2 would re-spend about ${sim.cost_after.quantize(Decimal('0.000001'))}"
        " at today's prices: 1 model call(s) recorded from it"
    )
    assert sim.cost_after > 0
    assert invoked() == {"research": 1, "outline": 1, "write": 1}  # nothing was invoked


def test_a_changed_structure_diverges_at_the_first_different_step(world: little.World) -> None:
    run_id = golden(world)
    sim = asyncio.run(
        simulate(world, rw.reshaped(f"g{next(_versions)}", outline_step="plan"), run_id)
    )
    d = sim.divergence
    assert d is not None
    assert (d.expected, d.got) == ("step outline (visit 1)", "step plan (visit 1)")
    assert invoked() == {"research": 1, "outline": 1, "write": 1}


def test_a_refused_replay_is_a_divergence_before_anything_runs(world: little.World) -> None:
    run_id = golden(world)

    @little.runtime.workflow("tests.simulate.other")
    async def other(ctx: little.runtime.WorkflowContext, topic: str) -> str:
        return "other"

    sim = asyncio.run(simulate(world, other, run_id))
    assert sim.divergence is not None
    assert sim.divergence.got == "replay refused: target-changed"
    assert sim.result is None


def test_assert_replays_passes_on_the_same_code_and_names_the_divergence_otherwise(
    world: little.World,
) -> None:
    from little.testing import assert_replays

    run_id = golden(world)
    assert assert_replays(world, run_id, rw.version(f"g{next(_versions)}")).identical
    edited = rw.version(f"g{next(_versions)}", outline="Outline in three points: ")
    with pytest.raises(AssertionError, match=r"agent call 1 .* would be invoked: key-mismatch"):
        assert_replays(world, run_id, edited)


def test_little_replay_simulate_exits_by_what_it_found(world: little.World, tmp_path: Path) -> None:
    from tests.cli import little_cli

    run_id = golden(world)
    (tmp_path / "flows.py").write_text(
        "from tests.little.runtime import replay_workflows as rw\n"
        "same = rw.version('cli-same')\n"
        "edited = rw.version('cli-edited', write='Write a short post from: ')\n"
    )
    env_dir = str(tmp_path)

    repo = str(REPO)  # flows.py imports the tests' workflows
    path = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}

    def sim(target: str) -> tuple[int, str, str]:
        out = little_cli(
            "replay",
            run_id,
            "--mode",
            "simulate",
            "--workflow",
            target,
            "--data-dir",
            env_dir,
            cwd=tmp_path,
            env=env,
        )
        return out.returncode, out.stdout, out.stderr

    code, out, err = sim("flows:same")
    assert code == 0, err
    assert out.strip() == f"identical to {run_id}"
    code, out, err = sim("flows:edited")
    assert code == 1
    assert "expected: agent call write/write#0 request " in out
    assert "got:      agent call 2 (write/write#0) would be invoked: key-mismatch" in out
    assert "re-running from call 2 would re-spend about $" in out
    assert err.startswith(f"error: run {run_id}: the simulation diverged at trace entry 5")


@pytest.mark.parametrize("slow", ["a", "b"])
def test_parallel_branches_simulate_identically_whatever_their_timing(
    world: little.World, slow: str
) -> None:
    """Sibling branches interleave by how long their calls take, and a served call takes
    none: the trace is compared per scope, branches in name order, so the same code is
    identical whichever branch was slow when the golden run was recorded."""
    source = asyncio.run(run(world, rw.fanned(f"sf{next(_versions)}", slow=slow), "Kafka"))
    assert source.status == "completed"
    sim = asyncio.run(simulate(world, rw.fanned(f"sf{next(_versions)}", slow=slow), source.run_id))
    assert sim.identical, sim.lines()
    edited = rw.fanned(f"sf{next(_versions)}", slow=slow, b="Contrarian angle on ")
    d = asyncio.run(simulate(world, edited, source.run_id)).divergence
    assert d is not None
    assert d.got is not None
    assert d.got.endswith("(fan/b/first/b1#0) would be invoked: key-mismatch")


def test_a_side_effecting_call_is_served_in_a_simulation(world: little.World) -> None:
    """A replay re-runs a side-effecting call (it reuses answers, not effects); a simulation
    invokes nothing, so serving its record repeats no effect."""
    rw.WRITES.clear()
    source = asyncio.run(run(world, rw.version(f"g{next(_versions)}", writes="write"), "Kafka"))
    assert len(rw.WRITES) == 1
    same = rw.version(f"g{next(_versions)}", writes="write")
    sim = asyncio.run(simulate(world, same, source.run_id))
    assert sim.identical, sim.lines()
    assert len(rw.WRITES) == 1  # the tool did not run again


def test_a_sub_run_is_simulated_against_the_golden_runs_sub_run(world: little.World) -> None:
    """A sub-run is a run of its own: the simulated run's is simulated against the one the
    golden run started at the same call, and its trace is compared inside its parent's."""
    golden_run = asyncio.run(run(world, rw.nested(f"n{next(_versions)}"), "Kafka"))
    assert golden_run.status == "completed"
    counts = {stage: rw.invocations(stage) for stage in ("research", "sum", "write")}
    assert counts == {"research": 1, "sum": 1, "write": 1}

    sim = asyncio.run(simulate(world, rw.nested(f"n{next(_versions)}"), golden_run.run_id))
    assert sim.identical, sim.lines()
    assert {stage: rw.invocations(stage) for stage in counts} == counts  # nothing invoked

    edited = rw.nested(f"n{next(_versions)}", child="Shorten: ")
    d = asyncio.run(simulate(world, edited, golden_run.run_id)).divergence
    assert d is not None
    call = f"start_workflow/{rw.NESTED_CHILD}.1/sub1"
    assert d.expected is not None
    assert d.expected.startswith(f"{call}> agent call sum/sum#0 request ")
    assert d.got == (
        f"sub-run {rw.NESTED_CHILD} at {call}: agent call 0 (sum/sum#0) would be invoked: key-mismatch"
    )
    assert d.ordinal is None  # a call of the sub-run: no cost line for the parent's calls
    assert {stage: rw.invocations(stage) for stage in counts} == counts


def test_a_sub_run_the_golden_run_did_not_start_is_a_divergence(world: little.World) -> None:
    inline = asyncio.run(run(world, rw.nested(f"n{next(_versions)}", sub=False), "Kafka"))
    sim = asyncio.run(simulate(world, rw.nested(f"n{next(_versions)}"), inline.run_id))
    d = sim.divergence
    assert d is not None
    assert (d.expected, d.got) == (
        "step sum (visit 1)",
        f"step start_workflow/{rw.NESTED_CHILD}.1 (visit 1)",
    )


def test_a_changed_request_hash_chain_is_a_divergence(
    world: little.World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served exchange invokes nothing, but its turns' request hashes are what a resume of
    a recorded run checks: built otherwise (canonical JSON or the chain changed), they are a
    divergence at the call."""
    import little.runtime._session as session

    run_id = golden(world)
    chain = session.chain_hash
    monkeypatch.setattr(session, "chain_hash", lambda p, a: chain(p, a + " "))
    sim = asyncio.run(simulate(world, rw.version(f"g{next(_versions)}"), run_id))
    d = sim.divergence
    assert d is not None
    assert d.expected is not None
    assert d.expected.startswith("agent call research/research#0 request ")
    assert d.got is not None
    assert d.got.startswith("agent call 0 (research#research): turn 1 builds request ")
    assert d.got.endswith("...: the request hash chain changed")
    assert d.ordinal == 0
    assert sim.calls_after == 3


def test_a_golden_run_whose_step_was_tried_again_simulates_identically(
    world: little.World,
) -> None:
    """The golden run's first attempt of the step answered a call then failed; the second
    opened the session anew. The served exchange is the second attempt's: its request hashes
    are checked against that attempt's turns."""
    from tests.little.runtime import chat_workflows as cw

    cw.REQUESTS.clear()
    source = asyncio.run(run(world, cw.glossary(f"r{next(_versions)}", fail_at=2), "x"))
    assert source.status == "completed"
    sent = len(cw.REQUESTS)
    sim = asyncio.run(simulate(world, cw.glossary(f"r{next(_versions)}", fail_at=2), source.run_id))
    assert sim.identical, sim.lines()
    assert len(cw.REQUESTS) == sent  # nothing invoked


# -- tool code runs in a simulation (issue 26 item 7) ----------------------------------------


def test_a_simulation_runs_each_tool_call_and_compares_its_result(world: little.World) -> None:
    """Seed 004: tool code is not re-executed unless in simulation mode. The unchanged tool
    runs again and matches; a tool edited to return something else is the divergence, named
    at its call, with nothing invoked but the tool."""
    rw.LOOKUPS.clear()
    source = asyncio.run(run(world, rw.tooled(f"t{next(_versions)}"), "kafka"))
    assert source.status == "completed"
    assert rw.LOOKUPS == ["1:l1"]

    same = asyncio.run(simulate(world, rw.tooled(f"t{next(_versions)}"), source.run_id))
    assert same.identical, same.lines()
    assert rw.LOOKUPS == ["1:l1", "1:l1"]  # the tool ran again
    assert same.tools_run == ("agent call 0 (define#define): tool look_up (call 1:l1)",)
    assert same.lines() == [
        f"identical to {source.run_id}",
        "1 tool call(s) ran again and returned what the golden run recorded",
    ]

    edited = rw.tooled(f"t{next(_versions)}", looked_up="ERROR")
    sim = asyncio.run(simulate(world, edited, source.run_id))
    d = sim.divergence
    assert d is not None, sim.lines()
    assert d.ordinal == 0
    assert d.expected is not None
    assert d.expected.startswith("agent call define/define#0 request ")
    assert d.got == (
        'agent call 0 (define#define): tool look_up (call 1:l1) returned "ERROR" but the '
        'golden run recorded "kafka: a word"'
    )
    assert sim.calls_after == 2  # the exchange's two model calls
    assert rw.invocations("define") == 2  # the golden run's only: no model was asked
    assert rw.LOOKUPS == ["1:l1", "1:l1", "1:l1"]


def test_a_side_effecting_tool_call_is_served_and_the_report_says_so(
    world: little.World,
) -> None:
    rw.LOOKUPS.clear()
    rw.WRITES.clear()
    source = asyncio.run(run(world, rw.tooled(f"t{next(_versions)}", writes=True), "kafka"))
    assert source.status == "completed"
    assert (rw.LOOKUPS, rw.WRITES) == (["1:l1"], ["kafka"])

    sim = asyncio.run(simulate(world, rw.tooled(f"t{next(_versions)}", writes=True), source.run_id))
    assert sim.identical, sim.lines()
    assert (rw.LOOKUPS, rw.WRITES) == (["1:l1", "1:l1"], ["kafka"])  # the write did not repeat
    served = "agent call 0 (define#define): tool write_report (call 1:w1): side-effecting"
    assert sim.tools_served == (f"{served}, served from the golden run",)
    assert sim.lines() == [
        f"identical to {source.run_id}",
        "1 tool call(s) ran again and returned what the golden run recorded",
        "1 tool call(s) not run, served as recorded:",
        f"  {served}, served from the golden run",
    ]


def test_a_tool_divergence_the_workflow_catches_is_still_the_divergence(
    world: little.World,
) -> None:
    """The divergence at a tool call is an integrity error: latched, so a stage that catches
    it and answers as the golden run did does not make the simulation identical."""
    rw.LOOKUPS.clear()
    source = asyncio.run(run(world, rw.tooled(f"t{next(_versions)}", catches=True), "kafka"))
    assert source.status == "completed"
    same = asyncio.run(
        simulate(world, rw.tooled(f"t{next(_versions)}", catches=True), source.run_id)
    )
    assert same.identical, same.lines()

    edited = rw.tooled(f"t{next(_versions)}", looked_up="ERROR", catches=True)
    sim = asyncio.run(simulate(world, edited, source.run_id))
    assert not sim.identical
    assert sim.divergence is not None
    assert sim.divergence.got is not None
    assert 'tool look_up (call 1:l1) returned "ERROR"' in sim.divergence.got
    assert sim.result is None  # the run stopped at the divergence


def test_a_simulation_compares_the_validators_verdict_and_a_replay_decides_again(
    world: little.World,
) -> None:
    """Seed 004's validation decisions: a simulation runs the validator again over the served
    draft and compares its verdict with the golden run's (an edited rule is the divergence,
    at the decision); a ``replay_from`` run is a new run, whose validator decides again over
    the served answer."""
    rw.VALIDATIONS.clear()
    source = asyncio.run(run(world, rw.validated(f"v{next(_versions)}"), "Kafka"))
    assert source.status == "completed"
    assert rw.VALIDATIONS == ["publish"]

    same = asyncio.run(simulate(world, rw.validated(f"v{next(_versions)}"), source.run_id))
    assert same.identical, same.lines()
    assert rw.VALIDATIONS == ["publish", "publish"]  # the validator ran again, and agreed

    stricter = rw.validated(f"v{next(_versions)}", needs="Kafka Streams")
    sim = asyncio.run(simulate(world, stricter, source.run_id))
    assert sim.divergence is not None, sim.lines()
    assert sim.divergence.expected == "decision validate -> publish"
    assert sim.divergence.got == "decision validate -> revise"

    replayed = asyncio.run(
        run(
            world,
            rw.validated(f"v{next(_versions)}", needs="Kafka Streams"),
            "Kafka",
            replay_from=source.run_id,
        )
    )
    assert replayed.status == "completed", replayed.error
    assert replayed.replay is not None
    assert replayed.replay.replayed_calls == 1  # the draft, served
    assert replayed.output.startswith("revise: ")  # decided again, by the edited rule
    assert rw.invocations("draft") == 1  # the source's only


def test_a_tool_call_recorded_redacted_is_served_in_a_simulation(tmp_path: Path) -> None:
    """The secret the look-up saw is not in the record: running it again on ``[redacted]``
    would report a divergence the code did not cause, so it is served and listed."""
    from little.redaction import redact_keys

    rw.LOOKUPS.clear()
    with little.local_world(tmp_path / "redacting", redact=redact_keys("q")) as world:
        source = asyncio.run(run(world, rw.tooled(f"t{next(_versions)}"), "kafka"))
        assert source.status == "completed"
        assert rw.LOOKUPS == ["1:l1"]
        sim = asyncio.run(simulate(world, rw.tooled(f"t{next(_versions)}"), source.run_id))
    assert sim.identical, sim.lines()
    assert rw.LOOKUPS == ["1:l1"]  # not run again
    served = "agent call 0 (define#define): tool look_up (call 1:l1): redacted when recorded"
    assert sim.tools_served == (f"{served}, served from the golden run",)
    assert sim.tools_run == ()

"""Deterministic simulation (seed 004): re-execute the current workflow code against a golden
run with every model and tool call served from its record, and compare what it did.

The simulated run is a recorded-call replay of the golden run, executed in a throwaway
embedded world that holds a copy of the golden run's records (the golden world is only read:
its artifacts are read through an overlay, and nothing is appended to its log). While it
runs, a call the record cannot serve is a divergence (``SimulationDivergedError``, raised
before anything is invoked), so no model, tool or network is ever reached. Then its trace
(step order, branch sets, decision targets, agent-call request keys, the final outcome) is
compared with the golden run's, and the first difference is the divergence. Beside it, what
the golden run recorded from the divergent call on: what re-running from there would spend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from little._world import World, local_world
from little.artifacts import ArtifactStore
from little.errors import ConfigurationError
from little.events import (
    AgentCallAdmitted,
    ArtifactRef,
    DecisionRecorded,
    LoggedEvent,
    ParallelBranchScheduled,
    RunClaimed,
    RunCompleted,
    RunFailed,
    StepStarted,
)
from little.log import OutgoingRecord
from little.replay import MaterializedRunState, fold_run, price_usd
from little.runtime._errors import SimulationDivergedError
from little.runtime._recorded import SIMULATING
from little.runtime._registry import AnyWorkflow
from little.runtime._runner import RunResult, _start_facts, load_json, run

_UNSET: Any = object()


@dataclass(frozen=True)
class Divergence:
    """The first difference between the golden run and the simulated one."""

    index: int
    """Position in the runs' traces (``trace``) where they differ."""
    expected: str | None
    """The golden run's entry there (None: the golden run had ended)."""
    got: str | None
    """The simulated run's (None: it stopped there, or had ended)."""
    ordinal: int | None = None
    """The agent call the divergence is at, when it is one."""


@dataclass(frozen=True)
class Simulation:
    """What simulating a workflow against a golden run found."""

    golden_run_id: str
    divergence: Divergence | None
    result: RunResult | None
    """The simulated run's result (None when it stopped at a divergence or was refused)."""
    calls_after: int = 0
    """Model calls the golden run recorded from the divergent agent call on."""
    cost_after: Decimal | None = None
    """What those cost when recorded (None: some are unpriced, or none)."""

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def lines(self) -> list[str]:
        """The readable report: one line if identical, else the diff and the price of it."""
        if self.divergence is None:
            return [f"identical to {self.golden_run_id}"]
        d = self.divergence
        out = [
            f"diverged from {self.golden_run_id} at trace entry {d.index}:",
            f"  expected: {d.expected if d.expected is not None else '(the run had ended)'}",
            f"  got:      {d.got if d.got is not None else '(nothing: the run stopped here)'}",
        ]
        if d.ordinal is not None:
            cost = (
                "an unknown amount" if self.cost_after is None else f"about ${self.cost_after:.2f}"
            )
            out.append(
                f"re-running from call {d.ordinal} would re-spend {cost}: "
                f"{self.calls_after} model call(s) recorded from it"
            )
        return out


def trace(events: Iterable[LoggedEvent]) -> list[tuple[str, int | None]]:
    """What a run did, in order, as comparable entries (with the agent-call ordinal of each
    call entry): each step visit, parallel group, decision and agent call once (a retry or a
    resume repeats none), then how it ended. Only accepted events count."""
    epoch = 0
    seen: set[tuple[str, ...]] = set()
    out: list[tuple[str, int | None]] = []

    def add(key: tuple[str, ...], entry: str, ordinal: int | None = None) -> None:
        if key not in seen:
            seen.add(key)
            out.append((entry, ordinal))

    for item in events:
        e = item.event
        if isinstance(e, RunClaimed):
            epoch = max(epoch, e.epoch)
            continue
        if e.epoch < epoch:
            continue
        if isinstance(e, StepStarted):
            add(("step", str(e.step_path), str(e.visit)), f"step {e.step_path} (visit {e.visit})")
        elif isinstance(e, ParallelBranchScheduled):
            add(("group", str(e.step_path)), f"group {e.step_path}: {', '.join(e.branches)}")
        elif isinstance(e, DecisionRecorded):
            add(
                ("decision", str(e.step_path), str(e.visit)),
                f"decision {e.step_path} -> {e.target}",
            )
        elif isinstance(e, AgentCallAdmitted):
            add(
                ("call", str(e.ordinal)),
                f"agent call {e.ordinal} {e.node_phase}/{e.node_label}#{e.node_occurrence} "
                f"request {e.request_key[:16]}",
                e.ordinal,
            )
        elif isinstance(e, RunCompleted):
            out.append(
                (
                    f"completed with {e.output_json if e.output_ref is None else e.output_ref.sha256}",
                    None,
                )
            )
        elif isinstance(e, RunFailed):
            out.append((f"failed: {e.error_type}: {e.message}", None))
    return out


class _Overlay(ArtifactStore):
    """Writes go to a throwaway directory; reads fall back to the golden world's store."""

    def __init__(self, root: Path, under: ArtifactStore) -> None:
        super().__init__(root)
        self._under = under

    def get(self, ref: ArtifactRef) -> bytes:
        return super().get(ref) if super().exists(ref) else self._under.get(ref)

    def exists(self, ref: ArtifactRef) -> bool:
        return super().exists(ref) or self._under.exists(ref)

    def verify(self, ref: ArtifactRef) -> None:
        if super().exists(ref):
            super().verify(ref)
        else:
            self._under.verify(ref)


def _cost_from(golden: MaterializedRunState, ordinal: int) -> tuple[int, Decimal | None]:
    calls, total, priced = 0, Decimal(0), True
    for c in golden.agent_calls:
        if c.ordinal < ordinal or c.usage is None:
            continue
        calls += c.model_calls if c.model_calls is not None else 1
        cost = (
            None
            if c.provider is None or c.model is None
            else price_usd(c.provider, c.model, c.usage, datetime.now(UTC))
        )
        if cost is None:
            priced = False
        else:
            total += cost
    return calls, (total if priced and calls else None)


def _first_difference(
    golden: list[tuple[str, int | None]], got: list[tuple[str, int | None]]
) -> Divergence | None:
    for i in range(max(len(golden), len(got))):
        want = golden[i] if i < len(golden) else (None, None)
        have = got[i] if i < len(got) else (None, None)
        if want[0] != have[0]:
            return Divergence(i, want[0], have[0], want[1] if want[1] is not None else have[1])
    return None


async def simulate(
    world: World, workflow: AnyWorkflow, golden_run_id: str, input: Any = _UNSET
) -> Simulation:
    """Re-execute ``workflow`` against the golden run ``golden_run_id`` of ``world`` with
    every call served from its record, never invoking a model or a tool; compare step order,
    branch sets, decision targets, request keys and the outcome. ``input`` defaults to the
    golden run's own."""
    golden, _, _ = await asyncio.to_thread(fold_run, world, golden_run_id)
    if golden.workflow is None:
        raise ConfigurationError(
            f"run {golden_run_id} has no RunStarted in {world.description}: nothing to simulate"
        )
    if input is _UNSET:
        input = await load_json(world, golden.input_json, golden.input_ref)
    _, refused, _ = await asyncio.to_thread(
        _start_facts, world, workflow, golden_run_id, "repairable"
    )
    golden_events = await asyncio.to_thread(lambda: list(world.read_run(golden_run_id)))
    expected = trace(golden_events)
    if refused is not None:  # a refused replay would run fresh: nothing could be served
        return Simulation(
            golden_run_id,
            Divergence(0, expected[0][0] if expected else None, f"replay refused: {refused}"),
            None,
        )
    with tempfile.TemporaryDirectory(prefix="little-simulate-") as d:
        base = local_world(Path(d) / "world")
        sandbox = dataclasses.replace(
            base, artifacts=_Overlay(Path(d) / "artifacts", world.artifacts)
        )
        try:
            records = [
                OutgoingRecord(r.payload, r.headers) for r in world.log.read_run(golden_run_id)
            ]
            await asyncio.to_thread(sandbox.log.append, golden_run_id, records)
            run_id = f"sim_{uuid.uuid4().hex}"
            token = SIMULATING.set(True)
            stopped: SimulationDivergedError | None = None
            result: RunResult | None = None
            try:
                result = await run(
                    sandbox, workflow, input, run_id=run_id, replay_from=golden_run_id
                )
            except SimulationDivergedError as exc:
                stopped = exc
            finally:
                SIMULATING.reset(token)
            got = trace(await asyncio.to_thread(lambda: list(sandbox.read_run(run_id))))
        finally:
            base.close()
    divergence = _first_difference(expected, got)
    if stopped is not None:
        # it stopped before admitting the call the record cannot serve: unless the traces
        # parted earlier, that call is the divergence, and the miss says why
        index = len(got)
        if divergence is None or divergence.index >= index:
            want = expected[index][0] if index < len(expected) else None
            why = stopped.miss_reason or "no record"
            divergence = Divergence(
                index,
                want,
                f"{stopped}" if why in str(stopped) else f"{stopped}: {why}",
                stopped.ordinal,
            )
    if divergence is None:
        return Simulation(golden_run_id, None, result)
    calls, cost = (0, None)
    if divergence.ordinal is not None:
        calls, cost = _cost_from(golden, divergence.ordinal)
    return Simulation(golden_run_id, divergence, result, calls, cost)

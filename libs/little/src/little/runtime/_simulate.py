"""Deterministic simulation (seed 004): re-execute the current workflow code against a golden
run with every model call served from its record, its tool code run again, and compare what
it did.

The simulated run is a recorded-call replay of the golden run, executed in a throwaway
embedded world that holds a copy of the golden run's records (the golden world is only read:
its artifacts are read through an overlay, and nothing is appended to its log). While it
runs, a call the record cannot serve is a divergence (``SimulationDivergedError``, raised
before anything is invoked), so no model is called; a step's own code does run (one that
calls a service itself, not through a session, reaches it), and so does every tool call of a
served exchange that is not side-effecting ("tool code not re-executed unless in simulation
mode"): a result other than the recorded one is the divergence, at that call (latched like
an integrity error: a workflow that catches it does not make the run identical). A
side-effecting tool call is served as recorded (no effect repeats), and so is one that needs a
person's approval (no one is asked), or was recorded redacted or rejected; the report lists
them. Then its trace
(step order, branch sets, decision targets, agent-call request keys, the final outcome) is
compared with the golden run's, and the first difference is the divergence. Beside it, what
the golden run recorded from the divergent call on: what re-running from there would spend.

The golden run is a run of a world (by id) or a golden file (``little.golden``): either way
its sub-runs come with it, and a sub-run the simulated run starts at the same call is
simulated against the golden run's, its trace compared inside its parent's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, overload

from little._world import World, local_world
from little.artifacts import ArtifactBackend, ArtifactStore
from little.errors import ConfigurationError
from little.events import (
    AgentCallAdmitted,
    ArtifactRef,
    DecisionRecorded,
    LoggedEvent,
    ParallelBranchScheduled,
    RunCompleted,
    RunFailed,
    StepStarted,
    SubRunReserved,
    ToolCallStarted,
)
from little.golden import GoldenRun, golden_tree, read_golden
from little.replay import (
    MaterializedRunState,
    accepted_events,
    materialize_run_state_from_events,
    price_usd,
)
from little.runtime._admission import _start_facts
from little.runtime._errors import SUB_RUN, SimulationDivergedError, sub_run_scope
from little.runtime._execution import RunResult, load_json
from little.runtime._recorded import SIMULATING, Simulating
from little.runtime._registry import AnyWorkflow
from little.runtime._runner import run

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
    golden_file: str | None = None
    """The golden file the golden run was read from (None: a run of a world)."""
    tools_run: tuple[str, ...] = ()
    """The tool calls that ran again and returned what the golden run recorded."""
    tools_served: tuple[str, ...] = ()
    """The tool calls that did not run (side-effecting ones: no effect repeats; those needing a
    person's approval: no one is asked; or recorded redacted, or rejected by a person), each
    with why: the golden run's results were served."""

    @property
    def identical(self) -> bool:
        return self.divergence is None

    @property
    def golden(self) -> str:
        """The golden run as the report names it: its id, and its file if it came from one."""
        if self.golden_file is None:
            return self.golden_run_id
        return f"{self.golden_run_id} (golden file {self.golden_file})"

    def lines(self) -> list[str]:
        """The readable report: one line if identical, else the diff and the price of it; then
        the tool calls that ran again and those served from the golden run (if any)."""
        tools = []
        if self.tools_run:
            tools.append(
                f"{len(self.tools_run)} tool call(s) ran again and returned what the golden run "
                "recorded"
            )
        if self.tools_served:
            tools.append(f"{len(self.tools_served)} tool call(s) not run, served as recorded:")
            tools.extend(f"  {t}" for t in self.tools_served)
        if self.divergence is None:
            return [f"identical to {self.golden}", *tools]
        return [*self._diverged(self.divergence), *tools]

    def _diverged(self, d: Divergence) -> list[str]:
        out = [
            f"diverged from {self.golden} at trace entry {d.index}:",
            f"  expected: {d.expected if d.expected is not None else '(the run had ended)'}",
            f"  got:      {d.got if d.got is not None else '(nothing: the run stopped here)'}",
        ]
        if d.ordinal is not None:
            cost = (
                "an unknown amount"
                if self.cost_after is None
                else f"about ${self.cost_after.quantize(Decimal('0.000001'))} at today's prices"
            )
            out.append(
                f"re-running from call {d.ordinal} would re-spend {cost}: "
                f"{self.calls_after} model call(s) recorded from it"
            )
        return out


@dataclass(frozen=True)
class Entry:
    """One thing a run did, as the trace compares it."""

    text: str
    scope: str
    """The workflow scope it happened in: "" the run, else a parallel branch's path."""
    ordinal: int | None = None
    """For an agent call: its ordinal in its run."""
    place: tuple[str, int] | None = None
    """For an agent call: its scope and rank among that scope's calls."""
    group: tuple[str, tuple[str, ...]] | None = None
    """For a parallel group: its path and branches."""
    children: tuple[Entry, ...] = ()
    """For a sub-run: its own trace, as entries of this one (their scopes after
    ``sub_run_scope``, their text after the call id)."""


def _scope_of(path: str | None, scopes: list[str]) -> str:
    path = path or ""
    return next((s for s in sorted(scopes, key=len, reverse=True) if path.startswith(s)), "")


def nested_calls(events: Iterable[LoggedEvent]) -> dict[int, int]:
    """The agent calls made inside another's tool call (a session opened in a tool; a
    framework agent run in a tool: ``durable(step, inner)`` in a Pydantic AI tool,
    ``agent.as_tool()`` or ``LittleRunner.run`` in an Agents SDK tool), each with the ordinal
    of the outermost call it ran inside, read from its recorded scope (``<the outer call's
    scope>#<its rank there>/<tool call id>/``, ``Recorder.admit``). A replay or a simulation
    that serves the outer call whole never makes them."""
    admitted = sorted(
        (e.ordinal, e.scope or "")
        for item in accepted_events(events)
        if isinstance(e := item.event, AgentCallAdmitted)
    )
    at: dict[tuple[str, int], int] = {}  # (scope, rank) -> ordinal, as admission placed them
    counts: dict[str, int] = {}
    for ordinal, scope in admitted:
        rank = counts.get(scope, 0)
        counts[scope] = rank + 1
        at[(scope, rank)] = ordinal
    inside: dict[int, int] = {}
    for ordinal, scope in admitted:
        outer_scope, marked, rest = scope.partition("#")
        digits = rest.split("/", 1)[0]
        if marked and digits.isdigit() and (outer_scope, int(digits)) in at:
            inside[ordinal] = at[(outer_scope, int(digits))]
    return inside


def made_in_tool(reserved: SubRunReserved) -> bool:
    """Was this sub-run started inside a recorded tool call of its step, numbered there
    (``<step>#<rank>/<tool call id>/sub<n>``, ``StepContext.start_workflow``)? A replay or a
    simulation that serves the tool's agent call whole never starts it (one that runs the
    tool again to compare starts it at the same call, against the golden run's)."""
    return str(reserved.call_id).startswith(f"{reserved.step_path}#")


def trace(
    events: Iterable[LoggedEvent],
    run_ids: Iterable[str] = (),
    sub_runs: Callable[[str], Sequence[LoggedEvent]] | None = None,
) -> list[Entry]:
    """What a run did, as comparable entries: each step visit, parallel group (its branch
    set), decision, agent call (node and request key) and sub-run once (a retry or a resume
    repeats none), then how it ended. Only accepted events count. An agent call made inside
    another's tool call (``nested_calls``) is left out, and so is a sub-run one started
    (``made_in_tool``, or given the tool call's id: ``workflow_tool``): the outer call's entry
    stands for them. The order is canonical, not
    the log's: each scope's entries in their order, and a group's branches expanded where the
    group stands, in name order (sibling branches interleave by timing, and a served call
    takes none); a sub-run's own trace (its events read with ``sub_runs``) follows its entry.
    ``run_ids`` are written as ``<run>`` in failure messages."""
    seen: set[tuple[str, ...]] = set()
    scopes = [""]
    by_scope: dict[str, list[Entry]] = {}
    counts: dict[str, int] = {}
    ending: list[Entry] = []
    names = tuple(run_ids)
    events = list(events)
    inner = nested_calls(events)
    tool_calls = {  # a sub-run started with its tool call's id (``workflow_tool``) is its
        (e.step_path, e.call_id) for x in events if isinstance(e := x.event, ToolCallStarted)
    }

    def add(key: tuple[str, ...], entry: Entry) -> None:
        if key not in seen:
            seen.add(key)
            by_scope.setdefault(entry.scope, []).append(entry)

    for item in accepted_events(events):
        e = item.event
        if isinstance(e, StepStarted):
            add(
                ("step", str(e.step_path), str(e.visit)),
                Entry(f"step {e.step_path} (visit {e.visit})", _scope_of(e.step_path, scopes)),
            )
        elif isinstance(e, ParallelBranchScheduled):
            path = e.step_path or ""
            scope = _scope_of(path, scopes)
            scopes.extend(f"{path}/{b}/" for b in e.branches)
            add(
                ("group", path),
                Entry(
                    f"group {path}: {', '.join(e.branches)}",
                    scope,
                    group=(path, tuple(e.branches)),
                ),
            )
        elif isinstance(e, DecisionRecorded):
            add(
                ("decision", str(e.step_path), str(e.visit)),
                Entry(f"decision {e.step_path} -> {e.target}", _scope_of(e.step_path, scopes)),
            )
        elif (
            isinstance(e, AgentCallAdmitted)
            and ("call", str(e.ordinal)) not in seen
            and e.ordinal not in inner
        ):
            scope = e.scope or ""
            index = counts.get(scope, 0)
            counts[scope] = index + 1
            add(
                ("call", str(e.ordinal)),
                Entry(
                    f"agent call {e.node_phase}/{e.node_label}#{e.node_occurrence} "
                    f"request {e.request_key[:16]}",
                    scope,
                    ordinal=e.ordinal,
                    place=(scope, index),
                ),
            )
        elif (
            isinstance(e, SubRunReserved)
            and not made_in_tool(e)
            and (e.step_path, e.call_id) not in tool_calls
        ):
            scope = _scope_of(e.step_path, scopes)
            prefix = sub_run_scope(scope, str(e.call_id))
            children = (
                ()
                if sub_runs is None
                else _nested(
                    trace(sub_runs(e.sub_run_id), names, sub_runs), prefix, f"{e.call_id}> "
                )
            )
            add(
                ("sub-run", str(e.call_id)),
                Entry(f"sub-run {e.workflow} at {e.call_id}", scope, children=children),
            )
        elif isinstance(e, RunCompleted):
            output = e.output_json if e.output_ref is None else e.output_ref.sha256
            ending = [Entry(f"completed with {output}", "")]
        elif isinstance(e, RunFailed):
            message = e.message
            for name in names:
                message = message.replace(name, "<run>")
            ending = [Entry(f"failed: {e.error_type}: {message}", "")]

    def expand(scope: str) -> Iterator[Entry]:
        for entry in by_scope.get(scope, ()):
            yield entry
            yield from entry.children
            if entry.group is not None:
                path, branches = entry.group
                for branch in sorted(branches):
                    yield from expand(f"{path}/{branch}/")

    return [*expand(""), *ending]


def _nested(entries: list[Entry], prefix: str, label: str) -> tuple[Entry, ...]:
    """A sub-run's trace as entries of its parent's: scopes and places after ``prefix``, text
    after ``label``; no ordinal (the sub-run's calls are not the parent's)."""
    return tuple(
        Entry(
            label + x.text,
            prefix + x.scope,
            place=None if x.place is None else (prefix + x.place[0], x.place[1]),
        )
        for x in entries
    )


class _Overlay(ArtifactStore):
    """Writes go to a throwaway directory; reads fall back to the golden world's store."""

    def __init__(self, root: Path, under: ArtifactBackend) -> None:
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


def _first_difference(golden: list[Entry], got: list[Entry]) -> Divergence | None:
    for i in range(max(len(golden), len(got))):
        want = golden[i] if i < len(golden) else None
        have = got[i] if i < len(got) else None
        if (want.text if want else None) != (have.text if have else None):
            return Divergence(
                i,
                want.text if want else None,
                have.text if have else None,
                want.ordinal if want else None,
            )
    return None


def _ancestors(scope: str) -> set[str]:
    """A scope and every scope enclosing it (``"fan/a/"``: itself and ``""``), through the
    sub-runs it is inside of (a sub-run's scopes are enclosed by the scope that started it)."""
    out: set[str] = set()
    levels = scope.split(SUB_RUN)  # a run's scope, then per sub-run: its call id, its scope
    prefix = ""
    for k in range(0, len(levels), 2):
        parts = levels[k].split("/")
        out.update({prefix, prefix + levels[k]})
        for n in range(2, len(parts), 2):
            out.add(prefix + "/".join(parts[:n]) + "/")
        if k + 1 < len(levels):
            prefix = prefix + sub_run_scope(levels[k], levels[k + 1])
    return out


@overload
async def simulate(
    world: World, workflow: AnyWorkflow, golden: str, input: Any = _UNSET
) -> Simulation: ...


@overload
async def simulate(
    world: World | None,
    workflow: AnyWorkflow,
    golden: os.PathLike[str] | GoldenRun,
    input: Any = _UNSET,
) -> Simulation: ...


async def simulate(
    world: World | None,
    workflow: AnyWorkflow,
    golden: str | os.PathLike[str] | GoldenRun,
    input: Any = _UNSET,
) -> Simulation:
    """Re-execute ``workflow`` against a golden run with every model call served from its
    record, never invoking a model; the tool calls inside served exchanges run again and are
    compared with their recorded results (but side-effecting, approval-gated, redacted and
    rejected ones, served as recorded: ``Simulation.tools_served``); compare step order, branch sets, decision targets,
    request keys (and, for served exchanges, their turns' request hashes), sub-runs and the
    outcome. ``golden`` is a run id of ``world``, a golden file's path (``little.golden``: a
    ``Path``, since a string is a run id; ``world`` is then not read) or a ``GoldenRun``
    already read. ``input`` defaults to the golden run's own. A golden file that cannot be
    read raises ``GoldenFileError``."""
    under: ArtifactBackend | None = None  # the golden world's store, read through an overlay
    where: str
    if isinstance(golden, GoldenRun):
        source = golden
        where = golden.where if golden.path is not None else "the GoldenRun given"
    elif isinstance(golden, str):
        if world is None:
            raise ConfigurationError(
                f"simulate: golden run {golden} is a run id, which needs its world (pass a "
                "golden file as a Path)"
            )
        runs = await asyncio.to_thread(golden_tree, world, golden)
        source = GoldenRun(golden, {golden: (), **{r: tuple(e) for r, e in runs.items()}}, {})
        under, where = world.artifacts, world.description
    else:
        source = await asyncio.to_thread(read_golden, golden)
        where = source.where
    golden_run_id = source.run_id
    state = await asyncio.to_thread(
        materialize_run_state_from_events, source.events, run_id=golden_run_id
    )
    if state.workflow is None:
        raise ConfigurationError(
            f"run {golden_run_id} has no RunStarted in {where}: nothing to simulate"
        )
    file = None if source.path is None else str(source.path)
    run_id = f"sim_{uuid.uuid4().hex}"
    names = (golden_run_id, run_id)
    expected, simulating = await asyncio.to_thread(  # folds over every golden event
        lambda: (
            trace(source.events, names, lambda r: source.runs.get(r, ())),
            Simulating.of(source.runs),
        )
    )
    with tempfile.TemporaryDirectory(prefix="little-simulate-") as d:
        base = local_world(Path(d) / "world")
        sandbox = base
        if under is not None:
            sandbox = dataclasses.replace(base, artifacts=_Overlay(Path(d) / "artifacts", under))
        token = SIMULATING.set(simulating)
        try:
            await asyncio.to_thread(_seed, sandbox, source)
            if input is _UNSET:
                input = await load_json(sandbox, state.input_json, state.input_ref)
            _, refused, _ = await asyncio.to_thread(
                _start_facts, sandbox, workflow, golden_run_id, "repairable"
            )
            if refused is not None:  # a refused replay would run fresh: nothing is served
                return Simulation(
                    golden_run_id,
                    Divergence(
                        0, expected[0].text if expected else None, f"replay refused: {refused}"
                    ),
                    None,
                    golden_file=file,
                )
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
        try:
            got = await asyncio.to_thread(
                lambda: trace(
                    list(sandbox.read_run(run_id)), names, lambda r: list(sandbox.read_run(r))
                )
            )
        finally:
            base.close()
    divergence = _first_difference(expected, got)
    if stopped is not None:
        # It stopped before admitting a call the record cannot serve: that call is the
        # divergence, unless the traces parted earlier on its own path (its scope or one
        # enclosing it; sibling branches were cut short by the stop, and say nothing).
        place = stopped.place
        mine = _ancestors(place[0] if place is not None else "")
        at = next((i for i, x in enumerate(expected) if place and x.place == place), None)
        earlier = [x for x in expected[: len(expected) if at is None else at] if x.scope in mine]
        have = [x for x in got if x.scope in mine]
        first = _first_difference(earlier, have[: len(earlier)])
        if first is not None:
            divergence = dataclasses.replace(
                first,
                index=expected.index(earlier[first.index]),
                got=str(stopped) if first.got is None else first.got,  # it stopped there
            )
        else:
            index = len(expected) if at is None else at
            want = expected[index] if index < len(expected) else None
            divergence = Divergence(
                index,
                want.text if want else None,
                str(stopped),
                want.ordinal if want else None,
            )
        if stopped.miss_reason == "wait-mismatch" and divergence.got is None:
            divergence = dataclasses.replace(divergence, got=str(stopped))  # stopped at the wait
    ran, served = tuple(simulating.tools_run), tuple(simulating.tools_served)
    calls, cost = (0, None)
    if divergence is not None and divergence.ordinal is not None:
        calls, cost = _cost_from(state, divergence.ordinal)
    return Simulation(golden_run_id, divergence, result, calls, cost, file, ran, served)


def _seed(sandbox: World, source: GoldenRun) -> None:
    """The golden runs' events and artifacts, into the sandbox (blocking). Events are
    re-encoded by the sandbox's codec: the golden world's framing (a schema registry's ids)
    means nothing there."""
    for events in source.runs.values():
        if events:
            sandbox.append([x.event for x in events])
    for a in source.artifacts.values():
        sandbox.artifacts.put(source.run_id, a.data, a.media_type)

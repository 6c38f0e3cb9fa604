"""Executing a run: claim, replay, check, then run the workflow with memoized steps.

Every execution is a resume: starting a run is resuming an empty stream. The executor claims
the run with the next epoch, reads its log up to that claim, refuses to proceed if the log and
the code disagree (restart checks), and runs the workflow; completed steps return their
recorded outputs, and agent sessions fast-forward through their recorded calls.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from little import tracing
from little._canonical import canonical_json
from little._world import RecordDecodeError, World
from little.errors import ConfigurationError, LogError, RuntimeIntegrityError
from little.events import (
    ArtifactRef,
    LoggedEvent,
    RunClaimed,
    RunCompleted,
    RunFailed,
    RunStarted,
    ValueRecorded,
)
from little.harness import Model, model_from_spec
from little.log import Position
from little.logs import get_logger
from little.replay import (
    MaterializedRunState,
    RecordedValue,
    ReplayEnvelope,
    StreamIntegrityError,
    assert_completed_step_artifacts_valid,
    configuration_changes,
    configuration_json,
    fold_run,
    materialize_run_state_from_events,
    replay_envelope,
    run_configuration,
    state_configuration,
)
from little.runtime._context import LARGE_PAYLOAD, WorkflowContext
from little.runtime._control import ExecutionStopped, RunControl
from little.runtime._errors import (
    BranchStopped,
    BudgetExceededError,
    ClaimRejectedError,
    ExecutionSuspended,
    PanelMixedError,
    PatchDeprecatedError,
    RunNotStartedError,
    SimulationDivergedError,
    StepFailedError,
    SubRunFailedError,
    WorkflowVersionError,
)
from little.runtime._patches import Patches
from little.runtime._recorded import (
    MODE_FULL,
    MODE_REPAIRABLE,
    MODE_STRICT,
    REFUSED_CONFIG_CHANGED,
    REFUSED_COVERAGE_UNPROVEN,
    REFUSED_NO_CALLS,
    REFUSED_SOURCE_CHANGED,
    REFUSED_SOURCE_UNUSABLE,
    REFUSED_TARGET_CHANGED,
    REFUSED_UNSAFE,
    REPLAY_MODES,
    SIMULATING,
    AgentCalls,
    FullReplay,
    RecordedCalls,
    tool_receipts,
)
from little.runtime._registry import AnyWorkflow, lookup, versions
from little.runtime._source import COVERAGE_SELF_CONTAINED, SourceIdentity, workflow_source
from little.runtime._spans import NOT_FAILURES
from little.runtime._waits import HOLD_SECONDS, RunWaits
from little.runtime._writer import FAULTS, PRODUCER, RunWriter

log = get_logger("little.runtime")


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str
    output: Any = None
    error: str | None = None
    served_calls: int = 0
    """Model calls of this execution answered from the log (recorded before), not invoked."""
    reinvoked_calls: int = 0
    """Model calls invoked again because the log holds their request but no answer (they were
    in flight when the previous writer stopped: the provider may have billed them twice)."""
    replay: ReplayEnvelope | None = None
    """Recorded-call replay of the run (``little.replay.ReplayEnvelope``): set on every result
    ``run``, ``resume`` and ``execute`` return, a run that is not a replay included (its
    ``source_run_id`` is None, ``replayed`` False); None only for a result built by hand."""
    wake_at: datetime | None = None
    """A ``waiting`` run's earliest due time (None: only a signal can wake it)."""
    waiting_for: tuple[str, ...] = ()
    """What a ``waiting`` run waits for: ``timer``, ``signal:<name>``, ``approval:<call>``."""


def default_owner() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:6]}"


async def store_json(
    world: World, run_id: str, value: Any
) -> tuple[str | None, ArtifactRef | None]:
    """Canonical JSON inline, or in the artifact store when larger than LARGE_PAYLOAD."""
    return await store_text(world, run_id, canonical_json(value))


async def store_text(world: World, run_id: str, text: str) -> tuple[str | None, ArtifactRef | None]:
    """``store_json`` for text that is already canonical JSON (a large one is written and
    fsynced off the event loop, and is durable before the record naming it is written)."""
    if len(text) <= LARGE_PAYLOAD:
        return text, None
    ref = await asyncio.to_thread(world.artifacts.put, run_id, text.encode(), "application/json")
    return None, ref


async def load_json(world: World, text: str | None, ref: ArtifactRef | None) -> Any:
    """The value ``store_json`` stored: inline text or the artifact ``ref`` points to (read
    off the event loop)."""
    if ref is not None:
        return await asyncio.to_thread(read_json, world, text, ref)
    return read_json(world, text, ref)


def read_json(world: World, text: str | None, ref: ArtifactRef | None) -> Any:
    """``load_json``, blocking (tooling, worker threads)."""
    if ref is not None:
        return json.loads(world.artifacts.get(ref))
    return None if text is None else json.loads(text)


async def load_text(world: World, text: str | None, ref: ArtifactRef | None) -> str | None:
    if ref is not None:
        return bytes(await asyncio.to_thread(world.artifacts.get, ref)).decode()
    return text


async def fold_run_off_loop(world: World, run_id: str) -> MaterializedRunState:
    """``fold_run`` on a worker thread: reading and folding a long run never blocks the loop."""
    state, _, _ = await asyncio.to_thread(fold_run, world, run_id)
    return state


class Execution:
    """One execution of one run: its writer, its replayed state, its budget counters."""

    def __init__(
        self,
        world: World,
        run_id: str,
        replayed: MaterializedRunState,
        writer: RunWriter,
        owner: str,
        source: RecordedCalls | None = None,
        hold: float = HOLD_SECONDS,
        model: Model | None = None,
    ) -> None:
        self.world = world
        self.run_id = run_id
        self.replayed = replayed
        self.writer = writer
        self.owner = owner
        self.billed_calls = replayed.usage.calls
        self.billed_tokens = replayed.usage.input_tokens + replayed.usage.output_tokens
        self.served_calls = 0
        self.reinvoked_calls = 0
        self.reserved_calls = 0
        """Model calls reserved by fresh panels' legs and not made yet (``reserve_calls``)."""
        self.agent_calls = AgentCalls.of(replayed, source)
        """Agent-call admission, and recorded-call replay from ``source``."""
        self.patches = Patches(replayed, None if source is None else source.state)
        """``ctx.patched`` answers, decided against the state as claimed."""
        self.values: dict[tuple[str | None, int], RecordedValue | ValueRecorded] = {}
        """This run's recorded values by place: those of its log, then those it records now
        (a retried step's second attempt reads the first attempt's)."""
        for v in replayed.values:
            self.values.setdefault((v.step_path, v.ordinal), v)
        self.waits = RunWaits(self, hold)
        """Durable waits and the signals sent to the run (``little.runtime._waits``)."""
        self.model = model
        """A full replay's model: every session of the run uses it (``FullReplay``); its tool
        receipts are served by ``little.runtime._serving.Receipts``."""

    def replay(self) -> ReplayEnvelope:
        """The run's replay envelope now: the state as claimed plus the agent calls this
        execution's writer landed (neither a read nor a fold of the run)."""
        return replay_envelope(self.replayed, after=self.writer.agent_events)

    def count_served(self) -> None:
        self.served_calls += 1
        if self.writer.control is not None:
            self.writer.control.served_calls += 1

    def count_reinvoked(self) -> None:
        self.reinvoked_calls += 1
        if self.writer.control is not None:
            self.writer.control.reinvoked_calls += 1

    # -- payloads ------------------------------------------------------------------------

    async def store_json(self, value: Any) -> tuple[str | None, ArtifactRef | None]:
        return await store_json(self.world, self.run_id, value)

    async def store_text(self, text: str) -> tuple[str | None, ArtifactRef | None]:
        return await store_text(self.world, self.run_id, text)

    async def load_json(self, text: str | None, ref: ArtifactRef | None) -> Any:
        return await load_json(self.world, text, ref)

    async def load_text(self, text: str | None, ref: ArtifactRef | None) -> str | None:
        return await load_text(self.world, text, ref)

    # -- budget --------------------------------------------------------------------------

    def check_budget(self, *, reserved: bool = False) -> None:
        """Before a fresh model call: calls served from the log never count here. Calls
        reserved by fresh panels count as spent, except the caller's own (``reserved``: a
        panel leg's first call, which its reservation covers and consumes)."""
        cap_calls, cap_tokens = self.replayed.max_agent_calls, self.replayed.max_tokens
        held = self.reserved_calls - (1 if reserved else 0)
        if cap_calls is not None and self.billed_calls + held >= cap_calls:
            raise BudgetExceededError(
                f"run {self.run_id}: budget of {cap_calls} agent call(s) spent "
                f"({self.billed_calls} made, {held} reserved by panels; "
                f"{self.served_calls} more served from the log, free)"
            )
        if cap_tokens is not None and self.billed_tokens >= cap_tokens:
            raise BudgetExceededError(
                f"run {self.run_id}: budget of {cap_tokens:,} tokens spent ({self.billed_tokens:,})"
            )
        if reserved:
            self.reserved_calls -= 1

    def reserve_calls(self, count: int, where: str) -> None:
        """A fresh panel's worst case, up front: one call per leg, or BudgetExceededError
        before any leg runs. Each leg's first model call consumes its reservation (a leg that
        ends without one gives it back, ``release_call``)."""
        cap_calls, cap_tokens = self.replayed.max_agent_calls, self.replayed.max_tokens
        left = None if cap_calls is None else cap_calls - self.billed_calls - self.reserved_calls
        if left is not None and count > left:
            raise BudgetExceededError(
                f"run {self.run_id}: the panel at {where} has {count} fresh leg(s) but the "
                f"budget of {cap_calls} agent call(s) has {max(left, 0)} left "
                f"({self.billed_calls} made, {self.reserved_calls} reserved): no leg was run"
            )
        if cap_tokens is not None and self.billed_tokens >= cap_tokens:
            raise BudgetExceededError(
                f"run {self.run_id}: budget of {cap_tokens:,} tokens spent "
                f"({self.billed_tokens:,}): the panel at {where} ran no leg"
            )
        self.reserved_calls += count

    def release_call(self) -> None:
        self.reserved_calls -= 1

    def billed(self, input_tokens: int, output_tokens: int) -> None:
        self.billed_calls += 1
        self.billed_tokens += input_tokens + output_tokens

    # -- control -------------------------------------------------------------------------

    @staticmethod
    def is_fatal(exc: BaseException) -> bool:
        """Errors that end the writer or the run at once, never retried as a step failure."""
        return isinstance(
            exc,
            LogError
            | ClaimRejectedError
            | RuntimeIntegrityError
            | BudgetExceededError
            | PanelMixedError
            | PatchDeprecatedError
            | BranchStopped
            | ExecutionStopped
            | ExecutionSuspended,
        )

    async def run_sub(
        self, workflow: AnyWorkflow, sub_run_id: str, input: Any, call_id: str
    ) -> Any:
        # a simulation simulates a sub-run against the golden run's sub-run at the same call
        simulating, golden = SIMULATING.get(), None
        if simulating is not None and self.agent_calls.source_run_id is not None:
            golden = simulating.sub_runs.get((self.agent_calls.source_run_id, call_id))
        full = self._full_sub_run(workflow, call_id)
        if full is not None:
            golden = (full[0], "")
        result = await execute(
            self.world,
            sub_run_id,
            workflow,
            input,
            owner=self.owner,
            parent_run_id=self.run_id,
            parent_call_id=call_id,
            control=self.writer.control,  # stopping or cancelling a run stops its sub-runs too
            hold=self.waits.hold,
            replay_from=None if golden is None else golden[0],
            full_replay=None if full is None else full[1],
        )
        if result.status == "waiting":  # the sub-run let go of itself: so does its parent
            raise ExecutionSuspended(self.run_id, result.wake_at, result.waiting_for)
        if result.status != "completed":
            raise SubRunFailedError(
                self.run_id, sub_run_id, workflow.name, result.status, result.error
            )
        return result.output

    def _full_sub_run(self, workflow: AnyWorkflow, call_id: str) -> tuple[str, FullReplay] | None:
        """In a full replay, a sub-run is a full replay too: of the sub-run the source run
        started at the same call with the same workflow, with the same model. One the source
        did not start there has nothing to serve its tools from: refused (its call fails)."""
        if self.model is None or self.replayed.replay_model is None:
            return None
        source = self.agent_calls.source
        state = None if source is None else source.state
        found = None
        if state is not None:
            found = next(
                (s for s in state.sub_runs if s.call_id == call_id and s.workflow == workflow.name),
                None,
            )
        if found is None:
            raise ConfigurationError(
                f"run {self.run_id} is a full replay of {self.agent_calls.source_run_id}, which "
                f"started no sub-run of {workflow.name} at call {call_id}: a full replay runs no "
                "workflow the recorded run did not (its tools would run live)"
            )
        live = bool(self.replayed.replay_live_tools)
        return found.sub_run_id, FullReplay(self.replayed.replay_model, live_tools=live)


LOGGED_ERROR = 4_000
"""The most characters of an error a log line carries (with its traceback only below it)."""

_AGAIN = RunResult("", "again")
"""``_execute_claimed``'s answer when the run suspended and can go on at once."""


async def _result(state: MaterializedRunState, world: World) -> RunResult:
    output = await load_json(world, state.output_json, state.output_ref)
    return RunResult(state.run_id, state.status, output, state.error, replay=replay_envelope(state))


async def claim(
    world: World,
    run_id: str,
    owner: str,
    state: MaterializedRunState | None = None,
    *,
    fresh: bool = False,
) -> tuple[MaterializedRunState, RunWriter]:
    """Append RunClaimed with the next epoch, then fold the run up to that claim.

    ``state`` is the run as the caller just folded it (folded here if not given). Returns the
    state as of the claim and a writer continuing at the last accepted seq + 1. Raises
    ClaimRejectedError if an earlier claim in the log holds an equal or higher epoch.
    ``fresh=True`` says the run id was made by the caller and never given out (a new uuid),
    so no other writer can know it: the claim is its first record and is accepted, and
    nothing is read back.
    """
    if state is None:
        state = (
            materialize_run_state_from_events([], run_id=run_id)
            if fresh
            else await fold_run_off_loop(world, run_id)
        )
    epoch = state.epoch + 1
    event = RunClaimed(
        run_id=run_id, epoch=epoch, owner=owner, observed_seq=state.last_seq, producer=PRODUCER
    )
    (position,) = await world.submit([event])
    FAULTS.events_acked(1)
    if fresh:
        state = materialize_run_state_from_events(
            [LoggedEvent(event, position.partition, position.offset)], start=state
        )
        log.debug("run_claimed", run_id=run_id, epoch=epoch, owner=owner, fresh=True)
        return state, RunWriter(world, run_id, epoch, state.last_seq + 1)
    state = await asyncio.to_thread(_fold_up_to_claim, world, run_id, owner, state, position, epoch)
    log.debug("run_claimed", run_id=run_id, epoch=epoch, owner=owner, last_seq=state.last_seq)
    return state, RunWriter(world, run_id, epoch, state.last_seq + 1)


def started_trace_context(world: World, run_id: str) -> Any:
    """The trace context the run's ``RunStarted`` record carries (its first execution's span),
    or None: read from the record's headers, not decoded (a worker thread)."""
    for record in world.log.read_run(run_id):
        if record.header("little.type") == b"RunStarted":
            return tracing.context_from_headers(record.headers)
    return None


def _fold_up_to_claim(
    world: World,
    run_id: str,
    owner: str,
    state: MaterializedRunState,
    position: Position,
    epoch: int,
) -> MaterializedRunState:
    """Read the run after ``state`` up to our claim at ``position`` and fold it (a worker
    thread); raise ClaimRejectedError if the claim was not accepted."""
    after = (
        Position(state.last_position.partition, state.last_position.offset)
        if state.last_position is not None
        else None
    )
    upto = list(
        itertools.takewhile(
            lambda logged: logged.offset <= position.offset, world.read_run(run_id, after=after)
        )
    )
    if not upto or upto[-1].offset != position.offset:
        raise RuntimeIntegrityError(
            f"run {run_id}: the claim appended at offset {position.offset} is not in its stream"
        )
    # Accepted only if its epoch is above everything accepted before it: a claim of the same
    # epoch that landed first wins (comparing the epoch after the fold cannot tell them apart).
    before = materialize_run_state_from_events(upto[:-1], start=state)
    if before.epoch >= epoch:
        raise ClaimRejectedError(
            f"run {run_id}: claim at epoch {epoch} by {owner} was rejected; {before.owner} holds "
            f"epoch {before.epoch}"
        )
    return materialize_run_state_from_events(upto[-1:], start=before)


async def execute(
    world: World,
    run_id: str,
    workflow: AnyWorkflow | None = None,
    input: Any = None,
    *,
    owner: str | None = None,
    parent_run_id: str | None = None,
    parent_call_id: str | None = None,
    max_agent_calls: int | None = None,
    max_tokens: int | None = None,
    control: RunControl | None = None,
    on_running: Callable[[MaterializedRunState], None] | None = None,
    replay_from: str | None = None,
    replay_mode: str = MODE_REPAIRABLE,
    full_replay: FullReplay | None = None,
    fresh: bool = False,
    hold: float = HOLD_SECONDS,
) -> RunResult:
    """Run or resume ``run_id`` in this process, to its end or until it waits.

    A run that waits (a timer not due, a signal not sent: ``little.runtime._waits``) is
    suspended: the result's status is ``waiting``, with ``wake_at`` and ``waiting_for``, and
    nothing holds the run until it is executed again (``follow`` does that). Timers due within
    ``hold`` seconds are slept here instead.

    ``control`` lets a supervisor stop or cancel the execution at its next event boundary
    (``ExecutionStopped`` is raised). ``on_running(state)`` is called once the run is claimed
    and its ``RunStarted`` is in the log, just before the workflow runs (not for sub-runs).
    ``replay_from`` (a new run only) names a recorded run whose agent calls this run may reuse
    (recorded-call replay, ``little.runtime._recorded``) in ``replay_mode`` (``repairable`` or
    ``strict``, see ``run``), or as a full replay (``full_replay``). ``fresh=True``: the caller made the
    run id just now and never gave it out (``run`` without ``run_id``), so there is no log to
    read first. Every read and fold runs off the event loop.
    """
    if replay_mode not in REPLAY_MODES:
        raise ConfigurationError(
            f"replay_mode={replay_mode!r} (run {run_id}) is not a replay mode: use one of "
            f"{', '.join(repr(m) for m in REPLAY_MODES)}"
        )
    model: Model | None = None
    if full_replay is not None:
        if replay_from is None:
            raise ConfigurationError(
                f"run {run_id}: a full replay needs replay_from, the recorded run it replays"
            )
        # a name that builds no model is refused up front (an import, a factory: off the loop)
        model = await asyncio.to_thread(model_from_spec, full_replay.model)
    owner = owner or default_owner()
    if fresh:
        state = materialize_run_state_from_events([], run_id=run_id)
    else:
        state = await fold_run_off_loop(world, run_id)
    if full_replay is not None and state.last_position is not None:
        _check_full_replay_of(state, replay_from, full_replay)
    if state.terminal:
        return await _result(state, world)  # nothing to claim: read the outcome from the log
    if state.workflow is not None:
        _check_resumed_budgets(state, max_agent_calls, max_tokens)
        if control is None or not control.cancelled:
            # Refused before claiming if the run's own version is not here: a claim would
            # only add an event nothing can act on. (A cancel needs no code: it is recorded
            # before the workflow would be looked up.)
            workflow = resolve_workflow(state, workflow)
    elif workflow is None:
        # Refused before claiming: a claim would only add an event nothing can act on.
        found = "no events" if state.last_position is None else "no RunStarted"
        raise RunNotStartedError(
            run_id,
            f"run {run_id} has {found} in its log, so there is no workflow or input to resume "
            "(a starter that died right after claiming it leaves only its claim): start it "
            f"with run(world, workflow, input, run_id={run_id!r}) or `little submit <workflow> "
            f"--input ... --run-id {run_id}`",
        )
    prepared: RecordedCalls | None = None
    if full_replay is not None and state.workflow is None and workflow is not None:
        # refused before claiming: a full replay that cannot be made leaves nothing behind
        assert replay_from is not None
        prepared = await asyncio.to_thread(_full_record, world, workflow.name, replay_from)
    # The execution's span: a run that started continues the trace its RunStarted record
    # carries (whoever resumes it, in whatever process), linked to the context resuming it.
    parent: Any = None
    links: tuple[Any, ...] = ()
    if state.workflow is not None and tracing.enabled():
        parent = await asyncio.to_thread(started_trace_context, world, run_id)
        current = tracing.current_context()
        links = () if parent is None or current is None else (current,)
    name = state.workflow or (workflow.name if workflow is not None else "?")
    with tracing.span(
        f"little.run {name}",
        {
            "little.run_id": run_id,
            "little.workflow": name,
            "little.resumed": state.workflow is not None,
            "little.parent_run_id": parent_run_id or state.parent_run_id,
            "little.parent_call_id": parent_call_id,
            "little.replay_source_run_id": replay_from or state.replay_source_run_id,
        },
        parent=parent,
        links=links,
        ok=NOT_FAILURES,
    ) as span:
        state, writer = await claim(world, run_id, owner, state, fresh=fresh)
        tracing.set_attributes(span, little_epoch=writer.epoch, little_owner=owner)
        if state.terminal:
            return await _result(state, world)
        writer.control = control
        try:
            result = await _execute_claimed(
                world,
                run_id,
                workflow,
                input,
                state,
                writer,
                owner=owner,
                parent_run_id=parent_run_id,
                parent_call_id=parent_call_id,
                max_agent_calls=max_agent_calls,
                max_tokens=max_tokens,
                on_running=on_running,
                replay_from=replay_from,
                replay_mode=replay_mode,
                full_replay=full_replay,
                prepared=prepared,
                model=model,
                hold=hold,
            )
        finally:
            await writer.settled()  # no append of this execution is left in flight when it ends
        tracing.set_attributes(
            span,
            little_status=result.status if result is not _AGAIN else "waiting",
            little_served_calls=result.served_calls,
            little_reinvoked_calls=result.reinvoked_calls,
            little_replayed=None if result.replay is None else result.replay.replayed,
        )
        if result.status == "failed":
            tracing.set_error(span, (result.error or "failed").split(":", 1)[0])
    if result is _AGAIN:  # a signal it waits for landed while it suspended: go on at once
        return await execute(
            world,
            run_id,
            workflow,
            owner=owner,
            control=control,
            hold=hold,
            parent_run_id=parent_run_id,
            parent_call_id=parent_call_id,
            on_running=on_running,  # a supervisor hears of the new claim (and its epoch)
        )
    return result


async def _execute_claimed(
    world: World,
    run_id: str,
    workflow: AnyWorkflow | None,
    input: Any,
    state: MaterializedRunState,
    writer: RunWriter,
    *,
    owner: str,
    parent_run_id: str | None,
    parent_call_id: str | None,
    max_agent_calls: int | None,
    max_tokens: int | None,
    on_running: Callable[[MaterializedRunState], None] | None,
    replay_from: str | None,
    replay_mode: str,
    full_replay: FullReplay | None,
    hold: float,
    prepared: RecordedCalls | None = None,
    model: Model | None = None,
) -> RunResult:
    await writer.checkpoint()  # stopped or cancelled while claiming
    if state.steps:
        await asyncio.to_thread(assert_completed_step_artifacts_valid, state, world.artifacts.get)

    source: RecordedCalls | None = None  # the replay's source record, as read at start
    if state.workflow is None:
        if workflow is None:  # another process claimed it meanwhile and has not started it
            raise RunNotStartedError(
                run_id,
                f"run {run_id} was claimed at epoch {writer.epoch} but has no RunStarted, and "
                "no workflow was given to start it with",
            )
        if full_replay is not None and parent_run_id is None and input is None and prepared:
            # a full replay does the recorded run's task again: its input, and (unless told
            # otherwise) its budgets, so another model never runs unbounded
            assert prepared.state is not None
            input_json, input_ref = prepared.state.input_json, prepared.state.input_ref
            if max_agent_calls is None:
                max_agent_calls = prepared.state.max_agent_calls
            if max_tokens is None:
                max_tokens = prepared.state.max_tokens
        else:
            input_json, input_ref = await store_json(world, run_id, input)
        budgets = (max_agent_calls, max_tokens)
        identity, refused, source, changes = await asyncio.to_thread(
            _start_facts_of,
            world,
            workflow,
            replay_from,
            replay_mode,
            budgets,
            full_replay,
            prepared,
        )
        config_json, config_sha256 = configuration_json(_configuration(workflow, identity, budgets))
        if refused is not None and SIMULATING.get() is not None:
            # a simulated sub-run whose replay is refused could only run fresh
            raise SimulationDivergedError(
                f"replay refused: {refused}", ordinal=None, miss_reason=refused
            )
        started, at = await writer.emit(
            RunStarted,
            workflow=workflow.name,
            workflow_version=workflow.version,
            input_json=input_json,
            input_ref=input_ref,
            parent_run_id=parent_run_id,
            parent_call_id=parent_call_id,
            max_agent_calls=max_agent_calls,
            max_tokens=max_tokens,
            replay_source_run_id=replay_from,
            replay_refused_reason=refused,
            source_sha256=identity.sha256,
            source_coverage=identity.coverage,
            replay_mode=(
                MODE_FULL
                if full_replay is not None
                else replay_mode
                if replay_from is not None
                else None
            ),
            replay_model=None if full_replay is None else full_replay.model,
            replay_live_tools=None if full_replay is None else full_replay.live_tools,
            config_sha256=config_sha256,
            config_json=config_json,
            config_changes=changes,
        )
        state = materialize_run_state_from_events(
            [LoggedEvent(started, at.partition, at.offset)], start=state
        )
    else:
        if replay_from is not None and replay_from != state.replay_source_run_id:
            log.warning(
                "replay_from_ignored",
                run_id=run_id,
                replay_from=replay_from,
                reason="the run already started: this is a resume",
            )
        workflow = resolve_workflow(state, workflow)  # (started by another writer meanwhile)
    recorded = await asyncio.to_thread(_recorded_calls, world, state, source)
    if model is None and state.replay_mode == MODE_FULL and state.replay_model is not None:
        model = await asyncio.to_thread(model_from_spec, state.replay_model)
    execution = Execution(world, run_id, state, writer, owner, recorded, hold, model)
    input = await execution.load_json(state.input_json, state.input_ref)
    log.info("run_executing", run_id=run_id, epoch=writer.epoch, resumed_from_seq=state.last_seq)
    if on_running is not None:
        on_running(state)
    try:
        output = await workflow(WorkflowContext(execution), input)
    except Exception as exc:
        if isinstance(exc, ExecutionSuspended):
            if await execution.waits.suspend(exc):
                return _AGAIN
            return RunResult(
                run_id,
                "waiting",
                served_calls=execution.served_calls,
                reinvoked_calls=execution.reinvoked_calls,
                replay=execution.replay(),
                wake_at=exc.wake_at,
                waiting_for=exc.waiting_for,
            )
        if isinstance(exc, ExecutionStopped):
            await writer.checkpoint()  # records this run's RunCancelled if a sub-run was cancelled
            raise
        if isinstance(exc, SimulationDivergedError):
            await writer.flush()  # a simulation's sandbox log shows how far the run got
            raise
        if isinstance(exc, LogError | ClaimRejectedError | RuntimeIntegrityError):
            raise  # the writer must stop; a later resume decides
        if execution.waits.raised is not None:
            return await _swallowed(execution, workflow.name, execution.waits.raised)
        cause = exc.error if isinstance(exc, StepFailedError) else exc
        error = str(exc)
        log.warning(
            "run_failed",
            run_id=run_id,
            workflow=workflow.name,
            error_type=type(cause).__name__,
            # a log line is no place for a megabyte: the record keeps what fits (RunFailed)
            error=error if len(error) <= LOGGED_ERROR else f"{error[:LOGGED_ERROR]}... [cut]",
            exc_info=cause if len(error) <= LOGGED_ERROR else None,
        )
        await writer.emit(
            RunFailed,
            error_type=type(cause).__name__,
            message=str(exc),
            retryable=False,
        )
        return RunResult(
            run_id,
            "failed",
            None,
            f"{type(cause).__name__}: {exc}",
            execution.served_calls,
            execution.reinvoked_calls,
            execution.replay(),
        )
    if execution.waits.raised is not None:  # caught by the workflow: it went on past a wait
        return await _swallowed(execution, workflow.name, execution.waits.raised)
    output_json, output_ref = await execution.store_json(output)
    await writer.emit(RunCompleted, output_json=output_json, output_ref=output_ref)
    return RunResult(
        run_id,
        "completed",
        output,
        None,
        execution.served_calls,
        execution.reinvoked_calls,
        execution.replay(),
    )


def resolve_workflow(state: MaterializedRunState, workflow: AnyWorkflow | None) -> AnyWorkflow:
    """The code that continues ``state``'s run, which has started: the version of its
    workflow that its ``RunStarted`` names. ``workflow`` if it is that name and version, else
    that version from the registry (so a resume given the newest version of a name, or none,
    runs the version the run started on). ``WorkflowVersionError`` when ``workflow`` is of
    another name, or that version is not registered here; ``UnknownWorkflowError`` when no
    workflow was given and no version of the name is registered."""
    name, version, run_id = state.workflow, state.workflow_version or "", state.run_id
    assert name is not None, "the run has started"
    if workflow is not None and (workflow.name, workflow.version) == (name, version):
        return workflow
    if workflow is not None and workflow.name != name:
        raise WorkflowVersionError(
            f"run {run_id} was started by workflow {name} v{version}, not {workflow.name} "
            f"v{workflow.version}: resuming it with other code would mix two programs' answers",
            workflow=name,
            version=version,
            registered=versions(name),
            run_id=run_id,
        )
    try:
        return lookup(name, version, run_id=run_id)
    except WorkflowVersionError as exc:
        if workflow is None:
            raise
        raise WorkflowVersionError(
            f"run {run_id} was started by workflow {name} v{version}, not {name} "
            f"v{workflow.version}, and v{version} is not registered in this process "
            f"(registered versions: {', '.join(exc.registered) or 'none'}): resuming it with "
            "other code would mix two programs' answers; keep v"
            f"{version} registered (@workflow({name!r}, version={version!r}, "
            "resume_only=True)) until its runs end",
            workflow=name,
            version=version,
            registered=exc.registered,
            run_id=run_id,
        ) from None


async def _swallowed(
    execution: Execution, workflow: str, suspended: ExecutionSuspended
) -> RunResult:
    """The workflow caught the ``ExecutionSuspended`` a wait raised and went on as if the
    wait had ended: what it did after is not what the run would do. The run fails, saying so."""
    message = (
        f"workflow {workflow} caught the suspension of a durable wait ({suspended}) and went "
        "on past the wait: catch the errors you mean (WaitTimeoutError, StepFailedError, ...), "
        "not Exception, around sleep/wait_for_signal and the steps and sessions that wait"
    )
    log.error("run_failed", run_id=execution.run_id, workflow=workflow, error=message)
    await execution.writer.emit(
        RunFailed, error_type="ExecutionSuspended", message=message, retryable=False
    )
    return RunResult(
        execution.run_id,
        "failed",
        None,
        f"ExecutionSuspended: {message}",
        execution.served_calls,
        execution.reinvoked_calls,
        execution.replay(),
    )


def fold_source(world: World, run_id: str) -> tuple[MaterializedRunState, str | None]:
    """A replay's source run folded from its log, as far as the log is proven: the fold stops
    before a record that does not decode or breaks the stream, and says where (a worker
    thread). The whole log is read: a snapshot cannot vouch for the records it stands for."""
    state, damage, _ = _proven_source(world, run_id)
    return state, damage


def _proven_source(
    world: World, run_id: str
) -> tuple[MaterializedRunState, str | None, list[LoggedEvent]]:
    """``fold_source``, with the events of the proven prefix it folded."""
    events: list[LoggedEvent] = []
    damage: str | None = None
    try:
        for item in world.read_run(run_id):
            events.append(item)
    except RecordDecodeError as exc:
        damage = str(exc)
    try:
        return materialize_run_state_from_events(events, run_id=run_id), damage, events
    except StreamIntegrityError as exc:
        cut = next(i for i, item in enumerate(events) if item.event is exc.event)
        state = materialize_run_state_from_events(events[:cut], run_id=run_id)
        return state, str(exc), events[:cut]


def _start_facts(
    world: World,
    workflow: AnyWorkflow,
    replay_from: str | None,
    replay_mode: str,
) -> tuple[SourceIdentity, str | None, RecordedCalls | None]:
    """What ``RunStarted`` records about the workflow's source, and for a replay why it is
    refused (or None) and the source run's record. Reads source files and the log: a worker
    thread."""
    identity, refused, source, _ = _start_facts_of(
        world, workflow, replay_from, replay_mode, (None, None)
    )
    return identity, refused, source


def _start_facts_of(
    world: World,
    workflow: AnyWorkflow,
    replay_from: str | None,
    replay_mode: str,
    budgets: tuple[int | None, int | None],
    full_replay: FullReplay | None = None,
    prepared: RecordedCalls | None = None,
) -> tuple[SourceIdentity, str | None, RecordedCalls | None, tuple[str, ...]]:
    """``_start_facts``, and for a replay how its configuration (with ``budgets``) differs
    from the source run's (``RunStarted.config_changes``). A full replay that cannot be made
    (its source is not a finished run of this workflow) raises ``ConfigurationError``: it
    would be no replay of anything; it serves no agent call, so nothing of its configuration
    is compared."""
    identity = workflow_source(workflow.fn, workflow.registered_in)
    if replay_from is None:
        return identity, None, None, ()
    if full_replay is not None:
        record = prepared or _full_record(world, workflow.name, replay_from)
        return identity, None, record, ()
    config = _configuration(workflow, identity, budgets)
    refused, source, changes = _replay_refusal(
        world, workflow, identity, replay_from, replay_mode, config
    )
    return identity, refused, source, changes


def _configuration(
    workflow: AnyWorkflow, identity: SourceIdentity, budgets: tuple[int | None, int | None]
) -> dict[str, Any]:
    return run_configuration(
        workflow=workflow.name,
        workflow_version=workflow.version,
        source_sha256=identity.sha256,
        source_coverage=identity.coverage,
        max_agent_calls=budgets[0],
        max_tokens=budgets[1],
    )


def _check_resumed_budgets(
    state: MaterializedRunState, max_agent_calls: int | None, max_tokens: int | None
) -> None:
    """A resume runs under the budgets its ``RunStarted`` recorded; one told other budgets (a
    ``run(..., run_id=)`` of a started run, a StartRun sent again with others) is refused
    before claiming, naming what changed, rather than silently running under either."""
    given = {"max_agent_calls": max_agent_calls, "max_tokens": max_tokens}
    recorded = {"max_agent_calls": state.max_agent_calls, "max_tokens": state.max_tokens}
    asked = {k: v for k, v in given.items() if v is not None}
    changes = configuration_changes(
        {"budgets": {k: recorded[k] for k in asked}}, {"budgets": asked}
    )
    if changes:
        raise ConfigurationError(
            f"run {state.run_id}: configuration changed: {'; '.join(changes)}: the run started "
            "under the budgets its RunStarted recorded and resumes under them; resume it "
            "without budgets, or start a new run (replay_from= reuses its recorded calls)"
        )


def _replay_refusal(
    world: World,
    workflow: AnyWorkflow,
    identity: SourceIdentity,
    source_run_id: str,
    mode: str,
    config: dict[str, Any],
) -> tuple[str | None, RecordedCalls | None, tuple[str, ...]]:
    """Why the agent calls of ``source_run_id`` cannot be offered to a new run of
    ``workflow`` whose source is ``identity`` (the run then executes fresh), or None; and the
    source run's record (its proven prefix, ``fold_source``); and how ``config`` differs from
    the source run's configuration. The checks run in the seed's order: the source run, its
    target, the coverage of both identities, the scan, the source change (strict mode), the
    configuration (strict mode), the record."""
    source, damage = fold_source(world, source_run_id)
    if damage is not None:
        log.warning("replay_source_damaged", source_run_id=source_run_id, damage=damage)

    recorded = state_configuration(source)
    changes = configuration_changes(recorded, config) if recorded is not None else ()

    def refuse(reason: str, **why: Any) -> tuple[str, None, tuple[str, ...]]:
        log.warning(
            "replay_refused",
            reason=reason,
            source_run_id=source_run_id,
            workflow=workflow.name,
            **why,
        )
        return reason, None, changes

    # A damaged log ends where it stops being readable: what came before is the proven record
    if source.workflow is None or not (source.terminal or damage is not None):
        return refuse(REFUSED_SOURCE_UNUSABLE, source_status=source.status)
    if source.workflow != workflow.name:
        return refuse(REFUSED_TARGET_CHANGED, source_workflow=source.workflow)
    if not identity.readable:
        return refuse(REFUSED_UNSAFE, reads=("the workflow's source cannot be read",))
    if identity.coverage != COVERAGE_SELF_CONTAINED:
        return refuse(REFUSED_COVERAGE_UNPROVEN, unresolved=identity.unresolved)
    if source.source_coverage != COVERAGE_SELF_CONTAINED:
        return refuse(
            REFUSED_COVERAGE_UNPROVEN,
            source_coverage=source.source_coverage or "none recorded (logged before RunStarted v3)",
        )
    if identity.reads:
        return refuse(REFUSED_UNSAFE, reads=identity.reads)
    if mode == MODE_STRICT and (
        source.source_sha256 != identity.sha256 or source.workflow_version != workflow.version
    ):
        return refuse(
            REFUSED_SOURCE_CHANGED,
            source_sha256=source.source_sha256,
            sha256=identity.sha256,
            source_version=source.workflow_version,
            version=workflow.version,
            changed=changes,
        )
    if mode == MODE_STRICT and changes:
        return refuse(REFUSED_CONFIG_CHANGED, changed=changes)
    if not any(c.outcome is not None for c in source.agent_calls) and SIMULATING.get() is None:
        # (a simulation is served the source's values, and any call is a divergence anyway)
        return refuse(REFUSED_NO_CALLS)
    if changes:  # repairable: proceeds, and says so (RunStarted.config_changes, the report)
        log.warning(
            "replay_configuration_changed",
            source_run_id=source_run_id,
            workflow=workflow.name,
            changed=changes,
        )
    return None, RecordedCalls.of(source, damage), changes


def _check_full_replay_of(
    state: MaterializedRunState, replay_from: str | None, full_replay: FullReplay
) -> None:
    """A full replay asked for under the id of a run that exists continues it only if it is
    that very full replay; anything else is refused, naming what differs, never ignored."""
    asked = {
        "replay_mode": MODE_FULL,
        "replay_source_run_id": replay_from,
        "replay_model": full_replay.model,
        "replay_live_tools": full_replay.live_tools,
    }
    recorded = {
        "replay_mode": state.replay_mode,
        "replay_source_run_id": state.replay_source_run_id,
        "replay_model": state.replay_model,
        "replay_live_tools": bool(state.replay_live_tools),
    }
    if state.workflow is None:  # only a claim: nothing recorded to differ from
        return
    differs = [f"{k}: {recorded[k]!r} -> {asked[k]!r}" for k in asked if asked[k] != recorded[k]]
    if differs:
        raise ConfigurationError(
            f"run {state.run_id} exists ({state.status}) and is not this full replay "
            f"({'; '.join(differs)}): give the full replay a new run id"
        )


def _full_record(world: World, workflow: str, source_run_id: str) -> RecordedCalls:
    """A full replay's record of its source: its values (served by place) and its tool
    receipts; no agent call of it is served (a worker thread)."""
    source, damage, events = _proven_source(world, source_run_id)
    if source.workflow is None or not (source.terminal or damage is not None):
        raise ConfigurationError(
            f"full replay of run {source_run_id}: it is not a finished run "
            f"({'no RunStarted' if source.workflow is None else source.status})"
        )
    if source.workflow != workflow:
        raise ConfigurationError(
            f"full replay of run {source_run_id}: it is a run of {source.workflow!r}, not of "
            f"{workflow!r} ({REFUSED_TARGET_CHANGED})"
        )
    record = RecordedCalls.of(source, damage)
    record.full = True
    record.receipts = tool_receipts(events)
    return record


def _recorded_calls(
    world: World, state: MaterializedRunState, source: RecordedCalls | None
) -> RecordedCalls | None:
    """The source run's record for a replaying run: ``source`` as just read when the run
    starts, read again on every resume of it (a worker thread)."""
    if state.replay_source_run_id is None or state.replay_refused_reason is not None:
        return None
    if source is None and state.replay_mode == MODE_FULL:
        assert state.workflow is not None
        return _full_record(world, state.workflow, state.replay_source_run_id)
    if source is None:
        folded, damage = fold_source(world, state.replay_source_run_id)
        source = RecordedCalls.of(folded, damage)
    return source


async def run(
    world: World,
    workflow: AnyWorkflow,
    input: Any = None,
    *,
    run_id: str | None = None,
    max_agent_calls: int | None = None,
    max_tokens: int | None = None,
    replay_from: str | None = None,
    replay_mode: str = MODE_REPAIRABLE,
    full_replay: FullReplay | None = None,
    hold: float = HOLD_SECONDS,
) -> RunResult:
    """Start ``workflow`` with ``input`` as a new run (or resume ``run_id`` if it exists).

    It runs until it ends or waits (status ``waiting``: ``follow`` resumes it whenever a wait
    can end; timers due within ``hold`` seconds are slept here).

    ``replay_from=<run id>`` re-runs it against that recorded run: every agent call whose
    admission ordinal and request match the recorded one returns the recorded answer without
    invoking a model or tool, up to the first call that does not (from there on every call
    runs fresh). Edit the last stage of a long pipeline, re-run it, and pay for that stage.
    ``replay_mode="repairable"`` (the default) does that for an edited source;
    ``replay_mode="strict"`` refuses reuse (``source-changed``: the run executes fresh) unless
    the workflow's source identity and version are those the recorded run started with.

    ``full_replay=FullReplay(model, live_tools=False)`` with ``replay_from`` makes a *full
    replay* instead: a new run, linked to the recorded one and marked ``full``, that executes
    the workflow again with every model call live from ``model`` and every tool call answered
    from the recorded run's results (``FullReplay``): a dataset of the same task done by
    another model, without repeating a tool's effects.
    """
    return await execute(
        world,
        run_id or f"run_{uuid.uuid4().hex}",
        workflow,
        input,
        max_agent_calls=max_agent_calls,
        max_tokens=max_tokens,
        replay_from=replay_from,
        replay_mode=replay_mode,
        full_replay=full_replay,
        fresh=run_id is None,  # an id made here and given to nobody yet: nothing to read
        hold=hold,
    )


async def resume(
    world: World,
    run_id: str,
    workflow: AnyWorkflow | None = None,
    *,
    hold: float = HOLD_SECONDS,
) -> RunResult:
    """Resume ``run_id`` from its log (its workflow is looked up by name if not given), until
    it ends or waits."""
    return await execute(world, run_id, workflow, hold=hold)

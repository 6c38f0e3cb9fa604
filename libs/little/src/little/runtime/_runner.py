"""Executing a run: claim, replay, check, then run the workflow with memoized steps.

Every execution is a resume: starting a run is resuming an empty stream. The executor claims
the run with the next epoch (``_claim``), reads its log up to that claim, refuses to proceed
if the log and the code disagree (restart checks, replay admission: ``_admission``), and runs
the workflow; completed steps return their recorded outputs, and agent sessions fast-forward
through their recorded calls. The public entry points ``run``, ``resume`` and ``execute``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from little import tracing
from little._ids import new_uuid_hex
from little._world import World
from little.errors import ConfigurationError
from little.events import LoggedEvent, RunCompleted, RunFailed, RunStarted, RunStartFacts
from little.harness import Model, model_from_spec
from little.logging_setup import get_logger
from little.replay import (
    MaterializedRunState,
    assert_completed_step_artifacts_valid,
    configuration_json,
    fold_run,
    materialize_run_state_from_events,
    replay_envelope,
)
from little.runtime._admission import (
    _check_full_replay_of,
    _check_replay_sessions,
    _check_resumed_budgets,
    _configuration,
    _full_record,
    _recorded_calls,
    _start_facts_of,
    full_sub_run,
    replays,
)
from little.runtime._claim import claim, default_owner
from little.runtime._context import WorkflowContext
from little.runtime._control import ExecutionStopped, RunControl
from little.runtime._errors import (
    ENDS_THE_WRITER,
    ExecutionSuspended,
    RunNotStartedError,
    SimulationDivergedError,
    StepFailedError,
    SubRunFailedError,
    WorkflowVersionError,
)
from little.runtime._execution import (
    Execution,
    IntegrityLatch,
    RunResult,
    fold_run_off_loop,
    load_json,
    store_json,
)
from little.runtime._recorded import (
    MODE_FULL,
    MODE_REPAIRABLE,
    REPLAY_MODES,
    SIMULATING,
    FullReplay,
    RecordedCalls,
)
from little.runtime._registry import AnyWorkflow, lookup, versions
from little.runtime._writer import RunWriter

log = get_logger("little.runtime")


LOGGED_ERROR = 4_000
"""The most characters of an error a log line carries (with its traceback only below it)."""

_AGAIN = RunResult("", "again")
"""``_execute_claimed``'s answer when the run suspended and can go on at once."""


async def _result(state: MaterializedRunState, world: World) -> RunResult:
    output = await load_json(world, state.output_json, state.output_ref)
    return RunResult(state.run_id, state.status, output, state.error, replay=replay_envelope(state))


def started_trace_context(world: World, run_id: str) -> Any:
    """The trace context the run's ``RunStarted`` record carries (its first execution's span),
    or None: read from the record's headers, not decoded (a worker thread)."""
    for record in world.log.read_run(run_id):
        if record.header("little.type") == b"RunStarted":
            return tracing.context_from_headers(record.headers)
    return None


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
    hold: float | None = None,
    parent_integrity: IntegrityLatch | None = None,
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
    read first. ``parent_integrity``: a sub-run's parent execution's integrity latch (an error
    it latches finishes the sub-run too). Every read and fold runs off the event loop.
    """
    if replay_mode not in REPLAY_MODES:
        raise ConfigurationError(
            f"replay_mode={replay_mode!r} (run {run_id}) is not a replay mode: use one of "
            f"{', '.join(repr(m) for m in REPLAY_MODES)}"
        )
    models: dict[str, Model] | None = None
    if full_replay is not None:
        if replay_from is None:
            raise ConfigurationError(
                f"run {run_id}: a full replay needs replay_from, the recorded run it replays"
            )
        # a name that builds no model is refused up front (an import, a factory: off the loop)
        models = await asyncio.to_thread(_models_of, full_replay)
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
        if parent_run_id is None:  # a session the models name must be one the source had
            await asyncio.to_thread(_check_replay_sessions, world, prepared, full_replay)
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
                models=models,
                hold=hold,
                parent_integrity=parent_integrity,
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
            parent_integrity=parent_integrity,
        )
    return result


def _tool_scopes(source: RecordedCalls | None) -> bool | None:
    """A new run's ``tool_scopes``: True, unless it replays a run logged before v6, whose
    numbering it keeps (its values, waits and sub-runs are matched by place)."""
    state = None if source is None else source.state
    return True if state is None or state.workflow is None else state.tool_scopes


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
    hold: float | None,
    prepared: RecordedCalls | None = None,
    models: dict[str, Model] | None = None,
    parent_integrity: IntegrityLatch | None = None,
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
        start = RunStartFacts(
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
            config_changes=changes,
            source_unsafe_reads=identity.recorded_reads(),
            tool_scopes=_tool_scopes(None if refused is not None else source),
        )
        started, at = await writer.emit(RunStarted, **start.start_facts(), config_json=config_json)
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
    recorded: RecordedCalls | None = None
    if replays(state):  # the source record (read on a worker thread); a fresh run has none
        recorded = await asyncio.to_thread(_recorded_calls, world, state, source)
    sub_runs_fresh: dict[str, bool | None] | None = None
    if recorded is not None and state.sub_runs:
        sub_runs_fresh = await asyncio.to_thread(_sub_runs_fresh, world, state, recorded)
    if models is None and state.replay_mode == MODE_FULL:  # as its RunStarted names them
        models = await asyncio.to_thread(_models_of, FullReplay(state.replay_model))
    execution = Execution(
        world,
        run_id,
        state,
        writer,
        owner,
        recorded,
        hold,
        models,
        run_sub=_run_sub,
        sub_runs_fresh=sub_runs_fresh,
        parent_integrity=parent_integrity,
    )
    input = await execution.load_json(state.input_json, state.input_ref)
    log.info("run_executing", run_id=run_id, epoch=writer.epoch, resumed_from_seq=state.last_seq)
    if on_running is not None:
        on_running(state)
    try:
        try:
            output = await workflow(WorkflowContext(execution), input)
        except (Exception, ExecutionSuspended) as exc:
            if execution.integrity.error is None or execution.integrity.holds(exc):
                raise
            _caught(execution, exc)  # then the workflow failed or waited otherwise
        else:
            _caught(execution, None)
        execution.integrity.check()  # the run is ended by it, whatever the workflow did with it
    except ExecutionSuspended as exc:
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
    except ExecutionStopped:
        await writer.checkpoint()  # records this run's RunCancelled if a sub-run was cancelled
        raise
    except SimulationDivergedError:
        await writer.flush()  # a simulation's sandbox log shows how far the run got
        raise
    except ENDS_THE_WRITER:
        raise  # the writer must stop; a later resume decides
    except Exception as exc:
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


def _caught(execution: Execution, then: BaseException | None) -> None:
    """Log that the workflow caught the integrity error its execution latched, if it did
    (``then``: what it raised instead, None if it returned)."""
    error = execution.integrity.error
    if error is not None:
        log.warning(
            "integrity_error_caught",
            run_id=execution.run_id,
            error_type=type(error).__name__,
            then=type(then).__name__ if then is not None else "returned",
            note="the run ends by the integrity error all the same",
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


def _sub_run_fresh(world: World, sub_run_id: str) -> bool:
    """Did the sub-run ``sub_run_id`` do fresh work: anything but replay its recorded sub-run
    whole (every agent call served, every value taken from the record, every sub-run of its
    own replayed whole, and completed)? A worker thread: it folds the sub-run's log."""
    state, _, _ = fold_run(world, sub_run_id)
    if (
        state.status != "completed"
        or state.replay_source_run_id is None
        or state.replay_refused_reason is not None
        or state.replay_mode == MODE_FULL
    ):
        return True
    if any(not c.replayed or c.outcome != "succeeded" for c in state.agent_calls):
        return True
    if any(v.source_run_id is None for v in state.values):
        return True
    return any(_sub_run_fresh(world, s.sub_run_id) for s in state.sub_runs)


def _sub_runs_fresh(
    world: World, state: MaterializedRunState, source: RecordedCalls
) -> dict[str, bool | None]:
    """For a replaying run's resume, each sub-run it reserved: fresh work (True), the
    recorded sub-run replayed whole (False), or not ended, or never started (None: the latch
    rule decides again, ``AgentCalls.of``). Only a sub-run the record started at the same
    call with the same workflow can be anything but fresh. A worker thread."""
    verdicts: dict[str, bool | None] = {}
    for sub in state.sub_runs:
        recorded = None if sub.call_id is None else source.sub_run(sub.call_id)
        if recorded is None or recorded.workflow != sub.workflow or source.full:
            verdicts[sub.sub_run_id] = True
            continue
        folded, _, _ = fold_run(world, sub.sub_run_id)
        if folded.workflow is None:  # reserved, never started: the latch rule decides
            verdicts[sub.sub_run_id] = None
        elif not folded.terminal:
            replaying = folded.replay_source_run_id == recorded.sub_run_id
            verdicts[sub.sub_run_id] = None if replaying else True
        else:
            verdicts[sub.sub_run_id] = _sub_run_fresh(world, sub.sub_run_id)
    return verdicts


def _models_of(full_replay: FullReplay) -> dict[str, Model]:
    """A full replay's models, built (a worker thread: a factory may import, or read keys)."""
    return {name: model_from_spec(spec) for name, spec in full_replay.models.items()}


async def _run_sub(
    execution: Execution, workflow: AnyWorkflow, sub_run_id: str, input: Any, call_id: str
) -> Any:
    """A sub-run of ``execution``'s run, executed inline (``Execution.run_sub``). In a replay
    (or a simulation) it replays the sub-run the record started at the same call, when
    admission said so (``AgentCalls.start_sub_run``); one that did fresh work latches the
    replay where it ended."""
    calls = execution.agent_calls
    golden = calls.sub_run_source(call_id)
    replaying = golden is not None and SIMULATING.get() is None
    full = full_sub_run(execution, workflow, call_id)
    if full is not None:
        golden, replaying = full[0], False
    mode = execution.replayed.replay_mode
    result = await execute(
        execution.world,
        sub_run_id,
        workflow,
        input,
        owner=execution.owner,
        parent_run_id=execution.run_id,
        parent_call_id=call_id,
        control=execution.writer.control,  # stopping or cancelling a run stops its sub-runs too
        hold=execution.waits.hold,
        replay_from=golden,
        replay_mode=mode if mode in REPLAY_MODES else MODE_REPAIRABLE,
        full_replay=None if full is None else full[1],
        parent_integrity=execution.integrity,  # the parent's latch finishes it too
    )
    if result.status == "waiting":  # the sub-run let go of itself: so does its parent
        raise ExecutionSuspended(execution.run_id, result.wake_at, result.waiting_for)
    if replaying:
        calls.sub_run_ended(
            call_id, await asyncio.to_thread(_sub_run_fresh, execution.world, sub_run_id)
        )
    if result.status != "completed":
        raise SubRunFailedError(
            execution.run_id, sub_run_id, workflow.name, result.status, result.error
        )
    return result.output


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
    hold: float | None = None,
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
    the workflow again with every model call live (each session's own model, unless ``model``
    names another: ``"anthropic:<id>"`` for every session, ``["agent=anthropic:<id>"]`` for
    those named ``agent``) and every tool call answered from the recorded run's results
    (``FullReplay``): a dataset of the same task done by another model, without repeating a
    tool's effects.
    """
    return await execute(
        world,
        run_id or f"run_{new_uuid_hex()}",
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
    hold: float | None = None,
) -> RunResult:
    """Resume ``run_id`` from its log (its workflow is looked up by name if not given), until
    it ends or waits."""
    return await execute(world, run_id, workflow, hold=hold)

"""Replay admission at run start: may a new run reuse a recorded run's agent calls, and how.

Reads the source run (its proven prefix), compares workflow, source identity and configuration
in the seed's order, and returns the refusal reason or the record (``RecordedCalls``) the run
is offered; a full replay's record and its sub-runs' too. Policy only: it writes nothing to the
run's log and never imports the executor or the author API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from little._world import RecordDecodeError, World
from little.errors import ConfigurationError
from little.events import LoggedEvent
from little.logging_setup import get_logger
from little.replay import (
    MaterializedRunState,
    StreamIntegrityError,
    configuration_changes,
    fold_run,
    materialize_run_state_from_events,
    run_configuration,
    state_configuration,
)
from little.runtime._recorded import (
    EVERY_SESSION,
    MODE_FULL,
    MODE_STRICT,
    REFUSED_CONFIG_CHANGED,
    REFUSED_COVERAGE_UNPROVEN,
    REFUSED_NO_CALLS,
    REFUSED_SOURCE_CHANGED,
    REFUSED_SOURCE_UNUSABLE,
    REFUSED_TARGET_CHANGED,
    REFUSED_UNSAFE,
    SIMULATING,
    FullReplay,
    RecordedCalls,
    tool_receipts,
)
from little.runtime._registry import AnyWorkflow
from little.runtime._source import COVERAGE_SELF_CONTAINED, SourceIdentity, workflow_source

if TYPE_CHECKING:
    from little.runtime._execution import Execution

log = get_logger("little.runtime")


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
    target, the coverage of both identities, the scan (of this code, and the verdict the
    source run recorded on its own), the source change (strict mode), the configuration
    (strict mode), the record."""
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
    if source.source_unsafe_reads:  # recorded by code reading the clock or randomness
        return refuse(REFUSED_UNSAFE, source_reads=source.source_unsafe_reads)
    # (None: logged before the verdict was recorded, RunStarted v5: accepted as before, by
    # any code; refusing it would leave every log and golden file recorded before v5 unable
    # to replay or simulate edited code, which is what they are kept for)
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


def _check_replay_sessions(world: World, record: RecordedCalls, full_replay: FullReplay) -> None:
    """Every session a full replay names a model for is a session of its source run (or of a
    sub-run it started): a name that matches none would change nothing, so it is refused,
    naming the sessions there are (a worker thread: sub-runs are read)."""
    named = sorted(n for n in full_replay.models if n != EVERY_SESSION)
    if not named or record.state is None:
        return
    names: set[str] = set()
    states, seen = [record.state], set()
    while states:
        state = states.pop()
        names.update(s.name for s in state.sessions)
        for sub in state.sub_runs:
            if sub.sub_run_id not in seen:
                seen.add(sub.sub_run_id)
                states.append(fold_run(world, sub.sub_run_id)[0])
    unknown = [n for n in named if n not in names]
    if unknown:
        raise ConfigurationError(
            f"full replay of run {record.state.run_id}: no session named "
            f"{', '.join(repr(n) for n in unknown)} (its sessions: "
            f"{', '.join(sorted(names)) or 'none'})"
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


def replays(state: MaterializedRunState) -> bool:
    """Whether the run serves a recorded run's calls (its replay was not refused)."""
    return state.replay_source_run_id is not None and state.replay_refused_reason is None


def _recorded_calls(
    world: World, state: MaterializedRunState, source: RecordedCalls | None
) -> RecordedCalls | None:
    """The source run's record for a replaying run: ``source`` as just read when the run
    starts, read again on every resume of it (a worker thread)."""
    source_run_id = state.replay_source_run_id
    if source_run_id is None or not replays(state):
        return None
    if source is None and state.replay_mode == MODE_FULL:
        assert state.workflow is not None
        return _full_record(world, state.workflow, source_run_id)
    if source is None:
        folded, damage = fold_source(world, source_run_id)
        source = RecordedCalls.of(folded, damage)
    return source


def full_sub_run(
    execution: Execution, workflow: AnyWorkflow, call_id: str
) -> tuple[str, FullReplay] | None:
    """In a full replay, a sub-run is a full replay too: of the sub-run the source run
    started at the same call with the same workflow, with the same model. One the source
    did not start there has nothing to serve its tools from: refused (its call fails)."""
    if execution.replayed.replay_mode != MODE_FULL:
        return None
    source = execution.agent_calls.source
    state = None if source is None else source.state
    found = None
    if state is not None:
        found = next(
            (s for s in state.sub_runs if s.call_id == call_id and s.workflow == workflow.name),
            None,
        )
    if found is None:
        raise ConfigurationError(
            f"run {execution.run_id} is a full replay of "
            f"{execution.agent_calls.source_run_id}, which "
            f"started no sub-run of {workflow.name} at call {call_id}: a full replay runs no "
            "workflow the recorded run did not (its tools would run live)"
        )
    live = bool(execution.replayed.replay_live_tools)
    return found.sub_run_id, FullReplay(execution.replayed.replay_model, live_tools=live)

"""The one fold: a run's events, in log order, into MaterializedRunState.

Used by the runtime, the projector and replay alike. Pure: no I/O, no clock, no randomness;
the same events always give the same state. Folding from a snapshot's state and then the
remaining events gives the same state as folding everything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, NoReturn

from little.errors import RuntimeIntegrityError
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    ArtifactCommitted,
    DecisionRecorded,
    Event,
    LoggedEvent,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    ParallelBranchScheduled,
    PatchMarked,
    RunCancelled,
    RunClaimed,
    RunCompleted,
    RunFailed,
    RunParked,
    RunStarted,
    RunSuspended,
    SessionCompacted,
    SessionCompleted,
    SessionStarted,
    SignalSent,
    StepCompleted,
    StepFailed,
    StepStarted,
    SubRunReserved,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    ValueRecorded,
    WaitEnded,
    WaitStarted,
)
from little.replay._pricing import cost_of
from little.replay._state import (
    RECENT_EVENT_IDS,
    AgentCall,
    CommittedArtifact,
    HistoryCompaction,
    LogPosition,
    MaterializedRunState,
    ModelTurn,
    ParallelGroup,
    PatchMark,
    RecordedValue,
    SessionState,
    SignalState,
    StepState,
    SubRun,
    ToolCall,
    VisitOutput,
    WaitState,
    construct,
    evolve,
    signal_name,
)

# States are built with construct/evolve (little.replay._state): every value comes from a
# validated event or state; validating it again was about a third of a fold's time.


class StreamIntegrityError(RuntimeIntegrityError):
    """A run's event stream is broken (seq gap, another event at an accepted seq, event of
    another run, an event for a session that never started). Names the run, the event and its
    offset."""

    def __init__(
        self, run_id: str, message: str, event: Event, position: LogPosition | None
    ) -> None:
        where = f" at partition {position.partition} offset {position.offset}" if position else ""
        super().__init__(f"run {run_id}: {message} ({event.type} event {event.event_id}{where})")
        self.run_id = run_id
        self.event = event
        self.position = position


class _Session:
    """Mutable while folding; frozen into SessionState at the end."""

    __slots__ = ("frozen", "tool_calls", "turns")

    def __init__(self, frozen: SessionState) -> None:
        self.frozen = frozen
        self.turns: dict[int, ModelTurn] = {t.turn: t for t in frozen.turns}
        self.tool_calls: dict[str, ToolCall] = {c.call_id: c for c in frozen.tool_calls}

    def freeze(self) -> SessionState:
        if self.frozen.compacted:
            return self.frozen
        return evolve(
            self.frozen,
            turns=tuple(self.turns.values()),
            tool_calls=tuple(self.tool_calls.values()),
            turn_count=len(self.turns),
            tool_call_count=len(self.tool_calls),
        )

    def compacted(self) -> SessionState:
        """The frozen session without its turns and tool calls, keeping their counts."""
        if self.frozen.compacted:
            return self.frozen
        return evolve(
            self.frozen,
            turns=(),
            tool_calls=(),
            turn_count=len(self.turns),
            tool_call_count=len(self.tool_calls),
            compacted=True,
            history=(),
        )


class _Fold:
    def __init__(self, start: MaterializedRunState) -> None:
        self.run: dict[str, Any] = start.__dict__.copy()  # the fields, in order
        self.run_id = start.run_id
        self.steps: dict[str, StepState] = {s.step_path: s for s in start.steps}
        self.sessions: dict[str, _Session] = {s.session_id: _Session(s) for s in start.sessions}
        # sessions not yet compacted, by step path: compacting on StepCompleted touches these
        # only, not every session of the run
        self.open_sessions: dict[str | None, list[str]] = {}
        for s in start.sessions:
            if not s.compacted:
                self.open_sessions.setdefault(s.step_path, []).append(s.session_id)
        self.groups: dict[str, ParallelGroup] = {g.group_path: g for g in start.parallel_groups}
        self.sub_runs = list(start.sub_runs)
        self.values = list(start.values)
        self.artifacts = list(start.artifacts)
        self.agent_calls: dict[int, AgentCall] = {c.ordinal: c for c in start.agent_calls}
        self.waits: dict[tuple[str | None, int], WaitState] = {
            (w.step_path, w.ordinal): w for w in start.waits
        }
        self.signals: dict[str, SignalState] = {s.signal_id: s for s in start.signals}
        self.recent: deque[str] = deque(start.recent_event_ids, maxlen=RECENT_EVENT_IDS)
        self.patches = list(start.patches)
        # (partition, offset) of the last item applied: a LogPosition is built only where one
        # is stored (freeze, a step's completion, an error), not for every event
        self.start_position = start.last_position
        self.position: tuple[int, int] | None = (
            None if start.last_position is None else _pair(start.last_position)
        )

    # -- driver --------------------------------------------------------------------------

    def apply(self, item: Event | LoggedEvent) -> None:
        if isinstance(item, LoggedEvent):
            event = item.event
            self.position = (item.partition, item.offset)
        else:
            event = item
        run = self.run
        if event.run_id != self.run_id:
            self._fail(f"event of run {event.run_id} in the stream of run {self.run_id}", event)
        if isinstance(event, RunClaimed):
            self._claim(event)
        elif isinstance(event, SignalSent):
            self.signal_sent(event)  # from outside the run's writers: no seq, no epoch
        elif event.epoch < run["epoch"]:
            if self._accepted_id(event.seq) == event.event_id:
                run["duplicate_events"] += 1  # a copy of an accepted event, made later
            else:
                run["fenced_events"] += 1  # a zombie writer's event, after a newer claim
        else:
            if event.epoch > run["epoch"]:
                self._fail(
                    f"event epoch {event.epoch} is ahead of the accepted claim's epoch "
                    f"{run['epoch']}: no RunClaimed accepted that writer",
                    event,
                )
            expected = run["last_seq"] + 1
            if event.seq == expected:
                run["last_seq"] = event.seq
                run["events_applied"] += 1
                self.recent.append(event.event_id)
                handler = _HANDLERS.get(type(event))
                if handler is not None:
                    handler(self, event)
            elif event.seq > expected:
                self._fail(f"seq gap: expected seq {expected}, found {event.seq}", event)
            elif self._accepted_id(event.seq) == event.event_id:
                run["duplicate_events"] += 1  # a mirror's or a re-produce's copy: skipped
            else:
                self._fail(self._not_a_copy(event, expected), event)
        run["last_event_id"] = event.event_id

    def _accepted_id(self, seq: int) -> str | None:
        """The id of the accepted event at ``seq``, if it is among the recent ones kept."""
        back = self.run["last_seq"] - seq
        recent = self.recent
        return recent[len(recent) - 1 - back] if 0 <= back < len(recent) else None

    def _not_a_copy(self, event: Event, expected: int) -> str:
        head = f"seq duplicate: expected seq {expected}, found {event.seq}"
        accepted = self._accepted_id(event.seq)
        if accepted is not None:
            return f"{head}, another event than the one accepted there ({accepted})"
        return (
            f"{head}, older than the last {len(self.recent)} accepted events, whose ids the "
            "fold keeps: a copy cannot be told from another event there"
        )

    def _log_position(self) -> LogPosition | None:
        pos, start = self.position, self.start_position
        if pos is None or (start is not None and pos == _pair(start)):
            return start
        return construct(LogPosition, partition=pos[0], offset=pos[1])

    def freeze(self) -> MaterializedRunState:
        # self.run holds every field of the state (it started as one): no defaults to fill
        return construct(
            MaterializedRunState,
            **{
                **self.run,
                "last_position": self._log_position(),
                "steps": tuple(self.steps.values()),
                "sessions": tuple(s.freeze() for s in self.sessions.values()),
                "parallel_groups": tuple(self.groups.values()),
                "sub_runs": tuple(self.sub_runs),
                "values": tuple(self.values),
                "artifacts": tuple(self.artifacts),
                "agent_calls": tuple(self.agent_calls.values()),
                "waits": tuple(self.waits.values()),
                "signals": tuple(self.signals.values()),
                "recent_event_ids": tuple(self.recent),
                "patches": tuple(self.patches),
            },
        )

    def _fail(self, message: str, event: Event) -> NoReturn:
        raise StreamIntegrityError(self.run_id, message, event, self._log_position())

    # -- claims (fencing, DESIGN §4) -------------------------------------------------------

    def _claim(self, e: RunClaimed) -> None:
        run = self.run
        if e.epoch <= run["epoch"]:
            run["rejected_claims"] += 1  # first claim in the log wins
            return
        if run["accepted_claims"] > 0:
            # A resume: every call recorded so far is served from the log (or skipped with
            # its step) instead of being paid for again.
            run["avoided_usage"] = run["avoided_usage"].plus(run["usage"])
            for path, step in self.steps.items():
                if step.usage.calls:
                    self.steps[path] = evolve(
                        step, avoided_usage=step.avoided_usage.plus(step.usage)
                    )
        run["epoch"] = e.epoch
        run["owner"] = e.owner
        run["accepted_claims"] += 1
        run["parked_reason"] = None  # whoever claims it next takes it up
        if run["status"] == "waiting":  # woken: the claimer takes up its waits
            run.update(status="running", wake_at=None, waiting_for=())

    # -- run ---------------------------------------------------------------------------------

    def run_started(self, e: RunStarted) -> None:
        self.run.update(e.start_facts(), status="running", started_at=e.occurred_at)

    def run_completed(self, e: RunCompleted) -> None:
        self.run.update(
            status="completed",
            output_json=e.output_json,
            output_ref=e.output_ref,
            ended_at=e.occurred_at,
        )

    def run_failed(self, e: RunFailed) -> None:
        self.run.update(
            status="failed", error=f"{e.error_type}: {e.message}", ended_at=e.occurred_at
        )

    def run_cancelled(self, e: RunCancelled) -> None:
        self.run.update(
            status="cancelled",
            error=f"cancelled: {e.reason}" if e.reason else None,
            ended_at=e.occurred_at,
        )

    def run_parked(self, e: RunParked) -> None:
        self.run["parked_reason"] = e.reason

    def run_suspended(self, e: RunSuspended) -> None:
        self.run.update(status="waiting", wake_at=e.wake_at, waiting_for=e.waiting_for)

    # -- durable waits -----------------------------------------------------------------------

    def wait_started(self, e: WaitStarted) -> None:
        key = (e.step_path, e.ordinal)
        if key in self.waits:
            self._fail(f"wait {e.ordinal} of {e.step_path or 'the run'} started twice", e)
        self.waits[key] = wait_state(e)

    def wait_ended(self, e: WaitEnded) -> None:
        key = (e.step_path, e.ordinal)
        wait = self.waits.get(key)
        if wait is None:
            self._fail(f"wait {e.ordinal} of {e.step_path or 'the run'} ended, never started", e)
        self.waits[key] = evolve(wait, outcome=e.outcome, signal_id=e.signal_id)
        if e.signal_id is not None:
            signal = self.signals.get(e.signal_id)
            if signal is None:
                self._fail(f"wait {e.ordinal} took signal {e.signal_id}, never sent", e)
            if signal.taken:
                self._fail(f"wait {e.ordinal} took signal {e.signal_id}, taken before", e)
            if signal.name != signal_name(wait):
                self._fail(
                    f"wait {e.ordinal} ({wait.kind} {wait.name!r}) took signal {e.signal_id} "
                    f"named {signal.name!r}",
                    e,
                )
            self.signals[e.signal_id] = evolve(signal, taken=True)

    def signal_sent(self, e: SignalSent) -> None:
        if e.signal_id in self.signals:
            return  # delivered again (a command read twice): the first one stands
        self.signals[e.signal_id] = signal_state(e)

    # -- steps -------------------------------------------------------------------------------

    def _step(self, e: Event, step_id: str | None = None) -> StepState:
        path = e.step_path
        if path is None:
            self._fail("a step event without step_path", e)
        step = self.steps.get(path)
        if step is None:
            step = construct(
                StepState,
                step_path=path,
                step_id=step_id or path.rsplit("/", 1)[-1],
                status="running",
            )
        return step

    def step_started(self, e: StepStarted) -> None:
        step = self._step(e, e.step_id)
        self.steps[step.step_path] = evolve(
            step,
            status="running",
            attempts=step.attempts + 1,
            max_visits=e.max_visits,
            branch_path=e.branch_path,
            error=None,
        )

    def step_completed(self, e: StepCompleted) -> None:
        step = self._step(e, e.step_id)
        visit_outputs = step.visit_outputs
        if step.max_visits > 1:
            # one entry per visit number (bounded by max_visits), the newest commit wins
            visit_outputs = (
                *(v for v in visit_outputs if v.visit != e.visit),
                construct(
                    VisitOutput,
                    visit=e.visit,
                    output_json=e.output_json,
                    output_ref=e.output_ref,
                    decision_target=step.decision_target,
                ),
            )
        self.steps[step.step_path] = evolve(
            step,
            visit_outputs=visit_outputs,
            status="completed",
            visits=step.visits + 1,
            branch_path=e.branch_path,
            output_json=e.output_json,
            output_ref=e.output_ref,
            artifact_refs=e.artifact_refs,
            error=None,
            completed_event_id=e.event_id,
            completed_position=self._log_position(),
        )
        for sid in self.open_sessions.pop(step.step_path, ()):
            self._count_lost(self.sessions[sid])
            self.sessions[sid] = _Session(self.sessions[sid].compacted())

    def step_failed(self, e: StepFailed) -> None:
        step = self._step(e, e.step_id)
        self.steps[step.step_path] = evolve(
            step,
            status="pending" if e.will_retry else "failed",
            error=f"{e.error_type}: {e.message}",
        )

    def parallel_scheduled(self, e: ParallelBranchScheduled) -> None:
        path = e.step_path or ""
        self.groups[path] = construct(
            ParallelGroup, group_path=path, branches=e.branches, branch_set_hash=e.branch_set_hash
        )

    def decision(self, e: DecisionRecorded) -> None:
        step = self._step(e, e.step_id)
        self.steps[step.step_path] = evolve(step, decision_target=e.target, decision_visit=e.visit)
        self.run["pending_decision_target"] = e.target

    def artifact(self, e: ArtifactCommitted) -> None:
        self.artifacts.append(
            construct(CommittedArtifact, name=e.name, ref=e.ref, step_path=e.step_path)
        )

    def sub_run(self, e: SubRunReserved) -> None:
        self.sub_runs.append(
            construct(
                SubRun,
                sub_run_id=e.sub_run_id,
                workflow=e.workflow,
                input_json=e.input_json,
                call_id=e.call_id,
                step_path=e.step_path,
                admitted_calls=len(self.agent_calls),
            )
        )

    def value(self, e: ValueRecorded) -> None:
        self.values.append(
            construct(
                RecordedValue,
                kind=e.kind,
                ordinal=e.ordinal,
                value_json=e.value_json,
                step_path=e.step_path,
                source_run_id=e.source_run_id,
                admitted_calls=len(self.agent_calls),
            )
        )

    def patch(self, e: PatchMarked) -> None:
        mark = construct(
            PatchMark, patch_id=e.patch_id, scope=e.scope, step_path=e.step_path, visit=e.visit
        )
        if mark not in self.patches:  # the first mark of a patch in a scope is the one
            self.patches.append(mark)

    # -- harness sessions --------------------------------------------------------------------

    def _session(self, e: Event) -> _Session:
        session = self.sessions.get(e.session_id or "")
        if session is None:
            self._fail(f"{e.type} for session {e.session_id!r}, which never started", e)
        return session

    def session_started(self, e: SessionStarted) -> None:
        if not e.session_id:
            self._fail("harness.session.started without session_id", e)
        existing = self.sessions.get(e.session_id or "")
        if existing is not None:
            self._count_lost(existing)  # a new attempt's session replaces the old one
        if existing is None or existing.frozen.compacted:
            self.open_sessions.setdefault(e.step_path, []).append(e.session_id or "")
        self.sessions[e.session_id or ""] = _Session(
            construct(
                SessionState,
                session_id=e.session_id or "",
                step_path=e.step_path,
                name=e.session_name,
                model=e.model,
                manifest_hash=e.manifest_hash,
                manifest_json=e.manifest_json,
            )
        )

    def _count_lost(self, session: _Session) -> None:
        """Turns still called when their session is dropped (its step committed, or a new
        attempt opened it again) were cut off (a cancelled call): the provider may have
        billed them, the log holds no usage for them."""
        self.run["interrupted_model_calls"] += sum(
            1 for turn in session.turns.values() if turn.status == "called"
        )

    def session_history_compacted(self, e: SessionCompacted) -> None:
        session = self._session(e)
        kept = tuple(c for c in session.frozen.history if c.exchange != e.exchange)
        compaction = construct(
            HistoryCompaction,
            exchange=e.exchange,
            policy_hash=e.policy_hash,
            replaced_messages=e.replaced_messages,
            replaced_hash=e.replaced_hash,
            previous_request_hash=e.previous_request_hash,
            history_json=e.history_json,
            history_ref=e.history_ref,
            history_hash=e.history_hash,
            summary_session_id=e.summary_session_id,
        )
        # a new attempt of the exchange (re-run after a crash) compacts the same way again
        session.frozen = evolve(session.frozen, history=(*kept, compaction))

    def session_completed(self, e: SessionCompleted) -> None:
        # e.usage is a rollup of this session's harness.model.responded events: skipped, or
        # every call would be counted twice.
        session = self._session(e)
        session.frozen = evolve(
            session.frozen, status="completed", output_json=e.output_json, output_ref=e.output_ref
        )

    def model_called(self, e: ModelCalled) -> None:
        session = self._session(e)
        earlier = session.turns.get(e.turn)
        if earlier is not None and earlier.status == "called":
            # called again with no response or failure to the first call: that one was in
            # flight when its writer stopped. The provider may have billed it; the log holds
            # no usage for it.
            self.run["interrupted_model_calls"] += 1
        session.turns[e.turn] = construct(
            ModelTurn,
            turn=e.turn,
            status="called",
            provider=e.provider,
            model=e.model,
            request_hash=e.request_hash,
            previous_request_hash=e.previous_request_hash,
            appended_messages_json=e.appended_messages_json,
            appended_messages_ref=e.appended_messages_ref,
            message_count=e.message_count,
        )

    def model_responded(self, e: ModelResponded) -> None:
        session = self._session(e)
        called = session.turns.get(e.turn)
        if called is None:
            self._fail(f"response to turn {e.turn}, which was never called", e)
        session.turns[e.turn] = evolve(
            called,
            status="responded",
            response_json=e.response_json,
            response_ref=e.response_ref,
            usage=e.usage,
            error=None,
            replayed_from_run_id=e.replayed_from_run_id,
        )
        cost = cost_of(e)
        self._account(e, cost, avoided=e.replayed_from_run_id is not None)

    def _account(self, e: ModelResponded, cost: Decimal | None, *, avoided: bool) -> None:
        key = "avoided_usage" if avoided else "usage"
        self.run[key] = self.run[key].add(e.usage, cost)
        if e.step_path is not None:
            step = self._step(e)
            self.steps[step.step_path] = evolve(
                step, **{key: getattr(step, key).add(e.usage, cost)}
            )

    def model_failed(self, e: ModelFailed) -> None:
        session = self._session(e)
        called = session.turns.get(e.turn)
        if called is None:
            self._fail(f"failure of turn {e.turn}, which was never called", e)
        session.turns[e.turn] = evolve(
            called, status="failed", error=f"{e.error_type}: {e.message}"
        )

    def tool_started(self, e: ToolCallStarted) -> None:
        session = self._session(e)
        earlier = session.tool_calls.get(e.call_id)
        if earlier is not None and earlier.status == "started":
            self.run["interrupted_tool_calls"] += 1  # started again: the first may have acted
        session.tool_calls[e.call_id] = construct(
            ToolCall,
            call_id=e.call_id,
            tool=e.tool,
            turn=e.turn,
            status="started",
            arguments_json=e.arguments_json,
            idempotency_key=e.idempotency_key,
        )

    def _started_call(self, e: ToolCallSucceeded | ToolCallFailed) -> tuple[_Session, ToolCall]:
        session = self._session(e)
        call = session.tool_calls.get(e.call_id)
        if call is None:
            self._fail(f"result of tool call {e.call_id!r}, which never started", e)
        return session, call

    def tool_succeeded(self, e: ToolCallSucceeded) -> None:
        session, call = self._started_call(e)
        session.tool_calls[e.call_id] = evolve(
            call, status="succeeded", result_json=e.result_json, result_ref=e.result_ref
        )

    def tool_failed(self, e: ToolCallFailed) -> None:
        session, call = self._started_call(e)
        session.tool_calls[e.call_id] = evolve(
            call, status="failed", error=f"{e.error_type}: {e.message}"
        )

    # -- recorded-call replay (seed 003) -----------------------------------------------------

    def _agent_defect(self, ordinal: int, message: str, e: Event) -> None:
        """Keep the first record of an ordinal and remember the first defect (where it is)."""
        if self.run["agent_calls_defect"] is not None:
            return
        pos = self.position
        where = f" at partition {pos[0]} offset {pos[1]}" if pos is not None else ""
        self.run["agent_calls_defect"] = f"{message} (seq {e.seq}{where})"
        self.run["agent_calls_defect_ordinal"] = ordinal

    def agent_admitted(self, e: AgentCallAdmitted) -> None:
        if e.ordinal in self.agent_calls:
            self._agent_defect(e.ordinal, f"agent call {e.ordinal} admitted twice", e)
            return
        self.agent_calls[e.ordinal] = construct(
            AgentCall,
            ordinal=e.ordinal,
            request_key=e.request_key,
            node_phase=e.node_phase,
            node_label=e.node_label,
            node_occurrence=e.node_occurrence,
            side_effecting=e.side_effecting,
            step_path=e.step_path,
            scope=e.scope or "",
        )

    def agent_settled(self, e: AgentCallSettled) -> None:
        admitted = self.agent_calls.get(e.ordinal)
        if admitted is None:
            self._fail(f"settlement of agent call {e.ordinal}, which was never admitted", e)
        self.agent_calls[e.ordinal] = evolve(
            admitted,
            outcome=e.outcome,
            result_json=e.result_json,
            result_ref=e.result_ref,
            usage=e.usage,
            replayed=e.replayed,
            source_run_id=e.source_run_id,
            miss_reason=e.miss_reason,
            provider=e.provider,
            model=e.model,
            model_calls=e.model_calls,
        )
        if e.replayed and e.usage is not None and e.provider and e.model:
            # answered from a recorded run: what that call cost is avoided here, never billed
            # (a fresh call's usage is already in its harness.model.responded events)
            cost = cost_of(e)
            calls = e.model_calls if e.model_calls is not None else 1
            self.run["avoided_usage"] = self.run["avoided_usage"].add(e.usage, cost, calls)
            if e.step_path is not None:
                step = self._step(e)
                self.steps[step.step_path] = evolve(
                    step, avoided_usage=step.avoided_usage.add(e.usage, cost, calls)
                )


_HANDLERS: dict[type[Event], Callable[[_Fold, Any], None]] = {
    RunStarted: _Fold.run_started,
    RunCompleted: _Fold.run_completed,
    RunFailed: _Fold.run_failed,
    RunCancelled: _Fold.run_cancelled,
    RunParked: _Fold.run_parked,
    RunSuspended: _Fold.run_suspended,
    WaitStarted: _Fold.wait_started,
    WaitEnded: _Fold.wait_ended,
    StepStarted: _Fold.step_started,
    StepCompleted: _Fold.step_completed,
    StepFailed: _Fold.step_failed,
    ParallelBranchScheduled: _Fold.parallel_scheduled,
    DecisionRecorded: _Fold.decision,
    ArtifactCommitted: _Fold.artifact,
    SubRunReserved: _Fold.sub_run,
    ValueRecorded: _Fold.value,
    PatchMarked: _Fold.patch,
    SessionStarted: _Fold.session_started,
    SessionCompacted: _Fold.session_history_compacted,
    SessionCompleted: _Fold.session_completed,
    ModelCalled: _Fold.model_called,
    ModelResponded: _Fold.model_responded,
    ModelFailed: _Fold.model_failed,
    ToolCallStarted: _Fold.tool_started,
    ToolCallSucceeded: _Fold.tool_succeeded,
    ToolCallFailed: _Fold.tool_failed,
    AgentCallAdmitted: _Fold.agent_admitted,
    AgentCallSettled: _Fold.agent_settled,
}


def wait_state(e: WaitStarted) -> WaitState:
    """The wait a ``WaitStarted`` begins (the fold's, and an execution's for its own)."""
    return construct(
        WaitState,
        kind=e.kind,
        ordinal=e.ordinal,
        name=e.name,
        step_path=e.step_path,
        due_at=e.due_at,
        details_json=e.details_json,
    )


def signal_state(e: SignalSent) -> SignalState:
    """The signal a ``SignalSent`` delivers, not taken yet."""
    return construct(
        SignalState,
        signal_id=e.signal_id,
        name=e.name,
        payload_json=e.payload_json,
        sent_at=e.occurred_at,
        sender=e.sender,
    )


def _pair(position: LogPosition) -> tuple[int, int]:
    return position.partition, position.offset


def materialize_run_state_from_events(
    events: Iterable[Event | LoggedEvent],
    *,
    start: MaterializedRunState | None = None,
    run_id: str | None = None,
) -> MaterializedRunState:
    """Fold ``events`` (one run's, in log order) onto ``start`` (or an empty run).

    ``run_id`` names the run when there is no ``start``; otherwise the first event does. Raises
    ``StreamIntegrityError`` (a ``RuntimeIntegrityError``) naming run, event and offset when
    the stream is broken. Events of a fenced writer are counted in ``fenced_events`` and ignored;
    copies of accepted events (the same ``event_id`` at its seq, among the last
    ``RECENT_EVENT_IDS`` accepted) in ``duplicate_events``, and ignored.
    """
    iterator = iter(events)
    if start is None:
        first = next(iterator, None)
        if first is None:
            if run_id is None:
                raise ValueError("an empty stream needs run_id or start")
            return MaterializedRunState(run_id=run_id)
        first_event = first.event if isinstance(first, LoggedEvent) else first
        fold = _Fold(MaterializedRunState(run_id=run_id or first_event.run_id))
        fold.apply(first)
    else:
        fold = _Fold(start)
    for item in iterator:
        fold.apply(item)
    return fold.freeze()


def agent_calls_after(
    start: MaterializedRunState, events: Iterable[Event]
) -> tuple[AgentCall, ...]:
    """The agent calls of ``start`` after these events (one writer's, accepted, in log order),
    folded by the fold's own handlers; events other than agent.call.* are skipped. For a
    writer that kept only its agent-call events: the state's seq chain is not checked."""
    fold = _Fold(start)
    for event in events:
        if isinstance(event, AgentCallAdmitted):
            fold.agent_admitted(event)
        elif isinstance(event, AgentCallSettled):
            fold.agent_settled(event)
    return tuple(fold.agent_calls.values())

"""MaterializedRunState: what folding a run's events gives, frozen and deeply immutable.

Pure data: no I/O. Collections are tuples (ordered by first appearance in the log) with
lookup helpers, so a state can be compared, hashed into snapshots and shared freely.
"""

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from little.events import ArtifactRef, RunStartFacts, Usage

RunStatus = Literal["pending", "running", "waiting", "completed", "failed", "cancelled"]
StepStatus = Literal["pending", "running", "completed", "failed"]
CallStatus = Literal["called", "responded", "failed"]
ToolStatus = Literal["started", "succeeded", "failed"]

STATE_VERSION = 18
"""Bumped whenever the shape or meaning of the state changes; older snapshots are ignored.

2: ``replay_source_run_id`` and ``replay_refused_reason`` (RunStarted v2). A version-1
snapshot would validate (both default to None), but a reader that knew only RunStarted v1
(through the schema registry it can resolve a v2 record to v1) folded them away, and the
fold never sees that RunStarted again: such a snapshot would show a replay as an ordinary run.
3: ``AgentCall.scope`` (agent.call.admitted v2): the same reasoning for the admitting scope.
4: replayed agent calls count as avoided usage (agent.call.settled v2).
5: ``parked_reason`` (RunParked): a version-4 snapshot of a parked run would show it running.
6: ``StepState.decision_visit``: an older snapshot would let a resume decide again.
7: ``RecordedValue.source_run_id`` / ``admitted_calls`` (ValueRecorded v2) and
``agent_calls_defect``: an older snapshot would let a resumed replay serve past a fresh value.
8: ``source_sha256``, ``source_coverage`` and ``replay_mode`` (RunStarted v3): an older
snapshot would show a run with a source identity as one logged without, and a replay of it
would be refused as ``identity-coverage-unproven``. ``SubRun.admitted_calls``: an older
snapshot would let a resumed replay serve past a sub-run.
9: ``interrupted_model_calls`` / ``interrupted_tool_calls``: an older snapshot would count
none of the calls in flight at the crashes before it.
10: ``duplicate_events`` and ``recent_event_ids``: from an older snapshot (no ids) a copy of an
event it covers would be an integrity error.
11: ``waits``, ``signals``, ``wake_at``, ``waiting_for`` and the ``waiting`` status (WaitStarted,
WaitEnded, SignalSent, RunSuspended): an older snapshot would resume a waiting run as if it
had never waited, and lose the signals sent to it.
12: ``patches`` (PatchMarked): an older snapshot of a run that passed a patch would answer
``ctx.patched`` as for a run recorded before the patch.
13: ``replay_model`` / ``replay_live_tools`` (RunStarted v4): an older snapshot of a full
replay would resume it as a repairable replay of its source, with the workflow's own models.
14: ``started_at`` and ``ended_at``: an older snapshot would show a run with no start time.
15: ``config_sha256`` / ``config_changes`` (RunStarted v4) and ``SessionState.history``
(harness.session.compacted): an older snapshot would show a replay that proceeded under a
changed configuration as one that did not, and a resume would compact a session's history
again instead of reusing the recorded result.
16: ``SessionState.output_ref`` (``harness.session.completed`` v2): an older snapshot would show
a session whose answer was stored as an artifact as one without an answer.
17: ``source_unsafe_reads`` (RunStarted v5): an older snapshot would show a run recorded by code
reading the clock as one logged before the verdict, which a replay of the same code trusts.
18: ``tool_scopes`` (RunStarted v6): an older snapshot would show a run numbering what its tools
make in their own scopes as one logged before, resumed with the step's sequences.
"""

RECENT_EVENT_IDS = 64
"""How many accepted events' ids a state keeps, to tell their copies from other events."""


class _Frozen(BaseModel):
    # built on first use, and no ``from __future__ import annotations`` in this module: cheap to
    # import, as the events are (``little.events._models``)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


# -- building states without validating them again ------------------------------------------
#
# The fold builds states only from values that were validated already (decoded events, states,
# sums of validated totals). pydantic's own ways to skip validation are slow for that:
# ``model_copy(update=...)`` goes through ``copy.copy`` of the dict, the fields set, the extra
# and the private attributes, and ``model_construct`` walks every field's aliases. Together they
# were about a third of a fold's time. These two helpers set exactly what ``model_construct``
# sets (``__dict__`` in field order, ``__pydantic_fields_set__``, ``__pydantic_extra__`` and
# ``__pydantic_private__``, both ``None`` for these models: no extra fields, no private
# attributes, no ``model_post_init``), so equality, hashing, ``model_dump`` and JSON behave as
# for any instance (tests check both against validation). They rely on those four attributes
# being pydantic's whole instance layout, as they are in pydantic 2 (pinned in uv.lock).

_M = TypeVar("_M", bound=BaseModel)
_new = object.__new__
_setattr = object.__setattr__


class _Layout:
    """A model class's fields in order, with the defaults ``construct`` fills in."""

    __slots__ = ("names", "required", "template")

    def __init__(self, cls: type[BaseModel]) -> None:
        if cls.__pydantic_post_init__ or cls.__private_attributes__:
            raise TypeError(f"{cls.__name__} needs pydantic's own construction")
        fields = cls.__pydantic_fields__
        if any(f.default_factory is not None for f in fields.values()):
            raise TypeError(f"{cls.__name__} has a default factory")
        self.names = frozenset(fields)
        self.required = frozenset(n for n, f in fields.items() if f.is_required())
        # every field in declaration order; required ones get a placeholder that a
        # construct() call always replaces (it checks they are given)
        self.template: dict[str, Any] = {
            n: None if f.is_required() else f.default for n, f in fields.items()
        }


_LAYOUTS: dict[type[BaseModel], _Layout] = {}


def construct(cls: type[_M], /, **values: Any) -> _M:
    """``cls.model_construct(**values)`` for the frozen state models, faster: ``values`` must be
    valid already (not checked); a missing required field or an unknown one is a TypeError."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = _Layout(cls)
    keys = values.keys()
    if not (layout.required <= keys <= layout.names):
        missing = sorted(layout.required - keys)
        unknown = sorted(keys - layout.names)
        raise TypeError(f"{cls.__name__}: missing {missing}, unknown {unknown}")
    new = _new(cls)
    _setattr(new, "__dict__", layout.template | values)  # keeps declaration order
    _setattr(new, "__pydantic_fields_set__", set(keys))
    _setattr(new, "__pydantic_extra__", None)
    _setattr(new, "__pydantic_private__", None)
    return new


def evolve(model: _M, /, **changes: Any) -> _M:
    """``model.model_copy(update=changes)`` for the frozen state models, faster: a new instance
    sharing the unchanged values (they are immutable). ``changes`` must be valid already (not
    checked); an unknown field is a TypeError, where ``model_copy`` would add it silently."""
    fields = model.__dict__
    if not changes.keys() <= fields.keys():
        raise TypeError(f"{type(model).__name__}: unknown {sorted(changes.keys() - fields)}")
    new = _new(type(model))
    _setattr(new, "__dict__", fields | changes)  # updates keep their position
    _setattr(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | changes.keys())
    _setattr(new, "__pydantic_extra__", None)
    _setattr(new, "__pydantic_private__", None)
    return new


class LogPosition(_Frozen):
    partition: int
    offset: int


class UsageTotals(_Frozen):
    """Tokens and dollars of a scope (run, step or session).

    ``cost_usd`` is ``None`` only when every call in the scope was unpriced; when some were
    priced it covers those and ``unpriced_calls`` records the shortfall. A true ``0`` is a real
    zero-dollar total, normally because there were no calls.
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    priced_cost_usd: Decimal = Decimal(0)
    unpriced_calls: int = 0

    @model_validator(mode="before")
    @classmethod
    def _drop_derived_cost(cls, data: Any) -> Any:
        # ``cost_usd`` is computed, yet model_dump_json() writes it: drop it on the way back in
        # so a state read from JSON (a snapshot) validates and equals the state written.
        if isinstance(data, dict) and "cost_usd" in data:
            data = {k: v for k, v in data.items() if k != "cost_usd"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_usd(self) -> Decimal | None:
        if self.calls > 0 and self.unpriced_calls == self.calls:
            return None
        return self.priced_cost_usd

    def add(self, usage: Usage, cost: Decimal | None, calls: int = 1) -> "UsageTotals":
        # the sums of validated totals are valid; validating again on every model response
        # was a measurable part of the fold
        return construct(
            UsageTotals,
            calls=self.calls + calls,
            input_tokens=self.input_tokens + usage.input_tokens,
            output_tokens=self.output_tokens + usage.output_tokens,
            cached_input_tokens=self.cached_input_tokens + usage.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + usage.reasoning_tokens,
            priced_cost_usd=self.priced_cost_usd + (cost or Decimal(0)),
            unpriced_calls=self.unpriced_calls + (cost is None),
        )

    def plus(self, other: "UsageTotals") -> "UsageTotals":
        return construct(
            UsageTotals,
            calls=self.calls + other.calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            priced_cost_usd=self.priced_cost_usd + other.priced_cost_usd,
            unpriced_calls=self.unpriced_calls + other.unpriced_calls,
        )


class ModelTurn(_Frozen):
    """One model call of a session: ``called`` until its terminal event lands."""

    turn: int
    status: CallStatus
    provider: str
    model: str
    request_hash: str
    previous_request_hash: str | None = None
    appended_messages_json: str | None = None
    appended_messages_ref: ArtifactRef | None = None
    message_count: int = 0
    response_json: str | None = None
    response_ref: ArtifactRef | None = None
    usage: Usage | None = None
    error: str | None = None
    replayed_from_run_id: str | None = None


class ToolCall(_Frozen):
    """One tool call of a session: ``started`` until its terminal event lands."""

    call_id: str
    tool: str
    turn: int
    status: ToolStatus
    arguments_json: str
    idempotency_key: str
    result_json: str | None = None
    result_ref: ArtifactRef | None = None
    error: str | None = None


class HistoryCompaction(_Frozen):
    """A session's history compacted before an exchange (harness.session.compacted): what a
    resume or a replay reuses instead of compacting (or summarising) again."""

    exchange: int
    policy_hash: str
    replaced_messages: int
    replaced_hash: str
    previous_request_hash: str | None = None
    history_json: str | None = None
    history_ref: ArtifactRef | None = None
    history_hash: str
    summary_session_id: str | None = None


class SessionState(_Frozen):
    """A harness session, with every turn and tool call while its step is in progress.

    When the step commits, its sessions are compacted to counts (``compacted=True``): a
    completed step never runs again, so its calls are never fast-forwarded, and the state of a
    long run grows with its steps, not its events.
    """

    session_id: str
    step_path: str | None
    name: str
    model: str
    manifest_hash: str
    manifest_json: str
    status: Literal["running", "completed"] = "running"
    turns: tuple[ModelTurn, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    turn_count: int = 0
    tool_call_count: int = 0
    compacted: bool = False
    output_json: str | None = None
    output_ref: ArtifactRef | None = None
    """The answer when large (``harness.session.completed`` v2; ``STATE_VERSION`` 16)."""
    history: tuple[HistoryCompaction, ...] = ()
    """Compactions of the conversation's history, in exchange order (not to be confused with
    ``compacted``: a committed step's session folded down to counts)."""

    def compaction(self, exchange: int) -> HistoryCompaction | None:
        for c in self.history:
            if c.exchange == exchange:
                return c
        return None

    def turn(self, number: int) -> ModelTurn | None:
        for t in self.turns:
            if t.turn == number:
                return t
        return None

    def tool_call(self, call_id: str) -> ToolCall | None:
        for c in self.tool_calls:
            if c.call_id == call_id:
                return c
        return None


class VisitOutput(_Frozen):
    visit: int
    output_json: str | None = None
    output_ref: ArtifactRef | None = None
    decision_target: str | None = None


class StepState(_Frozen):
    step_path: str
    step_id: str
    status: StepStatus
    branch_path: str | None = None
    attempts: int = 0
    visits: int = 0
    """Committed visits: StepCompleted events of this (step id, branch path)."""
    max_visits: int = 1
    output_json: str | None = None
    output_ref: ArtifactRef | None = None
    artifact_refs: tuple[ArtifactRef, ...] = ()
    visit_outputs: tuple[VisitOutput, ...] = ()
    """Outputs of committed visits, for steps with ``max_visits > 1`` (loops)."""
    error: str | None = None
    decision_target: str | None = None
    decision_visit: int | None = None
    """The visit ``decision_target`` was decided at (DecisionRecorded): a resume before that
    visit's StepCompleted takes the recorded target instead of deciding again."""
    completed_event_id: str | None = None
    completed_position: LogPosition | None = None
    """Where the latest StepCompleted of this step sits, for error messages."""
    usage: UsageTotals = UsageTotals()
    avoided_usage: UsageTotals = UsageTotals()


class ParallelGroup(_Frozen):
    group_path: str
    branches: tuple[str, ...]
    branch_set_hash: str


class SubRun(_Frozen):
    sub_run_id: str
    workflow: str
    input_json: str | None = None
    call_id: str | None = None
    step_path: str | None = None
    admitted_calls: int = 0
    """Agent calls admitted before its reservation in log order (where it stands among the
    calls: a replaying run's latch starts there)."""


class RecordedValue(_Frozen):
    kind: str
    ordinal: int
    value_json: str
    step_path: str | None = None
    source_run_id: str | None = None
    """Recorded-call replay: the run this value was served from; None when produced here."""
    admitted_calls: int = 0
    """Agent calls admitted before it in log order (where it stands among the calls)."""


class WaitState(_Frozen):
    """A durable wait (WaitStarted), and how it ended (WaitEnded) once it did."""

    kind: str
    """``timer``, ``signal`` or ``approval``."""
    ordinal: int
    name: str
    step_path: str | None = None
    """The scope that waits: None the run, else a parallel branch's or a step's path."""
    due_at: datetime | None = None
    """The timer's due time, or the signal's or approval's timeout."""
    details_json: str | None = None
    outcome: str | None = None
    """None while it waits; else ``fired``, ``received``, ``timed_out``, ``approved``,
    ``rejected``."""
    signal_id: str | None = None
    """The signal it took."""

    @property
    def label(self) -> str:
        """What it waits for, readable (RunSuspended's ``waiting_for``)."""
        return "timer" if self.kind == "timer" else f"{self.kind}:{self.name}"


class SignalState(_Frozen):
    """A signal sent to the run (SignalSent), and whether a wait took it."""

    signal_id: str
    name: str
    payload_json: str
    sent_at: datetime
    sender: str = ""
    taken: bool = False


class PatchMark(_Frozen):
    """A patch the run passed on its new path (``PatchMarked``), in one scope."""

    patch_id: str
    scope: str = ""
    """The workflow scope ("" the run, a parallel branch's path); for a step, the scope the
    step runs in."""
    step_path: str | None = None
    """The step, when the patch was met inside one (``visit`` is its visit)."""
    visit: int | None = None


class CommittedArtifact(_Frozen):
    name: str
    ref: ArtifactRef
    step_path: str | None = None


class AgentCall(_Frozen):
    """A recorded agent call (seed 003): admission ordinal, request key, settlement."""

    ordinal: int
    request_key: str
    node_phase: str | None = None
    node_label: str | None = None
    node_occurrence: int | None = None
    side_effecting: bool = False
    step_path: str | None = None
    scope: str = ""
    """The workflow scope that admitted it ("" the run itself, else a parallel branch)."""
    outcome: str | None = None
    result_json: str | None = None
    result_ref: ArtifactRef | None = None
    usage: Usage | None = None
    replayed: bool = False
    source_run_id: str | None = None
    miss_reason: str | None = None
    provider: str | None = None
    model: str | None = None
    model_calls: int | None = None


class _RunHead(_Frozen):
    """The state's first fields, in a base of their own so they stay first in its JSON
    (pydantic puts the fields of a model's last base first)."""

    run_id: str
    state_version: int = STATE_VERSION
    status: RunStatus = "pending"


# What the run started with (``workflow`` to ``config_changes``, None before ``RunStarted``)
# is ``RunStartFacts``, declared once for this state and the event.
class MaterializedRunState(RunStartFacts, _RunHead):
    """The state of one run as of the last event folded into it."""

    output_json: str | None = None
    output_ref: ArtifactRef | None = None
    error: str | None = None
    parked_reason: str | None = None
    """Why a resume coordinator parked the run (RunParked), until the next accepted claim."""
    started_at: datetime | None = None
    """When the run started (its RunStarted's ``occurred_at``)."""
    ended_at: datetime | None = None
    """When it ended (the ``occurred_at`` of its RunCompleted, RunFailed or RunCancelled)."""

    epoch: int = 0
    owner: str | None = None
    accepted_claims: int = 0
    rejected_claims: int = 0
    fenced_events: int = 0
    duplicate_events: int = 0
    """Copies of accepted events (the same ``event_id`` at its seq: a mirror's or a
    re-produce's), skipped."""
    recent_event_ids: tuple[str, ...] = ()
    """The ids of the last ``RECENT_EVENT_IDS`` accepted events, the last at ``last_seq``."""
    last_seq: int = -1
    last_event_id: str | None = None
    last_position: LogPosition | None = None
    events_applied: int = 0

    steps: tuple[StepState, ...] = ()
    sessions: tuple[SessionState, ...] = ()
    parallel_groups: tuple[ParallelGroup, ...] = ()
    sub_runs: tuple[SubRun, ...] = ()
    values: tuple[RecordedValue, ...] = ()
    artifacts: tuple[CommittedArtifact, ...] = ()
    agent_calls: tuple[AgentCall, ...] = ()
    patches: tuple[PatchMark, ...] = ()
    """Patches the run passed on their new path (``ctx.patched``), first marks only."""
    agent_calls_defect: str | None = None
    """The first defect of the agent-call record (an ordinal admitted twice), naming the
    event; the first admission is kept, never overwritten. (A call settled again is not one:
    a retried step's next attempt settles the same call, and the last settlement stands.)"""
    agent_calls_defect_ordinal: int | None = None
    """The ordinal of that defect: a replay serves no call from this ordinal on."""
    pending_decision_target: str | None = None

    interrupted_model_calls: int = 0
    """Model calls cut off with no response or failure recorded: in flight when a writer of
    this run stopped (a crash, a kill, a fenced writer; seen when a resume called the same turn
    again) or cancelled (seen when their session was dropped). The provider may have billed
    them; the log holds no usage for them (they are not in ``usage``)."""
    interrupted_tool_calls: int = 0
    """Tool calls started again by a resume with no result to the first start (it may have
    acted)."""

    waits: tuple[WaitState, ...] = ()
    """Durable waits (timers, signals, approvals), in the order they began."""
    signals: tuple[SignalState, ...] = ()
    """Signals sent to the run, in log order (taken or kept for a wait to come)."""
    wake_at: datetime | None = None
    """While ``waiting``: the earliest due time of its waits (RunSuspended), if any."""
    waiting_for: tuple[str, ...] = ()
    """While ``waiting``: what it waits for (``timer``, ``signal:<name>``, ``approval:<id>``)."""

    usage: UsageTotals = UsageTotals()
    """Billed: every model call actually made for this run."""
    avoided_usage: UsageTotals = UsageTotals()
    """Avoided: calls a restart did not pay again because the log served them."""

    def step(self, step_path: str) -> StepState | None:
        for s in self.steps:
            if s.step_path == step_path:
                return s
        return None

    def session(self, session_id: str) -> SessionState | None:
        for s in self.sessions:
            if s.session_id == session_id:
                return s
        return None

    def parallel_group(self, group_path: str) -> ParallelGroup | None:
        for g in self.parallel_groups:
            if g.group_path == group_path:
                return g
        return None

    def wait(self, step_path: str | None, ordinal: int) -> WaitState | None:
        for w in self.waits:
            if w.ordinal == ordinal and w.step_path == step_path:
                return w
        return None

    def kept_signal(self, name: str) -> SignalState | None:
        """The oldest signal named ``name`` no wait has taken yet (signals are taken in the
        order they were sent)."""
        return oldest_kept(self.signals, name)

    def can_wake(self, now: datetime) -> bool:
        """Whether a ``waiting`` run has a wait that can end now: a due time passed, or a
        signal it waits for was sent. A run suspended inside a sub-run waits on that
        sub-run's waits too: its ``wake_at`` covers their timers, not their signals."""
        if self.status != "waiting":
            return False
        if self.wake_at is not None and self.wake_at <= now:
            return True
        for w in self.waits:
            if w.outcome is None:
                if w.due_at is not None and w.due_at <= now:
                    return True
                if w.kind != "timer" and self.kept_signal(signal_name(w)) is not None:
                    return True
        return False

    @property
    def terminal(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")


def oldest_kept(signals: Iterable[SignalState], name: str) -> SignalState | None:
    """The first of ``signals`` (in the order sent) named ``name`` that no wait has taken."""
    for s in signals:
        if not s.taken and s.name == name:
            return s
    return None


def signal_name(wait: WaitState) -> str:
    """The signal a wait takes: its name, or ``approval:<call id>`` for an approval."""
    return f"approval:{wait.name}" if wait.kind == "approval" else wait.name

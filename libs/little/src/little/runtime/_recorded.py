"""Recorded-call replay (seed 003): re-run a workflow as a new run against a recorded run.

An *agent call* is one exchange of an agent session (``await agent.run(prompt)``). Each is
admitted with an ordinal (the run's admission order), a place (its scope, the run itself or a
parallel branch, and its rank among that scope's calls) and a request key (the canonical hash
of everything that decides its answer: the session's manifest, its node, the conversation so
far, the prompt and ``max_turns``), and settled with its answer and the messages it added. A
run started with ``replay_from=<run>`` serves a call from that run's record when the recorded
call at the same place settled successfully under the same node and key: no model or tool is
invoked. Replay is a strict prefix: the first call that does not resolve from the record runs
fresh, and so does every call that could have seen its answer (the latch: later calls of its
scope, of the branches it encloses and of the scopes enclosing it), because a later recorded
answer was produced after an earlier answer that no longer exists.

Refused replays (the source run cannot be used, has no recorded calls, or the replaying
workflow's module reads the clock or randomness directly) are written on ``RunStarted`` and
the run executes fresh. A replayed call bills nothing (its settlement carries what the
recorded call cost, counted as avoided), and every surface marks it replayed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

from little.events import (
    ArtifactRef,
    LoggedEvent,
    ModelCalled,
    SessionStarted,
    SubRunReserved,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
)
from little.replay import (
    AgentCall,
    MaterializedRunState,
    RecordedValue,
    SignalState,
    WaitState,
    accepted_events,
)
from little.runtime._errors import SimulationDivergedError

# why a call was not served from the record (AgentCallSettled.miss_reason)
MISS_NO_RECORD = "no-record"
MISS_NODE = "node-mismatch"
MISS_KEY = "key-mismatch"
MISS_CONFIG_CHANGED = "configuration-changed"
"""The call's request differs because its session's configuration (its manifest: model,
tools, system prompt, request options, compaction policy) differs from the source run's
session of the same id: a key mismatch whose cause is known. It latches like one."""
MISS_RECORDED_FAILURE = "recorded-failure"
MISS_SIDE_EFFECTING = "side-effecting-call"
MISS_DIVERGED = "diverged"
MISS_PANEL_MIXED = "panel-mixed"
"""A panel leg that the record would have answered, refused because another leg of its panel
was fresh (a panel never mixes recorded and live answers): the run ends there."""
MISS_RECORD_UNUSABLE = "recorded-result-unusable"
"""Serving the recorded answer failed (its artifact is missing or damaged): the call fails,
and the replay is refused from there on, as after any miss."""
MISS_SEQUENCE_INVALID = "recorded-sequence-invalid"
"""The source's record is not a proven sequence here: an ordinal is missing (a later call
would otherwise be closed up into its place) or recorded twice. Calls from there on run fresh."""
MISS_VALUE = "recorded-value-missing"
"""A clock, random or uuid value asked for before this call was not in the record at its
place (or was of another kind): it was produced fresh, and this is the first call that could
have seen it. Calls after it are ``diverged``."""
MISS_SUB_RUN = "sub-run-fresh"
"""A sub-run started before this call (its calls ran fresh, in a run of its own): this is
the first call that could have seen what it did. Calls after it are ``diverged``."""
MISS_REQUEST_CHANGED = "request-hash-changed"
"""Simulation only: a served exchange's model turn builds another request hash than the
golden run recorded for it (the canonical JSON or the request hash chain changed)."""
MISS_LOG_UNREADABLE = "recorded-log-unreadable"
"""The source run's log stops being readable before this call (an undecodable record, or a
broken stream): the reader stopped there, so nothing past it is proven."""
MISS_FULL_REPLAY = "full-replay"
"""A full replay: every agent call is answered live, by the model the replay names."""

# why a replay was refused before the run began (RunStarted.replay_refused_reason)
REFUSED_SOURCE_UNUSABLE = "source-run-unusable"
REFUSED_NO_CALLS = "no-recorded-calls"
REFUSED_UNSAFE = "replay-unsafe-script"
REFUSED_TARGET_CHANGED = "target-changed"
"""The source run was started by another workflow (name) than the replaying run's."""
REFUSED_COVERAGE_UNPROVEN = "identity-coverage-unproven"
"""The replaying workflow's source, or the source run's recorded one, is ``entry-only`` (or
the source run recorded no identity: it was logged before ``RunStarted`` v3)."""
REFUSED_SOURCE_CHANGED = "source-changed"
"""Strict mode: the workflow's source identity or version differs from the source run's."""
REFUSED_CONFIG_CHANGED = "configuration-changed"
"""Strict mode: the run's configuration (its budgets) differs from the source run's; what
changed is recorded on ``RunStarted.config_changes``."""

# how a replay treats a changed source (RunStarted.replay_mode)
MODE_REPAIRABLE = "repairable"
"""Reuse the unchanged prefix of a changed source (the first changed call ends reuse)."""
MODE_STRICT = "strict"
"""Refuse reuse when the source changed at all (``source-changed``)."""
REPLAY_MODES = (MODE_REPAIRABLE, MODE_STRICT)
MODE_FULL = "full"
"""A full replay (``run(..., full_replay=FullReplay(...))``): recorded as this mode, never
asked for by it."""


@dataclass(frozen=True)
class FullReplay:
    """A full replay of a recorded run: a new run of the same workflow, its input and values
    taken from the source run, every model call made live with ``model`` (``provider:model``
    or ``module:factory``, as ``little.harness.model_from_spec`` reads it), and every tool
    call answered from the source run's receipts unless ``live_tools``: the n-th call of a
    tool with the same arguments in a session gets the outcome of the n-th such call of the
    source's session of the same id (its result, or its error), never invoking the tool; a
    call the source's session never made fails as the tool's error, which the model sees.
    With ``live_tools`` tools run. Sub-runs are full replays of the source's sub-runs."""

    model: str
    live_tools: bool = False


Receipt = tuple[str | None, ArtifactRef | None, str | None]
"""A recorded tool call's outcome: its result JSON (or artifact ref), or its error."""

ReceiptKey = tuple[str | None, str, str]
"""``(session id, tool, arguments JSON)``: whose receipts a full replay's tool call takes."""


def tool_receipts(events: Iterable[LoggedEvent]) -> dict[ReceiptKey, list[Receipt]]:
    """The finished tool calls of a run's accepted events, by session, tool and arguments
    JSON (as recorded), in log order: what a full replay serves tool calls from."""
    started: dict[tuple[str | None, str], tuple[str, str]] = {}
    receipts: dict[ReceiptKey, list[Receipt]] = {}
    for item in accepted_events(events):
        e = item.event
        if isinstance(e, ToolCallStarted):
            started[(e.session_id, e.call_id)] = (e.tool, e.arguments_json)
        elif isinstance(e, ToolCallSucceeded | ToolCallFailed):
            found = started.pop((e.session_id, e.call_id), None)
            if found is None:
                continue
            outcome: Receipt = (
                (e.result_json, e.result_ref, None)
                if isinstance(e, ToolCallSucceeded)
                else (None, None, f"{e.error_type}: {e.message}")
            )
            receipts.setdefault((e.session_id, *found), []).append(outcome)
    return receipts


Node = tuple[str | None, str | None, int | None]
"""``(phase, label, occurrence)``: the step path, the session name, the exchange's number."""


Place = tuple[str, int]
"""``(scope, index)``: where a call stands in its run. Calls are ordered within a scope (the
run itself, ``""``, or a parallel branch's path): a branch runs its calls one after another,
while sibling branches interleave as their calls take time, and a served call takes none."""


def _node(call: AgentCall) -> Node:
    return (call.node_phase, call.node_label, call.node_occurrence)


def _places(calls: Mapping[int, AgentCall]) -> dict[int, Place]:
    """Each call's place: its scope, and its rank by ordinal among that scope's calls."""
    counts: dict[str, int] = {}
    places: dict[int, Place] = {}
    for ordinal in sorted(calls):
        scope = calls[ordinal].scope
        places[ordinal] = (scope, counts.get(scope, 0))
        counts[scope] = counts.get(scope, 0) + 1
    return places


def _after(miss: tuple[int, str, int], ordinal: int, scope: str, index: int) -> bool:
    """Does a miss at ``(ordinal, scope, index)`` latch this call (strict prefix)?

    Within a scope, every later call. Across scopes, a call that the missed one could have
    led to: in a scope nested in the miss's (a branch started after it) or in an enclosing
    scope (after the branch ended), admitted after it. Calls of sibling branches never see
    each other's answers, so a miss in one leaves the other's prefix alone."""
    m_ordinal, m_scope, m_index = miss
    if m_scope == scope:
        return m_index < index
    related = scope.startswith(m_scope) or m_scope.startswith(scope)
    return related and m_ordinal < ordinal


def _proven_ordinals(calls: Mapping[int, AgentCall], defect: int | None) -> int:
    """How many ordinals from 0 are proven: each recorded once, none missing before it."""
    proven = 0
    while proven in calls and (defect is None or proven < defect):
        proven += 1
    return proven


ValuePlace = tuple[str | None, int]
"""``(values scope, ordinal)``: a recorded value's place (the run, a branch or a step)."""


def _proven_values(values: Iterable[RecordedValue]) -> dict[ValuePlace, RecordedValue]:
    """The values at proven places: per scope, ordinals 0, 1, ... each recorded once; the
    first missing or duplicated ordinal ends that scope's proven values (never closed up)."""
    by_scope: dict[str | None, dict[int, list[RecordedValue]]] = {}
    for v in values:
        by_scope.setdefault(v.step_path, {}).setdefault(v.ordinal, []).append(v)
    proven: dict[ValuePlace, RecordedValue] = {}
    for scope, ordinals in by_scope.items():
        n = 0
        while len(ordinals.get(n, ())) == 1:
            proven[(scope, n)] = ordinals[n][0]
            n += 1
    return proven


@dataclass
class RecordedCalls:
    """The settled agent calls and recorded values of a source run, offered by place.

    Only a proven prefix is offered: ordinals from 0 each recorded once (``defect`` is the
    first ordinal the fold found recorded twice), and only the records read before the log
    stopped being readable (``damage`` says where and why)."""

    source_run_id: str
    calls: Mapping[int, AgentCall]
    values: Iterable[RecordedValue] = ()
    damage: str | None = None
    defect: int | None = None
    waits: Iterable[WaitState] = ()
    """The source run's waits and the signals they took: a simulation ends each wait as the
    golden run's ended (``little.runtime._waits``); nothing else reads them."""
    signals: Iterable[SignalState] = ()
    proven: int = 0
    """Ordinals ``0 .. proven-1`` are offered; a call past them is not."""
    state: MaterializedRunState | None = field(default=None, repr=False, compare=False)
    """The source run's folded state (its proven prefix), for what else a replay follows
    (``ctx.patched``)."""
    full: bool = False
    """A full replay: no agent call is served (``full-replay``); values and tool receipts are."""
    receipts: Mapping[ReceiptKey, list[Receipt]] = field(default_factory=dict)
    """A full replay's tool receipts (``tool_receipts``)."""
    _by_place: dict[Place, AgentCall] = field(default_factory=dict)
    _values: dict[ValuePlace, RecordedValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.proven = _proven_ordinals(self.calls, self.defect)
        offered = {o: c for o, c in self.calls.items() if o < self.proven}
        places = _places(offered)
        self._by_place = {places[o]: c for o, c in offered.items()}
        self._values = _proven_values(self.values)

    @classmethod
    def of(cls, source: MaterializedRunState, damage: str | None = None) -> RecordedCalls:
        return cls(
            source.run_id,
            {c.ordinal: c for c in source.agent_calls},
            source.values,
            damage,
            source.agent_calls_defect_ordinal,
            waits=source.waits,
            signals=source.signals,
            state=source,
        )

    def lookup(
        self,
        place: Place,
        request_key: str,
        node: Node,
        side_effecting: bool,
        *,
        serve_side_effecting: bool = False,
    ) -> tuple[AgentCall | None, str | None]:
        """The recorded call to serve at ``place``, or why there is none. A side-effecting
        call is served only with ``serve_side_effecting`` (a simulation, which invokes
        nothing: serving the record repeats no effect)."""
        if self.full:
            return None, MISS_FULL_REPLAY
        recorded = self._by_place.get(place)
        if recorded is None:
            if self.proven < len(self.calls):
                return None, MISS_SEQUENCE_INVALID
            return None, MISS_LOG_UNREADABLE if self.damage is not None else MISS_NO_RECORD
        if recorded.outcome is None:  # admitted, never settled: or settled past the damage
            return None, MISS_LOG_UNREADABLE if self.damage is not None else MISS_NO_RECORD
        if _node(recorded) != node:
            return None, MISS_NODE
        if recorded.request_key != request_key:
            return None, MISS_KEY
        if recorded.outcome != "succeeded":
            return None, MISS_RECORDED_FAILURE
        if (side_effecting or recorded.side_effecting) and not serve_side_effecting:
            return None, MISS_SIDE_EFFECTING
        return recorded, None

    def value(self, place: ValuePlace, kind: str) -> RecordedValue | None:
        """The source's value at ``place`` if it is proven and of this kind."""
        recorded = self._values.get(place)
        return recorded if recorded is not None and recorded.kind == kind else None


@dataclass(frozen=True)
class Simulating:
    """What a simulation knows of its golden runs beyond their records (``SIMULATING``)."""

    requests: Mapping[tuple[str, str, int], str] = field(default_factory=dict)
    """``(run, session, turn)``: the request hash the golden run recorded for that turn."""
    sub_runs: Mapping[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """``(run, call id)``: the sub-run the golden run started there, and its workflow."""
    tools_run: list[str] = field(default_factory=list)
    """The tool calls inside served exchanges that ran and matched their recorded results."""
    tools_served: list[str] = field(default_factory=list)
    """The tool calls inside served exchanges that did not run (side-effecting, or recorded
    redacted or rejected), each with why: their recorded results were served."""

    @classmethod
    def of(cls, runs: Mapping[str, Iterable[LoggedEvent]]) -> Simulating:
        requests: dict[tuple[str, str, int], str] = {}
        sub_runs: dict[tuple[str, str], tuple[str, str]] = {}
        for run_id, events in runs.items():
            for item in accepted_events(events):
                e = item.event
                if isinstance(e, SessionStarted) and e.session_id is not None:
                    # a step's new attempt opens its session anew: its turns are the ones
                    # its settled exchange (the one served) went through
                    for key in [k for k in requests if k[:2] == (run_id, e.session_id)]:
                        del requests[key]
                elif isinstance(e, ModelCalled) and e.session_id is not None:
                    requests[(run_id, e.session_id, e.turn)] = e.request_hash
                elif isinstance(e, SubRunReserved) and e.call_id is not None:
                    sub_runs.setdefault((run_id, e.call_id), (e.sub_run_id, e.workflow))
        return cls(requests, sub_runs)


SIMULATING: ContextVar[Simulating | None] = ContextVar("little_simulating", default=None)
"""Set while ``little.runtime.simulate`` runs a workflow: a call the record cannot serve is a
divergence (``SimulationDivergedError``), never an invocation; a sub-run is simulated against
the golden run's sub-run at the same call; a served exchange's request hashes are checked
against the golden run's."""


@dataclass
class AgentCalls:
    """The agent calls of one execution: admission ordinals and places, the run's own
    record (on a resume), the source run's record (on a replay) and the latch.

    Every run records its agent calls (a resume needs them). Whether a replaying run may be
    answered from a record is decided once, on ``RunStarted``: a workflow whose module fails
    the replay-safety scan is refused.
    """

    own: dict[int, AgentCall]
    source: RecordedCalls | None = None
    next_ordinal: int = 0
    misses: list[tuple[int, str, int]] = field(default_factory=list)
    """``(ordinal, scope, index)`` of every call of this run that a replay did not serve."""
    causes: dict[tuple[int, str, int], str] = field(default_factory=dict)
    """Those of ``misses`` that no call set, with the reason the first call they latch
    reports: a value produced fresh, a sub-run started."""
    admitted: set[int] = field(default_factory=set)
    """Ordinals admitted by this execution (a retried step admits its calls once)."""
    _by_node: dict[Node, int] = field(default_factory=dict)
    _places: dict[int, Place] = field(default_factory=dict)
    _counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, state: MaterializedRunState, source: RecordedCalls | None = None) -> AgentCalls:
        own = {c.ordinal: c for c in state.agent_calls}
        calls = cls(own=own, source=source)
        calls.next_ordinal = max(own, default=-1) + 1
        calls._by_node = {_node(c): c.ordinal for c in own.values()}
        calls._places = _places(own)
        for scope, index in calls._places.values():
            calls._counts[scope] = max(calls._counts.get(scope, 0), index + 1)
        if source is not None:
            # The latch as it stood: every call of the run's own log that ran fresh, or that
            # was admitted and would miss (a crash left it in flight). A call admitted and
            # served writes its settlement in the same batch, so it is never in flight.
            for c in own.values():
                place = calls._places[c.ordinal]
                fresh = c.outcome is not None and not c.replayed
                in_flight_miss = (
                    c.outcome is None
                    and source.lookup(
                        place,
                        c.request_key,
                        _node(c),
                        c.side_effecting,
                        serve_side_effecting=SIMULATING.get() is not None,
                    )[1]
                    is not None
                )
                if fresh or in_flight_miss:
                    calls.misses.append((c.ordinal, *place))
            scopes = _workflow_scopes(state)
            latched = [
                *(
                    (v.step_path, v.admitted_calls, MISS_VALUE)
                    for v in state.values
                    if v.source_run_id is None
                ),  # produced fresh: it latched where it stood
                *((s.step_path, s.admitted_calls, MISS_SUB_RUN) for s in state.sub_runs),
            ]
            for path, admitted, cause in latched:
                scope = _workflow_scope(scopes, path)
                index = sum(1 for o, (s, _) in calls._places.items() if s == scope and o < admitted)
                calls._latch((admitted - 1, scope, index - 1), cause)
        return calls

    def _latch(self, miss: tuple[int, str, int], cause: str) -> None:
        if miss not in self.misses:
            self.misses.append(miss)
            self.causes[miss] = cause

    def latch_here(self, scope: str, cause: str, sub_run: tuple[str, str] | None = None) -> None:
        """For a replay: something fresh happened in workflow scope ``scope`` (a sub-run was
        started): latch the replay as a missed call would at this point. In a simulation, a
        sub-run (``(call id, workflow)``) the golden run started at the same call with the
        same workflow is simulated against that one, so nothing fresh happens; any other is a
        divergence."""
        simulating = SIMULATING.get()
        if simulating is not None:
            golden = None
            if sub_run is not None and self.source is not None:
                golden = simulating.sub_runs.get((self.source.source_run_id, sub_run[0]))
            if golden is not None and sub_run is not None and golden[1] == sub_run[1]:
                return
            if sub_run is None:
                why = "the simulated run would do fresh work"
            elif golden is None:
                why = f"the golden run started no sub-run at {sub_run[0]}"
            else:
                why = f"the golden run's sub-run at {sub_run[0]} ran workflow {golden[1]}"
            what = f"sub-run {sub_run[1]}" if sub_run is not None else cause
            raise SimulationDivergedError(
                f"{what} before call {self.next_ordinal}: {why}",
                ordinal=self.next_ordinal,
                miss_reason=cause,
                place=(scope, self._counts.get(scope, 0)),
            )
        if self.source is not None:
            index = self._counts.get(scope, 0)
            self._latch((self.next_ordinal - 1, scope, index - 1), cause)

    def admit(self, node: Node, scope: str) -> tuple[int, Place]:
        """The call's ordinal and place: those the run's own log gave this node, else the
        next ones (a resume skips finished steps, so counting calls would shift them)."""
        known = self._by_node.get(node)
        if known is not None:
            return known, self._places[known]
        ordinal = self.next_ordinal
        self.next_ordinal += 1
        place = (scope, self._counts.get(scope, 0))
        self._counts[scope] = place[1] + 1
        self._by_node[node] = ordinal
        self._places[ordinal] = place
        return ordinal, place

    def place_of(self, ordinal: int) -> Place:
        """The place admission gave call ``ordinal``."""
        return self._places[ordinal]

    @property
    def source_run_id(self) -> str | None:
        return None if self.source is None else self.source.source_run_id

    def value(self, scope: str, place: ValuePlace, kind: str) -> RecordedValue | None:
        """For a replay: the source's value at ``place`` (asked for in workflow scope
        ``scope``), or None: the value is produced fresh, and that latches the replay as a
        missed call would at this point (it stands where the scope's next call would)."""
        if self.source is None:
            return None
        index = self._counts.get(scope, 0)
        recorded = None
        if not any(_after(m, self.next_ordinal, scope, index) for m in self.misses):
            recorded = self.source.value(place, kind)
        if recorded is None:
            self._latch((self.next_ordinal - 1, scope, index - 1), MISS_VALUE)
        return recorded

    def refuse(self, ordinal: int) -> None:
        """Serving call ``ordinal`` failed: latch the replay as after a miss there."""
        miss = (ordinal, *self._places[ordinal])
        if miss not in self.misses:
            self.misses.append(miss)

    def decide(
        self,
        ordinal: int,
        place: Place,
        request_key: str,
        node: Node,
        side_effecting: bool,
        *,
        serve_side_effecting: bool = False,
    ) -> tuple[AgentCall | None, str | None]:
        """For a replay: the source's call to serve, or the miss reason (which latches).
        Which of the two a call gets, and what a miss means (a fresh call, or a simulation's
        divergence), is ``little.runtime._serving``'s to say."""
        if self.source is None:
            return None, None
        scope, index = place
        latching = [m for m in self.misses if _after(m, ordinal, scope, index)]
        if latching:
            # latched by no call: the first call after it says by what
            causes = {self.causes.get(m) for m in latching}
            (cause,) = causes if len(causes) == 1 else (None,)
            reason: str | None = cause or MISS_DIVERGED
            recorded = None
        else:
            recorded, reason = self.source.lookup(
                place, request_key, node, side_effecting, serve_side_effecting=serve_side_effecting
            )
        if reason is not None and (ordinal, scope, index) not in self.misses:
            self.misses.append((ordinal, scope, index))
        return recorded, reason


def _workflow_scopes(state: MaterializedRunState) -> list[str]:
    """Every workflow scope of a run (the run, then each parallel branch), longest first."""
    scopes = [""] + [f"{g.group_path}/{b}/" for g in state.parallel_groups for b in g.branches]
    return sorted(scopes, key=len, reverse=True)


def _workflow_scope(scopes: list[str], values_scope: str | None) -> str:
    """The workflow scope a value was asked for in: the innermost one enclosing its own."""
    path = values_scope or ""
    return next(s for s in scopes if path.startswith(s))

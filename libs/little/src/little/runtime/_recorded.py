"""Recorded-call replay (seed 003): re-run a workflow as a new run against a recorded run.

An *agent call* is one exchange of an agent session (``await agent.run(prompt)``). Each is
admitted with an ordinal (the run's admission order), a place (its scope, the run itself or a
parallel branch, and its rank among that scope's calls) and a request key (the canonical hash
of everything that decides its answer: the session's manifest, its node, the conversation so
far, the prompt and ``max_turns``), and settled with its answer and the messages it added. A
run started with ``replay_from=<run>`` serves a call from that run's record when the recorded
call at the same place settled successfully under the same node and key: no model or tool is
invoked. Replay is a strict prefix: the first call that does not resolve from the record runs
fresh, and so does every call admitted from then on that could have seen its answer (later
calls of its scope, of the branches it encloses and of the scopes enclosing it) or that the
recorded run admitted after it, in any branch (the latch, ``AgentCalls._latching``), because a
later recorded answer was produced after an earlier answer that no longer exists. A sub-run
replays the recorded run's sub-run at the same call (``AgentCalls.start_sub_run``).

Refused replays (the source run cannot be used, has no recorded calls, or the replaying
workflow's module reads the clock or randomness directly) are written on ``RunStarted`` and
the run executes fresh. A replayed call bills nothing (its settlement carries what the
recorded call cost, counted as avoided), and every surface marks it replayed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from little.errors import ConfigurationError
from little.events import (
    ArtifactRef,
    LoggedEvent,
    ModelCalled,
    SessionStarted,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
)
from little.replay import (
    AgentCall,
    MaterializedRunState,
    RecordedValue,
    SignalState,
    SubRun,
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
"""A sub-run started before this call did fresh work (it was started after the latch, the
record started none like it at its call, or it diverged inside itself from the recorded
sub-run it replayed): this is the first call that could have seen what it did. Calls after it
are ``diverged``. A sub-run that replayed the recorded one whole latches nothing."""
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


EVERY_SESSION = "*"
"""The key of ``FullReplay.models`` naming the model of every session not named otherwise."""

ModelChoice = str | Sequence[str] | Mapping[str, str] | None
"""A full replay's models: None (every session keeps its own), one ``provider:model`` or
``module:factory`` for every session, ``name=spec`` for the sessions of that name, or several
of those (a list; a string of them separated by spaces, as ``RunStarted.replay_model``
records them); or a mapping of session names (``"*"``: every other session) to specs."""


@dataclass(frozen=True, init=False)
class FullReplay:
    """A full replay of a recorded run: a new run of the same workflow, its input and values
    taken from the source run, every model call made live, and every tool call answered from
    the source run's receipts unless ``live_tools``: the n-th call of a tool with the same
    arguments in a session gets the outcome of the n-th such call of the source's session of
    the same id (its result, or its error), never invoking the tool; a call the source's
    session never made fails as the tool's error, which the model sees. With ``live_tools``
    tools run. Sub-runs are full replays of the source's sub-runs.

    ``model`` says which model each session asks (``ModelChoice``): a session keeps the model
    its code names unless it is told otherwise, by its name (``researcher=anthropic:<id>``) or
    for every session (``anthropic:<id>``); a model is ``provider:model`` or
    ``module:factory``, as ``little.harness.model_from_spec`` reads it."""

    models: Mapping[str, str]
    """Session name (``EVERY_SESSION``: every other) -> model spec; empty: each its own."""
    live_tools: bool

    def __init__(self, model: ModelChoice = None, live_tools: bool = False) -> None:
        object.__setattr__(self, "models", replay_models(model))
        object.__setattr__(self, "live_tools", live_tools)

    @property
    def model(self) -> str | None:
        """The models as ``RunStarted.replay_model`` records them (None: each its own): the
        model of every session first, then ``name=spec`` by name, separated by spaces."""
        if not self.models:
            return None
        every = self.models.get(EVERY_SESSION)
        named = [f"{n}={m}" for n, m in sorted(self.models.items()) if n != EVERY_SESSION]
        return " ".join(([every] if every else []) + named)


def replay_models(model: ModelChoice) -> dict[str, str]:
    """``model`` as session name -> spec, or ``ConfigurationError`` naming what is wrong."""
    if model is None:
        return {}
    if isinstance(model, Mapping):
        words = [f"{k}={v}" if k != EVERY_SESSION else str(v) for k, v in model.items()]
    else:
        given = [model] if isinstance(model, str) else list(model)
        for m in given:
            if not m.split() or (len(m.split()) > 1 and not isinstance(model, str)):
                raise ConfigurationError(
                    f"full replay model {m!r} is not one model: give name=provider:model "
                    "or provider:model"
                )
        words = [w for m in given for w in m.split()]
    models: dict[str, str] = {}
    for word in words:
        name, spec = _model_item(word)
        if name in models:
            raise ConfigurationError(
                f"full replay models: two models for every session ({models[name]!r}, "
                f"{spec!r}): name the session each is for (name=provider:model)"
                if name == EVERY_SESSION
                else f"full replay models: two models for session {name!r} "
                f"({models[name]!r}, {spec!r})"
            )
        models[name] = spec
    return models


def _model_item(word: str) -> tuple[str, str]:
    """``name=spec`` (a name holds no ``:``) or a bare spec, for every session."""
    name, eq, spec = word.strip().partition("=")
    if not eq or ":" in name:
        return EVERY_SESSION, word.strip()
    if not name:
        raise ConfigurationError(
            f"full replay model {word!r} names no session before '=' (name=provider:model)"
        )
    if not spec:
        raise ConfigurationError(
            f"full replay model {word!r} names no model: give {name}=provider:model"
        )
    return name, spec


Receipt = tuple[str | None, ArtifactRef | None, str | None]
"""A recorded tool call's outcome: its result JSON (or artifact ref), or its error."""

ReceiptKey = tuple[str | None, str, str]
"""``(session id, tool, arguments JSON)``: whose receipts a full replay's tool call takes."""


def tool_receipts(events: Iterable[LoggedEvent]) -> dict[ReceiptKey, list[Receipt]]:
    """The finished tool calls of a run's accepted events, by session, tool and arguments
    JSON (as recorded), in the order they first started: what a full replay serves tool calls
    from. (Start order, not finish order: a turn's calls run concurrently and finish in any
    order, while they start in the order the model asked, which a replay asks them in.)"""
    started: dict[tuple[str | None, str], tuple[str, str]] = {}
    first: dict[tuple[str | None, str], int] = {}
    finished: list[tuple[int, ReceiptKey, Receipt]] = []
    for item in accepted_events(events):
        e = item.event
        if isinstance(e, ToolCallStarted):
            started[(e.session_id, e.call_id)] = (e.tool, e.arguments_json)
            first.setdefault((e.session_id, e.call_id), len(first))
        elif isinstance(e, ToolCallSucceeded | ToolCallFailed):
            found = started.pop((e.session_id, e.call_id), None)
            if found is None:
                continue
            outcome: Receipt = (
                (e.result_json, e.result_ref, None)
                if isinstance(e, ToolCallSucceeded)
                else (None, None, f"{e.error_type}: {e.message}")
            )
            finished.append((first[(e.session_id, e.call_id)], (e.session_id, *found), outcome))
    receipts: dict[ReceiptKey, list[Receipt]] = {}
    for _, key, outcome in sorted(finished, key=lambda f: f[0]):
        receipts.setdefault(key, []).append(outcome)
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

    def sub_run(self, call_id: str) -> SubRun | None:
        """The sub-run the source run started at ``call_id`` (its first reservation there):
        the one a replay's or a simulation's sub-run at the same call replays."""
        if self.state is None:
            return None
        return next((s for s in self.state.sub_runs if s.call_id == call_id), None)

    def at(self, place: Place) -> AgentCall | None:
        """The recorded call offered at ``place`` (None: the record offers none there)."""
        return self._by_place.get(place)

    def ordinal_at(self, place: Place) -> int | None:
        """The recorded ordinal (the recorded run's admission order) of the call offered at
        ``place``, or None: the record offers none there."""
        recorded = self._by_place.get(place)
        return None if recorded is None else recorded.ordinal

    def value(self, place: ValuePlace, kind: str) -> RecordedValue | None:
        """The source's value at ``place`` if it is proven and of this kind."""
        recorded = self._values.get(place)
        return recorded if recorded is not None and recorded.kind == kind else None


@dataclass(frozen=True)
class Simulating:
    """What a simulation knows of its golden runs beyond their records (``SIMULATING``)."""

    requests: Mapping[tuple[str, str, int], str] = field(default_factory=dict)
    """``(run, session, turn)``: the request hash the golden run recorded for that turn."""
    tools_run: list[str] = field(default_factory=list)
    """The tool calls inside served exchanges that ran and matched their recorded results."""
    tools_served: list[str] = field(default_factory=list)
    """The tool calls inside served exchanges that did not run (side-effecting, or recorded
    redacted or rejected, or needing a person's approval), each with why: their recorded
    results were served."""

    @classmethod
    def of(cls, runs: Mapping[str, Iterable[LoggedEvent]]) -> Simulating:
        requests: dict[tuple[str, str, int], str] = {}
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
        return cls(requests)


SIMULATING: ContextVar[Simulating | None] = ContextVar("little_simulating", default=None)
"""Set while ``little.runtime.simulate`` runs a workflow: a call the record cannot serve is a
divergence (``SimulationDivergedError``), never a model invocation (the tool calls of a served
exchange run again to be compared, ``Recorder.served_tool_calls``, but those that cannot be:
side-effecting, approval-gated, recorded redacted or rejected); a sub-run is simulated against
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
    bounds: dict[tuple[int, str, int], int] = field(default_factory=dict)
    """Each miss's place in the recorded run's admission order (``_bound``): everything the
    recorded run admitted after that ordinal is latched by it, in every branch."""
    admitted: set[int] = field(default_factory=set)
    """Ordinals admitted by this execution (a retried step admits its calls once)."""
    sub_run_sources: dict[str, tuple[str, str]] = field(default_factory=dict)
    """``call id -> (workflow scope, recorded sub-run id)``: the sub-runs of this run that
    replay (or simulate) the sub-run the record started at the same call (``start_sub_run``)."""
    _by_node: dict[Node, int] = field(default_factory=dict)
    _places: dict[int, Place] = field(default_factory=dict)
    _counts: dict[str, int] = field(default_factory=dict)
    _session_scopes: dict[str, str] | None = None

    @classmethod
    def of(
        cls,
        state: MaterializedRunState,
        source: RecordedCalls | None = None,
        sub_runs_fresh: Mapping[str, bool | None] | None = None,
    ) -> AgentCalls:
        """The agent calls of an execution of the run folded to ``state``, replaying
        ``source``. ``sub_runs_fresh``: for each sub-run the run reserved, whether it did fresh
        work (True), replayed the recorded one whole (False) or has not ended (None, a
        sub-run never started included: the latch rule decides again whether it replays the
        recorded one, from the misses before its reservation, and one that replays latches
        when it ends if it did not stay whole); a sub-run not named there did fresh work."""
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
                    calls._miss((c.ordinal, *place), c.ordinal, at_call=True)
            scopes = _workflow_scopes(state)
            fresh_subs = sub_runs_fresh or {}
            replaying = [
                (sub, recorded)
                for sub in state.sub_runs
                if fresh_subs.get(sub.sub_run_id, True) is None
                and sub.call_id is not None
                and (recorded := source.sub_run(sub.call_id)) is not None
            ]
            latched = [
                *(
                    (v.step_path, v.admitted_calls, MISS_VALUE)
                    for v in state.values
                    if v.source_run_id is None
                ),  # produced fresh: it latched where it stood
                *(
                    (s.step_path, s.admitted_calls, MISS_SUB_RUN)
                    for s in state.sub_runs
                    if fresh_subs.get(s.sub_run_id, True)
                ),  # did fresh work: it latched where it stood (a reused one latches nothing)
            ]
            for path, admitted, cause in latched:
                scope = _workflow_scope(scopes, path)
                index = sum(1 for o, (s, _) in calls._places.items() if s == scope and o < admitted)
                calls._latch((admitted - 1, scope, index - 1), cause, admitted)
            for sub, recorded in replaying:
                # not ended, or never started: the latch rule decides again, from what was
                # known when it was reserved, as ``start_sub_run`` decided it live (else
                # the verdict would depend on where a crash landed)
                scope = _workflow_scope(scopes, sub.step_path)
                admitted = sub.admitted_calls
                index = sum(1 for o, (s, _) in calls._places.items() if s == scope and o < admitted)
                if calls._latching(
                    admitted, scope, index, recorded.admitted_calls, known_before=admitted
                ):
                    calls._latch((admitted - 1, scope, index - 1), MISS_SUB_RUN, admitted)
                else:
                    calls.sub_run_sources[sub.call_id or ""] = (scope, recorded.sub_run_id)
        return calls

    def _bound(self, scope: str, index: int, before: int, *, at_call: bool) -> int:
        """Where a miss at ``(scope, index)`` stands in the recorded run's admission order:
        the recorded ordinal of the call the record offers at that place (a call that missed
        there); else (a call the record lacks, a value produced fresh, a sub-run) the latest
        recorded ordinal of the calls admitted before it (replay ordinal below ``before``) in
        its scope or a scope enclosing it, the calls it certainly came after (-1: none)."""
        assert self.source is not None
        if at_call:
            recorded = self.source.ordinal_at((scope, index))
            if recorded is not None:
                return recorded
        bound = -1
        for ordinal, place in self._places.items():
            s, i = place
            if ordinal < before and scope.startswith(s) and (s != scope or i < index):
                recorded = self.source.ordinal_at(place)
                if recorded is not None and recorded > bound:
                    bound = recorded
        return bound

    def _miss(self, miss: tuple[int, str, int], before: int, *, at_call: bool) -> bool:
        """Record ``miss`` (``(ordinal, scope, index)``) and its bound; False if it was known."""
        if miss in self.misses:
            return False
        self.misses.append(miss)
        if self.source is not None:
            # a latched point's index is its scope's last call before it; a call's is its own
            index = miss[2] if at_call else miss[2] + 1
            self.bounds[miss] = self._bound(miss[1], index, before, at_call=at_call)
        return True

    def _latch(self, miss: tuple[int, str, int], cause: str, before: int) -> None:
        if self._miss(miss, before, at_call=False):
            self.causes[miss] = cause

    def _latching(
        self,
        ordinal: int,
        scope: str,
        index: int,
        recorded: int | None,
        *,
        known_before: int | None = None,
    ) -> list[tuple[int, str, int]]:
        """The misses that latch a call (or a value) at ``(scope, index)``, admitted now with
        ``ordinal``, which the recorded run admitted at position ``recorded`` (a call's
        ordinal; a value's or a sub-run's count of calls admitted before it; None: the record
        has nothing there). Two rules (strict prefix):

        * what could have seen the missed call's answer in this run (``_after``: later in its
          scope, or in a scope nested in it or enclosing it, admitted after it here);
        * what the recorded run admitted after the miss's place in its own admission order
          (``bounds``), in every branch: a recorded answer produced after an answer that no
          longer exists is not reused, whichever order the replay's branches admit in.

        ``known_before``: only the misses at a point before that many calls were admitted
        (a resume deciding again what was decided then; a miss at the same count in a sibling
        branch, which the log cannot order, counts: the safe side is fresh).
        """
        return [
            m
            for m in self.misses
            if (known_before is None or m[0] < known_before)
            and (
                _after(m, ordinal, scope, index)
                or (recorded is not None and recorded > self.bounds.get(m, recorded))
            )
        ]

    def start_sub_run(self, scope: str, call_id: str, workflow: str) -> None:
        """A sub-run of ``workflow`` is reserved now at ``call_id``, in workflow scope
        ``scope``. It replays the sub-run the record started at the same call with the same
        workflow (``sub_run_source``) when the latch has not reached this point (the recorded
        sub-run came before no miss); it latches nothing then, until it ends having done fresh
        work (``sub_run_ended``). Any other sub-run runs fresh, in a run of its own, and latches
        the replay here as a missed call would. In a simulation, a sub-run the golden run did
        not start at the same call with the same workflow is a divergence."""
        recorded = None if self.source is None else self.source.sub_run(call_id)
        index = self._counts.get(scope, 0)
        if SIMULATING.get() is not None:
            if recorded is not None and recorded.workflow == workflow:
                self.sub_run_sources[call_id] = (scope, recorded.sub_run_id)
                return
            why = (
                f"the golden run started no sub-run at {call_id}"
                if recorded is None
                else f"the golden run's sub-run at {call_id} ran workflow {recorded.workflow}"
            )
            raise SimulationDivergedError(
                f"sub-run {workflow} before call {self.next_ordinal}: {why}",
                ordinal=self.next_ordinal,
                miss_reason=MISS_SUB_RUN,
                place=(scope, index),
            )
        if self.source is None:
            return
        if (
            recorded is not None
            and recorded.workflow == workflow
            and not self.source.full
            and not self._latching(self.next_ordinal, scope, index, recorded.admitted_calls)
        ):
            self.sub_run_sources[call_id] = (scope, recorded.sub_run_id)
            return
        self._latch((self.next_ordinal - 1, scope, index - 1), MISS_SUB_RUN, self.next_ordinal)

    def sub_run_source(self, call_id: str) -> str | None:
        """The recorded sub-run the sub-run at ``call_id`` replays (or simulates), if any."""
        found = self.sub_run_sources.get(call_id)
        return None if found is None else found[1]

    def sub_run_ended(self, call_id: str, fresh: bool) -> None:
        """The sub-run at ``call_id``, replaying the recorded one, ended: if it did fresh work
        (it diverged inside itself), the replay latches here, as after a missed call."""
        found = self.sub_run_sources.get(call_id)
        if found is None or not fresh:
            return
        scope = found[0]
        index = self._counts.get(scope, 0)
        self._latch((self.next_ordinal - 1, scope, index - 1), MISS_SUB_RUN, self.next_ordinal)

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

    def recorded_scope(self, session_id: str) -> str | None:
        """The scope the run's own log (else the source run's record) admitted the first call of
        session ``session_id`` in; None: neither holds a call of it."""
        if self._session_scopes is None:
            scopes: dict[str, str] = {}
            logs = [self.own] if self.source is None else [self.own, self.source.calls]
            for calls in logs:
                for ordinal in sorted(calls):
                    c = calls[ordinal]
                    scopes.setdefault(f"{c.node_phase}#{c.node_label}", c.scope)
            self._session_scopes = scopes
        return self._session_scopes.get(session_id)

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
        recorded = self.source.value(place, kind)
        position = None if recorded is None else recorded.admitted_calls
        if self._latching(self.next_ordinal, scope, index, position):
            recorded = None
        if recorded is None:
            self._latch((self.next_ordinal - 1, scope, index - 1), MISS_VALUE, self.next_ordinal)
        return recorded

    def refuse(self, ordinal: int) -> None:
        """Serving call ``ordinal`` failed: latch the replay as after a miss there."""
        self._miss((ordinal, *self._places[ordinal]), ordinal, at_call=True)

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
        latching = self._latching(ordinal, scope, index, self.source.ordinal_at(place))
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
        if reason is not None:
            self._miss((ordinal, scope, index), ordinal, at_call=True)
        return recorded, reason


def _workflow_scopes(state: MaterializedRunState) -> list[str]:
    """Every workflow scope of a run (the run, then each parallel branch), longest first."""
    scopes = [""] + [f"{g.group_path}/{b}/" for g in state.parallel_groups for b in g.branches]
    return sorted(scopes, key=len, reverse=True)


def _workflow_scope(scopes: list[str], values_scope: str | None) -> str:
    """The workflow scope a value was asked for in: the innermost one enclosing its own."""
    path = values_scope or ""
    return next(s for s in scopes if path.startswith(s))

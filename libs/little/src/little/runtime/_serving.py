"""Where an answer comes from: the one place that chooses, for an agent call, a model turn or a
tool call, between the run's own log (a resume), a recorded run (``replay_from``), a golden run
(a simulation) and a full replay's tool receipts, or none of them (the call is made fresh).

Each source is one object behind ``Source``; ``Serving`` asks them in a fixed order and returns
``Served`` (with the records a served answer writes) or ``Fresh``. It decides only: it
appends nothing to the log, loads nothing and invokes nothing (``little.runtime._recording``
does all three); a recorded run's latch (the strict prefix) moves as it decides.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from little._canonical import sha256_hex
from little.errors import CapabilityDriftError
from little.events import (
    ArtifactRef,
    Event,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    Usage,
)
from little.logging_setup import get_logger
from little.replay import AgentCall, HistoryCompaction, SessionState
from little.runtime._errors import SessionDivergedError, SimulationDivergedError
from little.runtime._recorded import (
    MISS_CONFIG_CHANGED,
    MISS_KEY,
    MISS_REQUEST_CHANGED,
    SIMULATING,
    AgentCalls,
    Node,
    Place,
    Receipt,
    ReceiptKey,
    Simulating,
)

if TYPE_CHECKING:
    from little.runtime._execution import Execution

log = get_logger("little.runtime")

OWN_LOG = "own-log"
RECORDED_RUN = "recorded-run"
GOLDEN_RUN = "golden-run"
RECEIPTS = "receipts"


@dataclass(frozen=True, slots=True)
class Record:
    """An event a served answer writes (without ``step_path`` and ``session_id``, which the
    recorder adds): appended and acked before the answer is read (``ack``), or deferred."""

    cls: type[Event]
    fields: Mapping[str, Any]
    ack: bool = False


@dataclass(frozen=True, slots=True)
class Served:
    """Answered from a record: no model or tool is invoked."""

    source: str
    """Which source answered (``OWN_LOG``, ``RECORDED_RUN``, ``GOLDEN_RUN``, ``RECEIPTS``)."""
    text: str | None = None
    ref: ArtifactRef | None = None
    """The recorded answer: its JSON inline, or its artifact (none for a recorded error)."""
    error: str | None = None
    """A tool call's recorded failure (``"<type>: <message>"``), given to the model as its error."""
    usage: Usage | None = None
    """A model turn's recorded usage."""
    call: AgentCall | None = None
    """An agent call's record (its answer, usage, model calls)."""
    source_run_id: str | None = None
    """The run whose record answers, when it is not this one."""
    replayed: bool | None = None
    """For a tool call answered from another run's record: whether one was found (None: the
    call is answered from this run's own log)."""
    settled: bool = False
    """An agent call settled in this run's log already: nothing more is written for it."""
    again: bool = False
    """The run's own log holds this call's start but no answer (it was in flight)."""
    records: tuple[Record, ...] = ()
    """What serving it writes, in order."""


@dataclass(frozen=True, slots=True)
class Fresh:
    """Not answered from a record: the model or tool is invoked (an agent call runs its turns,
    each of them asked again)."""

    miss: str | None = None
    """An agent call's: why the record it was admitted against did not answer it."""
    settled: bool = False
    """An agent call settled in this run's log already: its turns and tool calls are served
    from the log one by one, and nothing more is written for it."""
    again: bool = False
    """The run's own log holds this call's start but no answer: it was in flight when the last
    writer stopped, and is made again (the provider may bill it twice)."""


FRESH = Fresh()
FRESH_AGAIN = Fresh(again=True)


@dataclass(frozen=True, slots=True)
class ToolAsk:
    """A tool call as the log knows it: what a source answers it by."""

    turn: int
    call_id: str
    """``<turn>:<the model's call id>``: the call's id in its session."""
    tool: str
    arguments_json: str
    """The arguments as recorded (redacted): canonical JSON."""
    idempotency_key: str
    occurrence: int
    """How many calls of the same tool with the same arguments the session made before it."""


class Source:
    """One place an answer can come from. Each method returns None when this source has no word
    on the call (the next source is asked), else its answer; a source that finds the code at odds
    with its record raises (a divergence) instead."""

    def exchange(
        self, ordinal: int, place: Place, node: Node, request_key: str
    ) -> Served | Fresh | None:
        """An agent call (one exchange of a session): answered whole, or run turn by turn."""
        return None

    def turn(self, turn: int, request_hash: str) -> Served | Fresh | None:
        """A model turn of an exchange that runs turn by turn."""
        return None

    def served_turn(self, ordinal: int, turn: int, request_hash: str) -> None:
        """A model turn inside an agent call answered whole: the request it builds now. Raise
        if this source recorded another one for it."""

    def tool_call(self, ask: ToolAsk) -> Served | Fresh | None:
        """A tool call the model asked for."""
        return None

    def runs_served_tool(self, ordinal: int, call_id: str, tool: str, kept: str | None) -> bool:
        """A tool call inside an agent call answered whole: run it again, and show its result
        to ``served_tool_result``? ``kept``: why it cannot be (side-effecting, ...), or None."""
        return False

    def served_tool_result(
        self, ordinal: int, call_id: str, tool: str, recorded: str | None, got: str
    ) -> None:
        """What a tool call run again by ``runs_served_tool`` returned now (its JSON, or its
        error's, as the model would see it): raise if this source recorded another one."""


class OwnLog(Source):
    """The run's own log, as claimed: on a resume, what this run recorded before is answered
    from it, and checked against what the code asks now."""

    def __init__(self, run_id: str, calls: AgentCalls, state: SessionState | None, session_id: str):
        self.run_id = run_id
        self.calls = calls
        self.session = state
        """The session as the log holds it (None: it never started before)."""
        self.session_id = session_id

    def exchange(
        self, ordinal: int, place: Place, node: Node, request_key: str
    ) -> Served | Fresh | None:
        own = self.calls.own.get(ordinal)
        if own is None:
            return None
        if own.request_key != request_key:
            raise SessionDivergedError(
                f"run {self.run_id}: agent call {ordinal} ({self.session_id}) has request "
                f"{request_key[:12]}... but the log recorded {own.request_key[:12]}...: the "
                "workflow diverged from its log (non-deterministic code before this call?)"
            )
        if own.outcome != "succeeded":
            return None  # in flight or failed: the record this run replays (if any) decides
        if own.replayed:
            # answered from the source run before a crash: no turns to fast-forward
            return Served(OWN_LOG, call=own, settled=True)
        # its turns and tool calls are served from this log one by one, so turn numbers and
        # the request hash chain go on exactly as the first time
        return Fresh(settled=True)

    def turn(self, turn: int, request_hash: str) -> Served | Fresh | None:
        recorded = self.session.turn(turn) if self.session is not None else None
        if recorded is None:
            return None
        if recorded.request_hash != request_hash:
            raise SessionDivergedError(
                f"run {self.run_id}: session {self.session_id} turn {turn} builds request "
                f"{request_hash[:12]}... but the log recorded {recorded.request_hash[:12]}...: "
                "the conversation diverged from its log (non-deterministic code before this "
                "call?)"
            )
        if recorded.status == "responded" and recorded.usage is not None:
            return Served(
                OWN_LOG, recorded.response_json, recorded.response_ref, usage=recorded.usage
            )
        return FRESH_AGAIN if recorded.status == "called" else FRESH

    def tool_call(self, ask: ToolAsk) -> Served | Fresh | None:
        recorded = self.session.tool_call(ask.call_id) if self.session is not None else None
        if recorded is None:
            return None
        if recorded.status == "succeeded":
            return Served(OWN_LOG, recorded.result_json, recorded.result_ref)
        if recorded.status == "failed":
            return Served(OWN_LOG, error=recorded.error)
        return FRESH_AGAIN

    def compaction(
        self, exchange: int, policy_hash: str, conversation: str
    ) -> HistoryCompaction | None:
        """The compaction this run recorded before ``exchange``, if it did: checked against
        the session's policy and the conversation rebuilt now (its canonical JSON)."""
        recorded = self.session.compaction(exchange) if self.session is not None else None
        if recorded is None:
            return None
        where = f"run {self.run_id}: session {self.session_id} exchange {exchange}"
        if recorded.policy_hash != policy_hash:
            raise CapabilityDriftError(
                f"{where}: the history was compacted under policy "
                f"{recorded.policy_hash[:12]}... but the session's is "
                f"{policy_hash[:12]}... (changed: compaction): start a new run"
            )
        if recorded.replaced_hash != sha256_hex(conversation):
            raise SessionDivergedError(
                f"{where}: the log compacted another conversation than the one rebuilt "
                "now (non-deterministic code before this exchange?)"
            )
        return recorded


class RecordedRun(Source):
    """The run this one replays (``replay_from``): an agent call is served from the recorded
    call at the same place while the replay's prefix holds (``AgentCalls.decide``)."""

    def __init__(
        self,
        run_id: str,
        calls: AgentCalls,
        session_id: str,
        manifest: Mapping[str, Any],
        manifest_hash: str,
        side_effecting: bool,
    ) -> None:
        self.run_id = run_id
        self.calls = calls
        self.session_id = session_id
        self.manifest = manifest
        self.manifest_hash = manifest_hash
        self.side_effecting = side_effecting
        """A session holding a side-effecting tool is never answered from a record: replay
        reuses answers, not effects."""

    def exchange(
        self, ordinal: int, place: Place, node: Node, request_key: str
    ) -> Served | Fresh | None:
        served, miss = self.calls.decide(ordinal, place, request_key, node, self.side_effecting)
        if served is not None:
            return Served(RECORDED_RUN, call=served, source_run_id=self.calls.source_run_id)
        if miss == MISS_KEY:
            miss = self.configuration_miss() or miss
        return Fresh(miss)

    def call_configuration_miss(
        self, place: Place, configuration: Mapping[str, Any] | None
    ) -> str | None:
        """``configuration-changed`` when the recorded call at ``place`` was made under
        another per-call configuration (an ``agent.run(..., output=...)`` schema) than
        ``configuration``, as its settled result records it (``"configuration"``, absent
        when none); None when it was the same, or the result is not inline (no read here)."""
        source = self.calls.source
        recorded = source.at(place) if source is not None else None
        if recorded is None or recorded.result_json is None:
            return None
        try:
            then = json.loads(recorded.result_json).get("configuration") or {}
        except (ValueError, AttributeError):
            return None
        now = dict(configuration or {})
        changed = sorted(k for k in {*then, *now} if then.get(k) != now.get(k))
        if not changed:
            return None
        log.warning(
            "replay_call_configuration_changed",
            run_id=self.run_id,
            session_id=self.session_id,
            source_run_id=source.source_run_id if source else None,
            changed=changed,
        )
        return MISS_CONFIG_CHANGED

    def configuration_miss(self) -> str | None:
        """``configuration-changed`` when the source run's session of this id was configured
        otherwise (its manifest), naming what changed in the log; None when it was not."""
        source = self.calls.source
        recorded = source.state.session(self.session_id) if source and source.state else None
        if recorded is None or recorded.manifest_hash == self.manifest_hash:
            return None
        try:
            then = json.loads(recorded.manifest_json)
        except ValueError:
            then = {}
        log.warning(
            "replay_session_configuration_changed",
            run_id=self.run_id,
            session_id=self.session_id,
            source_run_id=source.source_run_id if source else None,
            changed=sorted(
                k for k in {*then, *self.manifest} if then.get(k) != self.manifest.get(k)
            ),
        )
        return MISS_CONFIG_CHANGED


class GoldenRun(RecordedRun):
    """The golden run a simulation replays: every agent call is served from it, since a
    simulation invokes no model (so a side-effecting call's record is served too); a call it
    cannot serve, or a served exchange whose turns build other requests than it recorded, is a
    divergence (``SimulationDivergedError``), raised before anything runs. The tool calls
    inside a served exchange run again, all but side-effecting ones (no effect repeats): one
    returning another result than it recorded is the divergence, at that call."""

    def __init__(self, simulating: Simulating, *args: Any) -> None:
        super().__init__(*args)
        self.simulating = simulating

    def exchange(
        self, ordinal: int, place: Place, node: Node, request_key: str
    ) -> Served | Fresh | None:
        what = f"agent call {ordinal} ({node[0]}/{node[1]}#{node[2]}) would be invoked"
        if self.calls.source is None:
            raise SimulationDivergedError(
                f"{what}: the simulated run has no record to serve it from",
                ordinal=ordinal,
                miss_reason=None,
                place=place,
            )
        served, miss = self.calls.decide(
            ordinal, place, request_key, node, self.side_effecting, serve_side_effecting=True
        )
        if served is not None:
            return Served(GOLDEN_RUN, call=served, source_run_id=self.calls.source_run_id)
        if miss == MISS_KEY:  # a simulation says why the request changed, as a replay does
            miss = self.configuration_miss() or miss
        raise SimulationDivergedError(
            f"{what}: {miss}", ordinal=ordinal, miss_reason=miss, place=place
        )

    def runs_served_tool(self, ordinal: int, call_id: str, tool: str, kept: str | None) -> bool:
        # seed 004: tool code is not re-executed, unless in simulation mode
        what = f"agent call {ordinal} ({self.session_id}): tool {tool} (call {call_id})"
        if kept is not None:
            self.simulating.tools_served.append(f"{what}: {kept}, served from the golden run")
            return False
        return True

    def served_tool_result(
        self, ordinal: int, call_id: str, tool: str, recorded: str | None, got: str
    ) -> None:
        what = f"agent call {ordinal} ({self.session_id}): tool {tool} (call {call_id})"
        if got != recorded:
            raise SimulationDivergedError(
                f"{what} returned {_cut(got)} but the golden run recorded {_cut(recorded)}",
                ordinal=ordinal,
                miss_reason=TOOL_RESULT_CHANGED,
                place=self.calls.place_of(ordinal),
            )
        self.simulating.tools_run.append(what)

    def served_turn(self, ordinal: int, turn: int, request_hash: str) -> None:
        # a changed canonical JSON or chain would build requests a resume of a recorded run
        # refuses (SessionDivergedError), so it is a divergence here
        source = self.calls.source_run_id
        recorded = (
            None
            if source is None
            else self.simulating.requests.get((source, self.session_id, turn))
        )
        if recorded is not None and recorded != request_hash:
            raise SimulationDivergedError(
                f"agent call {ordinal} ({self.session_id}): turn {turn} "
                f"builds request {request_hash[:12]}... but the golden run "
                f"recorded {recorded[:12]}...: the request hash chain changed",
                ordinal=ordinal,
                miss_reason=MISS_REQUEST_CHANGED,
                place=self.calls.place_of(ordinal),
            )


TOOL_RESULT_CHANGED = "tool-result-changed"
"""Simulation only: a tool call inside a served exchange, run again, returned another result
than the golden run recorded (the tool's code, or what it reads, changed)."""


def _cut(text: str | None, limit: int = 200) -> str:
    if text is None:
        return "nothing"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class Receipts(Source):
    """A full replay's tool receipts: the n-th call of a tool with the same arguments in a
    session gets the outcome of the n-th such call of the source's session of the same id (its
    result, or its error), never invoking the tool; a call the source never made fails as the
    tool's error, which the model sees, since a full replay runs no tool unless ``live_tools``."""

    def __init__(
        self, receipts: Mapping[ReceiptKey, list[Receipt]], session_id: str, source: str | None
    ) -> None:
        self.receipts = receipts
        self.session_id = session_id
        self.source_run_id = source

    def tool_call(self, ask: ToolAsk) -> Served | Fresh | None:
        found = self.receipts.get((self.session_id, ask.tool, ask.arguments_json), [])
        receipt = found[ask.occurrence] if ask.occurrence < len(found) else None
        started = Record(
            ToolCallStarted,
            {
                "call_id": ask.call_id,
                "tool": ask.tool,
                "turn": ask.turn,
                "arguments_json": ask.arguments_json,
                "idempotency_key": ask.idempotency_key,
            },
            ack=True,
        )
        replayed = receipt is not None
        failure: tuple[str, str] | None = None
        if receipt is not None and receipt[2] is not None:  # it failed when recorded
            error_type, _, message = receipt[2].partition(": ")
            failure = (error_type, message)
        elif receipt is None:
            failure = (
                "ToolNotRecorded",
                f"{ask.tool}({ask.arguments_json}) is not among the tool calls of session "
                f"{self.session_id} in recorded run {self.source_run_id} (or it was called more "
                "often here), and a full replay runs no tool unless live_tools is set",
            )
        if failure is not None:
            failed = Record(
                ToolCallFailed,
                {
                    "call_id": ask.call_id,
                    "tool": ask.tool,
                    "error_type": failure[0],
                    "message": failure[1],
                    "retryable": False,
                },
            )
            return Served(
                RECEIPTS,
                error=f"{failure[0]}: {failure[1]}",
                source_run_id=self.source_run_id,
                replayed=replayed,
                records=(started, failed),
            )
        assert receipt is not None
        result_json, result_ref, _ = receipt
        succeeded = Record(
            ToolCallSucceeded,
            {
                "call_id": ask.call_id,
                "tool": ask.tool,
                "result_json": result_json,
                "result_ref": result_ref,
                "replayed_from_run_id": self.source_run_id,
            },
        )
        return Served(
            RECEIPTS,
            result_json,
            result_ref,
            source_run_id=self.source_run_id,
            replayed=replayed,
            records=(started, succeeded),
        )


class Serving:
    """Where the answers of one session come from, asked in this order (what no source answers
    is ``Fresh``)::

        agent call   own log, then the record the run was started against (a recorded run,
                     or in a simulation the golden run)
        model turn   own log (a recorded run answers whole agent calls, never one turn)
        tool call    own log, then a full replay's receipts

    The run's own log always comes first: what this run recorded is never asked for again."""

    def __init__(self, own: OwnLog, record: Source | None, receipts: Source | None) -> None:
        self.own = own
        self.record = record
        self.receipts = receipts

    @classmethod
    def of(
        cls,
        x: Execution,
        session_id: str,
        manifest: Mapping[str, Any],
        manifest_hash: str,
        side_effecting: bool,
    ) -> Serving:
        """The sources of a session of execution ``x``: the only place that asks whether the
        run resumes, replays, simulates or fully replays."""
        calls = x.agent_calls
        own = OwnLog(x.run_id, calls, x.replayed.session(session_id), session_id)
        args = (x.run_id, calls, session_id, manifest, manifest_hash, side_effecting)
        simulating = SIMULATING.get()
        source = calls.source
        record: Source | None = None  # a run of its own: every agent call is fresh
        if simulating is not None:
            record = GoldenRun(simulating, *args)
        elif source is not None:
            record = RecordedRun(*args)
        receipts = None
        if source is not None and source.full and not x.replayed.replay_live_tools:
            receipts = Receipts(source.receipts, session_id, source.source_run_id)
        return cls(own, record, receipts)

    def exchange(
        self,
        ordinal: int,
        place: Place,
        node: Node,
        request_key: str,
        configuration: Mapping[str, Any] | None = None,
    ) -> Served | Fresh:
        """``configuration``: the call's own configuration (its structured output), which its
        key holds; a key miss it explains is ``configuration-changed``."""
        answer = self.own.exchange(ordinal, place, node, request_key)
        if answer is None and self.record is not None:
            answer = self.record.exchange(ordinal, place, node, request_key)
            record = self.record
            if (
                isinstance(answer, Fresh)
                and answer.miss == MISS_KEY
                and isinstance(record, RecordedRun)
            ):
                miss = record.call_configuration_miss(place, configuration)
                if miss is not None:
                    answer = replace(answer, miss=miss)
        return FRESH if answer is None else answer

    def turn(self, turn: int, request_hash: str) -> Served | Fresh:
        answer = self.own.turn(turn, request_hash)
        return FRESH if answer is None else answer

    def served_turn(self, ordinal: int, turn: int, request_hash: str) -> None:
        for source in (self.own, self.record, self.receipts):
            if source is not None:
                source.served_turn(ordinal, turn, request_hash)

    def runs_served_tool(self, ordinal: int, call_id: str, tool: str, kept: str | None) -> bool:
        return self.record is not None and self.record.runs_served_tool(
            ordinal, call_id, tool, kept
        )

    def served_tool_result(
        self, ordinal: int, call_id: str, tool: str, recorded: str | None, got: str
    ) -> None:
        if self.record is not None:
            self.record.served_tool_result(ordinal, call_id, tool, recorded, got)

    def tool_call(self, ask: ToolAsk) -> Served | Fresh:
        own = self.own.tool_call(ask)
        if isinstance(own, Served):
            return own
        if self.receipts is not None:
            answer = self.receipts.tool_call(ask)
            if answer is not None:
                # made before and in flight when the last writer stopped: whoever answers now,
                # the call is made again
                return answer if own is None else replace(answer, again=True)
        return FRESH if own is None else own

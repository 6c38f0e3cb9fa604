"""The run report: what ``little report`` prints and the projector's API serves, as data."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from little.events import (
    AgentCallAdmitted,
    DecisionRecorded,
    Event,
    LoggedEvent,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    ParallelBranchScheduled,
    RunStarted,
    SessionStarted,
    StepStarted,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
)
from little.replay import (
    MaterializedRunState,
    ReplayEnvelope,
    ReplayResult,
    UsageTotals,
    accepted_events,
    configuration_json,
    replay_envelope,
    state_configuration,
)

__all__ = [
    "Cause",
    "Redaction",
    "configuration_data",
    "configuration_line",
    "decision_lines",
    "dollars",
    "explain",
    "interrupted_line",
    "node_name",
    "redacted_line",
    "redactions",
    "replay_line",
    "report_data",
    "tokens",
    "usage_dict",
    "waiting_line",
]


@dataclass(frozen=True)
class Redaction:
    """A recorded field a redactor stripped (``little.redaction``): the event's seq and type,
    and the path of the field in it (``arguments.api_key``)."""

    seq: int
    event_type: str
    field: str

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "event_type": self.event_type, "field": self.field}


_RECORDED_JSON: dict[type[Event], tuple[tuple[str, str], ...]] = {
    SessionStarted: (("system_json", "system"),),
    ModelCalled: (("appended_messages_json", "messages"),),
    ModelResponded: (("response_json", "response"),),
    ToolCallStarted: (("arguments_json", "arguments"),),
    ToolCallSucceeded: (("result_json", "result"),),
}


def redactions(events: Sequence[LoggedEvent]) -> list[Redaction]:
    """Every field of the run's recorded prompts, responses, tool arguments and results that
    holds the redaction marker, in log order (inline JSON only; a value big enough to be an
    artifact is not opened)."""
    from little.redaction import redacted_paths

    found: list[Redaction] = []
    for logged in events:
        e = logged.event
        for attr, name in _RECORDED_JSON.get(type(e), ()):
            text = getattr(e, attr)
            if not text or "[redacted]" not in text:
                continue
            try:
                value = json.loads(text)
            except ValueError:
                continue
            found.extend(Redaction(e.seq, e.event_type, p) for p in redacted_paths(value, name))
    return found


def redacted_line(found: Sequence[Redaction]) -> str | None:
    """One line saying which recorded fields were redacted, or None."""
    if not found:
        return None
    shown = "; ".join(f"seq {r.seq} {r.event_type} {r.field}" for r in found[:5])
    more = f"; and {len(found) - 5} more" if len(found) > 5 else ""
    return f"redacted: {len(found)} recorded field(s) hold [redacted]: {shown}{more}"


def usage_dict(u: UsageTotals) -> dict[str, Any]:
    return {
        "calls": u.calls,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cached_input_tokens": u.cached_input_tokens,
        "reasoning_tokens": u.reasoning_tokens,
        "cost_usd": None if u.cost_usd is None else str(u.cost_usd),
        "unpriced_calls": u.unpriced_calls,
    }


def report_data(result: ReplayResult) -> dict[str, Any]:
    """A JSON-ready report of a replayed run. Dollars are decimal strings, never floats.

    ``replay`` is the run's replay envelope (``little.replay.ReplayEnvelope``): every run has
    one, a run that is not a replay with ``source_run_id`` null."""
    s = result.state
    report: dict[str, Any] = {
        "run_id": s.run_id,
        "workflow": s.workflow,
        "workflow_version": s.workflow_version,
        "status": s.status,
        "error": s.error,
        "epoch": s.epoch,
        "accepted_claims": s.accepted_claims,
        "rejected_claims": s.rejected_claims,
        "fenced_events": s.fenced_events,
        "duplicate_events": s.duplicate_events,
        "last_seq": s.last_seq,
        "events_folded": result.events_folded,
        "from_snapshot": None
        if result.from_snapshot is None
        else {"partition": result.from_snapshot.partition, "offset": result.from_snapshot.offset},
        "steps": [
            {
                "step_path": step.step_path,
                "status": step.status,
                "should_run": planned.should_run,
                "visits": step.visits,
                "attempts": step.attempts,
                "error": step.error,
                "billed": usage_dict(step.usage),
                "avoided": usage_dict(step.avoided_usage),
                "decision": None
                if step.decision_visit is None
                else {"visit": step.decision_visit, "target": step.decision_target},
            }
            for step, planned in zip(s.steps, result.steps, strict=True)
        ],
        "sub_runs": [r.sub_run_id for r in s.sub_runs],
        "billed": usage_dict(s.usage),
        "avoided": usage_dict(s.avoided_usage),
        "replay": replay_envelope(s).to_json(),
        "configuration": configuration_data(s),
        "waiting": waiting_line(s),
        "waits": [w.model_dump(mode="json") for w in s.waits],
        "interrupted": {
            "model_calls": s.interrupted_model_calls,
            "tool_calls": s.interrupted_tool_calls,
            "in_flight": _in_flight(s),
        },
    }
    return report


def decision_lines(s: MaterializedRunState) -> list[str]:
    """The decisions the run recorded (``ctx.decide``: a validator's verdict, a route), one line
    each as ``little explain`` names them: what a replay reports without deciding again."""
    return [
        f"decision {step.step_path} (visit {step.decision_visit}) chose "
        f"{step.decision_target if step.decision_target is not None else 'to stop'}"
        for step in s.steps
        if step.decision_visit is not None
    ]


def configuration_data(s: MaterializedRunState) -> dict[str, Any] | None:
    """The run's configuration (``RunStarted`` v4): its hash, whether the log recorded it or
    it is derived (a run logged before v4), its parts, and for a replay how it differed from
    the source run's. None before the run started."""
    config = state_configuration(s)
    if config is None:
        return None
    return {
        "sha256": s.config_sha256 or configuration_json(config)[1],
        "recorded": s.config_sha256 is not None,
        "parts": config,
        "changes_from_source": list(s.config_changes),
    }


def configuration_line(s: MaterializedRunState) -> str | None:
    """The report's line for a replay whose configuration differed from its source run's:
    what changed, and whether the replay proceeded with it (repairable) or was refused
    (strict). None when nothing changed."""
    if not s.config_changes:
        return None
    changed = "; ".join(s.config_changes)
    if s.replay_refused_reason is not None:
        return f"configuration changed from {s.replay_source_run_id}: {changed} (replay refused)"
    return (
        f"configuration changed from {s.replay_source_run_id}: {changed} "
        f"(replay proceeded, {s.replay_mode or 'repairable'} mode)"
    )


def _in_flight(s: MaterializedRunState) -> int:
    """Model calls with a write-ahead record and nothing after it, as the log stands."""
    return sum(1 for session in s.sessions for turn in session.turns if turn.status == "called")


def interrupted_line(s: MaterializedRunState) -> str | None:
    """What the log cannot price: calls in flight when a writer of the run stopped (the
    provider may have billed them; a tool may have acted). None when there were none."""
    parts = []
    lost = s.interrupted_model_calls + (_in_flight(s) if s.terminal else 0)
    if lost:
        parts.append(f"{lost} model call(s) cut off by a crash or a cancel: cost not recorded")
    if s.interrupted_tool_calls:
        parts.append(
            f"{s.interrupted_tool_calls} tool call(s) started again after a crash "
            "(the first start may have acted)"
        )
    if not s.terminal and _in_flight(s):
        parts.append(f"{_in_flight(s)} model call(s) in flight now (or at a crash not resumed)")
    return "; ".join(parts) or None


def waiting_line(s: MaterializedRunState) -> str | None:
    """What a ``waiting`` run waits for, readable: each open wait (an approval with its tool
    and arguments, so a person can decide from this line) and the due time. None otherwise."""
    if s.status != "waiting":
        return None
    parts = []
    for w in s.waits:
        if w.outcome is not None:
            continue
        if w.kind == "approval":
            details = json.loads(w.details_json or "{}")
            args = json.dumps(details.get("arguments"), separators=(",", ":"))
            parts.append(f"approval of {details.get('tool')}({args}): call {w.name}")
        elif w.kind == "signal":
            parts.append(f"signal {w.name!r}")
        else:
            parts.append("timer")
        if w.due_at is not None:
            verb = "due" if w.kind == "timer" else "times out"
            parts[-1] += f" ({verb} {w.due_at.isoformat(timespec='seconds')})"
    if not parts:  # suspended inside a sub-run
        parts = list(s.waiting_for)
    return "waiting for " + ", ".join(parts)


def node_name(node: Sequence[str | int | None] | None) -> str | None:
    """``phase/label#occurrence`` of a node ``(phase, label, occurrence)``; None for none."""
    if node is None:
        return None
    phase, label, occurrence = node
    if label is None:
        return None
    name = str(label) if phase is None else f"{phase}/{label}"
    return name if occurrence is None else f"{name}#{occurrence}"


def replay_line(replay: ReplayEnvelope) -> str | None:
    """The one line about recorded-call replay that the report and ``little status`` print;
    None for a run that is not a replay."""
    if replay.source_run_id is None:
        return None
    subject = f"replay of {replay.source_run_id}"
    if replay.mode == "full":
        tools = "tools run live" if replay.live_tools else "tool results served from its receipts"
        return (
            f"full {subject} with {replay.model or 'each session own model'}: "
            f"{replay.fresh_calls} agent call(s) asked "
            f"live, {tools}"
        )
    if replay.refused_reason is not None:
        return f"{subject} refused: {replay.refused_reason}; ran fresh"
    line = (
        f"{subject}: {replay.replayed_calls}/{replay.agent_calls} agent call(s) reused a "
        "recorded run (not fresh evidence)"
    )
    if replay.diverged_at_call is not None:
        node = node_name(replay.diverged_at_node)
        line += f"; diverged at call {replay.diverged_at_call}"
        line += f" ({node})" if node is not None else ""
        line += f": {replay.miss_reason}"
    return line


def dollars(u: UsageTotals) -> str:
    """``$0.012345``, ``unpriced`` or ``$0.01 (+2 unpriced)``."""
    cost = u.cost_usd
    if cost is None:
        return f"unpriced ({u.unpriced_calls} call{'s' if u.unpriced_calls != 1 else ''})"
    text = f"${cost.quantize(Decimal('0.000001'))}"
    if u.unpriced_calls:
        text += f" (+{u.unpriced_calls} unpriced)"
    return text


def tokens(u: UsageTotals) -> str:
    if not u.calls:
        return "-"
    cached = f" ({u.cached_input_tokens:,} cached)" if u.cached_input_tokens else ""
    return f"{u.input_tokens:,} in{cached} / {u.output_tokens:,} out"


# -- little explain ------------------------------------------------------------------------


@dataclass(frozen=True)
class Cause:
    """One link of an explanation: the event, what it is to the explained one, and a line."""

    role: str
    event: LoggedEvent
    detail: str

    def to_json(self) -> dict[str, Any]:
        e = self.event
        return {
            "role": self.role,
            "seq": e.event.seq,
            "type": e.event.type,
            "partition": e.partition,
            "offset": e.offset,
            "step_path": e.event.step_path,
            "session_id": e.event.session_id,
            "detail": self.detail,
        }


def _requested(response_json: str | None, call_id: str, turn: int) -> bool | None:
    """Whether a logged model response asked for tool call ``call_id`` (``<turn>:<the id
    the model gave>``); None when the response is not inline."""
    if response_json is None:
        return None
    try:
        calls = json.loads(response_json).get("tool_calls") or []
    except (ValueError, AttributeError):
        return None
    return any(isinstance(c, dict) and f"{turn}:{c.get('id')}" == call_id for c in calls)


def explain(events: Sequence[LoggedEvent], seq: int) -> list[Cause]:
    """Why the event at ``seq`` of a run happened, from the run's events alone: for a tool
    call, the model turn whose response requested it and the turn's request; then the agent
    call (exchange) and session it belongs to, its step (attempt, visit), the decision that
    named that step, the parallel branch it ran in, and the run's start. First the event
    itself. ``LookupError`` when the run has no accepted event at ``seq``."""
    history = accepted_events(events)
    index = next((i for i, x in enumerate(history) if x.event.seq == seq), None)
    if index is None:
        last = max((x.event.seq for x in history), default=-1)
        raise LookupError(f"no event at seq {seq} (its events run from seq 0 to {last})")
    before = history[: index + 1]

    def latest(match: Callable[[Event], bool], upto: int | None = None) -> LoggedEvent | None:
        window = before if upto is None else before[: upto + 1]
        return next((x for x in reversed(window) if match(x.event)), None)

    target = history[index]
    e = target.event
    causes = [Cause("event", target, _describe(e))]
    turn: int | None = None
    if isinstance(e, ToolCallStarted | ToolCallSucceeded | ToolCallFailed):
        call_id = e.call_id
        started = latest(
            lambda x: (
                isinstance(x, ToolCallStarted)
                and x.session_id == e.session_id
                and x.call_id == call_id
            )
        )
        if started is not None and started is not target:
            causes.append(Cause("started as", started, _describe(started.event)))
        if started is not None and isinstance(started.event, ToolCallStarted):
            turn = started.event.turn
            responded = latest(
                lambda x: (
                    isinstance(x, ModelResponded)
                    and x.session_id == e.session_id
                    and x.turn == turn
                )
            )
            if responded is not None and isinstance(responded.event, ModelResponded):
                asked = _requested(responded.event.response_json, call_id, turn)
                if asked is None:
                    how = "(its response is an artifact) for"
                else:
                    how = "its response asked for" if asked else "(its response does not name)"
                causes.append(
                    Cause(
                        "requested by",
                        responded,
                        f"model turn {turn} of {responded.event.provider}:"
                        f"{responded.event.model}: {how} {started.event.tool} ({call_id})",
                    )
                )
    elif isinstance(e, ModelResponded | ModelFailed):
        turn = e.turn
    if turn is not None or isinstance(e, ModelCalled):
        wanted = e.turn if isinstance(e, ModelCalled) else turn
        called = latest(
            lambda x: (
                isinstance(x, ModelCalled) and x.session_id == e.session_id and x.turn == wanted
            )
        )
        if called is not None and called is not target:
            causes.append(Cause("asked by", called, _describe(called.event)))
    if e.session_id is not None:
        admitted = latest(
            lambda x: isinstance(x, AgentCallAdmitted) and x.session_id == e.session_id
        )
        if admitted is not None and admitted is not target:
            causes.append(Cause("in agent call", admitted, _describe(admitted.event)))
        session = latest(lambda x: isinstance(x, SessionStarted) and x.session_id == e.session_id)
        if session is not None and session is not target:
            causes.append(Cause("in session", session, _describe(session.event)))
    step_at: int | None = None
    if e.step_path is not None:
        path = e.step_path
        step = latest(lambda x: isinstance(x, StepStarted) and x.step_path == e.step_path)
        if step is not None:
            step_at = history.index(step)
            if step is not target:
                causes.append(Cause("in step", step, _describe(step.event)))
            decided = latest(lambda x: _chose(x, path), step_at)
            if decided is not None:
                causes.append(Cause("decided by", decided, _describe(decided.event)))
        for item in reversed(before):
            group = item.event
            if isinstance(group, ParallelBranchScheduled) and group.step_path is not None:
                branch = next(
                    (b for b in group.branches if path.startswith(f"{group.step_path}/{b}/")),
                    None,
                )
                if branch is not None:
                    causes.append(
                        Cause("in branch", item, f"branch {branch} of group {group.step_path}")
                    )
                    break
    run = latest(lambda x: isinstance(x, RunStarted))
    if run is not None and run is not target:
        causes.append(Cause("in run", run, _describe(run.event)))
    return causes


def _chose(e: Event, path: str) -> bool:
    """Did decision ``e`` name the step at ``path``: its target is the step's last segment,
    and the step runs in the decision's scope or in one nested in it (not a sibling's)."""
    if not isinstance(e, DecisionRecorded) or e.target is None or e.step_path is None:
        return False
    scope = e.step_path.rpartition("/")[0]
    named = path == e.target or path.endswith(f"/{e.target}")
    return named and (not scope or path.startswith(f"{scope}/"))


def _describe(e: Event) -> str:
    """One line about an event, for an explanation."""
    if isinstance(e, ToolCallStarted):
        return f"tool {e.tool} ({e.call_id}) started in model turn {e.turn}"
    if isinstance(e, ToolCallSucceeded):
        return f"tool {e.tool} ({e.call_id}) succeeded" + (
            f" (served from {e.replayed_from_run_id})" if e.replayed_from_run_id else ""
        )
    if isinstance(e, ToolCallFailed):
        return f"tool call {e.call_id} failed: {e.error_type}: {e.message}"
    if isinstance(e, ModelCalled):
        return f"model turn {e.turn} called ({e.provider}:{e.model}, {e.message_count} messages)"
    if isinstance(e, ModelResponded):
        return f"model turn {e.turn} responded ({e.usage.input_tokens} in / {e.usage.output_tokens} out)"
    if isinstance(e, ModelFailed):
        return f"model turn {e.turn} failed: {e.error_type}: {e.message}"
    if isinstance(e, AgentCallAdmitted):
        return f"agent call {e.ordinal} (node {e.node_phase}/{e.node_label}#{e.node_occurrence})"
    if isinstance(e, SessionStarted):
        return f"session {e.session_name} on {e.model}"
    if isinstance(e, StepStarted):
        return f"step {e.step_path} (attempt {e.attempt}, visit {e.visit})"
    if isinstance(e, DecisionRecorded):
        return f"decision {e.step_path} (visit {e.visit}) chose {e.target}"
    if isinstance(e, RunStarted):
        return f"run of {e.workflow} v{e.workflow_version}" + (
            f", sub-run of {e.parent_run_id}" if e.parent_run_id else ""
        )
    return e.type

"""What the run inspector's pages show, built from a run's events and state (no I/O here).

The timeline walks the run's accepted events in log order (``little.replay.accepted_events``)
and gives each step, session, agent call, model call, tool call, sub-run and wait one row,
updated by the events that settle it. Where each call's result came from:

* ``fresh``: invoked by the execution that recorded it;
* ``invoked again``: a call of the same turn (tool call id) was in flight when an earlier
  execution stopped, and this execution invoked it again (that earlier row is ``cut off``);
* ``replayed``: answered from a recorded run (recorded-call replay), not invoked;
* ``served from the log``: finished before a later execution claimed the run, which read it
  from the log instead of invoking it again (in the fold's terms its usage is avoided from
  then on); ``skipped with its step`` when its step had completed by then (such a step's row
  says ``output from the log``: the later execution took its output instead of running it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    DecisionRecorded,
    Event,
    LoggedEvent,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    ParallelBranchScheduled,
    RunCancelled,
    RunClaimed,
    RunCompleted,
    RunFailed,
    RunParked,
    RunStarted,
    RunSuspended,
    SessionStarted,
    SignalSent,
    StepCompleted,
    StepFailed,
    StepStarted,
    SubRunReserved,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    Usage,
    WaitEnded,
    WaitStarted,
)
from little.replay import MaterializedRunState, UsageTotals, accepted_events, cost_of
from little.report import dollars, tokens

FRESH = "fresh"
AGAIN = "invoked again"
REPLAYED = "replayed"
SERVED = "served from the log"
SKIPPED = "skipped with its step"
CUT_OFF = "cut off by a crash"
STEP_SERVED = "output from the log"

PREVIEW = 160
"""Characters of a value (input, output, arguments, result) shown in a row."""


@dataclass
class Row:
    """One line of the timeline."""

    kind: str
    """claim, run, step, group, decision, session, agent, model, tool, sub-run, wait, signal."""
    name: str
    key: str
    """Stable within the run (``model investigate#agent turn 2``), for a person and tests."""
    seq: int
    execution: int
    epoch: int
    partition: int
    offset: int
    step_path: str | None = None
    status: str = ""
    origin: str | None = None
    """fresh, invoked again or replayed (calls only)."""
    fate: str | None = None
    """served from the log, skipped with its step or cut off by a crash."""
    detail: str | None = None
    link: str | None = None
    """A run this row names (a sub-run, a replay's source)."""
    tokens: str | None = None
    dollars: str | None = None

    @property
    def finished(self) -> bool:
        return self.status in {"responded", "succeeded", "failed", "completed", "settled"}


@dataclass
class Bar:
    """One step of the billed-against-avoided chart (SVG units)."""

    step_path: str
    billed: str
    avoided: str
    billed_width: float
    avoided_width: float
    billed_tokens: str
    avoided_tokens: str


@dataclass
class Timeline:
    rows: list[Row] = field(default_factory=list)
    executions: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    parent_run_id: str | None = None


def preview(value: str | None, limit: int = PREVIEW) -> str | None:
    """A value as a person reads it: JSON strings unquoted, cut at ``limit`` characters."""
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    text = parsed if isinstance(parsed, str) else json.dumps(parsed, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _usage_text(usage: Usage) -> str:
    cached = f" ({usage.cached_input_tokens:,} cached)" if usage.cached_input_tokens else ""
    return f"{usage.input_tokens:,} in{cached} / {usage.output_tokens:,} out"


def _money(cost: Decimal | None) -> str:
    return "unpriced" if cost is None else f"${cost.quantize(Decimal('0.000001'))}"


_CALLS = {"agent", "model", "tool"}


class _Builder:
    def __init__(self) -> None:
        self.t = Timeline()
        self.execution = 0
        self.epoch = 0
        self.latest: dict[str, Row] = {}
        """The latest row of each key (a call invoked again gets a new row)."""
        self.completed_steps: set[str] = set()

    def row(self, item: LoggedEvent, kind: str, name: str, key: str, **kw: Any) -> Row:
        e = item.event
        r = Row(
            kind=kind,
            name=name,
            key=key,
            seq=e.seq,
            execution=self.execution,
            epoch=e.epoch,
            partition=item.partition,
            offset=item.offset,
            step_path=e.step_path,
            **kw,
        )
        self.t.rows.append(r)
        self.latest[key] = r
        return r

    def call(self, item: LoggedEvent, kind: str, name: str, key: str, **kw: Any) -> Row:
        """A call's row; a call of that key still in flight was cut off and runs again."""
        earlier = self.latest.get(key)
        again = earlier is not None and not earlier.finished
        if again and earlier is not None:
            earlier.fate = CUT_OFF
            earlier.status = "cut off"
        return self.row(item, kind, name, key, origin=AGAIN if again else FRESH, **kw)

    def claimed(self, item: LoggedEvent, e: RunClaimed) -> None:
        self.execution += 1
        if self.execution > 1:  # a resume: what is recorded is served, not paid again
            for r in self.t.rows:
                if r.kind in _CALLS and r.finished and r.fate is None and r.origin != REPLAYED:
                    r.fate = SKIPPED if r.step_path in self.completed_steps else SERVED
                elif r.kind == "step" and r.status == "completed" and r.fate is None:
                    r.fate = STEP_SERVED
        self.row(
            item,
            "claim",
            f"execution {self.execution} claimed the run",
            f"claim {e.epoch}",
            status=f"epoch {e.epoch}",
            detail=f"owner {e.owner}",
        )

    def add(self, item: LoggedEvent) -> None:
        e: Event = item.event
        sid = e.session_id or ""
        if isinstance(e, RunClaimed):
            self.claimed(item, e)
        elif isinstance(e, RunStarted):
            self.t.started_at = e.occurred_at
            self.t.parent_run_id = e.parent_run_id
            self.row(
                item,
                "run",
                f"started {e.workflow} v{e.workflow_version}",
                "run",
                status="running",
                detail=preview(e.input_json) if e.input_ref is None else "input: artifact",
                link=e.parent_run_id,
            )
        elif isinstance(e, RunCompleted | RunFailed | RunCancelled):
            self.t.ended_at = e.occurred_at
            status = {RunCompleted: "completed", RunFailed: "failed", RunCancelled: "cancelled"}
            detail = (
                preview(e.output_json)
                if isinstance(e, RunCompleted)
                else f"{e.error_type}: {e.message}"
                if isinstance(e, RunFailed)
                else e.reason
            )
            self.row(item, "run", f"run {status[type(e)]}", "run end", status=status[type(e)])
            self.t.rows[-1].detail = detail
        elif isinstance(e, RunParked | RunSuspended):
            what = (
                f"parked: {e.reason}"
                if isinstance(e, RunParked)
                else "suspended, waiting for " + ", ".join(e.waiting_for)
            )
            self.row(item, "run", what, f"run {e.seq}", status=e.type)
        elif isinstance(e, StepStarted):
            path = e.step_path or ""
            key = f"step {path}#{e.visit}"
            earlier = self.latest.get(key)
            if earlier is not None and earlier.status == "running":
                earlier.status = "cut off"
                earlier.fate = CUT_OFF
            self.completed_steps.discard(path)
            self.row(
                item,
                "step",
                path,
                key,
                status="running",
                detail=f"attempt {e.attempt}" + (f", visit {e.visit}" if e.max_visits > 1 else ""),
            )
        elif isinstance(e, StepCompleted | StepFailed):
            r = self.latest.get(f"step {e.step_path or ''}#{e.visit}")
            if r is not None:
                if isinstance(e, StepCompleted):
                    r.status = "completed"
                    self.completed_steps.add(e.step_path or "")
                    r.detail = f"attempt {e.attempt}: " + (
                        preview(e.output_json) or "output: artifact"
                    )
                else:
                    r.status = "failed" + (" (will retry)" if e.will_retry else "")
                    r.detail = f"{e.error_type}: {e.message}"
        elif isinstance(e, ParallelBranchScheduled):
            self.row(
                item,
                "group",
                e.step_path or "",
                f"group {e.step_path}",
                status="scheduled",
                detail="branches " + ", ".join(e.branches),
            )
        elif isinstance(e, DecisionRecorded):
            self.row(
                item,
                "decision",
                e.step_path or "",
                f"decision {e.step_path}#{e.visit}",
                status="decided",
                detail=f"next: {e.target}" if e.target else preview(e.output_json),
            )
        elif isinstance(e, SessionStarted):
            self.row(
                item,
                "session",
                f"session {e.session_name}",
                f"session {sid}",
                status="started",
                detail=f"model {e.model}",
            )
        elif isinstance(e, AgentCallAdmitted):
            node = "/".join(str(x) for x in (e.node_phase, e.node_label) if x is not None)
            self.call(
                item,
                "agent",
                f"agent call {e.ordinal}" + (f" ({node})" if node else ""),
                f"agent #{e.ordinal}",
                status="admitted",
            )
        elif isinstance(e, AgentCallSettled):
            r = self.latest.get(f"agent #{e.ordinal}")  # ordinals are unique in a run
            if r is not None:
                r.status = e.outcome if e.outcome != "succeeded" else "settled"
                if e.replayed:
                    r.origin = REPLAYED
                    r.link = e.source_run_id
                    r.detail = f"answered from {e.source_run_id}" + (
                        f" ({e.model_calls} model calls)" if e.model_calls else ""
                    )
                elif e.miss_reason:
                    r.detail = f"not replayed: {e.miss_reason}"
                if e.replayed and e.usage is not None:
                    r.tokens = _usage_text(e.usage) + " avoided"
                    r.dollars = _money(cost_of(e))
        elif isinstance(e, ModelCalled):
            self.call(
                item,
                "model",
                f"model turn {e.turn}",
                f"model {sid} turn {e.turn}",
                status="called",
                detail=f"{e.provider}:{e.model}, {e.message_count} messages",
            )
        elif isinstance(e, ModelResponded | ModelFailed):
            r = self.latest.get(f"model {sid} turn {e.turn}")
            if r is None:
                return
            if isinstance(e, ModelFailed):
                r.status = "failed"
                r.detail = f"{e.error_type}: {e.message}"
                return
            r.status = "responded"
            r.tokens = _usage_text(e.usage)
            r.dollars = _money(cost_of(e))
            if e.replayed_from_run_id is not None:
                r.origin = REPLAYED
                r.link = e.replayed_from_run_id
            if e.response_json is not None:
                r.detail = f"{e.provider}:{e.model}: {preview(e.response_json)}"
        elif isinstance(e, ToolCallStarted):
            self.call(
                item,
                "tool",
                f"tool {e.tool} ({e.call_id})",
                f"tool {sid} {e.call_id}",
                status="started",
                detail=preview(e.arguments_json),
            )
        elif isinstance(e, ToolCallSucceeded | ToolCallFailed):
            r = self.latest.get(f"tool {sid} {e.call_id}")
            if r is None:
                return
            if isinstance(e, ToolCallFailed):
                r.status = "failed"
                r.detail = f"{e.error_type}: {e.message}"
                return
            r.status = "succeeded"
            r.detail = preview(e.result_json) if e.result_ref is None else "result: artifact"
            if e.replayed_from_run_id is not None:
                r.origin = REPLAYED
                r.link = e.replayed_from_run_id
        elif isinstance(e, SubRunReserved):
            self.row(
                item,
                "sub-run",
                f"sub-run {e.workflow}",
                f"sub-run {e.sub_run_id}",
                status="reserved",
                detail=e.sub_run_id,
                link=e.sub_run_id,
            )
        elif isinstance(e, WaitStarted):
            self.row(
                item,
                "wait",
                f"{e.kind} {e.name}",
                f"wait {e.step_path}#{e.ordinal}",
                status="waiting",
                detail=None if e.due_at is None else f"due {e.due_at.isoformat()}",
            )
        elif isinstance(e, WaitEnded):
            r = self.latest.get(f"wait {e.step_path}#{e.ordinal}")
            if r is not None:
                r.status = e.outcome
        elif isinstance(e, SignalSent):
            self.row(
                item,
                "signal",
                f"signal {e.name}",
                f"signal {e.signal_id}",
                status="sent",
                detail=preview(e.payload_json),
            )


def timeline(events: Sequence[LoggedEvent]) -> Timeline:
    """The run's timeline from its events in log order (fenced writers' events left out)."""
    b = _Builder()
    for item in accepted_events(events):
        b.add(item)
    b.t.executions = b.execution
    return b.t


def chart(state: MaterializedRunState, width: float = 360.0) -> list[Bar]:
    """Per step, billed against avoided dollars (tokens where nothing is priced), scaled to
    ``width``; steps with no model calls are left out."""
    steps = [s for s in state.steps if s.usage.calls or s.avoided_usage.calls]

    def measure(u: UsageTotals) -> float:
        return float(u.priced_cost_usd) if priced else float(u.input_tokens + u.output_tokens)

    priced = any(s.usage.priced_cost_usd or s.avoided_usage.priced_cost_usd for s in steps)
    top = max((max(measure(s.usage), measure(s.avoided_usage)) for s in steps), default=0.0)
    scale = width / top if top else 0.0
    return [
        Bar(
            step_path=s.step_path,
            billed=dollars(s.usage),
            avoided=dollars(s.avoided_usage),
            billed_width=round(measure(s.usage) * scale, 1),
            avoided_width=round(measure(s.avoided_usage) * scale, 1),
            billed_tokens=tokens(s.usage),
            avoided_tokens=tokens(s.avoided_usage),
        )
        for s in steps
    ]


def duration(started: datetime | None, ended: datetime | None, now: datetime) -> str:
    """``1m 05s``; up to ``now`` (with ``so far``) for a run that has not ended."""
    if started is None:
        return "-"
    span: timedelta = (ended or now) - started
    seconds = max(span.total_seconds(), 0.0)
    if seconds < 10:
        text = f"{seconds:.2f}s"
    elif seconds < 3600:
        text = (
            f"{int(seconds // 60)}m {int(seconds % 60):02d}s"
            if seconds >= 60
            else f"{seconds:.0f}s"
        )
    else:
        text = f"{int(seconds // 3600)}h {int(seconds % 3600 // 60):02d}m"
    return text if ended is not None else f"{text} so far"

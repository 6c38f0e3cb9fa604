"""The run report: what ``little report`` prints and the projector's API serves, as data."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from little.replay import ReplayEnvelope, ReplayResult, UsageTotals, replay_envelope

__all__ = [
    "dollars",
    "node_name",
    "replay_line",
    "report_data",
    "tokens",
    "usage_dict",
]


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
            }
            for step, planned in zip(s.steps, result.steps, strict=True)
        ],
        "sub_runs": [r.sub_run_id for r in s.sub_runs],
        "billed": usage_dict(s.usage),
        "avoided": usage_dict(s.avoided_usage),
        "replay": replay_envelope(s).to_json(),
    }
    return report


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

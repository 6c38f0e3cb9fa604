"""The run report: what ``little report`` prints and the projector's API serves, as data."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from little.replay import AgentCall, MaterializedRunState, ReplayResult, UsageTotals

__all__ = [
    "dollars",
    "node_name",
    "replay_line",
    "replay_section",
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

    ``replay`` (see ``replay_section``) is there only for a recorded-call replay or a run with
    agent calls."""
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
    }
    replay = replay_section(s)
    if replay is not None:
        report["replay"] = replay
    return report


def node_name(call: AgentCall) -> str | None:
    """``phase/label#occurrence`` of a recorded-call node; None for a call without a label."""
    if call.node_label is None:
        return None
    name = call.node_label if call.node_phase is None else f"{call.node_phase}/{call.node_label}"
    return name if call.node_occurrence is None else f"{name}#{call.node_occurrence}"


def replay_section(s: MaterializedRunState) -> dict[str, Any] | None:
    """Recorded-call replay (seed 003) of a run: how many settled agent calls reused a recorded
    run, how many ran fresh, and where reuse ended (the fresh call with the lowest ordinal that
    names a miss reason). None for a run that is not a replay (every run records its agent
    calls; only a replay has something to say about them here)."""
    if s.replay_source_run_id is None:
        return None
    settled = [c for c in s.agent_calls if c.outcome is not None]
    misses = [c for c in settled if not c.replayed and c.miss_reason is not None]
    diverged = min(misses, key=lambda c: c.ordinal, default=None)
    return {
        "source_run_id": s.replay_source_run_id,
        "refused_reason": s.replay_refused_reason,
        "replayed_calls": sum(c.replayed for c in settled),
        "fresh_calls": sum(not c.replayed for c in settled),
        "diverged_at_call": None if diverged is None else diverged.ordinal,
        "diverged_at_node": None if diverged is None else node_name(diverged),
        "miss_reason": None if diverged is None else diverged.miss_reason,
    }


def replay_line(replay: dict[str, Any]) -> str:
    """The report's one line about recorded-call replay (a ``replay_section``)."""
    subject = f"replay of {replay['source_run_id']}"
    if replay["refused_reason"] is not None:
        return f"{subject} refused: {replay['refused_reason']}; ran fresh"
    replayed, fresh = replay["replayed_calls"], replay["fresh_calls"]
    line = (
        f"{subject}: {replayed}/{replayed + fresh} agent call(s) reused a recorded run "
        "(not fresh evidence)"
    )
    if replay["diverged_at_call"] is not None:
        node = replay["diverged_at_node"]
        line += f"; diverged at call {replay['diverged_at_call']}"
        line += f" ({node})" if node is not None else ""
        line += f": {replay['miss_reason']}"
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

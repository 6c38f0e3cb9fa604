"""The replay envelope (seed 003, "A replayed run is always marked"): what a run's agent calls
say about recorded-call replay, computed from its folded state alone.

Pure: no I/O. Every surface that marks a run replayed (``RunResult.replay``, ``little report
--json``, the projector's ``GET /runs`` and ``GET /runs/{id}``, ``little status``) shows this
one value, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from little.events import Event
from little.replay._fold import agent_calls_after
from little.replay._state import AgentCall, MaterializedRunState

NOT_RECORDED_NO_CALLS = "no-agent-calls"
"""``not_recorded_reason`` of a run that settled no agent call: a replay from it would be
refused with ``no-recorded-calls``."""

Node = tuple[str | None, str | None, int | None]


class ReplayEnvelope(BaseModel):
    """Recorded-call replay of one run, JSON-ready (``model_dump(mode="json")``).

    Every run has one. ``replayed``: at least one of its agent calls was served from a recorded
    run (not fresh evidence). ``recorded``: its own log holds a record a later replay can be
    served from. Every run records its agent calls in its log (there is no separate replay
    file and no recording to switch off: the replay-safety scan gates *serving*, on the
    replaying run), so a run is not recorded only when it settled no agent call, and
    ``not_recorded_reason`` says so. ``source_run_id`` and ``refused_reason`` come from its
    ``RunStarted``; the call counts are of settled calls (an admitted call still in flight is
    in neither; a call that was not served counts as fresh even when it was refused before a
    model ran: a mixed panel's leg, a budget refusal, an unusable recorded answer); ``diverged_at_call`` is the lowest ordinal of a call a replay did not serve
    (its miss reason and node ``[phase, label, occurrence]`` beside it, the node None for a
    call without a label)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use

    replayed: bool = False
    recorded: bool = False
    source_run_id: str | None = None
    refused_reason: str | None = None
    not_recorded_reason: str | None = NOT_RECORDED_NO_CALLS
    replayed_calls: int = 0
    fresh_calls: int = 0
    diverged_at_call: int | None = None
    diverged_at_node: Node | None = None
    miss_reason: str | None = None
    mode: str | None = None
    """A replay's mode (``RunStarted.replay_mode``): ``repairable``, ``strict`` or ``full``."""
    model: str | None = None
    """A full replay's model, as named."""
    live_tools: bool | None = None
    """A full replay that ran its tools instead of serving the source run's receipts."""

    @property
    def is_replay(self) -> bool:
        """The run was started with ``replay_from`` (served or refused)."""
        return self.source_run_id is not None

    @property
    def agent_calls(self) -> int:
        """Settled agent calls: served plus fresh."""
        return self.replayed_calls + self.fresh_calls

    @classmethod
    def of(
        cls,
        calls: Iterable[AgentCall],
        *,
        source_run_id: str | None = None,
        refused_reason: str | None = None,
        mode: str | None = None,
        model: str | None = None,
        live_tools: bool | None = None,
    ) -> ReplayEnvelope:
        """The envelope of a run with these agent calls (as the fold holds them)."""
        replayed = fresh = 0
        diverged: AgentCall | None = None
        for c in calls:
            if c.outcome is None:
                continue  # admitted, still in flight: neither served nor fresh yet
            if c.replayed:
                replayed += 1
                continue
            fresh += 1
            if c.miss_reason is not None and (diverged is None or c.ordinal < diverged.ordinal):
                diverged = c
        recorded = replayed + fresh > 0
        return cls(
            replayed=replayed > 0,
            recorded=recorded,
            source_run_id=source_run_id,
            refused_reason=refused_reason,
            not_recorded_reason=None if recorded else NOT_RECORDED_NO_CALLS,
            replayed_calls=replayed,
            fresh_calls=fresh,
            diverged_at_call=None if diverged is None else diverged.ordinal,
            diverged_at_node=None if diverged is None else node_of(diverged),
            miss_reason=None if diverged is None else diverged.miss_reason,
            mode=mode,
            model=model,
            live_tools=live_tools,
        )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def node_of(call: AgentCall) -> Node | None:
    """``(phase, label, occurrence)`` of an agent call; None for a call without a label."""
    if call.node_label is None:
        return None
    return (call.node_phase, call.node_label, call.node_occurrence)


def replay_envelope(state: MaterializedRunState, after: Iterable[Event] = ()) -> ReplayEnvelope:
    """The replay envelope of a folded run; with ``after``, of the run once these events of
    its writer are folded too (only their agent.call.* events matter: a writer that kept just
    those gets the envelope of its run's final state without reading or folding it again)."""
    after = tuple(after)
    calls = agent_calls_after(state, after) if after else state.agent_calls
    return ReplayEnvelope.of(
        calls,
        source_run_id=state.replay_source_run_id,
        refused_reason=state.replay_refused_reason,
        mode=state.replay_mode if state.replay_source_run_id is not None else None,
        model=state.replay_model,
        live_tools=state.replay_live_tools,
    )

"""Panels (``step.panel(...)``): several agent calls of one step at once, admitted in list order
before any runs, served whole from a record or run whole fresh (never a mix), a fresh panel's
calls reserved against the budget up front. It runs legs through their sessions: it records
nothing itself but the refusal of a panel it will not run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from little.errors import ConfigurationError
from little.harness import Content
from little.runtime._errors import BudgetExceededError, PanelMixedError
from little.runtime._groups import drain
from little.runtime._model_turns import SessionStep
from little.runtime._recorded import MISS_PANEL_MIXED
from little.runtime._session import AgentSession

if TYPE_CHECKING:
    from little.runtime._execution import Execution


async def run_panel(
    x: Execution,
    step: SessionStep,
    legs: Sequence[tuple[AgentSession[Any], Content]],
    max_turns: int,
) -> list[Any]:
    """``StepContext.panel``: admit every leg in list order, decide the panel as a whole
    (served, fresh, or a refused mix), reserve a fresh panel's calls, then run the legs at
    once and drain them."""
    where = f"run {x.run_id}: step {step.step_path}"
    if isinstance(legs, str | bytes) or not legs:
        raise ConfigurationError(f"{where}: a panel needs a non-empty list of legs, not {legs!r}")
    sessions: list[AgentSession[Any]] = []
    for i, leg in enumerate(legs):
        if not (
            isinstance(leg, tuple)
            and len(leg) == 2
            and isinstance(leg[0], AgentSession)
            and isinstance(leg[1], str | list | tuple)
        ):
            raise ConfigurationError(
                f"{where}: panel leg {i} is {leg!r}, not a (session, prompt) pair"
            )
        session = leg[0]
        if session._step is not step:
            raise ConfigurationError(
                f"{where}: panel leg {i} uses session {session.session_id}, opened by another "
                "step: open each leg's session in the step that runs the panel"
            )
        if session in sessions:
            raise ConfigurationError(
                f"{where}: panel legs {sessions.index(session)} and {i} share session "
                f"{session.name!r}, which holds one conversation: give each leg its own session"
            )
        sessions.append(session)
    step._check_group()
    # each leg's prompt as recorded (its parts' large bytes stored), in list order
    prompts = [await s._recorder.parts.prompt(prompt, s._where) for s, prompt in legs]
    for session in sessions:  # each leg's history compacted first, in list order
        await session._compact_if_due()
    tickets = [s._admit(p, max_turns) for s, p in zip(sessions, prompts, strict=True)]  # no await
    recorded = [t.served for t in tickets]
    if any(recorded) and not all(recorded):
        for session, ticket in zip(sessions, tickets, strict=True):
            session._recorder.refuse(ticket, ticket.miss or MISS_PANEL_MIXED)
        await x.writer.flush()
        legs_of = ", ".join(
            f"{i} {'recorded' if r else f'fresh ({t.miss})'}"
            for i, (r, t) in enumerate(zip(recorded, tickets, strict=True))
        )
        raise x.integrity.latch(
            PanelMixedError(
                f"{where}: panel resume cannot mix recorded and fresh agent calls (legs: {legs_of}); "
                "edit the workflow so the panel's legs all change or none does, or run it without "
                "replay_from"
            )
        )
    fresh = [i for i, t in enumerate(tickets) if not t.served and not t.settled]
    # a leg in flight when the last writer stopped was counted when it was first made
    uncounted = [i for i in fresh if tickets[i].ordinal not in x.counted_calls]
    if uncounted:
        try:
            x.reserve_calls(len(uncounted), step.step_path)
        except BudgetExceededError:
            for i in fresh:
                sessions[i]._recorder.refuse(tickets[i], tickets[i].miss)
            await x.writer.flush()
            raise
        for i in uncounted:
            sessions[i]._recorder.reserved = True

    async def run_leg(i: int) -> Any:
        recorder = sessions[i]._recorder
        try:
            return await sessions[i]._run_admitted(tickets[i], prompts[i], max_turns)
        finally:
            if recorder.reserved:  # ended without a fresh model call: give it back
                recorder.reserved = False
                x.release_call()

    tasks = [asyncio.ensure_future(run_leg(i)) for i in range(len(legs))]
    answers = await drain(tasks, [s.name for s in sessions], lambda _: None)
    return list(answers)

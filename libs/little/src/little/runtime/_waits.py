"""Durable waits inside a run: timers, signals and approvals that hold no process meanwhile.

A wait is recorded before it waits (``WaitStarted``: its kind, its place, its due time) and
when it ends (``WaitEnded``: fired, received, timed out, approved, rejected). A wait that
cannot end now lets go of the run: the execution records ``RunSuspended`` and ends
(``ExecutionSuspended``), so the run is ``waiting`` and nothing holds it; whoever wakes it
(``follow``, ``little worker``, the resume coordinator) executes it again at its due time or
when a signal it waits for arrives, and the replay reaches the same wait and ends it. Timers
due within ``hold`` seconds are waited for in the process instead: a suspension and a claim
cost more than a short sleep.

Signals come from outside the run's writers (``_client.send_signal``) and are kept in the
run's log until a wait of that name takes it (the oldest first). Taking it is recorded
(``WaitEnded.signal_id``), so a resume and a replay give each wait the same signal without its
sender. This module never sends signals or resumes runs (``_client``, ``_host`` do).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from little._canonical import canonical_json
from little._world import World
from little.errors import ConfigurationError
from little.events import RunSuspended, SignalSent, WaitEnded, WaitStarted
from little.log import Position
from little.logging_setup import get_logger
from little.replay import (
    MaterializedRunState,
    SignalState,
    WaitState,
    oldest_kept,
    signal_name,
    signal_state,
    wait_state,
)
from little.runtime._errors import (
    ExecutionSuspended,
    SimulationDivergedError,
    WaitTimeoutError,
)
from little.runtime._recorded import SIMULATING, AgentCalls
from little.runtime._writer import RunWriter

log = get_logger("little.runtime")


def hold_seconds(hold: float | None = None) -> float:
    """Timers due within this many seconds are slept in the process; longer waits suspend.
    ``hold`` if given, else ``LITTLE_WAIT_HOLD_SECONDS`` (default 1), read when a run starts
    rather than when ``little`` is imported (a process forked after the import reads its own)."""
    if hold is not None:
        return hold
    return float(os.environ.get("LITTLE_WAIT_HOLD_SECONDS", "1.0"))


MAX_WAIT_SECONDS = 100 * 365 * 86400.0
"""A hundred years: a longer (or infinite) duration is a mistake, not a wait."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def seconds(duration: float | timedelta, what: str) -> float:
    value = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    if not math.isfinite(value) or value < 0 or value > MAX_WAIT_SECONDS:
        raise ConfigurationError(f"{what} must be a duration of 0 seconds or more, not {duration}")
    return value


class RunWaits:
    """The waits and signals of one execution: those its log held when it was claimed, then
    those it records and reads since."""

    def __init__(
        self,
        world: World,
        writer: RunWriter,
        agent_calls: AgentCalls,
        replayed: MaterializedRunState,
        hold: float,
    ) -> None:
        self._world = world
        self._writer = writer
        self._calls = agent_calls
        """The run's agent-call admission: a simulation ends a wait as its golden run did."""
        self.run_id = writer.run_id
        self.hold = hold
        self.waits: dict[tuple[str | None, int], WaitState] = {
            (w.step_path, w.ordinal): w for w in replayed.waits
        }
        self.signals: dict[str, SignalState] = {s.signal_id: s for s in replayed.signals}
        self._approvals_asked: dict[str, int] = {}
        """Per session, the last approval ordinal this execution took (its wait in flight)."""
        self._read_to: Position | None = (
            None
            if replayed.last_position is None
            else Position(replayed.last_position.partition, replayed.last_position.offset)
        )

    # -- signals -------------------------------------------------------------------------

    def _kept(self, name: str) -> SignalState | None:
        return oldest_kept(self.signals.values(), name)

    def _read_new_signals(self) -> None:
        """Read the run's log past what this execution has seen for signals sent since (a
        worker thread)."""
        last = self._read_to
        for item in self._world.read_run(self.run_id, after=last):
            last = Position(item.partition, item.offset)
            e = item.event
            if isinstance(e, SignalSent) and e.signal_id not in self.signals:
                self.signals[e.signal_id] = signal_state(e)
        self._read_to = last

    async def take(self, name: str) -> SignalState | None:
        """Take the oldest signal named ``name`` no wait took yet: from what this execution
        knows, else from the log as it is now (read off the loop). It is marked taken before
        anything else runs, so two waits on one name (in two branches) never take the same."""
        kept = self._kept(name)
        if kept is None:
            await asyncio.to_thread(self._read_new_signals)
            kept = self._kept(name)
        if kept is not None:
            self.signals[kept.signal_id] = kept.model_copy(update={"taken": True})
        return kept

    async def arrived_since(self) -> bool:
        """After suspending: did a signal one of this run's own open waits needs land
        meanwhile (after this execution's last read)? Then the run can go on at once. (A
        sub-run's waits are its own execution's to check, in its own log.)"""
        names = {
            signal_name(w) for w in self.waits.values() if w.outcome is None and w.kind != "timer"
        }
        if not names:
            return False
        await asyncio.to_thread(self._read_new_signals)
        return any(self._kept(n) is not None for n in names)

    # -- waits ---------------------------------------------------------------------------

    async def wait(
        self,
        scope: str | None,
        ordinal: int,
        kind: str,
        name: str,
        due_at: datetime | None,
        details: Any = None,
    ) -> tuple[WaitState, Any]:
        """The wait at (``scope``, ``ordinal``), recorded if new, ended if it can end now;
        returns it ended and the payload of the signal it took (None for a timer). Raises
        ``ExecutionSuspended`` when it cannot end yet, ``WaitTimeoutError`` when it timed out."""
        key = (scope, ordinal)
        wait = self.waits.get(key)
        if wait is None:
            started, _ = await self._writer.emit(
                WaitStarted,
                step_path=scope,
                kind=kind,
                ordinal=ordinal,
                name=name,
                due_at=due_at,
                details_json=None if details is None else canonical_json(details),
            )
            wait = self.waits[key] = wait_state(started)
        elif wait.kind != kind or wait.name != name:
            raise ConfigurationError(
                f"run {self.run_id}: wait {ordinal} of {scope or 'the run'} is a {wait.kind} "
                f"{wait.name!r} in the log, but the workflow now waits for a {kind} {name!r}: "
                "the code changed"
            )
        if wait.outcome is None:
            wait = await self._end(wait)
        return wait, self._payload(wait)

    async def approval(self, session_id: str, approval_id: str, details: Any) -> WaitState:
        """The approval wait of tool call ``approval_id`` (``<session>/<turn>:<call>``),
        found by that id (unique in the run) and ended if it can be: a session's tool calls
        served from its log skip their approvals, and a panel's legs ask in any order, so no
        counter could place it. It is placed in the session's own scope (``step_path`` the
        session id, ordinals in the order approvals were first asked)."""
        for wait in self.waits.values():
            if wait.kind == "approval" and wait.name == approval_id:
                break
        else:
            ordinals = [w.ordinal for w in self.waits.values() if w.step_path == session_id]
            # one asked meanwhile is recorded only once its WaitStarted is acked: a parallel
            # turn's calls asking at once must not take one ordinal
            ordinals.append(self._approvals_asked.get(session_id, -1))
            ordinal = max(ordinals) + 1
            self._approvals_asked[session_id] = ordinal
            wait, _ = await self.wait(session_id, ordinal, "approval", approval_id, None, details)
            return wait
        if wait.outcome is None:
            wait = await self._end(wait)
        return wait

    def _payload(self, wait: WaitState) -> Any:
        if wait.outcome == "timed_out":
            raise WaitTimeoutError(self.run_id, wait.kind, wait.name, wait.step_path)
        if wait.signal_id is None:
            return None
        return json.loads(self.signals[wait.signal_id].payload_json)

    async def _simulated(self, wait: WaitState) -> WaitState:
        """In a simulation: end the wait as the golden run's wait at its place ended (a timer
        fires at once, a signal is the golden's signal, copied here), or diverge."""
        source = self._calls.source
        golden = None
        if source is not None:
            golden = next(
                (
                    w
                    for w in source.waits
                    if (w.step_path, w.ordinal) == (wait.step_path, wait.ordinal)
                ),
                None,
            )
        if (
            golden is None
            or (golden.kind, golden.name) != (wait.kind, wait.name)
            or not golden.outcome
        ):
            found = "no wait" if golden is None else f"a {golden.kind} {golden.name!r}"
            raise SimulationDivergedError(
                f"run {self.run_id}: the simulated run waits for a {wait.kind} {wait.name!r} "
                f"at wait {wait.ordinal} of {wait.step_path or 'the run'}, where the golden run "
                f"has {found}" + ("" if golden is None or golden.outcome else " that never ended"),
                ordinal=None,
                miss_reason="wait-mismatch",
            )
        signal = None
        if golden.signal_id is not None and source is not None:
            sent = next(s for s in source.signals if s.signal_id == golden.signal_id)
            copy = SignalSent(
                run_id=self.run_id,
                name=sent.name,
                payload_json=sent.payload_json,
                signal_id=sent.signal_id,
                sender=sent.sender,
            )
            await self._world.submit([copy])
            signal = sent.model_copy(update={"taken": False})
            self.signals[signal.signal_id] = signal
        return await self._record_end(wait, golden.outcome, signal)

    async def _end(self, wait: WaitState) -> WaitState:
        if SIMULATING.get() is not None:
            return await self._simulated(wait)
        if wait.kind != "timer":
            signal = await self.take(signal_name(wait))
            if signal is not None:
                outcome = "received"
                if wait.kind == "approval":  # anything but {"approved": true} rejects
                    decision = json.loads(signal.payload_json)
                    approved = isinstance(decision, dict) and decision.get("approved") is True
                    outcome = "approved" if approved else "rejected"
                return await self._record_end(wait, outcome, signal)
        now = utcnow()
        if wait.due_at is not None and wait.due_at <= now:
            return await self._record_end(wait, "fired" if wait.kind == "timer" else "timed_out")
        left = None if wait.due_at is None else (wait.due_at - now).total_seconds()
        if wait.kind == "timer" and left is not None and left <= self.hold:
            await self._writer.checkpoint()  # a stop asked meanwhile ends it here instead
            await asyncio.sleep(left)
            return await self._record_end(wait, "fired")
        raise ExecutionSuspended(self.run_id, wait.due_at, (wait.label,))

    async def _record_end(
        self, wait: WaitState, outcome: str, signal: SignalState | None = None
    ) -> WaitState:
        await self._writer.emit(
            WaitEnded,
            step_path=wait.step_path,
            kind=wait.kind,
            ordinal=wait.ordinal,
            name=wait.name,
            outcome=outcome,
            signal_id=None if signal is None else signal.signal_id,
        )
        if signal is not None:
            self.signals[signal.signal_id] = signal.model_copy(update={"taken": True})
        ended = wait.model_copy(
            update={"outcome": outcome, "signal_id": None if signal is None else signal.signal_id}
        )
        self.waits[(wait.step_path, wait.ordinal)] = ended
        return ended

    async def suspend(self, suspended: ExecutionSuspended) -> bool:
        """Record ``RunSuspended``; True if a signal the run waits for arrived meanwhile (the
        run can be executed again at once)."""
        await self._writer.emit(
            RunSuspended, wake_at=suspended.wake_at, waiting_for=suspended.waiting_for
        )
        log.info(
            "run_suspended",
            run_id=self.run_id,
            wake_at=None if suspended.wake_at is None else suspended.wake_at.isoformat(),
            waiting_for=list(suspended.waiting_for),
        )
        return await self.arrived_since()


class ScopeWaits:
    """The waits of one scope (the run, a branch, a step's visit), numbered in order."""

    def __init__(self, waits: RunWaits, scope: str | None) -> None:
        self._run = waits
        self._scope = scope
        self.ordinal = 0
        """The next wait's ordinal: how many waits of the scope this execution reached."""

    async def wait(
        self, kind: str, name: str, due_at: datetime | None, details: Any = None
    ) -> tuple[WaitState, Any]:
        ordinal = self.ordinal
        self.ordinal += 1
        return await self._run.wait(self._scope, ordinal, kind, name, due_at, details)

    def due(self, timeout: float | timedelta | None, what: str) -> datetime | None:
        """A new wait's due time ``timeout`` from now (a resume finds the recorded one)."""
        if timeout is None:
            return None
        return utcnow() + timedelta(seconds=seconds(timeout, what))

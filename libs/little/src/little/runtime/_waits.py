"""Durable waits: timers, signals and approvals that hold no process while they wait.

A wait is recorded before it waits (``WaitStarted``: its kind, its place, its due time) and
when it ends (``WaitEnded``: fired, received, timed out, approved, rejected). A wait that
cannot end now lets go of the run: the execution records ``RunSuspended`` and ends
(``ExecutionSuspended``), so the run is ``waiting`` and nothing holds it; whoever wakes it
(``follow``, ``little worker``, the resume coordinator) executes it again at its due time or
when a signal it waits for arrives, and the replay reaches the same wait and ends it. Timers
due within ``hold`` seconds are waited for in the process instead: a suspension and a claim
cost more than a short sleep.

Signals come from outside the run's writers (``send_signal``): ``SignalSent`` stands outside
the run's seq chain, like a claim, and is kept in the run's log until a wait of that name
takes it (the oldest first). Taking it is recorded (``WaitEnded.signal_id``), so a resume and
a replay give each wait the same signal without its sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import socket
import uuid
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from little._canonical import canonical_json
from little.errors import ConfigurationError
from little.events import RunSuspended, SignalSent, WaitEnded, WaitStarted
from little.log import Position
from little.logs import get_logger
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
    SignalRefusedError,
    SimulationDivergedError,
    WaitTimeoutError,
)
from little.runtime._recorded import SIMULATING

if TYPE_CHECKING:
    from little._world import World
    from little.runtime._registry import AnyWorkflow
    from little.runtime._runner import Execution, RunResult

log = get_logger("little.runtime")

HOLD_SECONDS = float(os.environ.get("LITTLE_WAIT_HOLD_SECONDS", "1.0"))
"""Timers due within this many seconds are slept in the process; longer waits suspend."""


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

    def __init__(self, execution: Execution, hold: float) -> None:
        self._x = execution
        self.hold = hold
        replayed = execution.replayed
        self.waits: dict[tuple[str | None, int], WaitState] = {
            (w.step_path, w.ordinal): w for w in replayed.waits
        }
        self.signals: dict[str, SignalState] = {s.signal_id: s for s in replayed.signals}
        self.raised: ExecutionSuspended | None = None
        """The last suspension a wait raised: set until the execution ends suspended (a
        workflow that catches it and goes on would complete past a wait it never took)."""
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
        for item in self._x.world.read_run(self._x.run_id, after=last):
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
        x = self._x
        key = (scope, ordinal)
        wait = self.waits.get(key)
        if wait is None:
            started, _ = await x.writer.emit(
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
                f"run {x.run_id}: wait {ordinal} of {scope or 'the run'} is a {wait.kind} "
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
            ordinal = max(ordinals, default=-1) + 1
            wait, _ = await self.wait(session_id, ordinal, "approval", approval_id, None, details)
            return wait
        if wait.outcome is None:
            wait = await self._end(wait)
        return wait

    def _payload(self, wait: WaitState) -> Any:
        if wait.outcome == "timed_out":
            raise WaitTimeoutError(self._x.run_id, wait.kind, wait.name, wait.step_path)
        if wait.signal_id is None:
            return None
        return json.loads(self.signals[wait.signal_id].payload_json)

    async def _simulated(self, wait: WaitState) -> WaitState:
        """In a simulation: end the wait as the golden run's wait at its place ended (a timer
        fires at once, a signal is the golden's signal, copied here), or diverge."""
        source = self._x.agent_calls.source
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
                f"run {self._x.run_id}: the simulated run waits for a {wait.kind} {wait.name!r} "
                f"at wait {wait.ordinal} of {wait.step_path or 'the run'}, where the golden run "
                f"has {found}" + ("" if golden is None or golden.outcome else " that never ended"),
                ordinal=None,
                miss_reason="wait-mismatch",
            )
        signal = None
        if golden.signal_id is not None and source is not None:
            sent = next(s for s in source.signals if s.signal_id == golden.signal_id)
            copy = SignalSent(
                run_id=self._x.run_id,
                name=sent.name,
                payload_json=sent.payload_json,
                signal_id=sent.signal_id,
                sender=sent.sender,
            )
            await self._x.world.submit([copy])
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
            await self._x.writer.checkpoint()  # a stop asked meanwhile ends it here instead
            await asyncio.sleep(left)
            return await self._record_end(wait, "fired")
        self.raised = ExecutionSuspended(self._x.run_id, wait.due_at, (wait.label,))
        raise self.raised

    async def _record_end(
        self, wait: WaitState, outcome: str, signal: SignalState | None = None
    ) -> WaitState:
        await self._x.writer.emit(
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
        await self._x.writer.emit(
            RunSuspended, wake_at=suspended.wake_at, waiting_for=suspended.waiting_for
        )
        log.info(
            "run_suspended",
            run_id=self._x.run_id,
            wake_at=None if suspended.wake_at is None else suspended.wake_at.isoformat(),
            waiting_for=list(suspended.waiting_for),
        )
        return await self.arrived_since()


class ScopeWaits:
    """The waits of one scope (the run, a branch, a step's visit), numbered in order."""

    def __init__(self, execution: Execution, scope: str | None) -> None:
        self._x = execution
        self._scope = scope
        self.ordinal = 0
        """The next wait's ordinal: how many waits of the scope this execution reached."""

    async def wait(
        self, kind: str, name: str, due_at: datetime | None, details: Any = None
    ) -> tuple[WaitState, Any]:
        ordinal = self.ordinal
        self.ordinal += 1
        return await self._x.waits.wait(self._scope, ordinal, kind, name, due_at, details)

    def due(self, timeout: float | timedelta | None, what: str) -> datetime | None:
        """A new wait's due time ``timeout`` from now (a resume finds the recorded one)."""
        if timeout is None:
            return None
        return utcnow() + timedelta(seconds=seconds(timeout, what))


# -- signals from outside --------------------------------------------------------------------


def sender() -> str:
    return f"{os.environ.get('USER', 'user')}@{socket.gethostname()}"


def check_signal(state: MaterializedRunState, run_id: str, name: str, where: str) -> None:
    """Refuse a signal to a run that cannot take it (``SignalRefusedError``)."""
    if state.last_position is None or state.workflow is None:
        raise SignalRefusedError(f"run {run_id} is unknown in {where}: no signal was recorded")
    if state.terminal:
        raise SignalRefusedError(
            f"run {run_id} has already ended ({state.status}) in {where}: no signal was recorded"
        )
    if not name or name == "approval:":
        raise SignalRefusedError(f"run {run_id}: a signal needs a name")


def check_approval(state: MaterializedRunState, run_id: str, call_id: str, where: str) -> None:
    """Refuse a decision on an approval the run never asked for, or already has."""
    check_signal(state, run_id, f"approval:{call_id}", where)
    asked = [w for w in state.waits if w.kind == "approval" and w.name == call_id]
    if not asked:
        raise SignalRefusedError(
            f"run {run_id} asked for no approval of call {call_id!r} in {where}: "
            "nothing was recorded"
        )
    if all(w.outcome is not None for w in asked) or state.kept_signal(f"approval:{call_id}"):
        raise SignalRefusedError(
            f"run {run_id}: call {call_id!r} was already decided: nothing was recorded"
        )


def payload_json(data: Any) -> str:
    """A signal's payload as canonical JSON (``SignalRefusedError`` if it is not JSON)."""
    try:
        return canonical_json(data)
    except (TypeError, ValueError) as exc:
        raise SignalRefusedError(f"a signal's payload must be JSON: {exc}") from exc


def signal_event(
    run_id: str, name: str, data: Any, *, signal_id: str | None = None, by: str | None = None
) -> SignalSent:
    return SignalSent(
        run_id=run_id,
        name=name,
        payload_json=payload_json(data),
        signal_id=signal_id or str(uuid.uuid4()),
        sender=by or sender(),
    )


def check_decision(run_id: str, name: str, data: Any) -> None:
    """An approval decision is ``{"approved": true|false, ...}``: anything else is refused
    (a payload ``"false"`` or ``{"approved": "no"}`` would otherwise be read one way or the
    other)."""
    if not isinstance(data, dict) or not isinstance(data.get("approved"), bool):
        raise SignalRefusedError(
            f'run {run_id}: {name} needs a decision {{"approved": true|false, "reason": '
            f"...}}, not {payload_json(data)[:80]}: nothing was recorded"
        )


def prepare_signal(
    state: MaterializedRunState,
    run_id: str,
    name: str,
    data: Any = None,
    *,
    where: str,
    signal_id: str | None = None,
    by: str | None = None,
) -> SignalSent:
    """The ``SignalSent`` that delivers ``name`` with ``data`` to the run ``state`` folds, once
    checked: ``SignalRefusedError`` (naming ``where`` the run was looked for) for an unknown or
    finished run, a payload that is not JSON, or an approval (``approval:<call id>``) the run
    never asked for or already has."""
    event = signal_event(run_id, name, data, signal_id=signal_id, by=by)
    if name.startswith("approval:"):
        check_decision(run_id, name, data)
        check_approval(state, run_id, name[len("approval:") :], where)
    else:
        check_signal(state, run_id, name, where)
    return event


async def send_signal(
    world: World,
    run_id: str,
    name: str,
    data: Any = None,
    *,
    signal_id: str | None = None,
    by: str | None = None,
) -> SignalSent:
    """Deliver signal ``name`` with JSON ``data`` to ``run_id``: appended to its log (kept
    until a wait takes it; a run waiting for it can be woken). Raises ``SignalRefusedError``
    for an unknown or finished run or a payload that is not JSON; nothing is recorded then.
    The same ``signal_id`` sent twice is recorded once (the second is ignored by the fold)."""
    from little.runtime._runner import fold_run_off_loop

    state = await fold_run_off_loop(world, run_id)
    event = prepare_signal(
        state, run_id, name, data, where=world.description, signal_id=signal_id, by=by
    )
    await world.submit([event])
    log.info("signal_sent", run_id=run_id, name=name, signal_id=event.signal_id)
    return event


def approval_decision(approved: bool, reason: str = "", by: str | None = None) -> dict[str, Any]:
    """The payload of the signal ``approval:<call id>`` that answers an approval."""
    return {"approved": approved, "reason": reason, "by": by or sender()}


async def decide_approval(
    world: World,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    reason: str = "",
    by: str | None = None,
) -> SignalSent:
    """Approve or reject the tool call ``call_id`` a run waits on (``little approve`` /
    ``little reject``): a signal ``approval:<call_id>`` whose payload is the decision."""
    decision = approval_decision(approved, reason, by)
    return await send_signal(world, run_id, f"approval:{call_id}", decision, by=by)


# -- waking ----------------------------------------------------------------------------------


def can_wake(world: World, state: MaterializedRunState, now: datetime) -> bool:
    """Whether a waiting run has a wait that can end now: its own, or a waiting sub-run's
    (a worker thread: sub-runs are folded from the log)."""
    from little.replay import fold_run

    if state.can_wake(now):
        return True
    if state.status != "waiting":
        return False
    for sub in state.sub_runs:  # suspended inside a sub-run: the sub-run is waiting too
        sub_state, _, _ = fold_run(world, sub.sub_run_id)
        if sub_state.status == "waiting" and can_wake(world, sub_state, now):
            return True
    return False


async def follow(
    world: World,
    run_id: str,
    workflow: AnyWorkflow | None = None,
    *,
    poll: float = 0.5,
    hold: float = HOLD_SECONDS,
) -> RunResult:
    """Resume ``run_id`` whenever one of its waits can end, until it ends (or a failure):
    sleep until its next due time, and look for the signals it waits for every ``poll``
    seconds. Nothing is held meanwhile: this process may exit, and another (``little
    resume``, ``little worker``, the coordinator) takes the run up. A run another process is
    executing (a worker woke it) is left to it and watched until it ends or waits again; the
    first look resumes a run that is not waiting (to continue it here)."""
    from little.runtime._runner import fold_run_off_loop, resume

    first = True
    while True:
        state = await fold_run_off_loop(world, run_id)
        now = utcnow()
        waiting = state.status == "waiting"
        if (waiting and await asyncio.to_thread(can_wake, world, state, now)) or (
            first and not waiting
        ):
            result = await resume(world, run_id, workflow, hold=hold)
            if result.status != "waiting":
                return result
            first = False
            continue
        if state.terminal:
            return await resume(world, run_id, workflow, hold=hold)  # its outcome, from the log
        # waiting, or executed by another process (a worker that woke it): look again later
        first = False
        pause = poll
        if waiting and state.wake_at is not None:
            pause = min(poll, max(0.0, (state.wake_at - now).total_seconds()))
        await asyncio.sleep(pause)


class Waker:
    """Wakes the waiting runs of a world (``little worker``): reads the log as it grows,
    keeps the top-level runs whose last record says they wait (``RunSuspended``) or may have
    been woken (``SignalSent``), and resumes each one whose wait can end now."""

    def __init__(self, world: World, *, hold: float = HOLD_SECONDS) -> None:
        self.world = world
        self.hold = hold
        self._next: dict[int, int] = {}
        self._candidates: set[str] = set()
        self._busy: dict[str, asyncio.Task[RunResult]] = {}

    def _scan(self) -> None:
        """Read what the log gained since the last scan (a worker thread)."""
        log_ = self.world.log
        for partition, end in sorted(log_.end_offsets().items()):
            offset = self._next.get(partition, 0)
            while offset < end:
                batch = log_.read_partition(partition, offset, limit=1000)
                for record in batch:
                    kind = record.header("little.type")
                    if kind in (b"RunSuspended", b"SignalSent"):
                        self._candidates.add(record.run_id.split("~", 1)[0])
                offset = batch[-1].offset + 1 if batch else offset + 1000
            self._next[partition] = max(offset, end)

    def _ready(self, now: datetime) -> tuple[list[str], datetime | None]:
        """The candidates that can go on now, and the earliest due time of the others."""
        from little.replay import fold_run

        self._scan()
        ready: list[str] = []
        next_due: datetime | None = None
        for run_id in sorted(self._candidates):
            state, _, _ = fold_run(self.world, run_id)
            if state.status != "waiting":
                if state.terminal:
                    self._candidates.discard(run_id)
                continue
            if can_wake(self.world, state, now):
                ready.append(run_id)
            elif state.wake_at is not None and (next_due is None or state.wake_at < next_due):
                next_due = state.wake_at
        return ready, next_due

    async def wake_ready(self) -> tuple[list[asyncio.Task[RunResult]], datetime | None]:
        """Resume every waiting run whose wait can end now, each in a task of its own (a run
        that works for an hour after its wake-up delays no other); returns the tasks started
        and the earliest due time among the runs still waiting. A run still executing from an
        earlier wake-up is not resumed again."""
        from little.runtime._runner import resume

        ready, next_due = await asyncio.to_thread(self._ready, utcnow())
        started: list[asyncio.Task[RunResult]] = []
        for run_id in ready:
            if run_id in self._busy:
                continue
            task = asyncio.ensure_future(resume(self.world, run_id, hold=self.hold))
            self._busy[run_id] = task
            task.add_done_callback(partial(self._woken, run_id))
            started.append(task)
        return started, next_due

    def _woken(self, run_id: str, task: asyncio.Task[RunResult]) -> None:
        self._busy.pop(run_id, None)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("wake_failed", run_id=run_id, error=f"{type(error).__name__}: {error}")
        else:
            log.info("run_woken", run_id=run_id, status=task.result().status)

    async def serve(self, stop: asyncio.Event, *, poll: float = 0.5) -> None:
        """Wake runs until ``stop`` is set: at each due time, and every ``poll`` seconds for
        signals."""
        while not stop.is_set():
            _, next_due = await self.wake_ready()
            pause = poll
            if next_due is not None:
                pause = min(poll, max(0.0, (next_due - utcnow()).total_seconds()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=pause)
        if self._busy:  # the runs it woke go on to their next boundary, then it leaves
            await asyncio.gather(*self._busy.values(), return_exceptions=True)

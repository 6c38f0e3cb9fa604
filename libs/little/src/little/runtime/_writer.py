"""The run writer: assigns seq and epoch, appends write-ahead, and holds the crash hooks.

One writer per execution of a run. Every event it appends is acked by the log before
``emit`` returns. An append with an unknown outcome ends the writer (the exception
propagates and nothing else is written): the next resume reads what actually landed.
"""

from __future__ import annotations

import os
import signal
import socket
from typing import Any, TypeVar

from little.events import Event, RunCancelled, RunCompleted, RunFailed
from little.log import Position
from little.runtime._control import RunControl

E = TypeVar("E", bound=Event)

PRODUCER = f"little/{socket.gethostname()}/{os.getpid()}"


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


class FaultInjection:
    """Real crashes for crash tests: SIGKILL this process at a chosen point.

    ``LITTLE_CRASH_AFTER_EVENT=k``: right after the k-th event (0-based) this process appends
    is acked. ``LITTLE_CRASH_AFTER_CALL=n``: right after the n-th model or tool invocation
    (0-based) returns, before its terminal event is written. Unset in normal use.
    """

    def __init__(self) -> None:
        self.after_event = _env_int("LITTLE_CRASH_AFTER_EVENT")
        self.after_call = _env_int("LITTLE_CRASH_AFTER_CALL")
        self.events = 0
        self.calls = 0

    def event_acked(self) -> None:
        if self.after_event is not None and self.events == self.after_event:
            os.kill(os.getpid(), signal.SIGKILL)
        self.events += 1

    def call_returned(self) -> None:
        if self.after_call is not None and self.calls == self.after_call:
            os.kill(os.getpid(), signal.SIGKILL)
        self.calls += 1


FAULTS = FaultInjection()


_TERMINAL = (RunCompleted, RunFailed, RunCancelled)


class RunWriter:
    """Appends one run's events with contiguous seq under one epoch.

    With a ``RunControl`` (set by ``execute``), a requested stop lets the next event land and
    then raises ``ExecutionStopped``; later appends are refused. A cancel appends
    ``RunCancelled`` before raising, unless this writer already ended the run.
    """

    def __init__(
        self,
        world: Any,
        run_id: str,
        epoch: int,
        next_seq: int,
        control: RunControl | None = None,
    ) -> None:
        self.world = world
        self.run_id = run_id
        self.epoch = epoch
        self.next_seq = next_seq
        self.control = control
        self.finished = False
        """True once this writer appended the run's terminal event."""
        self._pending: list[Event] = []

    def emit(self, cls: type[E], **fields: Any) -> tuple[E, Position]:
        """Build, append and wait for the ack of one event; returns it and its position.

        Events deferred before it are appended in the same batch, ahead of it.
        """
        if self.control is not None and self.control.halted:
            self.checkpoint()
        event, position = self._append(cls, **fields)
        if not self.finished:
            self.checkpoint()  # a stop requested while this event was being made: stop here
        return event, position

    def defer(self, cls: type[E], **fields: Any) -> E:
        """Build an event now (it takes the next seq) and append it with the next ``emit``.

        For the terminal record of a call (a model response, a tool result): the next
        write-ahead record carries it to the log in the same acked batch, so a recorded call
        costs one round trip, not two. If the process dies first, the call has no terminal
        event in the log and runs again on resume, exactly as if it had died before writing
        it: nothing is ever acted on before the log holds it.
        """
        if self.control is not None and self.control.halted:
            self.checkpoint()
        event = self._new(cls, fields)
        self._pending.append(event)
        if self.control is not None and self.control.requested:
            self.checkpoint()  # a stop lands what is in hand (this result) and stops here
        return event

    def flush(self) -> list[Position]:
        """Append and wait for the deferred events, if any; returns their positions."""
        if not self._pending:
            return []
        batch, self._pending = self._pending, []
        positions: list[Position] = self.world.append(batch)
        for _ in batch:
            FAULTS.event_acked()
        return positions

    def checkpoint(self) -> None:
        """Raise ``ExecutionStopped`` if a stop was requested (recording a cancel first)."""
        control = self.control
        if control is None or not control.requested:
            return
        control.halted = True
        if control.cancelled and not self.finished:
            self._append(RunCancelled, reason=control.reason or "")
        else:
            self.flush()  # results already in hand are recorded, never paid for again
        raise control.stopped(self.run_id)

    def _new(self, cls: type[E], fields: dict[str, Any]) -> E:
        """The event of this run and epoch with the next seq."""
        event = cls(
            run_id=self.run_id, seq=self.next_seq, epoch=self.epoch, producer=PRODUCER, **fields
        )
        self.next_seq += 1
        return event

    def _append(self, cls: type[E], **fields: Any) -> tuple[E, Position]:
        """Append the deferred events and a new one in one batch; wait for the ack."""
        event = self._new(cls, fields)
        self._pending.append(event)
        position = self.flush()[-1]
        if isinstance(event, _TERMINAL):
            self.finished = True
        return event, position

"""The run writer: assigns seq and epoch, appends write-ahead, and calls the crash hooks.

One writer per execution of a run. ``emit`` takes the next seq and submits the event (with
every event deferred before it) with no ``await`` in between, so submit order is seq order
even when parallel branches of the run emit at once; then it awaits the ack. An append that
fails (an unknown outcome above all) ends the writer: nothing more is submitted, and the next
resume reads what actually landed.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Any, TypeVar

from little.errors import EventValidationError, LogError
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    Event,
    ModelResponded,
    RunCancelled,
    RunCompleted,
    RunFailed,
    ToolCallFailed,
    ToolCallSucceeded,
    build_event,
)
from little.log import PendingAppend, Position
from little.runtime._control import RunControl
from little.runtime._errors import raised_again
from little.runtime._faults import FAULTS

if TYPE_CHECKING:
    from little._world import World

E = TypeVar("E", bound=Event)

_producer: str | None = None


def producer() -> str:
    """This process's name on the events it writes (``little/<host>/<pid>``): taken at the
    first write, and again in a forked child (its own pid), not when ``little`` is imported."""
    global _producer
    if _producer is None:
        _producer = f"little/{socket.gethostname()}/{os.getpid()}"
    return _producer


def _forget_producer() -> None:
    global _producer
    _producer = None


os.register_at_fork(after_in_child=_forget_producer)


MAX_EVENT_TEXT = 900_000
"""The most bytes (UTF-8, as Avro writes strings) an event's text fields may hold together.
The broker's ``message.max.bytes`` (and librdkafka's, 1,000,000 by default) bounds a record: a
payload that can be large has an ``*_ref`` field and goes to the artifact store past 64 KiB
(``store_json``), so an event this large has a field without one (tool arguments, an error
message, a recorded value). It is refused here, before it takes a seq, as an
``EventValidationError`` (terminal: the step fails saying so) instead of being sent and
refused by the broker as a ``LogError``, which a resume would meet again and again. An error
``message`` is cut to fit instead (marked), so the failure itself can always be recorded."""


def _check_size(run_id: str, cls: type[Event], fields: dict[str, Any]) -> None:
    # a character is at most 4 bytes of UTF-8: most events are far below the bound by their
    # length alone, without encoding anything
    chars = 0
    for v in fields.values():  # (a loop: a generator per event was a measurable cost)
        if isinstance(v, str):
            chars += len(v)
    if 4 * chars <= MAX_EVENT_TEXT:
        return
    sizes = {k: len(v.encode("utf-8")) for k, v in fields.items() if isinstance(v, str)}
    total = sum(sizes.values())
    if total <= MAX_EVENT_TEXT:
        return
    message = fields.get("message")
    if isinstance(message, str) and total - sizes["message"] < MAX_EVENT_TEXT - 100:
        keep = MAX_EVENT_TEXT - 100 - (total - sizes["message"])
        cut = message.encode("utf-8")[:keep].decode("utf-8", "ignore")
        fields["message"] = f"{cut} [cut: {sizes['message']:,} bytes in all]"
        return
    field, size = max(sizes.items(), key=lambda kv: kv[1])
    raise EventValidationError(
        f"run {run_id}: a {cls.event_type} event of over {MAX_EVENT_TEXT:,} bytes is not "
        f"written (its {field} holds {size:,}; the broker takes records of about 1 MB, and "
        f"{field} has no artifact ref): make it smaller"
    )


_ENVELOPE = frozenset({"run_id", "seq", "epoch", "producer"})
"""What the writer sets on every event it builds (never its callers)."""
_TERMINAL = (RunCompleted, RunFailed, RunCancelled)
_ENDS = (RunFailed, RunCancelled)
_RESULTS = (ModelResponded, ToolCallSucceeded, ToolCallFailed, AgentCallSettled)
"""The results of calls: after an integrity error, only those of calls already in flight."""
_AGENT_CALL = (AgentCallAdmitted, AgentCallSettled)


class RunWriter:
    """Appends one run's events with contiguous seq under one epoch.

    With a ``RunControl`` (set by ``execute``), a requested stop lets the next event land and
    then raises ``ExecutionStopped``; later appends are refused. A cancel appends
    ``RunCancelled`` before raising, unless this writer already ended the run.
    """

    def __init__(
        self,
        world: World,
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
        """True once this writer's terminal event is acked."""
        self._ending = False
        """True once this writer submitted the run's terminal event."""
        self._pending: list[Event] = []
        self._in_flight: set[PendingAppend] = set()
        self._last: PendingAppend | None = None
        """The last append submitted: the next one is refused if it failed (``after``)."""
        self._broken: BaseException | None = None
        self._producer = producer()  # a writer lives in one process
        self.refused: BaseException | None = None
        """The integrity error that finished this execution (``Execution.integrity``): nothing
        new is recorded after it. ``emit`` refuses all but the run's end (``RunFailed``,
        ``RunCancelled``), ``defer`` all but the results of calls already in flight (they land
        with that end, if any: a draining group's cost is recorded)."""
        self.agent_events: list[Event] = []
        """The agent.call.* events of this writer the log acknowledged, in seq order: with the
        state as claimed they give the run's replay envelope at the end (no fold, no read)."""

    async def emit(self, cls: type[E], **fields: Any) -> tuple[E, Position]:
        """Build one event, append it (after the deferred ones) and await its ack; returns it
        and its position."""
        return await self.emit_fields(cls, fields)

    async def emit_fields(self, cls: type[E], fields: dict[str, Any]) -> tuple[E, Position]:
        """``emit`` with the fields as a dict the writer takes over (and adds the envelope
        to): a caller that builds one passes it on without re-packing it."""
        if self.refused is not None and cls not in _ENDS:
            raise raised_again(self.refused) from self.refused
        if self.control is not None and self.control.halted:
            await self.checkpoint()
        event = self._new(cls, fields)
        self._pending.append(event)
        positions = await self._flush()
        control = self.control
        if control is not None and control.requested and not self.finished:
            await self.checkpoint()  # a stop requested while this event was in flight
        return event, positions[-1]

    def defer(self, cls: type[E], **fields: Any) -> E:
        """Build an event now (it takes the next seq) and append it with the next ``emit`` or
        ``flush``.

        For the terminal record of a call (a model response, a tool result) and for records
        nothing acts on before the run's next acked event (a step's start, a recorded value):
        the next write-ahead record carries it to the log in the same acked batch, so a
        recorded call costs one round trip, not two. If the process dies first, the log holds
        neither, exactly as if it had died before making it (docs/architecture.md, "What is
        deferred, and why that is safe").
        """
        return self.defer_fields(cls, fields)

    def defer_fields(self, cls: type[E], fields: dict[str, Any]) -> E:
        """``defer`` with the fields as a dict the writer takes over (``emit_fields``)."""
        if self.refused is not None and cls not in _RESULTS:
            raise raised_again(self.refused) from self.refused
        control = self.control
        if control is not None and control.halted:
            raise control.stopped(self.run_id)
        event = self._new(cls, fields)
        self._pending.append(event)
        if control is not None and control.requested:
            # a stop lands what is in hand (this result) and stops here: submitted now, and
            # awaited by the execution (``settled``) before it ends
            control.halted = True
            if control.cancelled and not self._ending:
                self._pending.append(self._new(RunCancelled, {"reason": control.reason or ""}))
            _, pending = self._submit()
            if pending is not None:  # awaited by ``settled``
                pending.add_done_callback(self._forget)
            raise control.stopped(self.run_id)
        return event

    async def flush(self) -> list[Position]:
        """Append and await the deferred events, if any; returns their positions."""
        positions = await self._flush()
        control = self.control
        if control is not None and control.requested and not self.finished:
            await self.checkpoint()
        return positions

    async def settled(self) -> None:
        """Wait until every append this writer submitted is acked or failed (an execution
        does not end while its appends are in flight)."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
            for pending in list(self._in_flight):
                if pending.settled:
                    self._forget(pending)

    def _forget(self, pending: PendingAppend) -> None:
        self._in_flight.discard(pending)
        error = pending.error()  # seen, not reported as lost
        if error is not None and self._broken is None:
            self._broken = error

    async def checkpoint(self) -> None:
        """Raise ``ExecutionStopped`` if a stop was requested (recording a cancel first)."""
        control = self.control
        if control is None or not control.requested:
            return
        control.halted = True
        if control.cancelled and not self._ending:
            self._pending.append(self._new(RunCancelled, {"reason": control.reason or ""}))
        await self._flush()  # results already in hand are recorded, never paid for again
        raise control.stopped(self.run_id)

    def _new(self, cls: type[E], fields: dict[str, Any]) -> E:
        """The event of this run and epoch with the next seq."""
        if not _ENVELOPE.isdisjoint(fields):
            raise TypeError(f"{cls.__name__}: the writer sets {sorted(_ENVELOPE & fields.keys())}")
        _check_size(self.run_id, cls, fields)
        fields["run_id"] = self.run_id
        fields["seq"] = self.next_seq
        fields["epoch"] = self.epoch
        fields["producer"] = self._producer
        # built from the runtime's own values, validated only where one is not of its
        # field's type already (``build_event``: the same event either way)
        event = build_event(cls, fields)
        self.next_seq += 1
        if isinstance(event, _TERMINAL):
            self._ending = True
        return event

    def _submit(self) -> tuple[list[Event], PendingAppend | None]:
        """Submit the deferred events now, with no await (seq order is submit order)."""
        # (A failure settled on the backend's thread before its awaiter heard of it is caught
        # by the backend itself, under its lock: ``after`` the previous append, refused.)
        if self._broken is not None:
            raise LogError(
                f"run {self.run_id}: this writer stopped after a failed append "
                f"({self._broken}); a resume continues from what landed"
            )
        if not self._pending:
            return [], None
        batch, self._pending = self._pending, []
        try:
            pending = self.world.submit(batch, after=self._last)
        except BaseException as exc:
            self._broken = exc
            raise
        self._last = pending
        self._in_flight.add(pending)
        return batch, pending

    async def _flush(self) -> list[Position]:
        """Submit the deferred events and await their ack."""
        batch, pending = self._submit()
        if pending is None:
            return []
        try:
            positions = await pending
        except asyncio.CancelledError:
            pending.add_done_callback(self._forget)  # still in flight: ``settled`` waits
            raise
        except BaseException as exc:
            self._in_flight.discard(pending)
            self._broken = exc
            raise
        self._in_flight.discard(pending)
        landed = [e for e in batch if isinstance(e, _AGENT_CALL)]
        if landed:
            # concurrent flushes (parallel branches, a panel's legs) hear of their acks in any
            # order: keep seq order, which is the log's
            out_of_order = bool(self.agent_events) and self.agent_events[-1].seq > landed[0].seq
            self.agent_events += landed
            if out_of_order:
                self.agent_events.sort(key=lambda e: e.seq)
        FAULTS.events_acked(len(batch))
        if isinstance(batch[-1], _TERMINAL):
            self.finished = True
        return positions

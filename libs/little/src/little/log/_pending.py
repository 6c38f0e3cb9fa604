"""Appends in flight: what ``EventLog.submit`` returns, and how backends settle them in batches.

A backend completes appends on its own thread (Kafka's delivery pump, the embedded committer).
An append submitted on an event loop is resolved on that loop, one ``call_soon_threadsafe`` per
batch of completions (not per append: each wakes the loop); a blocking ``append`` waits on a
lock. Nothing here does I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any, TypeAlias

from little.errors import AppendOutcomeUnknownError, ConfigurationError
from little.log._records import Position

Outcome: TypeAlias = "list[Position] | BaseException"


class PendingAppend:
    """One durable append on its way: ``await`` it on the loop that submitted it (``submit``),
    or ``wait()`` for it from a thread (``append``). It resolves to the records' positions, or
    raises what the log raised (``AppendOutcomeUnknownError``: the writer must stop)."""

    __slots__ = (
        "_awaited",
        "_callbacks",
        "_error",
        "_future",
        "_lock",
        "_loop",
        "_positions",
        "_resolved",
        "_waiters",
        "doomed",
        "holds_pump",
        "serve",
        "submitted_at",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.submitted_at = time.monotonic()
        self._loop = loop
        self._future: asyncio.Future[list[Position]] | None = (
            loop.create_future() if loop is not None else None
        )
        """The first awaiter's future. An awaiter's cancellation cancels only its own future
        (no ``asyncio.shield`` per append): a later awaiter gets one of its own
        (``_waiters``), and the outcome itself is kept here, never in a future."""
        self._awaited = False
        self._waiters: list[asyncio.Future[list[Position]]] | None = None
        self._callbacks: list[Callable[[PendingAppend], object]] | None = None
        self._resolved = False
        """Set on the loop once the outcome reached it (``_resolve_on_loop``)."""
        self._lock: threading.Lock | None = None
        if loop is None:
            self._lock = threading.Lock()
            self._lock.acquire()  # released once settled
        self._positions: list[Position] | None = None
        self._error: BaseException | None = None
        self.doomed = False
        """Set by the backend, under its own lock, the moment it knows this append failed (or
        will not be sent): a later append of the run submitted ``after`` it is refused."""
        self.holds_pump = False
        self.serve: Callable[[PendingAppend], None] | None = None
        """Set by a backend whose blocking append's thread serves its own completion while it
        waits (Kafka: it polls the producer for its delivery reports), called by ``wait``."""

    @property
    def blocking(self) -> bool:
        """A blocking ``append``'s (waited for by a thread, not awaited on a loop)."""
        return self._loop is None

    @property
    def settled(self) -> bool:
        """Whether the outcome is in (it may not have reached the loop yet)."""
        return self._positions is not None or self._error is not None

    @classmethod
    def on_running_loop(cls) -> PendingAppend:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ConfigurationError(
                "EventLog.submit needs a running event loop in this thread (it returns an "
                "awaitable); outside one, use EventLog.append"
            ) from None
        return cls(loop)

    @classmethod
    def done(cls, positions: list[Position]) -> PendingAppend:
        """An awaited append that needs no I/O (no records): already resolved."""
        pending = cls.on_running_loop()
        pending._positions = positions
        pending._resolved = True
        return pending

    def __await__(self) -> Generator[Any, None, list[Position]]:
        loop = self._loop
        if loop is None:
            raise ConfigurationError("a blocking append is waited for with wait(), not awaited")
        if self.settled:  # in already: no trip through the loop
            return self._outcome()
        future = self._future
        if self._awaited or future is None:  # (None: never, on a loop)
            # awaited again (another task, or after its awaiter was cancelled): a future of
            # its own, so one awaiter's cancellation never reaches another
            future = loop.create_future()
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(future)
        self._awaited = True
        return (yield from future.__await__())

    def _outcome(self) -> list[Position]:
        if self._error is not None:
            raise self._error
        assert self._positions is not None
        return self._positions

    def error(self) -> BaseException | None:
        """The failure, once settled (None if it succeeded or is not in yet); reading it marks
        the outcome as seen, so a failure nobody awaited is not reported as lost (a future is
        resolved only for an awaiter: one nobody awaits is never resolved)."""
        return self._error

    def add_done_callback(self, fn: Callable[[PendingAppend], object]) -> None:
        """Call ``fn(self)`` on the submitting loop once settled (appends awaited on a loop),
        whether or not an awaiter of it was cancelled."""
        loop = self._loop
        if loop is None:
            raise ConfigurationError("a blocking append has no loop to call back on")
        if self._resolved:
            loop.call_soon(fn, self)
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(fn)

    def wait(self, timeout: float | None = None) -> list[Position]:
        """Block until settled (blocking appends only); ``AppendOutcomeUnknownError`` if it
        takes longer than ``timeout``."""
        if self._lock is None:
            raise ConfigurationError("an append submitted on an event loop must be awaited")
        serve, self.serve = self.serve, None
        if serve is not None:  # this thread waits anyway: it serves its own completion
            serve(self)  # (called when settled already too: it releases what it holds)
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise AppendOutcomeUnknownError(
                f"append not settled within {timeout:.0f}s: it may or may not have landed"
            )
        self._lock.release()
        if self._error is not None:
            raise self._error
        assert self._positions is not None
        return self._positions

    def _settle_here(self, outcome: Outcome) -> None:
        """Record the outcome (any thread, once: ``InFlight.settle`` guards it); a blocking
        waiter is released at once."""
        if isinstance(outcome, BaseException):
            self._error = outcome
        else:
            self._positions = outcome
        if self._lock is not None:
            self._lock.release()


class InFlight:
    """The appends of one backend that are not settled yet, in submit order.

    ``settle`` resolves a batch of them from the backend's thread; ``stats`` says how many are
    waiting and for how long the oldest has (a stalled broker shows here first).
    """

    def __init__(self, on_settle: Callable[[PendingAppend], object] | None = None) -> None:
        self._items: dict[int, PendingAppend] = {}
        self._on_settle = on_settle

    def add(self, pending: PendingAppend) -> None:
        self._items[id(pending)] = pending

    def __bool__(self) -> bool:
        return bool(self._items)

    def settle(self, batch: Iterable[tuple[PendingAppend, Outcome]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[PendingAppend, Outcome]]] = {}
        for pending, outcome in batch:
            if self._items.pop(id(pending), None) is None:
                continue  # settled already (two threads completed it): the first one wins
            if isinstance(outcome, BaseException):
                pending.doomed = True
            pending._settle_here(outcome)
            if self._on_settle is not None:
                self._on_settle(pending)
            loop = pending._loop
            if loop is not None:  # resolved there (an awaiter may have taken it already)
                by_loop.setdefault(loop, []).append((pending, outcome))
        here = asyncio._get_running_loop()  # settled on a loop's own thread (an idle wait)
        for loop, items in by_loop.items():
            if loop is here:
                _resolve_on_loop(items)
                continue
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits these
                loop.call_soon_threadsafe(_resolve_on_loop, items)

    def stats(self) -> tuple[int, float]:
        """(appends waiting, seconds the oldest has waited; 0 with none)."""
        for _ in range(3):
            try:
                oldest = next(iter(self._items.values()), None)
                count = len(self._items)
            except RuntimeError:  # changed size while read from another thread: read again
                continue
            age = 0.0 if oldest is None else time.monotonic() - oldest.submitted_at
            return count, age
        return len(self._items), 0.0

    def pending(self) -> list[PendingAppend]:
        return list(self._items.values())


def _resolve_on_loop(items: list[tuple[PendingAppend, Outcome]]) -> None:
    for pending, outcome in items:
        pending._resolved = True
        future = pending._future
        # resolved only if awaited (a future resolved with an error nobody retrieves is
        # reported as lost), and not if its awaiter was cancelled: the append stands
        if future is not None and pending._awaited and not future.done():
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        waiters, pending._waiters = pending._waiters, None
        if waiters is not None:
            for waiter in waiters:
                if waiter.done():
                    continue
                if isinstance(outcome, BaseException):
                    waiter.set_exception(outcome)
                else:
                    waiter.set_result(outcome)
        callbacks, pending._callbacks = pending._callbacks, None
        if callbacks is not None and pending._loop is not None:
            for fn in callbacks:  # each its own handle: one that raises stops no other
                pending._loop.call_soon(fn, pending)

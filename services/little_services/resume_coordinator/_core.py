"""The coordinator's run table: which run executes here, when, and which commands it settles.

Plain values in (run events, commands, ``now``, the lease), changed run records and the
effects to carry out: executions to start, commands to settle, snapshots to drop. The
transitions are claim, lease expiry, wake-up, park or retry, and settling a command. It must
never touch Kafka, a thread or the event loop: the shells (``_executions``, ``_intake``,
``_ownership``) do, with what it returns.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from little.commands import StartRun
from little.errors import LittleError, LogError, RuntimeIntegrityError
from little.log import partition_for
from little.replay import MaterializedRunState
from little.runtime import ClaimRejectedError, RunControl
from little_services.resume_coordinator._scheduling import CommandRef

log = structlog.get_logger("little.coordinator")

TERMINAL_TYPES = frozenset({"RunCompleted", "RunFailed", "RunCancelled"})
TERMINAL_OUTCOMES = frozenset({"completed", "failed", "cancelled"})
FORGOTTEN_OUTCOMES = TERMINAL_OUTCOMES | {"unknown_run", "sub_run", "not_started"}
"""Outcomes after which the run is no longer tracked here."""
REASONS_THAT_UNPARK = frozenset({"start", "resume", "cancel"})
"""A command asked for the run: a parked run is tried again."""

RunEvent = tuple[int, str, str, int]
"""(partition, run id, event type, epoch) from a record's headers."""


@dataclass(eq=False)
class LocalRun:
    """One execution of a run in this process (the shell keeps its task)."""

    run_id: str
    reason: str
    started_at: float
    control: RunControl = field(default_factory=RunControl)
    epoch: int | None = None
    running: bool = False
    fenced: bool = False
    known: MaterializedRunState | None = None
    """The run as its snapshot said (an adoption): the execution starts from it."""
    until_running: list[CommandRef] = field(default_factory=list)
    """Commands settled once the run is claimed, started and snapshotted (durable)."""
    until_done: list[CommandRef] = field(default_factory=list)
    """Commands settled when the execution ends (a cancel: once RunCancelled is written)."""


@dataclass(eq=False)
class Tracked:
    """A non-terminal run of an owned partition, under a lease."""

    run_id: str
    partition: int
    lease_until: float
    epoch: int = 0
    local: LocalRun | None = None
    parked: str | None = None
    """Why the run is not resumed automatically (its execution ended on an error that is not
    ``retryable``: an integrity error, a bug); a ResumeRun clears it."""
    cancel: str | None = None
    """A cancel that did not land yet (its execution ended on an error): the next one cancels."""
    carried: list[CommandRef] = field(default_factory=list)
    """Commands of that cancel, settled once RunCancelled is written."""
    start: StartRun | None = None
    """The StartRun of a run that has not started yet: its only input, kept (and its command
    unsettled) until an execution gets the run started, so a retry can still start it."""
    trace: tuple[tuple[str, bytes], ...] = ()
    """The W3C trace context of the latest command that asked for the run (an execution it
    starts is a child of the span that sent it)."""
    start_refs: list[CommandRef] = field(default_factory=list)
    """Commands of executions that ended before the run started, settled once it does."""
    waiting: bool = False
    """Its last execution here suspended it (``waiting``): no lease runs out on it; it is
    executed again at ``wake_at`` or when a signal for it lands on the runs topic."""
    wake_at: datetime | None = None
    wake_pending: bool = False
    """A signal for it landed while it executed here: if that execution ends ``waiting`` (it
    may have read the log before the signal), it is executed again at once."""


@dataclass
class Effects:
    """What the shells carry out after a transition (``Executions.apply``: stalls and fences
    reported first, then commands settled, snapshots dropped, executions started)."""

    started: list[tuple[Tracked, LocalRun]] = field(default_factory=list)
    """New executions: the shell runs each (``LocalRun.reason`` says why)."""
    settle: list[CommandRef] = field(default_factory=list)
    """Commands handled: settle them (the ledger decides the commit point)."""
    dropped: list[str] = field(default_factory=list)
    """Runs no longer tracked here whose snapshot the shell forgets."""
    stalled: list[Tracked] = field(default_factory=list)
    """Runs whose lease ran out with no progress (each was started again)."""
    fenced: list[tuple[str, int, int]] = field(default_factory=list)
    """(run id, their epoch, ours): executions here stopped by a later claim."""

    def add(self, other: Effects) -> Effects:
        self.started += other.started
        self.settle += other.settle
        self.dropped += other.dropped
        self.stalled += other.stalled
        self.fenced += other.fenced
        return self


@dataclass(frozen=True)
class Verdict:
    """What an execution's error means for its run: retried after a lease, or parked."""

    outcome: str
    """A metrics label: claim_rejected, log_error, retryable_error, integrity_error, error."""
    parked: str | None = None
    """Why it is parked; None when it is retried."""


def verdict_of(exc: BaseException) -> Verdict:
    """An execution ended on ``exc``: retry the run if the error is ``retryable`` (it is
    resumed once its lease runs out with no progress, the lease being the backoff), else
    park it until a ResumeRun."""
    error = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, LittleError) and exc.retryable:
        if isinstance(exc, ClaimRejectedError):  # another writer holds it: ordinary
            return Verdict("claim_rejected")
        return Verdict("log_error" if isinstance(exc, LogError) else "retryable_error")
    if isinstance(exc, RuntimeIntegrityError):
        return Verdict("integrity_error", error)
    return Verdict("error", error)


def retry_or_park(entry: Tracked, exc: BaseException) -> str:
    """``verdict_of`` applied to ``entry`` and logged; returns the outcome."""
    verdict = verdict_of(exc)
    error = f"{type(exc).__name__}: {exc}"
    if verdict.parked is None:
        if verdict.outcome == "claim_rejected":
            log.info("claim_rejected", run_id=entry.run_id, error=error)
        else:
            log.warning("run_retry_later", run_id=entry.run_id, error=error)
        return verdict.outcome
    entry.parked = verdict.parked
    # the traceback too when little did not raise it on purpose (a bug, most likely)
    log.error(
        "run_parked",
        run_id=entry.run_id,
        outcome=verdict.outcome,
        error=error,
        exc_info=None if isinstance(exc, LittleError) else exc,
    )
    return verdict.outcome


class RunTable:
    """The runs of the owned partitions and every rule that changes them (no I/O)."""

    def __init__(self, lease: float, partitions: int) -> None:
        self.lease = lease
        self.partitions = partitions
        self.owned: set[int] = set()
        self.runs: dict[str, Tracked] = {}
        self.parked: set[str] = set()
        """Run ids of tracked runs that are parked."""
        self.finished: OrderedDict[str, None] = OrderedDict()
        """Runs seen to end here lately (an adoption does not resume them from a stale
        snapshot)."""
        self.stopping = False
        self._misrouted: OrderedDict[str, int] = OrderedDict()

    # -- records ---------------------------------------------------------------------------

    def track(self, run_id: str, partition: int, now: float) -> Tracked:
        entry = self.runs.get(run_id)
        if entry is None:
            entry = Tracked(run_id, partition, now + self.lease)
            self.runs[run_id] = entry
        return entry

    def set_parked(self, entry: Tracked, reason: str | None) -> None:
        entry.parked = reason
        if reason is None:
            self.parked.discard(entry.run_id)
        else:
            self.parked.add(entry.run_id)

    def forget(self, run_id: str, *, done: bool) -> Effects:
        self.runs.pop(run_id, None)
        self.parked.discard(run_id)
        if done:
            self.finished[run_id] = None
            while len(self.finished) > 100_000:
                self.finished.popitem(last=False)
        return Effects(dropped=[run_id])

    # -- claim: a run executes here --------------------------------------------------------

    def ensure(
        self,
        run_id: str,
        partition: int,
        reason: str,
        now: float,
        *,
        start: StartRun | None = None,
        known: MaterializedRunState | None = None,
        command: CommandRef | None = None,
        cancel: str | None = None,
    ) -> Effects:
        """Make sure ``run_id`` executes here (or is cancelled); idempotent per run: a run
        already executing here takes the cancel or the command instead of a second one."""
        entry = self.track(run_id, partition, now)
        local = entry.local
        if local is not None:
            if cancel is not None:
                local.control.cancel(cancel)
                if command is not None:
                    local.until_done.append(command)
            elif command is not None:
                if local.running:
                    return Effects(settle=[command])
                local.until_running.append(command)
            return Effects()
        if reason in REASONS_THAT_UNPARK:
            self.set_parked(entry, None)
        self.finished.pop(run_id, None)
        entry.waiting, entry.wake_at, entry.wake_pending = False, None, False
        local = LocalRun(run_id, reason, now, known=known)
        cancel = cancel or entry.cancel
        if cancel is not None:
            local.control.cancel(cancel)
            local.until_done.extend(entry.carried)
            entry.carried.clear()
        if command is not None:
            (local.until_done if cancel is not None else local.until_running).append(command)
        if start is not None:
            entry.start = start
        local.until_running.extend(entry.start_refs)
        entry.start_refs.clear()
        entry.local = local
        return Effects(started=[(entry, local)])

    def running(self, entry: Tracked, local: LocalRun, epoch: int) -> None:
        """The execution claimed the run at ``epoch`` and the run is started: its log holds
        its input now, not only the StartRun."""
        local.epoch = epoch
        local.running = True
        entry.start = None
        entry.epoch = max(entry.epoch, epoch)

    # -- an execution ended: park or retry, settle its commands ----------------------------

    def failed(self, entry: Tracked, exc: BaseException) -> str:
        """The execution ended on ``exc``: parked or left for a retry (returns the outcome)."""
        outcome = retry_or_park(entry, exc)
        self.set_parked(entry, entry.parked)
        return outcome

    def ended(self, entry: Tracked, local: LocalRun, outcome: str, now: float) -> Effects:
        """The execution ended with ``outcome``: which of its commands are handled, whether
        the run is still tracked, and what wakes it next."""
        if entry.local is local:
            entry.local = None
        effects = Effects()
        owned = entry.partition in self.owned
        terminal = outcome in TERMINAL_OUTCOMES
        if local.control.cancelled and not terminal and owned:
            entry.cancel = local.control.reason  # not cancelled yet: the next execution will be
            entry.carried.extend(local.until_done)
            local.until_done.clear()
        if (
            entry.start is not None
            and not local.running
            and not terminal
            and outcome != "unknown_run"
            and owned
        ):
            # ended before the run started (a log error, a rejected claim, parked): its
            # StartRun is still the only input, so its command waits for the execution that
            # starts it (here after a retry, or a coordinator that has the workflow)
            entry.start_refs.extend(local.until_running)
            local.until_running.clear()
            effects.settle += _drain(local.until_done)
        elif outcome not in ("stopped", "abandoned"):  # not given up: the commands are handled
            effects.settle += _drain(local.until_running) + _drain(local.until_done)
        if outcome in FORGOTTEN_OUTCOMES:
            effects.add(self.forget(entry.run_id, done=terminal))
        elif not owned:
            self.runs.pop(entry.run_id, None)
            self.parked.discard(entry.run_id)
        elif outcome == "waiting":  # held by nobody: woken at its due time or by a signal
            entry.waiting = True
            if entry.wake_pending:  # a signal landed while it executed: look again now
                entry.wake_pending = False
                effects.add(self.ensure(entry.run_id, entry.partition, "signal", now))
        else:  # stopped, fenced, retryable: resumed if nobody progresses in a lease (not parked)
            entry.lease_until = now + self.lease
        return effects

    # -- the runs topic: leases renewed, foreign claims fence, endings forget --------------

    def on_run_events(self, events: Iterable[RunEvent], now: float) -> Effects:
        """Progress seen on the runs topic: renew leases, notice foreign claims and endings."""
        effects = Effects()
        for partition, run_id, kind, epoch in events:
            if partition not in self.owned or run_id in self.finished:
                continue
            if partition_for(run_id, self.partitions) != partition:
                # misrouted (another partitioner): not the run's stream, which no reader of
                # the run reads; its lease, claims and end are judged by its own partition
                self._log_misrouted(partition, run_id, kind)
                continue
            entry = self.runs.get(run_id)
            if kind in TERMINAL_TYPES:
                if entry is not None and entry.local is None and epoch >= entry.epoch:
                    effects.add(self.forget(run_id, done=True))
                continue
            if kind == "SignalSent":
                effects.add(self.wake(run_id, "signal", now))
                continue
            entry = self.track(run_id, partition, now)
            if kind == "RunClaimed":
                if entry.waiting and entry.local is None and epoch > entry.epoch:
                    entry.waiting, entry.wake_at = False, None  # taken up elsewhere: lease it
                local = entry.local
                if local is not None and local.epoch is not None and epoch > local.epoch:
                    local.fenced = True
                    local.control.stop(f"fenced by a claim at epoch {epoch} (ours: {local.epoch})")
                    effects.fenced.append((run_id, epoch, local.epoch))
                entry.epoch = max(entry.epoch, epoch)
            entry.lease_until = max(entry.lease_until, now + self.lease)
        return effects

    def _log_misrouted(self, partition: int, run_id: str, kind: str) -> None:
        if self._misrouted.get(run_id) != partition:  # once per run and partition
            self._misrouted[run_id] = partition
            while len(self._misrouted) > 10_000:
                self._misrouted.popitem(last=False)
            log.error(
                "run_event_misrouted",
                run_id=run_id,
                type=kind,
                partition=partition,
                expected=partition_for(run_id, self.partitions),
                hint="produce run events with Kafka's default partitioner over the run id "
                "(murmur2; librdkafka: partitioner=murmur2_random)",
            )

    # -- wake-ups and lease expiry ---------------------------------------------------------

    def wake(self, run_id: str, reason: str, now: float) -> Effects:
        """Execute a waiting run of ours now (a sub-run's signal wakes its top-level run,
        which executes the sub-run inline)."""
        entry = self.runs.get(run_id.split("~", 1)[0])
        if entry is None or entry.partition not in self.owned or self.stopping:
            return Effects()
        if entry.local is not None:
            entry.wake_pending = True  # it may suspend having read the log before the signal
        elif entry.waiting:
            return self.ensure(entry.run_id, entry.partition, reason, now)
        return Effects()

    def hold_leases(self, now: float) -> None:
        """The clock jumped (the process was paused): no lease is judged by it; every run
        gets a full lease from now."""
        for entry in self.runs.values():
            entry.lease_until = max(entry.lease_until, now + self.lease)

    def due(self, now: float, wall: datetime) -> Effects:
        """A tick: a live execution here holds its lease; a waiting run whose time came is
        woken (``timer``); a run whose lease ran out, not parked, is taken up (``stalled``)."""
        effects = Effects()
        for entry in list(self.runs.values()):
            if entry.local is not None:
                entry.lease_until = now + self.lease
                continue
            owned = entry.partition in self.owned
            if entry.waiting:
                if owned and entry.wake_at is not None and entry.wake_at <= wall:
                    effects.add(self.ensure(entry.run_id, entry.partition, "timer", now))
                continue
            if entry.parked or now < entry.lease_until or not owned:
                continue
            effects.stalled.append(entry)
            effects.add(self.ensure(entry.run_id, entry.partition, "stalled", now))
        return effects

    # -- partition ownership ---------------------------------------------------------------

    def assign(self, partitions: Iterable[int]) -> list[int]:
        """Own ``partitions``; returns the ones new here, sorted."""
        new = sorted(set(partitions) - self.owned)
        self.owned.update(new)
        return new

    def adopt(self, partition: int, states: Iterable[MaterializedRunState], now: float) -> Effects:
        """The live runs of a newly owned partition (from its snapshots) execute here."""
        effects = Effects()
        if partition not in self.owned:
            return effects
        for state in states:
            if state.run_id not in self.finished:
                effects.add(self.ensure(state.run_id, partition, "assigned", now, known=state))
        return effects

    def revoke(self, partitions: Iterable[int]) -> list[LocalRun]:
        """Give up ``partitions``: returns the executions here to stop; their runs stay
        tracked until ``release``."""
        gone = set(partitions)
        self.owned -= gone
        return [e.local for e in self.runs.values() if e.partition in gone and e.local]

    def release(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        for run_id in [r for r, e in self.runs.items() if e.partition in gone]:
            del self.runs[run_id]
            self.parked.discard(run_id)


def _drain(refs: list[CommandRef]) -> list[CommandRef]:
    """Take every ref (last first, as they were always settled)."""
    out = refs[::-1]
    refs.clear()
    return out

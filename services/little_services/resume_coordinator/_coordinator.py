"""What the coordinator decides, all on one asyncio loop: which runs to execute, and when to stop.

A run of an owned partition is executed here when a StartRun/ResumeRun/CancelRun names it,
when its partition is assigned (found through the snapshots topic), or when its lease runs
out. Every execution goes through ``little.runtime.execute``: claim with the next epoch, replay,
continue. Leases are renewed by the run's events (seen on the runs topic) and, while it executes
here, by the live task itself, so a long model call never looks stalled. Command offsets are
committed only below the first command whose run is not yet durably started.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import structlog

from little import World, tracing
from little.commands import (
    CancelRun,
    CommandDecodeError,
    ResumeRun,
    SignalRun,
    StartRun,
    decode_command,
)
from little.errors import LittleError, LogError, RuntimeIntegrityError
from little.events import ModelResponded, RunFailed, RunParked, SignalSent
from little.log import partition_for
from little.replay import (
    MaterializedRunState,
    Snapshot,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    outline_snapshot,
    price_usd,
)
from little.runtime import (
    ClaimRejectedError,
    ExecutionStopped,
    RunControl,
    SignalRefusedError,
    UnknownWorkflowError,
    WorkflowVersionError,
    claim,
    execute,
    fold_run_off_loop,
    prepare_signal,
    registered,
    versions,
)
from little_services.resume_coordinator._consumers import CommandConsumer, RunEvent, RunsTail
from little_services.resume_coordinator._deadletters import DeadLetterProducer, dead_letter_headers
from little_services.resume_coordinator._metrics import Metrics
from little_services.resume_coordinator._scheduling import CommandRef, Ledger
from little_services.resume_coordinator._settings import CoordinatorSettings
from little_services.resume_coordinator._world import OwnedSnapshots

log = structlog.get_logger("little.coordinator")

TERMINAL_TYPES = frozenset({"RunCompleted", "RunFailed", "RunCancelled"})
TERMINAL_OUTCOMES = frozenset({"completed", "failed", "cancelled"})


@dataclass(eq=False)
class LocalRun:
    """One execution of a run in this process."""

    run_id: str
    reason: str
    control: RunControl = field(default_factory=RunControl)
    started_at: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    epoch: int | None = None
    running: bool = False
    fenced: bool = False
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


def retry_or_park(entry: Tracked, exc: Exception) -> str:
    """An execution ended on ``exc``: retry the run if the error is ``retryable`` (it is
    resumed once its lease runs out with no progress, the lease being the backoff), else
    park it until a ResumeRun. Returns the outcome (a metrics label)."""
    error = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, LittleError) and exc.retryable:
        if isinstance(exc, ClaimRejectedError):  # another writer holds it: ordinary
            log.info("claim_rejected", run_id=entry.run_id, error=error)
            return "claim_rejected"
        log.warning("run_retry_later", run_id=entry.run_id, error=error)
        return "log_error" if isinstance(exc, LogError) else "retryable_error"
    entry.parked = error
    if isinstance(exc, RuntimeIntegrityError):
        log.error("run_parked", run_id=entry.run_id, outcome="integrity_error", error=error)
        return "integrity_error"
    # the traceback too when little did not raise it on purpose (a bug, most likely)
    log.error(
        "run_parked",
        run_id=entry.run_id,
        outcome="error",
        error=error,
        exc_info=None if isinstance(exc, LittleError) else exc,
    )
    return "error"


class Coordinator:
    """Owns partitions of the commands topic and the runs of the same partitions."""

    def __init__(
        self,
        settings: CoordinatorSettings,
        world: World,
        snapshots: OwnedSnapshots,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.world = world
        self.snapshots = snapshots
        self.metrics = metrics
        self.owner = settings.owner()
        self.lease = settings.lease_seconds
        self.partitions = snapshots.partitions
        self.owned: set[int] = set()
        self.owned_view: tuple[int, ...] = ()
        self.runs: dict[str, Tracked] = {}
        self._parked: set[str] = set()  # run ids of tracked runs that are parked
        self.finished: OrderedDict[str, None] = OrderedDict()
        self._misrouted_seen: OrderedDict[str, int] = OrderedDict()
        self.ledger = Ledger()
        self.ready = False
        self.stopping = False
        self.adopting = 0
        self.executing = 0
        """Executions in this process (read by the HTTP thread, so a plain int)."""
        self.loop_beat = time.monotonic()
        self.exit_code = 0
        self.commands: CommandConsumer | None = None
        self.tail: RunsTail | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._snapshot_pool = ThreadPoolExecutor(1, thread_name_prefix="snapshots")
        self._background: set[asyncio.Task[Any]] = set()
        self._stop: asyncio.Event | None = None
        self._stalled = False
        self._signals = asyncio.Lock()
        self._publisher: Any = None
        """A CommandPublisher, made on first use (a signal to a sub-run owned elsewhere)."""
        self._dead_letters: DeadLetterProducer | None = None
        """Commands records not acted on go to ``LITTLE_DLQ_TOPIC`` (``_deadletters``)."""
        # read at scrape time, so /metrics and /readyz never disagree
        metrics.appends_in_flight.set_function(lambda: self.world.log.in_flight()[0])
        metrics.oldest_append.set_function(lambda: self.world.log.in_flight()[1])

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Serve until ``stop`` is set; then stop every run at an event boundary and leave."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = stop
        self._slots = asyncio.Semaphore(self.settings.max_runs)
        bootstrap = self.settings.bootstrap()
        self.tail = RunsTail(
            bootstrap=bootstrap,
            topic=self.settings.runs_topic,
            loop=loop,
            on_events=self.on_run_events,
            on_record=self.count_call,
        )
        self.commands = CommandConsumer(
            bootstrap=bootstrap,
            topic=self.settings.commands_topic,
            group=self.settings.coordinator_group,
            client_id=self.owner,
            session_timeout_ms=self.settings.session_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_ms(),
            loop=loop,
            on_command=self.on_command,
            on_assigned=self.on_assigned,
            on_revoked=self.on_revoked,
            callback_timeout=self.settings.stop_grace_seconds + 60,
            runs_topic=self.settings.runs_topic,
        )
        self.tail.start()
        self.commands.start()
        self._spawn(self._watch())
        log.info(
            "coordinator_started",
            owner=self.owner,
            group=self.settings.coordinator_group,
            commands_topic=self.settings.commands_topic,
            runs_topic=self.settings.runs_topic,
            lease_seconds=self.lease,
            world=self.world.description,
            snapshots_topic=self.settings.snapshots_topic,
            workflows=[
                f"{name} v{version}" + (" (resume only)" if wf.resume_only else "")
                for name in sorted(registered())
                for version, wf in versions(name).items()
            ],
        )
        await stop.wait()
        await self.shutdown()
        return self.exit_code

    async def shutdown(self) -> None:
        self.stopping = True
        log.info("coordinator_stopping", executing=self.executing)
        if self.commands is not None:
            self.commands.close()  # leaving the group revokes every partition: runs stop there
            await asyncio.to_thread(
                self.commands.closed.wait, self.settings.stop_grace_seconds + 90
            )
        leftovers = [e.local for e in self.runs.values() if e.local is not None]
        for local in leftovers:
            local.control.stop("shutting down")
        await self._wait_stopped(leftovers)
        for task in list(self._background):
            task.cancel()
        if self.tail is not None:
            await asyncio.to_thread(self.tail.close)
        self._snapshot_pool.shutdown(wait=True)
        if self._publisher is not None:
            await asyncio.to_thread(self._publisher.close)
        if self._dead_letters is not None:
            await asyncio.to_thread(self._dead_letters.close)
        self.world.close()
        log.info("coordinator_stopped", owner=self.owner)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the coordinator serves on (the HTTP thread hands signals to it)."""
        return self._loop

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def healthy(self) -> bool:
        """The process serves: its loop turns and its consumer threads live. A stalled broker
        does not make it unhealthy (restarting it would not help; see ``log_stalled``)."""
        threads_alive = (self.commands is None or self.commands.alive() or self.stopping) and (
            self.tail is None or self.tail.alive() or self.stopping
        )
        return threads_alive and time.monotonic() - self.loop_beat < 30

    def tail_positioned(self) -> bool:
        """The runs tail follows every owned partition (leases and call metrics see all of
        their events from here on)."""
        return self.tail is not None and set(self.owned_view) <= self.tail.positioned

    def log_stalled(self) -> tuple[bool, int, float]:
        """(stalled, appends in flight, seconds the oldest has waited): stalled when an append
        has waited longer than ``append_stall_seconds`` (the broker, or the way to it)."""
        waiting, oldest = self.world.log.in_flight()
        return oldest > self.settings.append_stall_seconds, waiting, oldest

    def _count_executing(self, delta: int) -> None:
        self.executing += delta
        self.metrics.executing.set(self.executing)

    # -- partitions --------------------------------------------------------------------------

    def on_assigned(self, partitions: list[int], ends: dict[int, int] | None = None) -> None:
        new = sorted(set(partitions) - self.owned)
        self.ready = True
        if not new:
            return
        self.owned.update(new)
        self.owned_view = tuple(sorted(self.owned))
        for p in new:
            self.ledger.open(p)
        assert self.tail is not None
        self.tail.add(new, ends)
        self.metrics.partitions.set(len(self.owned))
        self.metrics.rebalances.labels("assigned").inc()
        self.adopting += 1
        self._spawn(self._adopt(new))

    async def _adopt(self, partitions: list[int]) -> None:
        """Resume every non-terminal run of newly assigned partitions (found via snapshots,
        all the partitions' read at once)."""
        started = time.monotonic()
        resumed = 0
        try:
            live = await asyncio.to_thread(self._live_snapshots, partitions)
            for p in partitions:
                if p not in self.owned:
                    continue
                for state in live[p]:
                    if state.run_id not in self.finished:
                        self.ensure(state.run_id, p, "assigned", known=state)
                        resumed += 1
        except Exception as exc:
            log.error(
                "adoption_failed", partitions=partitions, error=f"{type(exc).__name__}: {exc}"
            )
        finally:
            self.adopting -= 1
        elapsed = time.monotonic() - started
        self.metrics.assignment_seconds.observe(elapsed)
        log.info("partitions_adopted", partitions=partitions, resumed=resumed, seconds=elapsed)

    def _live_snapshots(self, partitions: list[int]) -> dict[int, list[MaterializedRunState]]:
        """Non-terminal top-level runs of the partitions, from their snapshots (a worker
        thread)."""
        out: dict[int, list[MaterializedRunState]] = {}
        for p, snapshots in self.snapshots.scan(partitions).items():
            out[p] = []
            for run_id, payload in snapshots.items():
                try:
                    state = decode_snapshot(payload).state
                except SnapshotError as exc:
                    stale = self._stale_but_live(run_id, payload)
                    if stale is not None:
                        out[p].append(stale)
                    else:
                        log.warning("snapshot_ignored", run_id=run_id, reason=str(exc))
                    continue
                if not state.terminal and state.parent_run_id is None:
                    self.snapshots.remember(run_id, payload)
                    out[p].append(state)
        return out

    def _stale_but_live(self, run_id: str, payload: bytes) -> MaterializedRunState | None:
        """A snapshot of another state version (written before an upgrade) cannot stand in
        for its run's state, but it says whether the run is live: such a run is resumed from
        its log (folded from the start), not left behind."""
        try:
            outline = outline_snapshot(payload)
        except SnapshotError:
            return None
        if outline.terminal or outline.parent_run_id is not None or outline.run_id != run_id:
            return None
        log.info("snapshot_of_another_version", run_id=run_id, version=outline.state_version)
        return MaterializedRunState(run_id=run_id)  # known nothing: the execution folds it

    async def on_revoked(self, partitions: list[int], lost: bool) -> dict[int, int]:
        """Stop the runs of ``partitions`` at an event boundary; return offsets to commit."""
        gone = set(partitions)
        self.owned -= gone
        self.owned_view = tuple(sorted(self.owned))
        assert self.tail is not None
        self.tail.remove(sorted(gone))
        self.metrics.partitions.set(len(self.owned))
        self.metrics.rebalances.labels("lost" if lost else "revoked").inc()
        why = (
            "shutting down"
            if self.stopping
            else ("partition lost" if lost else "partition revoked")
        )
        locals_ = [e.local for e in self.runs.values() if e.partition in gone and e.local]
        for local in locals_:
            local.control.stop(why)
        await self._wait_stopped(locals_)
        offsets: dict[int, int] = {}
        for p in gone:
            point = self.ledger.close(p)
            if point is not None and not lost:
                offsets[p] = point
        for run_id in [r for r, e in self.runs.items() if e.partition in gone]:
            del self.runs[run_id]
            self._unpark(run_id)
        self.snapshots.forget(gone)
        log.info(
            "partitions_released",
            partitions=sorted(gone),
            lost=lost,
            stopped_runs=len(locals_),
            committed=offsets,
        )
        return offsets

    async def _wait_stopped(self, locals_: list[LocalRun]) -> None:
        tasks = [
            local.task for local in locals_ if local.task is not None and not local.task.done()
        ]
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=self.settings.stop_grace_seconds)
        for task in pending:
            task.cancel()  # past the grace: abandon the in-flight call, the next owner redoes it
        if pending:
            await asyncio.wait(pending)
            log.warning("runs_abandoned", runs=len(pending), grace=self.settings.stop_grace_seconds)

    # -- commands ----------------------------------------------------------------------------

    def on_command(
        self,
        partition: int,
        offset: int,
        value: bytes | None,
        key: bytes | None = None,
        headers: Any = None,
    ) -> None:
        if partition not in self.owned or self.stopping:
            return  # fetched before a revocation: the partition's next owner reads it again
        self.ledger.received(partition, offset)
        ref = (partition, offset)
        try:
            command = decode_command(value or b"")
        except CommandDecodeError as exc:
            self.metrics.commands.labels("invalid").inc()
            log.warning(
                "command_invalid",
                partition=partition,
                offset=offset,
                reason=exc.reason,
                error=str(exc),
            )
            self._dead_letter(ref, key, value, exc.reason, str(exc))
            return
        self.metrics.commands.labels(command.type).inc()
        expected = partition_for(command.run_id, self.partitions)
        if expected != partition:
            log.error(
                "command_misrouted",
                run_id=command.run_id,
                partition=partition,
                expected=expected,
                hint="produce commands with Kafka's default partitioner over the run id",
            )
            self._dead_letter(
                ref,
                key,
                value,
                "misrouted",
                f"{command.type} of run {command.run_id} is in partition {partition} but "
                f"belongs in partition {expected}: produce commands keyed by run id with "
                "Kafka's default partitioner (murmur2; librdkafka: partitioner=murmur2_random)",
            )
            return
        if key is not None and key != command.run_id.encode():
            message = (
                f"{command.type} of run {command.run_id} is keyed {key[:200]!r}: a command's key "
                "is its run id; not acted on"
            )
            log.error("command_key_mismatch", run_id=command.run_id, offset=offset, error=message)
            self._dead_letter(ref, key, value, "key-mismatch", message)
            return
        log.info("command_received", type=command.type, run_id=command.run_id, offset=offset)
        trace = tuple(
            (k, v) for k, v in headers or () if k in tracing.TRACE_HEADERS and v is not None
        )
        if trace and isinstance(command, StartRun | ResumeRun | CancelRun):
            # the execution it causes continues the sender's trace (``little.tracing``)
            self.runs.setdefault(
                command.run_id,
                Tracked(command.run_id, partition, time.monotonic() + self.lease),
            ).trace = trace
        if isinstance(command, StartRun):
            self.ensure(command.run_id, partition, "start", start=command, command=ref)
        elif isinstance(command, ResumeRun):
            self.ensure(command.run_id, partition, "resume", command=ref)
        elif isinstance(command, CancelRun):
            reason = command.reason or "cancelled on request"
            self.ensure(command.run_id, partition, "cancel", command=ref, cancel=reason)
        elif isinstance(command, SignalRun):
            self._spawn(self._signal_command(command, ref))

    async def _signal_command(self, command: SignalRun, ref: CommandRef) -> None:
        """Record the command's signal in its run's log (once however often the command is
        read: the signal id), then settle it; a refused signal is logged and settled. A run
        whose StartRun is still being executed here is waited for (a SignalRun sent right
        after its StartRun would otherwise find no run yet)."""
        try:
            for _ in range(120):
                try:
                    await self.deliver_signal(
                        command.run_id,
                        command.name,
                        command.payload,
                        signal_id=command.signal_id,
                        by=command.issued_by,
                    )
                    break
                except SignalRefusedError:
                    entry = self.runs.get(command.run_id)
                    if entry is None or entry.start is None or self.stopping:
                        raise
                    await asyncio.sleep(0.25)  # its StartRun is executing here: not started yet
        except SignalRefusedError as exc:
            self.metrics.commands.labels("refused").inc()
            log.warning("signal_refused", run_id=command.run_id, name=command.name, error=str(exc))
        except LittleError as exc:  # the log failed: read the command again after a restart
            log.error("signal_not_recorded", run_id=command.run_id, error=str(exc))
            return
        self._settle(ref)

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: object,
        *,
        signal_id: str | None = None,
        by: str | None = None,
    ) -> SignalSent:
        """Append ``SignalSent`` to the run's log (any run, owned here or not: the owner's
        runs tail sees it and wakes the run) after checking the run can take it
        (``SignalRefusedError`` otherwise, nothing recorded)."""
        async with self._signals:  # one at a time: a re-delivery finds the first in the log
            state = await fold_run_off_loop(self.world, run_id)
            where = f"resume coordinator {self.owner}"
            event = prepare_signal(
                state, run_id, name, payload, where=where, signal_id=signal_id, by=by or self.owner
            )
            if not any(s.signal_id == event.signal_id for s in state.signals):
                await self.world.submit([event])
        log.info("signal_recorded", run_id=run_id, name=name, signal_id=event.signal_id)
        top = run_id.split("~", 1)[0]
        if top != run_id and partition_for(top, self.partitions) not in self.owned:
            # a sub-run executes inside its top-level run, owned elsewhere: wake that one
            await asyncio.to_thread(self._publish_resume, top)
        self._wake(run_id, "signal")
        return event

    def _publish_resume(self, run_id: str) -> None:
        """Send ``ResumeRun(run_id)`` to the coordinator that owns it (a worker thread)."""
        from little.commands import CommandPublisher

        if self._publisher is None:
            self._publisher = CommandPublisher(
                self.settings.bootstrap(), topic=self.settings.commands_topic
            )
        self._publisher.send([ResumeRun(run_id=run_id, issued_by=self.owner)])

    def _wake(self, run_id: str, reason: str) -> None:
        """Execute a waiting run of ours now (a sub-run's signal wakes its top-level run,
        which executes the sub-run inline)."""
        entry = self.runs.get(run_id.split("~", 1)[0])
        if entry is None or entry.partition not in self.owned or self.stopping:
            return
        if entry.local is not None:
            entry.wake_pending = True  # it may suspend having read the log before the signal
        elif entry.waiting:
            self.ensure(entry.run_id, entry.partition, reason)

    def _dead_letter(
        self, ref: CommandRef, key: bytes | None, value: bytes | None, reason: str, message: str
    ) -> None:
        """Send a commands record the coordinator will not act on to the dead-letter topic,
        then settle it (whether or not the send worked: it is logged either way)."""
        self.metrics.dead_letters.labels(reason).inc()
        headers = dead_letter_headers(reason, message, self.settings.commands_topic, *ref)
        if self._dead_letters is None:
            self._dead_letters = DeadLetterProducer(
                self.settings.bootstrap(), self.settings.dlq_topic
            )
        producer = self._dead_letters

        async def send() -> None:
            try:
                await asyncio.to_thread(producer.send, key, value, headers)
                log.info("command_dead_lettered", partition=ref[0], offset=ref[1], reason=reason)
            except Exception as exc:
                log.error(
                    "dead_letter_failed",
                    partition=ref[0],
                    offset=ref[1],
                    reason=reason,
                    error=f"{type(exc).__name__}: {exc}",
                )
            finally:
                self._settle(ref)

        self._spawn(send())

    def _settle(self, ref: CommandRef) -> None:
        point = self.ledger.settle(*ref)
        if point is not None and self.commands is not None:
            self.commands.commit(ref[0], point)

    # -- executions --------------------------------------------------------------------------

    def ensure(
        self,
        run_id: str,
        partition: int,
        reason: str,
        *,
        start: StartRun | None = None,
        known: MaterializedRunState | None = None,
        command: CommandRef | None = None,
        cancel: str | None = None,
    ) -> None:
        """Make sure ``run_id`` executes here (or is cancelled); idempotent per run."""
        entry = self.runs.get(run_id)
        if entry is None:
            entry = Tracked(run_id, partition, time.monotonic() + self.lease)
            self.runs[run_id] = entry
        local = entry.local
        if local is not None:  # already executing here
            if cancel is not None:
                local.control.cancel(cancel)
                if command is not None:
                    local.until_done.append(command)
            elif command is not None:
                if local.running:
                    self._settle(command)
                else:
                    local.until_running.append(command)
            return
        if reason in ("start", "resume", "cancel"):
            self._set_parked(entry, None)
        self.finished.pop(run_id, None)
        entry.waiting, entry.wake_at, entry.wake_pending = False, None, False
        local = LocalRun(run_id, reason)
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
        local.task = asyncio.ensure_future(self._drive(entry, local, start or entry.start, known))
        self.metrics.resumed.labels(reason).inc()
        self._count_executing(+1)

    async def _drive(
        self,
        entry: Tracked,
        local: LocalRun,
        start: StartRun | None,
        known: MaterializedRunState | None,
    ) -> None:
        outcome = "error"
        try:
            assert self._slots is not None
            async with self._slots:
                outcome = await self._execute(entry, local, start, known)
        except asyncio.CancelledError:
            outcome = "abandoned"
        except ExecutionStopped as exc:  # asked for (a command, a fence, a revocation): no error
            outcome = "cancelled" if exc.cancelled else ("fenced" if local.fenced else "stopped")
        except Exception as exc:
            outcome = retry_or_park(entry, exc)
            self._set_parked(entry, entry.parked)
        finally:
            self._finish(entry, local, outcome)

    async def _execute(
        self,
        entry: Tracked,
        local: LocalRun,
        start: StartRun | None,
        known: MaterializedRunState | None,
    ) -> str:
        run_id = entry.run_id
        control = local.control
        if control.requested and not control.cancelled:
            raise control.stopped(run_id)  # stopped before it began: do not claim just to stop
        state = known
        # A StartRun of a registered workflow goes straight to execute (which resumes the run
        # if it exists); anything else needs to know what the log says first.
        if (start is None and (state is None or state.workflow is None)) or (
            start is not None and start.workflow not in registered()
        ):
            state = await fold_run_off_loop(self.world, run_id)
            if state.last_position is None and start is None:
                log.warning("run_unknown", run_id=run_id, reason=local.reason)
                return "unknown_run"
        if state is not None:
            if state.workflow is not None:
                entry.start = None  # started: its log holds the input, not only the StartRun
            if state.terminal:
                return state.status
            if state.parent_run_id is not None and not control.cancelled:
                log.info("sub_run_skipped", run_id=run_id, parent_run_id=state.parent_run_id)
                return "sub_run"  # executed inline by its parent's execution, never on its own
        name = state.workflow if state is not None and state.workflow else None
        started = name is not None
        if name is None and start is not None:
            name = start.workflow
        # a new run takes the version a new run uses; a started one, the version its log names
        # (``execute`` finds it among the name's registered versions)
        workflow = registered().get(name) if name is not None else None
        if name is None and not control.cancelled:
            log.warning("run_not_started", run_id=run_id, hint="no RunStarted and no StartRun")
            return "not_started"
        if name is not None and not versions(name) and not control.cancelled:
            # No version of it here: a deployment that forgot a module, most likely. Parked,
            # so a coordinator that has it takes the run up.
            error: LittleError = UnknownWorkflowError(
                name,
                registered(),
                run_id=run_id,
                where=f"resume coordinator {self.owner}",
                hint="register it through the little.workflows entry point group or "
                "LITTLE_WORKFLOWS=module[:attr]",
            )
            version = state.workflow_version if state is not None else None
            return await self._park(entry, error, workflow=name, version=version)
        if workflow is None and not started and not control.cancelled:
            # a new run of a name registered here only in resume_only versions
            assert name is not None
            error = WorkflowVersionError(
                f"workflow {name} has only resume_only versions in resume coordinator "
                f"{self.owner} ({', '.join(versions(name))}): a new run needs a version "
                "registered without resume_only",
                workflow=name,
                registered=versions(name),
                run_id=run_id,
            )
            return await self._park(entry, error, workflow=name, version=None)
        try:
            with tracing.use_headers(entry.trace):
                result = await execute(
                    self.world,
                    run_id,
                    workflow,
                    start.input if start is not None else None,
                    owner=self.owner,
                    max_agent_calls=start.budgets.max_agent_calls if start is not None else None,
                    max_tokens=start.budgets.max_tokens if start is not None else None,
                    replay_from=start.replay_from if start is not None else None,
                    replay_mode=(start.replay_mode if start is not None else None) or "repairable",
                    control=control,
                    on_running=partial(self._running, entry, local),
                )
                if result.status == "waiting":
                    entry.wake_at = result.wake_at
        except WorkflowVersionError as exc:
            if start is None and exc.run_id == run_id:
                # The version the run started on is not registered here.
                return await self._version_missing(entry, exc)
            if start is None:  # a sub-run's: parked with its parent, as integrity errors are
                raise
            # A StartRun of a run that exists already (naming another workflow, or a version
            # of its workflow it did not start on): the StartRun means "resume it", with the
            # workflow and version its log names.
            state = await fold_run_off_loop(self.world, run_id)
            log.warning("start_run_of_existing_run", run_id=run_id, workflow=start.workflow)
            return await self._execute(entry, local, None, state)
        return result.status

    async def _park(
        self,
        entry: Tracked,
        error: LittleError,
        *,
        workflow: str | None,
        version: str | None,
    ) -> str:
        """This coordinator cannot run ``entry``'s run (a workflow or version it lacks): claim
        it and record ``RunParked`` with why, so the log, the projection and ``little status``
        show it; it is not resumed here until a ResumeRun. Not failed: a coordinator that has
        the workflow takes it up with its next claim (a run that never started needs its
        StartRun, which stays unsettled, so that coordinator reads it again)."""
        run_id = entry.run_id
        state = await fold_run_off_loop(self.world, run_id)
        if state.terminal:
            return state.status
        state, writer = await claim(self.world, run_id, self.owner, state)
        if state.terminal:
            return state.status
        await writer.emit(RunParked, reason=str(error), workflow=workflow, workflow_version=version)
        self._set_parked(entry, f"{type(error).__name__}: {error}")
        log.warning(
            "run_parked",
            run_id=run_id,
            outcome="parked",
            workflow=workflow,
            workflow_version=version,
            error=str(error),
        )
        return "parked"

    async def _version_missing(self, entry: Tracked, exc: WorkflowVersionError) -> str:
        """The run started on a version of its workflow that is not registered here, though
        the workflow is. By ``LITTLE_MISSING_VERSION``: ``fail`` (the default) ends it with
        ``RunFailed`` naming the version and what is registered (its code is gone: a
        coordinator fleet runs one configuration, so no other member has it either, and
        retrying would loop); ``park`` leaves it, recorded, for a coordinator that has that
        version (a fleet mid-way through a deploy, a canary)."""
        where = f"resume coordinator {self.owner}"
        message = (
            f"run {entry.run_id} was started by workflow {exc.workflow} v{exc.version}, which "
            f"is not registered in {where} (registered versions: "
            f"{', '.join(exc.registered) or 'none'}): the code it started on is gone. Keep that "
            f"version registered (@workflow({exc.workflow!r}, version={exc.version!r}, "
            "resume_only=True)) until its runs end"
        )
        if self.settings.missing_version == "park":
            error = WorkflowVersionError(
                f"{message}; parked (LITTLE_MISSING_VERSION=park) for a coordinator that has it",
                workflow=exc.workflow,
                version=exc.version,
                registered=exc.registered,
                run_id=entry.run_id,
            )
            return await self._park(entry, error, workflow=exc.workflow, version=exc.version)
        run_id = entry.run_id
        state = await fold_run_off_loop(self.world, run_id)
        if state.terminal:
            return state.status
        state, writer = await claim(self.world, run_id, self.owner, state)
        if state.terminal:
            return state.status
        await writer.emit(
            RunFailed,
            error_type="WorkflowVersionError",
            message=f"{message} (LITTLE_MISSING_VERSION=park parks such runs instead)",
            retryable=False,
        )
        self.metrics.version_missing.inc()
        log.error(
            "run_failed",
            run_id=run_id,
            outcome="version_missing",
            workflow=exc.workflow,
            workflow_version=exc.version,
            registered=list(exc.registered),
        )
        return "failed"

    def count_call(self, kind: str, value: bytes) -> None:
        """Metrics of a call's event in an owned partition (on the tail's thread)."""
        if kind == "harness.model.called":
            self.metrics.calls.labels("model").inc()
            return
        if kind == "harness.tool_call.started":
            self.metrics.calls.labels("tool").inc()
            return
        try:
            event = self.world.codec.decode(value)
        except LittleError:
            return  # the projector dead-letters it; not the coordinator's to judge
        if not isinstance(event, ModelResponded) or event.replayed_from_run_id is not None:
            return
        u, labels = event.usage, (event.provider, event.model)
        self.metrics.tokens.labels("input", *labels).inc(u.input_tokens)
        self.metrics.tokens.labels("output", *labels).inc(u.output_tokens)
        self.metrics.tokens.labels("cached_input", *labels).inc(u.cached_input_tokens)
        usd = price_usd(event.provider, event.model, u, event.occurred_at)
        if usd is None:
            self.metrics.unpriced.labels(*labels).inc()
        else:
            self.metrics.billed.labels(*labels).inc(float(usd))

    def _set_parked(self, entry: Tracked, reason: str | None) -> None:
        entry.parked = reason
        if reason is None:
            self._unpark(entry.run_id)
        else:
            self._parked.add(entry.run_id)
            self.metrics.parked.set(len(self._parked))

    def _unpark(self, run_id: str) -> None:
        if run_id in self._parked:
            self._parked.discard(run_id)
            self.metrics.parked.set(len(self._parked))

    def _running(self, entry: Tracked, local: LocalRun, state: MaterializedRunState) -> None:
        """Called by execute once the run is claimed and started: snapshot it, then settle."""
        local.epoch = state.epoch
        local.running = True
        entry.start = None  # started: its log has the input now
        entry.epoch = max(entry.epoch, state.epoch)
        self.metrics.time_to_running.observe(time.monotonic() - local.started_at)
        log.info(
            "run_claimed",
            run_id=state.run_id,
            epoch=state.epoch,
            reason=local.reason,
            resumed_from_seq=state.last_seq,
        )
        try:
            payload = encode_snapshot(Snapshot.of(state))
        except SnapshotError:
            self._settle_all(local.until_running)
            return
        assert self._loop is not None
        future = self._snapshot_pool.submit(self.snapshots.put, state.run_id, payload)
        loop = self._loop
        future.add_done_callback(lambda f: loop.call_soon_threadsafe(self._snapshotted, local, f))

    def _snapshotted(self, local: LocalRun, future: Future[None]) -> None:
        if local.run_id not in self.runs:
            self.snapshots.drop(local.run_id)  # it ended before its snapshot was acknowledged
        error = future.exception()
        if error is not None:  # the commands stay unsettled until the execution ends
            log.warning("snapshot_not_written", run_id=local.run_id, error=str(error))
            return
        self._settle_all(local.until_running)

    def _settle_all(self, refs: list[CommandRef]) -> None:
        while refs:
            self._settle(refs.pop())

    def _finish(self, entry: Tracked, local: LocalRun, outcome: str) -> None:
        if entry.local is local:
            entry.local = None
        self.metrics.finished.labels(outcome).inc()
        # however it ended (stopped, fenced, failed), sub-runs included: they share the control
        self.metrics.reinvoked.inc(local.control.reinvoked_calls)
        self.metrics.served.inc(local.control.served_calls)
        self._count_executing(-1)
        log.info(
            "run_execution_ended",
            run_id=entry.run_id,
            outcome=outcome,
            reason=local.reason,
            seconds=round(time.monotonic() - local.started_at, 3),
        )
        owned = entry.partition in self.owned
        if local.control.cancelled and outcome not in TERMINAL_OUTCOMES and owned:
            entry.cancel = local.control.reason  # not cancelled yet: the next execution will be
            entry.carried.extend(local.until_done)
            local.until_done.clear()
        if (
            entry.start is not None
            and not local.running
            and outcome not in TERMINAL_OUTCOMES
            and outcome != "unknown_run"
            and owned
        ):
            # ended before the run started (a log error, a rejected claim, parked): its
            # StartRun is still the only input, so its command waits for the execution that
            # starts it (here after a retry, or a coordinator that has the workflow)
            entry.start_refs.extend(local.until_running)
            local.until_running.clear()
            self._settle_all(local.until_done)
        elif outcome not in ("stopped", "abandoned"):  # not given up: the commands are handled
            self._settle_all(local.until_running)
            self._settle_all(local.until_done)
        if outcome in TERMINAL_OUTCOMES or outcome in ("unknown_run", "sub_run", "not_started"):
            self._forget(entry.run_id, done=outcome in TERMINAL_OUTCOMES)
        elif not owned:
            self.runs.pop(entry.run_id, None)
            self._unpark(entry.run_id)
        elif outcome == "waiting":  # held by nobody: woken at its due time or by a signal
            entry.waiting = True
            if entry.wake_pending:  # a signal landed while it executed: look again now
                entry.wake_pending = False
                self.ensure(entry.run_id, entry.partition, "signal")
        else:  # stopped, fenced, retryable: resumed if nobody progresses in a lease (not parked)
            entry.lease_until = time.monotonic() + self.lease

    def _forget(self, run_id: str, *, done: bool) -> None:
        self.runs.pop(run_id, None)
        self._unpark(run_id)
        self.snapshots.drop(run_id)
        if done:
            self.finished[run_id] = None
            while len(self.finished) > 100_000:
                self.finished.popitem(last=False)

    # -- leases ------------------------------------------------------------------------------

    def on_run_events(self, events: list[RunEvent]) -> None:
        """Progress seen on the runs topic: renew leases, notice foreign claims and endings."""
        now = time.monotonic()
        for partition, run_id, kind, epoch in events:
            if partition not in self.owned or run_id in self.finished:
                continue
            if partition_for(run_id, self.partitions) != partition:
                # misrouted (another partitioner): not the run's stream, which no reader of
                # the run reads; its lease, claims and end are judged by its own partition
                self._misrouted(partition, run_id, kind)
                continue
            entry = self.runs.get(run_id)
            if kind in TERMINAL_TYPES:
                if entry is not None and entry.local is None and epoch >= entry.epoch:
                    self._forget(run_id, done=True)
                continue
            if kind == "SignalSent":
                self._wake(run_id, "signal")
                continue
            if entry is None:
                entry = Tracked(run_id, partition, now + self.lease)
                self.runs[run_id] = entry
            waiting_here = entry.waiting and entry.local is None
            if kind == "RunClaimed" and waiting_here and epoch > entry.epoch:
                entry.waiting, entry.wake_at = False, None  # someone else took it up: lease it
            if kind == "RunClaimed":
                local = entry.local
                if local is not None and local.epoch is not None and epoch > local.epoch:
                    local.fenced = True
                    local.control.stop(f"fenced by a claim at epoch {epoch} (ours: {local.epoch})")
                    self.metrics.fenced.inc()
                    log.warning("run_fenced", run_id=run_id, epoch=epoch, ours=local.epoch)
                entry.epoch = max(entry.epoch, epoch)
            entry.lease_until = max(entry.lease_until, now + self.lease)

    def _misrouted(self, partition: int, run_id: str, kind: str) -> None:
        if self._misrouted_seen.get(run_id) != partition:  # once per run and partition
            self._misrouted_seen[run_id] = partition
            while len(self._misrouted_seen) > 10_000:
                self._misrouted_seen.popitem(last=False)
            log.error(
                "run_event_misrouted",
                run_id=run_id,
                type=kind,
                partition=partition,
                expected=partition_for(run_id, self.partitions),
                hint="produce run events with Kafka's default partitioner over the run id "
                "(murmur2; librdkafka: partitioner=murmur2_random)",
            )

    async def _watch(self) -> None:
        """Local heartbeats, stall detection, loop lag and the consumer thread's health."""
        tick = max(0.05, min(1.0, self.lease / 4))
        while True:
            before = time.monotonic()
            await asyncio.sleep(tick)
            now = time.monotonic()
            self.loop_beat = now
            lag = max(0.0, now - before - tick)
            self.metrics.loop_lag.set(lag)
            stalled, waiting, oldest = self.log_stalled()
            if stalled != self._stalled:
                self._stalled = stalled
                if stalled:
                    log.warning("log_stalled", appends_waiting=waiting, oldest_seconds=oldest)
                else:
                    log.info("log_recovered", appends_waiting=waiting)
            if lag > self.settings.session_timeout_ms / 2000:
                # Paused (SIGSTOP, a VM freeze): our partitions may have moved meanwhile. Let the
                # consumer learn that before any lease is judged by a clock that jumped.
                log.warning("loop_paused", seconds=round(lag, 1))
                for entry in self.runs.values():
                    entry.lease_until = max(entry.lease_until, now + self.lease)
                continue
            if self.commands is not None and not self.commands.alive() and not self.stopping:
                log.error("commands_consumer_died")
                self.exit_code = 1
                assert self._stop is not None
                self._stop.set()
                return
            wall = datetime.now(UTC)
            for entry in list(self.runs.values()):
                if entry.local is not None:
                    entry.lease_until = now + self.lease  # a live execution here holds its lease
                    continue
                if entry.waiting:
                    due = entry.wake_at is not None and entry.wake_at <= wall
                    if due and entry.partition in self.owned:
                        self.ensure(entry.run_id, entry.partition, "timer")
                    continue
                if entry.parked or now < entry.lease_until or entry.partition not in self.owned:
                    continue
                self.metrics.stalls.inc()
                log.warning(
                    "run_stalled",
                    run_id=entry.run_id,
                    lease_seconds=self.lease,
                    last_epoch=entry.epoch,
                )
                self.ensure(entry.run_id, entry.partition, "stalled")
            self.metrics.tracked.set(len(self.runs))
            self.metrics.waiting.set(sum(1 for e in self.runs.values() if e.waiting))

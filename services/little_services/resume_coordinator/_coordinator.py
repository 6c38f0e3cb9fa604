"""The resume coordinator's shell: one asyncio loop, two consumer threads, and the run table.

A run of an owned partition is executed here when a StartRun/ResumeRun/CancelRun names it,
when its partition is assigned (found through the snapshots topic), when its lease runs out,
or when a waiting run's time comes or a signal lands. ``RunTable`` (``_core``) decides all of
that from plain values; this wires it to Kafka (``_consumers``), the commands (``_intake``),
the executions (``_executions``) and partition ownership (``_ownership``). Command offsets are
committed only below the first command whose run is not yet durably started. It must never
change a run's record itself: every change is a transition of the run table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

import structlog

from little import World
from little.events import SignalSent
from little.runtime import registered, versions
from little_services.resume_coordinator._consumers import CommandConsumer, RunsTail
from little_services.resume_coordinator._core import RunEvent, RunTable, Tracked, retry_or_park
from little_services.resume_coordinator._executions import Executions
from little_services.resume_coordinator._intake import Intake
from little_services.resume_coordinator._metrics import Metrics
from little_services.resume_coordinator._ownership import Ownership
from little_services.resume_coordinator._scheduling import CommandRef, Ledger
from little_services.resume_coordinator._settings import CoordinatorSettings
from little_services.resume_coordinator._world import OwnedSnapshots

__all__ = ["Coordinator", "Tracked", "retry_or_park"]

log = structlog.get_logger("little.coordinator")


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
        self.table = RunTable(self.lease, snapshots.partitions)
        self.ledger = Ledger()
        self.ready = False
        self.loop_beat = time.monotonic()
        self.exit_code = 0
        self.commands: CommandConsumer | None = None
        self.tail: RunsTail | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._stop: asyncio.Event | None = None
        self._stalled = False
        self.executions = Executions(settings, world, snapshots, metrics, self.table, self._settle)
        self.intake = Intake(
            settings, world, metrics, self.table, self.executions, self._settle, self._spawn
        )
        self.ownership = Ownership(
            self.table, self.ledger, snapshots, metrics, self.executions, self._spawn
        )
        # read at scrape time, so /metrics and /readyz never disagree
        metrics.appends_in_flight.set_function(lambda: self.world.log.in_flight()[0])
        metrics.oldest_append.set_function(lambda: self.world.log.in_flight()[1])

    # -- what the HTTP thread and tests read -------------------------------------------------

    @property
    def owned(self) -> set[int]:
        return self.table.owned

    @owned.setter
    def owned(self, partitions: set[int]) -> None:
        self.table.owned = partitions

    @property
    def runs(self) -> dict[str, Tracked]:
        return self.table.runs

    @property
    def stopping(self) -> bool:
        return self.table.stopping

    @property
    def owned_view(self) -> tuple[int, ...]:
        return self.ownership.view

    @property
    def adopting(self) -> int:
        return self.ownership.adopting

    @property
    def executing(self) -> int:
        """Executions in this process."""
        return self.executions.count

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the coordinator serves on (the HTTP thread hands signals to it)."""
        return self._loop

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Serve until ``stop`` is set; then stop every run at an event boundary and leave."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = stop
        bootstrap = self.settings.bootstrap()
        self.tail = RunsTail(
            bootstrap=bootstrap,
            topic=self.settings.runs_topic,
            loop=loop,
            on_events=self.on_run_events,
            on_record=self.count_call,
        )
        self.ownership.tail = self.tail
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
        self.table.stopping = True
        log.info("coordinator_stopping", executing=self.executing)
        if self.commands is not None:
            self.commands.close()  # leaving the group revokes every partition: runs stop there
            await asyncio.to_thread(
                self.commands.closed.wait, self.settings.stop_grace_seconds + 90
            )
        leftovers = [e.local for e in self.runs.values() if e.local is not None]
        for local in leftovers:
            local.control.stop("shutting down")
        await self.executions.wait_stopped(leftovers)
        for task in list(self._background):
            task.cancel()
        if self.tail is not None:
            await asyncio.to_thread(self.tail.close)
        self.executions.close()
        await asyncio.to_thread(self.intake.close)
        self.world.close()
        log.info("coordinator_stopped", owner=self.owner)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
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

    # -- what the consumer threads hand to the loop ------------------------------------------

    def on_assigned(self, partitions: list[int], ends: dict[int, int] | None = None) -> None:
        self.ready = True
        self.ownership.assigned(partitions, ends)

    async def on_revoked(self, partitions: list[int], lost: bool) -> dict[int, int]:
        return await self.ownership.revoked(partitions, lost)

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
        self.intake.on_command(partition, offset, value, key, headers)

    def on_run_events(self, events: list[RunEvent]) -> None:
        """Progress seen on the runs topic: renew leases, notice foreign claims and endings."""
        self.executions.apply(self.table.on_run_events(events, time.monotonic()))

    def count_call(self, kind: str, value: bytes) -> None:
        """Metrics of a call's event in an owned partition (on the tail's thread)."""
        self.metrics.count_call(self.world.codec, kind, value)

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: object,
        *,
        signal_id: str | None = None,
        by: str | None = None,
    ) -> SignalSent:
        """Record a signal in the run's log (``Intake.deliver_signal``)."""
        return await self.intake.deliver_signal(run_id, name, payload, signal_id=signal_id, by=by)

    def _settle(self, ref: CommandRef) -> None:
        point = self.ledger.settle(*ref)
        if point is not None and self.commands is not None:
            self.commands.commit(ref[0], point)

    # -- the clock -----------------------------------------------------------------------------

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
                self.table.hold_leases(now)
                continue
            if self.commands is not None and not self.commands.alive() and not self.stopping:
                log.error("commands_consumer_died")
                self.exit_code = 1
                assert self._stop is not None
                self._stop.set()
                return
            self.executions.apply(self.table.due(now, datetime.now(UTC)))
            self.metrics.tracked.set(len(self.runs))
            self.metrics.waiting.set(sum(1 for e in self.runs.values() if e.waiting))

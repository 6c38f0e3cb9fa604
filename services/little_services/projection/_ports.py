"""The projector over the EventLog and CursorStore ports: the embedded world's projector.

Per partition: read a batch, fold it, write the store, then dead letters and snapshots, then
commit the cursor. No transactions: the store write comes first and re-applying a record
changes nothing, so a crash anywhere only repeats work (dead letters at least once).
"""

from __future__ import annotations

import threading
import time

from little import World
from little.log import EventLog, OutgoingRecord
from little_services.projection._core import PartitionBatch, ProjectionConfig, ProjectionCore
from little_services.projection._driver import (
    Projector,
    ProjectorListener,
    ProjectorStatus,
    ProjectorTotals,
)
from little_services.projection._store import ProjectionStore


class PortProjector(Projector):
    """Folds ``world.log`` into ``store``, committing ``world.cursors`` for ``config.group``.

    ``dead_letters`` is the log that receives undecodable or unfoldable records (the embedded
    world keeps ``little.runs.dlq.v1`` as another topic of its sqlite file); without one they
    are only logged and counted.
    """

    def __init__(
        self,
        world: World,
        store: ProjectionStore,
        config: ProjectionConfig | None = None,
        *,
        listener: ProjectorListener | None = None,
        dead_letters: EventLog | None = None,
        poll_interval: float = 0.2,
    ) -> None:
        config = config or ProjectionConfig(topic=world.log.topic)
        super().__init__(ProjectionCore(world, store, config), listener)
        self.world = world
        self.config = config
        self.dead_letters = dead_letters
        self.poll_interval = poll_interval

    def run(
        self, stop: threading.Event | None = None, *, until_caught_up: bool = False
    ) -> ProjectorTotals:
        stop = stop or threading.Event()
        totals = ProjectorTotals()
        log, core, group = self.world.log, self.core, self.config.group
        committed = self.world.cursors.committed(group)
        partitions = tuple(range(log.partitions))
        for p in partitions:
            core.open_partition(p, committed.get(p), 0)
        targets = log.end_offsets()
        self.listener.assigned(partitions)
        caught_up = False
        try:
            while not stop.is_set():
                progressed = False
                for p in partitions:
                    if stop.is_set():
                        break
                    records = log.read_partition(p, core.position(p), limit=self.config.batch_size)
                    if not records:
                        continue
                    progressed = True
                    began = time.perf_counter()
                    batch = core.fold(p, records)
                    core.persist([batch])
                    self._side_outputs(batch)
                    self.world.cursors.commit(group, {p: batch.end})
                    core.settle([batch])
                    totals.add(batch)
                    self.listener.committed(batch, time.perf_counter() - began)
                positions = core.positions()
                ends = log.end_offsets()
                lag = {p: max(0, ends.get(p, 0) - positions[p]) for p in partitions}
                self.listener.lag(lag)
                if not caught_up and all(positions[p] >= targets.get(p, 0) for p in partitions):
                    caught_up = True
                    self.listener.caught_up()
                self._status = ProjectorStatus(partitions, positions, lag, caught_up, True)
                if caught_up and until_caught_up:
                    break
                if not progressed:
                    stop.wait(self.poll_interval)
        finally:
            for p in partitions:
                core.close_partition(p)
            self._status = ProjectorStatus(caught_up=caught_up)
            self.listener.revoked(partitions)
        return totals

    def _side_outputs(self, batch: PartitionBatch) -> None:
        for dl in batch.dead_letters:
            if self.dead_letters is not None:
                self.dead_letters.append(dl.run_id, [OutgoingRecord(dl.payload, dl.headers)])
        for run_id, payload in batch.snapshots:
            self.world.snapshots.put(run_id, payload)

    def close(self) -> None:
        """Closes the dead-letter log it was given (the projector owns it)."""
        if self.dead_letters is not None:
            self.dead_letters.close()

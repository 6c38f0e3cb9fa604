"""Partition ownership: what the coordinator takes up on an assignment and gives up on a revocation.

An assigned partition's live runs (found through the snapshots topic) execute here; a revoked
one's executions stop at an event boundary before its settled command offsets are committed
and the partition goes. The consumer group decides which partitions are owned; this never
decides that, nor which run executes (the run table does).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from little.replay import MaterializedRunState, SnapshotError, decode_snapshot, outline_snapshot
from little_services.resume_coordinator._consumers import RunsTail
from little_services.resume_coordinator._core import RunTable
from little_services.resume_coordinator._executions import Executions
from little_services.resume_coordinator._metrics import Metrics
from little_services.resume_coordinator._scheduling import Ledger
from little_services.resume_coordinator._world import OwnedSnapshots

log = structlog.get_logger("little.coordinator")


class Ownership:
    """The owned partitions' comings and goings, on the coordinator's loop."""

    def __init__(
        self,
        table: RunTable,
        ledger: Ledger,
        snapshots: OwnedSnapshots,
        metrics: Metrics,
        executions: Executions,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.table = table
        self.ledger = ledger
        self.snapshots = snapshots
        self.metrics = metrics
        self.executions = executions
        self._spawn = spawn
        self.tail: RunsTail | None = None
        self.view: tuple[int, ...] = ()
        """The owned partitions, replaced whole (read by the HTTP thread)."""
        self.adopting = 0
        """Assignments whose runs are still being found."""

    def assigned(self, partitions: list[int], ends: dict[int, int] | None = None) -> None:
        new = self.table.assign(partitions)
        if not new:
            return
        self.view = tuple(sorted(self.table.owned))
        for p in new:
            self.ledger.open(p)
        assert self.tail is not None
        self.tail.add(new, ends)
        self.metrics.partitions.set(len(self.table.owned))
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
                effects = self.table.adopt(p, live[p], time.monotonic())
                resumed += len(effects.started)
                self.executions.apply(effects)
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

    async def revoked(self, partitions: list[int], lost: bool) -> dict[int, int]:
        """Stop the runs of ``partitions`` at an event boundary; return offsets to commit."""
        gone = set(partitions)
        locals_ = self.table.revoke(gone)
        self.view = tuple(sorted(self.table.owned))
        assert self.tail is not None
        self.tail.remove(sorted(gone))
        self.metrics.partitions.set(len(self.table.owned))
        self.metrics.rebalances.labels("lost" if lost else "revoked").inc()
        why = (
            "shutting down"
            if self.table.stopping
            else ("partition lost" if lost else "partition revoked")
        )
        for local in locals_:
            local.control.stop(why)
        await self.executions.wait_stopped(locals_)
        offsets: dict[int, int] = {}
        for p in gone:
            point = self.ledger.close(p)
            if point is not None and not lost:
                offsets[p] = point
        self.table.release(gone)
        self.snapshots.forget(gone)
        log.info(
            "partitions_released",
            partitions=sorted(gone),
            lost=lost,
            stopped_runs=len(locals_),
            committed=offsets,
        )
        return offsets

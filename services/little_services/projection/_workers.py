"""A rebuild's worker processes: KafkaProjectors in one consumer group, one per process.

Partitions are independent, so a rebuild is partition-parallel the way the projector service
scales out: the group balances the partitions between its members. Workers are spawned
processes (one Python interpreter folds on one core) that open their own world and store
from picklable settings; they all write the one sqlite store file. The parent supervises: it
starts them together, reports progress from the group's committed offsets, decides when the
rebuild is done, and stops them all when one fails. Kafka only: the embedded world's cursors
belong to one process.

When is it done? Not when each worker thinks it is: a worker that left once its partitions
were caught up would hand them to the others and make them stop for a rebalance, and a worker
catching up on what it holds says nothing of partitions in flight between members. So
workers consume until told to stop, and the parent stops them when the group's committed
offsets reached, on every partition, the end it had at the reset. Committed offsets are what
a restarted projector trusts, so they are the one measure that holds across rebalances.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as ProcessEvent
from typing import TYPE_CHECKING, Any

import structlog

from little import World
from little.errors import LittleError
from little_services.projection._core import ProjectionConfig
from little_services.projection._driver import (
    ProjectorListener,
    ProjectorStalledError,
    ProjectorTotals,
)

if TYPE_CHECKING:
    from little_services.projection._open import ProjectionSettings

log = structlog.get_logger("little_services.projection.workers")

POLL_SECONDS = 0.5
"""How often the parent reads the group's committed offsets (progress and the end)."""
STOP_SECONDS = 60.0
"""How long a stopped worker may take to finish its batch, commit and leave the group."""
HEARTBEAT_MS = 250
"""Workers' consumer heartbeat. The first join of an empty group completes with one member on
a broker with ``group.initial.rebalance.delay.ms=0``, and the next worker's join makes it
rebalance: the first one notices within about this long, not librdkafka's default 3 s."""


class RebuildWorkerError(LittleError):
    """A rebuild worker process failed (an exception, or it died without a result); the other
    workers were stopped. Terminal for this rebuild: fix the cause and rebuild again."""

    def __init__(
        self, worker: int, workers: int, reason: str, remote_traceback: str | None = None
    ) -> None:
        super().__init__(f"rebuild worker {worker} of {workers} {reason}; the others were stopped")
        self.worker = worker
        self.remote_traceback = remote_traceback


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to open its own world, store and projector (picklable)."""

    settings: ProjectionSettings
    config: ProjectionConfig
    bootstrap_servers: str
    client_config: dict[str, Any] | None
    store_location: str
    """The store's sqlite file or PostgreSQL URL (``open_store_at``)."""
    store_synchronous: str


class _Worker:
    """The parent's view of one worker process."""

    def __init__(self, index: int, process: BaseProcess, conn: Connection) -> None:
        self.index = index
        self.process = process
        self.conn: Connection | None = conn
        self.ready = False
        self.caught_up = False
        """It said all it holds reached the ends they had at assignment (cleared on a
        rebalance): the fallback end for partitions whose commits stop short of the end."""
        self.totals: ProjectorTotals | None = None


def run_workers(
    world: World,
    spec: WorkerSpec,
    workers: int,
    *,
    start: Mapping[int, int],
    ends: Mapping[int, int],
    listener: ProjectorListener,
    stop: threading.Event | None = None,
) -> list[ProjectorTotals]:
    """Run ``workers`` processes until the group's committed offsets reach ``ends`` (or every
    worker is caught up, or ``stop`` is set); their totals, by worker. ``start`` is where the
    reset left each partition. Raises ``RebuildWorkerError`` naming the first worker that
    failed, after stopping the rest."""
    ctx = multiprocessing.get_context("spawn")
    go, halt = ctx.Event(), ctx.Event()
    pool: list[_Worker] = []
    for i in range(workers):
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=worker_main,
            args=(i, spec, writer, go, halt),
            name=f"little-rebuild-{i}",
            daemon=True,
        )
        proc.start()
        writer.close()  # the worker holds the only writing end: EOF when it exits
        pool.append(_Worker(i, proc, reader))
    log.info("rebuild_workers_started", workers=workers, pids=[w.process.pid for w in pool])
    next_poll = 0.0
    try:
        while any(w.totals is None for w in pool):
            if stop is not None and stop.is_set():
                halt.set()
            # until a worker's pipe is closed (it exited), its pipe or its exit wakes us
            live = [(w.conn, w.process.sentinel) for w in pool if w.conn is not None]
            wait([x for pair in live for x in pair], timeout=POLL_SECONDS)
            for w in pool:
                _handle(w, go, pool)
            if time.monotonic() >= next_poll and not halt.is_set():
                next_poll = time.monotonic() + POLL_SECONDS
                committed = _progress(world, spec.config.group, start, listener)
                if committed is not None and all(committed.get(p, 0) >= e for p, e in ends.items()):
                    log.info("rebuild_workers_reached_the_end", committed=committed)
                    halt.set()
                elif all(w.caught_up for w in pool):
                    log.info("rebuild_workers_caught_up", committed=committed)
                    halt.set()
    finally:
        halt.set()
        _stop_all(pool, go)
    _progress(world, spec.config.group, start, listener)
    return [w.totals or ProjectorTotals() for w in pool]


def _handle(w: _Worker, go: ProcessEvent, pool: Sequence[_Worker]) -> None:
    """Read what worker ``w`` sent since the last look; raise if it failed or died."""
    conn = w.conn
    while conn is not None:
        try:
            if not conn.poll():
                return
            kind, payload = conn.recv()
        except (EOFError, OSError):  # it exited: everything it sent was read before the EOF
            conn.close()
            w.conn = None
            if w.totals is None:
                w.process.join(STOP_SECONDS)
                reason = f"exited ({_exit_reason(w.process.exitcode)}) without a result"
                raise RebuildWorkerError(w.index, len(pool), reason) from None
            return
        if kind == "ready":
            w.ready = True
            if all(x.ready for x in pool):
                go.set()  # they join the group together: one rebalance, not one each
        elif kind == "caught_up":
            w.caught_up = payload
        elif kind == "done":
            w.totals = payload
            log.info("rebuild_worker_done", worker=w.index, consumed=payload.consumed)
        else:
            error, remote = payload
            raise RebuildWorkerError(w.index, len(pool), f"failed: {error}", remote)


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _stop_all(pool: Sequence[_Worker], go: ProcessEvent) -> None:
    """Join every worker (``halt`` is set: each finishes its batch, commits and leaves the
    group); one that does not finish in time is terminated, then killed."""
    deadline = time.monotonic() + STOP_SECONDS
    for w in pool:
        w.process.join(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(RebuildWorkerError):  # already failing: the first error wins
            _handle(w, go, pool)  # drain what it sent, so its pipe closes
    for w in pool:
        if w.process.is_alive():
            log.warning("rebuild_worker_terminated", worker=w.index, pid=w.process.pid)
            w.process.terminate()
            w.process.join(5)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(5)
        if w.conn is not None:
            w.conn.close()
            w.conn = None


def _progress(
    world: World, group: str, start: Mapping[int, int], listener: ProjectorListener
) -> dict[int, int] | None:
    """Tell the listener how far the group's commits are; the committed offsets (None if the
    broker did not answer: progress is best effort, the workers carry on regardless)."""
    try:
        committed = world.cursors.committed(group)
        ends = world.log.end_offsets()
    except LittleError as exc:
        log.info("rebuild_progress_unavailable", error=str(exc))
        return None
    done = sum(max(0, committed.get(p, 0) - o) for p, o in start.items())
    lag = {p: max(0, end - committed.get(p, start.get(p, 0))) for p, end in ends.items()}
    listener.progress(done, lag)
    return committed


# -- in the worker process ---------------------------------------------------------------------


class _Reporter(ProjectorListener):
    """Tells the parent when this worker is caught up, and when a rebalance undid that."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def assigned(self, partitions: Sequence[int]) -> None:
        self.conn.send(("caught_up", False))

    def revoked(self, partitions: Sequence[int]) -> None:
        self.conn.send(("caught_up", False))

    def caught_up(self) -> None:
        self.conn.send(("caught_up", True))


def worker_main(
    index: int, spec: WorkerSpec, conn: Connection, go: ProcessEvent, halt: ProcessEvent
) -> None:
    """A worker's whole life: open, say ready, wait for the others, consume until the parent
    says stop, send the totals. A failure is sent as text (exceptions may not pickle)."""
    from little import tune_gc
    from little_services.projection._kafka import KafkaProjector
    from little_services.projection._open import open_store_at, open_world

    try:
        stop = threading.Event()
        threading.Thread(target=_relay, args=(halt, stop), daemon=True).start()
        with (
            open_world(spec.settings, bootstrap_servers=spec.bootstrap_servers) as world,
            open_store_at(spec.store_location, synchronous=spec.store_synchronous) as store,
            KafkaProjector(
                world,
                store,
                spec.config,
                bootstrap_servers=spec.bootstrap_servers,
                client_config=spec.client_config,
                listener=_Reporter(conn),
                heartbeat_interval_ms=HEARTBEAT_MS,
            ) as projector,
        ):
            tune_gc()  # a process of its own that only folds, as the service is
            conn.send(("ready", None))
            while not (go.is_set() or halt.is_set()):
                time.sleep(0.05)
            totals = ProjectorTotals() if halt.is_set() else projector.run(stop)
        conn.send(("done", totals))
    except BaseException as exc:  # reported to the parent, which fails the rebuild
        with contextlib.suppress(Exception):
            conn.send(("failed", (f"{type(exc).__name__}: {exc}", traceback.format_exc())))
        if isinstance(exc, ProjectorStalledError):  # a stuck thread: exiting would wait for it
            conn.close()
            os._exit(75)
        raise SystemExit(1) from None
    finally:
        conn.close()


def _relay(halt: ProcessEvent, stop: threading.Event) -> None:
    # Polled, never waited on: a process that exits while it waits on a multiprocessing
    # Event leaves its condition expecting a sleeper that never wakes, and the parent's
    # halt.set() would then block forever.
    while not halt.is_set():
        time.sleep(0.1)
    stop.set()

"""A rebuild: a projection folded again from a reset of its cursors, in this process or in
worker processes (``_workers``) that share its store.

The parts (world, store, driver) are opened from settings by ``_open``; topic names are
settings so tests and side-by-side projections can use their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from little import World
from little.errors import ConfigurationError, LogError
from little.log import ResetTo
from little_services.projection._core import ProjectionConfig
from little_services.projection._driver import ProjectorListener, ProjectorTotals
from little_services.projection._open import (
    ProjectionSettings,
    create_projector,
    shared_store_location,
)
from little_services.projection._store import ProjectionStore

log = structlog.get_logger("little_services.projection")


@dataclass(frozen=True)
class RebuildResult:
    reset_to: dict[int, int]
    totals: ProjectorTotals
    seconds: float
    workers: int = 1
    """Processes that folded (1: in-process)."""
    per_worker: tuple[ProjectorTotals, ...] = ()
    """With worker processes, each one's totals (``totals`` adds them up, and a last
    in-process pass if one ran)."""


def rebuild(
    world: World,
    store: ProjectionStore,
    config: ProjectionConfig,
    to: ResetTo,
    *,
    bootstrap_servers: str | None = None,
    client_config: Mapping[str, Any] | None = None,
    listener: ProjectorListener | None = None,
    stop: threading.Event | None = None,
    workers: int = 1,
    settings: ProjectionSettings | None = None,
) -> RebuildResult:
    """Reset the projector group's offsets and refold until caught up.

    The group must have no live members (stop the projector first), as for
    ``kafka-consumer-groups --reset-offsets``. From the earliest offsets the store is cleared
    first; from anywhere else the projector's own reconciliation drops or refolds what the
    reset uncovered (the same path a reset with Kafka's tool takes).

    ``workers=1`` folds in this process. More (Kafka and a store other processes can open: an
    sqlite file or a PostgreSQL database) start that many processes, at most one per
    partition, each a projector in the group that opens its own world from ``settings`` (those
    ``world`` was opened with) and writes the same store; ``listener.progress`` then reports from the group's committed offsets.
    The rebuild ends when every partition's committed offset reached the end it had at the
    reset (checked; a last in-process pass covers any partition left behind).
    """
    if workers < 1:
        raise ConfigurationError(f"workers must be >= 1, not {workers}")
    if workers > 1:
        if not bootstrap_servers:
            raise ConfigurationError(
                "rebuild workers need Kafka: the embedded world is one process's"
            )
        if shared_store_location(store) is None:
            raise ConfigurationError(
                f"rebuild workers need a store other processes can open (an sqlite file or "
                f"a PostgreSQL database), not {type(store).__name__}"
            )
        if settings is None:
            raise ConfigurationError("rebuild workers need the settings the world was opened with")
    began = time.perf_counter()
    try:
        reset_to = world.cursors.reset(config.group, to)
    except LogError as exc:
        raise LogError(
            f"{exc}. Is a projector of group {config.group} still running? Stop it first."
        ) from exc
    if to.earliest:
        store.clear()
    shared = shared_store_location(store)
    if (  # checked above; repeated so the types narrow
        workers > 1 and bootstrap_servers and shared is not None and settings is not None
    ):
        totals, per_worker = _rebuild_with_workers(
            world,
            store,
            shared,
            config,
            reset_to,
            workers,
            settings=settings,
            bootstrap_servers=bootstrap_servers,
            client_config=client_config,
            listener=listener or ProjectorListener(),
            stop=stop,
        )
        seconds = time.perf_counter() - began
        return RebuildResult(reset_to, totals, seconds, len(per_worker), tuple(per_worker))
    totals = _run_until_caught_up(
        world,
        store,
        config,
        bootstrap_servers=bootstrap_servers,
        client_config=client_config,
        listener=listener,
        stop=stop,
    )
    return RebuildResult(reset_to, totals, time.perf_counter() - began)


def _run_until_caught_up(
    world: World,
    store: ProjectionStore,
    config: ProjectionConfig,
    *,
    bootstrap_servers: str | None,
    client_config: Mapping[str, Any] | None,
    listener: ProjectorListener | None,
    stop: threading.Event | None,
) -> ProjectorTotals:
    """One projector, run until every partition is caught up (or ``stop``), then closed."""
    with create_projector(
        world,
        store,
        config,
        bootstrap_servers=bootstrap_servers,
        client_config=client_config,
        listener=listener,
    ) as projector:
        return projector.run(stop, until_caught_up=True)


def _rebuild_with_workers(
    world: World,
    store: ProjectionStore,
    shared: tuple[str, str],
    config: ProjectionConfig,
    reset_to: dict[int, int],
    workers: int,
    *,
    settings: ProjectionSettings,
    bootstrap_servers: str,
    client_config: Mapping[str, Any] | None,
    listener: ProjectorListener,
    stop: threading.Event | None,
) -> tuple[ProjectorTotals, list[ProjectorTotals]]:
    """The worker processes, then the check that the group's committed offsets reached the
    ends every partition had at the reset, and an in-process pass if one did not."""
    from little_services.projection._workers import WorkerSpec, run_workers

    ends = world.log.end_offsets()
    used = min(workers, len(ends))
    spec = WorkerSpec(
        settings=settings,
        config=config,
        bootstrap_servers=bootstrap_servers,
        client_config=dict(client_config) if client_config is not None else None,
        store_location=shared[0],
        store_synchronous=shared[1],
    )
    per_worker = run_workers(
        world, spec, used, start=reset_to, ends=ends, listener=listener, stop=stop
    )
    totals = sum(per_worker, ProjectorTotals())
    if stop is not None and stop.is_set():
        return totals, per_worker
    committed = world.cursors.committed(config.group)
    behind = {p: (committed.get(p), end) for p, end in ends.items() if committed.get(p, 0) < end}
    if behind:
        # The workers were stopped because every one of them said it was caught up, not
        # because the commits reached the ends: a committed offset can stop short of a
        # transaction marker at the end of a partition (a transactional writer), which only a
        # consumer's position passes, and a worker's word can be stale during a rebalance.
        # One projector holding every partition settles both: it is caught up only when all
        # of them are.
        log.info("rebuild_workers_left_partitions", behind=behind)
        totals = totals + _run_until_caught_up(
            world,
            store,
            config,
            bootstrap_servers=bootstrap_servers,
            client_config=client_config,
            listener=listener,
            stop=stop,
        )
    listener.caught_up()
    return totals, per_worker

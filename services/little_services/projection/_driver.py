"""What every projector driver shares: the run loop's contract, its status and its listener.

A driver moves records from a log into the core and commits offsets after the store write.
Listeners see each committed batch (metrics, progress bars) and must not block for long.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

from little.errors import LogError
from little_services.projection._core import PartitionBatch, ProjectionCore


class ProjectorStalledError(LogError):
    """A partition's transaction did not finish within its bound: librdkafka's
    ``send_offsets_to_transaction`` can block past its timeout once the group coordinator
    broker was restarted (confluentinc/librdkafka#5456, #5511). Its thread cannot be freed, so
    the process must end; a restart resumes from the committed offsets (nothing of the stuck
    transaction is visible). Retryable, by a new process."""

    retryable = True


class ProjectorFencedError(LogError):
    """Another projector instance took over this one's partitions (its transactional id was
    initialised again). Terminal for this instance: stop it; the other one carries on."""

    retryable = False


@dataclass(frozen=True)
class ProjectorStatus:
    """A point-in-time view for readiness probes and ``little projections`` output."""

    assigned: tuple[int, ...] = ()
    positions: Mapping[int, int] = field(default_factory=dict)
    lag: Mapping[int, int] = field(default_factory=dict)
    caught_up: bool = False
    """All assigned partitions reached the end they had when assigned (set once, stays)."""
    consuming: bool = False

    @property
    def ready(self) -> bool:
        return self.consuming and self.caught_up


@dataclass
class ProjectorTotals:
    """Counts over one ``run``. Plain and picklable: a rebuild's worker processes send theirs
    to the parent, which adds them up (``+``)."""

    batches: int = 0
    consumed: int = 0
    folded: int = 0
    duplicates: int = 0
    skipped: int = 0
    dead_letters: int = 0
    snapshots: int = 0
    refolded_runs: int = 0

    def add(self, b: PartitionBatch) -> None:
        self.batches += 1
        self.consumed += b.consumed
        self.folded += b.folded
        self.duplicates += b.duplicates
        self.skipped += b.skipped
        self.dead_letters += len(b.dead_letters)
        self.snapshots += len(b.snapshots)
        self.refolded_runs += b.refolded_runs

    def __add__(self, other: ProjectorTotals) -> ProjectorTotals:
        return ProjectorTotals(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


class ProjectorListener:
    """Callbacks from the driver thread; override what you need."""

    def assigned(self, partitions: Sequence[int]) -> None:
        """Partitions were assigned (and reconciled with the store)."""

    def revoked(self, partitions: Sequence[int]) -> None:
        """Partitions were revoked or lost."""

    def committed(self, batch: PartitionBatch, seconds: float) -> None:
        """A batch is in the store and its offset committed; ``seconds`` from fold to commit."""

    def lag(self, lag: Mapping[int, int]) -> None:
        """Records left per assigned partition, after a batch or an idle poll."""

    def caught_up(self) -> None:
        """Every assigned partition reached the end it had when assigned."""

    def progress(self, done: int, lag: Mapping[int, int]) -> None:
        """A rebuild with worker processes, polled by the parent about twice a second: offsets
        the group's commits moved past since the reset (all workers together) and what is
        left per partition. The workers' own batches are not seen in the parent; in-process
        drivers call ``committed`` and ``lag`` instead."""


class Projector(ABC):
    """Runs the projection core against a log until stopped."""

    def __init__(self, core: ProjectionCore, listener: ProjectorListener | None) -> None:
        self.core = core
        self.listener = listener or ProjectorListener()
        self._status = ProjectorStatus()

    @abstractmethod
    def run(
        self, stop: threading.Event | None = None, *, until_caught_up: bool = False
    ) -> ProjectorTotals:
        """Consume and fold until ``stop`` is set (or, with ``until_caught_up``, until every
        partition reached the end it had at assignment). A batch in progress always finishes
        and commits before this returns."""

    def status(self) -> ProjectorStatus:
        return self._status

    def close(self) -> None:  # noqa: B027 - drivers without resources need not override
        """Release clients. Idempotent."""

    def __enter__(self) -> Projector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The projector's library core: run states folded from the log, offsets as replay cursors.

``ProjectionCore`` folds records with the one fold of ``little.replay``; ``ProjectionStore``
keeps a state per run (sqlite by default, or PostgreSQL shared by several instances); drivers run the core on Kafka (per-partition
transactions with snapshots and dead letters) or on any ``EventLog`` (the embedded world).
The service in ``little_services.projector`` and ``little projections rebuild`` sit on this.
``import little_services.projection`` does not import the Kafka client.
"""

from little import tune_gc
from little_services.projection._core import (
    DEFAULT_GROUP,
    DLQ_MAX_VALUE,
    DLQ_MESSAGE,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC_HEADER,
    DLQ_VALUE_OMITTED,
    DeadLetter,
    PartitionBatch,
    ProjectionConfig,
    ProjectionCore,
)
from little_services.projection._driver import (
    Projector,
    ProjectorFencedError,
    ProjectorListener,
    ProjectorStalledError,
    ProjectorStatus,
    ProjectorTotals,
)
from little_services.projection._open import (
    ProjectionSettings,
    create_projector,
    open_store,
    open_store_at,
    open_world,
    projector_from_settings,
)
from little_services.projection._ports import PortProjector
from little_services.projection._postgres import PostgresProjectionStore
from little_services.projection._replay import replay_from_state
from little_services.projection._setup import RebuildResult, rebuild
from little_services.projection._sqlite import SqliteProjectionStore
from little_services.projection._store import (
    INTEGRITY_ERROR,
    PARKED,
    IntegrityMark,
    MemoryProjectionStore,
    PartitionCursor,
    ProjectionStore,
    ProjectionWrite,
    RunPage,
    RunQuery,
    RunRecord,
    RunSummary,
)
from little_services.projection._workers import RebuildWorkerError

__all__ = [
    "DEFAULT_GROUP",
    "DLQ_MAX_VALUE",
    "DLQ_MESSAGE",
    "DLQ_OFFSET",
    "DLQ_PARTITION",
    "DLQ_REASON",
    "DLQ_TOPIC_HEADER",
    "DLQ_VALUE_OMITTED",
    "INTEGRITY_ERROR",
    "PARKED",
    "DeadLetter",
    "IntegrityMark",
    "MemoryProjectionStore",
    "PartitionBatch",
    "PartitionCursor",
    "PortProjector",
    "PostgresProjectionStore",
    "ProjectionConfig",
    "ProjectionCore",
    "ProjectionSettings",
    "ProjectionStore",
    "ProjectionWrite",
    "Projector",
    "ProjectorFencedError",
    "ProjectorListener",
    "ProjectorStalledError",
    "ProjectorStatus",
    "ProjectorTotals",
    "RebuildResult",
    "RebuildWorkerError",
    "RunPage",
    "RunQuery",
    "RunRecord",
    "RunSummary",
    "SqliteProjectionStore",
    "create_projector",
    "open_store",
    "open_store_at",
    "open_world",
    "projector_from_settings",
    "rebuild",
    "replay_from_state",
    "tune_gc",
]

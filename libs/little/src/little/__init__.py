"""little: durable, replayable LLM agent runs on Kafka.

Every model call and tool call of a run is a versioned Avro event on a log keyed by run id;
a crashed run resumes by replaying its events. Start with ``local_world()`` (embedded, no
broker) or ``kafka_world(bootstrap_servers=...)``.
"""

from typing import TYPE_CHECKING

from little import events
from little._gc import tune_gc
from little._lazy import lazy_exports as _lazy_exports
from little._version import __version__
from little._world import RecordDecodeError, World, kafka_world, local_world
from little.artifacts import ArtifactBackend, ArtifactStore, S3ArtifactStore
from little.errors import (
    AppendOutcomeUnknownError,
    ArtifactError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    BrokerUnavailableError,
    CapabilityDriftError,
    ConfigurationError,
    EventDecodeError,
    EventValidationError,
    KafkaAuthenticationError,
    LittleError,
    LogError,
    RuntimeIntegrityError,
)
from little.events import ArtifactRef, Event, EventCodec, LoggedEvent, Usage
from little.log import EventLog, Position, TopicNames
from little.replay import MaterializedRunState, ReplayResult, replay_run

if TYPE_CHECKING:
    from little.replay_modes import (
        REPLAY_MODES,
        PartialReplay,
        ProjectionReplay,
        ReplayMode,
        replay_in_mode,
    )

_LAZY = {
    "REPLAY_MODES": "little.replay_modes",
    "PartialReplay": "little.replay_modes",
    "ProjectionReplay": "little.replay_modes",
    "ReplayMode": "little.replay_modes",
    "replay_in_mode": "little.replay_modes",
}
"""Exported names imported on first use (a module ``__getattr__``): what a fresh process
resuming a run does not use is not imported by ``import little``."""


__all__ = [
    "REPLAY_MODES",
    "AppendOutcomeUnknownError",
    "ArtifactBackend",
    "ArtifactError",
    "ArtifactIntegrityError",
    "ArtifactNotFoundError",
    "ArtifactRef",
    "ArtifactStore",
    "BrokerUnavailableError",
    "CapabilityDriftError",
    "ConfigurationError",
    "Event",
    "EventCodec",
    "EventDecodeError",
    "EventLog",
    "EventValidationError",
    "KafkaAuthenticationError",
    "LittleError",
    "LogError",
    "LoggedEvent",
    "MaterializedRunState",
    "PartialReplay",
    "Position",
    "ProjectionReplay",
    "RecordDecodeError",
    "ReplayMode",
    "ReplayResult",
    "RuntimeIntegrityError",
    "S3ArtifactStore",
    "TopicNames",
    "Usage",
    "World",
    "__version__",
    "events",
    "kafka_world",
    "local_world",
    "replay_in_mode",
    "replay_run",
    "tune_gc",
]

__getattr__, __dir__ = _lazy_exports(__name__, globals(), _LAZY, __all__)

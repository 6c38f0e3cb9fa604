"""little: durable, replayable LLM agent runs on Kafka.

Every model call and tool call of a run is a versioned Avro event on a log keyed by run id;
a crashed run resumes by replaying its events. Start with ``local_world()`` (embedded, no
broker) or ``kafka_world(bootstrap_servers=...)``.
"""

from little import events
from little._gc import tune_gc
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
from little.replay_modes import (
    REPLAY_MODES,
    PartialReplay,
    ProjectionReplay,
    ReplayMode,
    replay_in_mode,
)

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

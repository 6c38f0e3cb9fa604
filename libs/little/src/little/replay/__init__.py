"""Replay: the pure fold of a run's events into MaterializedRunState, and what builds on it.

Nothing in this package imports Kafka, sqlite or a network client; ``replay_run`` reads the
log only through the world it is given, and never writes.
"""

from little.replay._fold import StreamIntegrityError, materialize_run_state_from_events
from little.replay._pricing import price_usd
from little.replay._state import (
    STATE_VERSION,
    AgentCall,
    CommittedArtifact,
    LogPosition,
    MaterializedRunState,
    ModelTurn,
    ParallelGroup,
    RecordedValue,
    SessionState,
    StepState,
    SubRun,
    ToolCall,
    UsageTotals,
)

__all__ = [
    "STATE_VERSION",
    "AgentCall",
    "CommittedArtifact",
    "LogPosition",
    "MaterializedRunState",
    "ModelTurn",
    "ParallelGroup",
    "RecordedValue",
    "SessionState",
    "StepState",
    "StreamIntegrityError",
    "SubRun",
    "ToolCall",
    "UsageTotals",
    "materialize_run_state_from_events",
    "price_usd",
]

"""Replay: the pure fold of a run's events into MaterializedRunState, and what builds on it.

Nothing in this package imports Kafka, sqlite or a network client; ``replay_run`` reads the
log only through the world it is given, and never writes.
"""

from little.replay._checks import (
    ParallelBranchMismatchError,
    assert_completed_parallel_replay_matches_input,
    assert_completed_step_artifacts_valid,
    assert_harness_manifest_consistent,
    branch_set_hash,
    manifest_hash,
)
from little.replay._envelope import ReplayEnvelope, replay_envelope
from little.replay._fold import (
    StreamIntegrityError,
    materialize_run_state_from_events,
    signal_state,
    wait_state,
)
from little.replay._partial import AppliedEvent, accepted_events, state_changes, step_through
from little.replay._pricing import price_usd
from little.replay._replay import (
    ArtifactMismatchError,
    HydratedArtifact,
    ReplayPlanStep,
    ReplayResult,
    fold_run,
    load_snapshot,
    replay_run,
)
from little.replay._snapshot import (
    Snapshot,
    SnapshotError,
    SnapshotOutline,
    decode_snapshot,
    encode_snapshot,
    outline_snapshot,
)
from little.replay._state import (
    STATE_VERSION,
    AgentCall,
    CommittedArtifact,
    LogPosition,
    MaterializedRunState,
    ModelTurn,
    ParallelGroup,
    PatchMark,
    RecordedValue,
    SessionState,
    SignalState,
    StepState,
    SubRun,
    ToolCall,
    UsageTotals,
    VisitOutput,
    WaitState,
    oldest_kept,
    signal_name,
)

__all__ = [
    "STATE_VERSION",
    "AgentCall",
    "AppliedEvent",
    "ArtifactMismatchError",
    "CommittedArtifact",
    "HydratedArtifact",
    "LogPosition",
    "MaterializedRunState",
    "ModelTurn",
    "ParallelBranchMismatchError",
    "ParallelGroup",
    "PatchMark",
    "RecordedValue",
    "ReplayEnvelope",
    "ReplayPlanStep",
    "ReplayResult",
    "SessionState",
    "SignalState",
    "Snapshot",
    "SnapshotError",
    "SnapshotOutline",
    "StepState",
    "StreamIntegrityError",
    "SubRun",
    "ToolCall",
    "UsageTotals",
    "VisitOutput",
    "WaitState",
    "accepted_events",
    "assert_completed_parallel_replay_matches_input",
    "assert_completed_step_artifacts_valid",
    "assert_harness_manifest_consistent",
    "branch_set_hash",
    "decode_snapshot",
    "encode_snapshot",
    "fold_run",
    "load_snapshot",
    "manifest_hash",
    "materialize_run_state_from_events",
    "oldest_kept",
    "outline_snapshot",
    "price_usd",
    "replay_envelope",
    "replay_run",
    "signal_name",
    "signal_state",
    "state_changes",
    "step_through",
    "wait_state",
]

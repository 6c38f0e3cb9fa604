"""Event types as frozen pydantic models, one per Avro schema in ``schemas/<type>/``.

Each model mirrors the newest schema version of its type field for field. Events are values:
frozen, compared by content, never mutated. JSON payloads (inputs, outputs, tool arguments)
travel as canonical JSON strings so any Avro reader can show them.

Cheap to import (a fresh process resuming a run pays for it, ``bench/lone_run.py --recovery``):
no ``from __future__ import annotations`` here, so pydantic reads each field's annotation as the
object it is instead of compiling and evaluating its text (a ``typing.ForwardRef`` per field),
and ``defer_build``: a model's validator and serializer are built on its first use, not at
import (a resume decodes a few of the event types).
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from little._ids import new_uuid
from little.errors import EventValidationError


class _Frozen(BaseModel):
    # defer_build: validator and serializer built on first use (see the module's docstring)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ArtifactRef(_Frozen):
    """A content-addressed payload in the artifact store."""

    run_id: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    media_type: str


class Usage(_Frozen):
    """Tokens of one model call. Never a cost: dollars are computed by the fold alone."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    reasoning_tokens: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _reject_cost(cls, data: Any) -> Any:
        if isinstance(data, dict) and ({"cost_usd", "costUsd", "cost"} & data.keys()):
            raise EventValidationError(
                "recorded usage must not carry a cost (got cost_usd): record tokens only; "
                "dollars are computed by the fold from the price table"
            )
        return data

    @model_validator(mode="after")
    def _cached_within_input(self) -> "Usage":
        # input_tokens counts every input token, cached ones included (docs/architecture.md)
        if self.cached_input_tokens > self.input_tokens:
            raise ValueError(
                f"cached_input_tokens ({self.cached_input_tokens}) cannot exceed input_tokens "
                f"({self.input_tokens}): input_tokens counts cached tokens too"
            )
        return self


def _now() -> datetime:
    return datetime.now(UTC)


class Event(_Frozen):
    """The envelope every event carries (DESIGN §3), mirrored as Kafka headers."""

    event_type: ClassVar[str] = ""

    run_id: str = Field(min_length=1)
    seq: int = Field(ge=-1)
    epoch: int = Field(default=1, ge=0)
    event_id: str = Field(
        default_factory=new_uuid,
        pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
    )
    occurred_at: datetime = Field(default_factory=_now)
    producer: str = "little"
    step_path: str | None = None
    session_id: str | None = None

    @model_validator(mode="after")
    def _utc(self) -> "Event":
        if self.occurred_at.tzinfo is None:
            raise EventValidationError(f"{self.event_type} occurred_at must be timezone-aware")
        return self

    @property
    def type(self) -> str:
        return self.event_type


class _Error(Event):
    error_type: str
    message: str
    retryable: bool = False


# -- run lifecycle ---------------------------------------------------------------------------


class RunStartFacts(_Frozen):
    """What a run started with: the facts its ``RunStarted`` records and its folded state
    (``little.replay.MaterializedRunState``) keeps, declared once for both (the fold copies
    them with ``start_facts()``; the runtime builds one to write ``RunStarted``).

    A new fact is a field here (with a default, so older records still decode), the same field
    in the next ``schemas/RunStarted/v<n>.avsc``, its value where the run starts
    (``little.runtime``) and a ``STATE_VERSION`` bump (older snapshots lack it). A field only
    the event carries (``config_json``) goes on ``RunStarted`` alone.
    """

    workflow: str | None = None
    """Required on ``RunStarted``; None only in a state whose run has not started."""
    workflow_version: str | None = None
    input_json: str | None = None
    input_ref: ArtifactRef | None = None
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    max_agent_calls: int | None = None
    max_tokens: int | None = None
    replay_source_run_id: str | None = None
    """Recorded-call replay: the recorded run whose agent calls this run may reuse (v2)."""
    replay_refused_reason: str | None = None
    """Why reuse of the source run's calls was refused before the run began (it ran fresh)."""
    source_sha256: str | None = None
    """The identity of the workflow's source when the run started (v3)."""
    source_coverage: str | None = None
    """What ``source_sha256`` covers: ``self-contained`` or ``entry-only``."""
    replay_mode: str | None = None
    """A replay's mode: ``repairable`` (the default), ``strict`` or ``full``."""
    replay_model: str | None = None
    """A full replay's models: ``provider:model`` or ``module:factory`` for every session, and
    ``name=spec`` for the sessions of that name, separated by spaces (``FullReplay.model``);
    None in a full replay: each session asks its own model."""
    replay_live_tools: bool | None = None
    """A full replay that executes its tools instead of serving the source run's receipts."""
    config_sha256: str | None = None
    """sha256 of ``RunStarted.config_json`` (v4; None: logged before, its configuration is
    derived from the fields above by ``little.replay.state_configuration``)."""
    config_changes: tuple[str, ...] = ()
    """A replay only: how this configuration differs from the source run's
    (``"budgets.max_agent_calls: 10 -> 5"``), proceeded with (repairable) or refused (strict)."""
    source_unsafe_reads: tuple[str, ...] | None = None
    """The replay-safety scan's verdict on the run's own source (v5): the direct clock and
    randomness reads it found (empty: none; a run with any is never a replay source). None:
    logged before v5, or no source could be read."""
    tool_scopes: bool | None = None
    """Whether a recorded value, a durable wait or a sub-run made inside a recorded tool call
    takes that tool call's scope (v6; True for a run started since) or the step's own sequence
    (None: logged before v6, and numbered so on every resume). A replay takes its source's, so
    places match."""

    @field_serializer("source_unsafe_reads")
    def _reads_as_list(self, reads: tuple[str, ...] | None) -> list[str] | None:
        # a list: the Avro writer takes a tuple in a union for a (branch name, value) pair
        return None if reads is None else list(reads)

    def start_facts(self) -> dict[str, Any]:
        """These facts by name, without the other fields of the event or state that has them."""
        return {name: getattr(self, name) for name in RunStartFacts.model_fields}


class RunStarted(RunStartFacts, Event):
    # (RunStartFacts first among the bases: the envelope's fields still come first)
    event_type: ClassVar[str] = "RunStarted"
    workflow: str
    workflow_version: str
    config_json: str | None = None
    """The run-level configuration as canonical JSON (``little.runtime._config``)."""


class RunClaimed(Event):
    event_type: ClassVar[str] = "RunClaimed"
    seq: int = -1
    owner: str
    observed_seq: int = Field(ge=-1)


class RunCompleted(Event):
    event_type: ClassVar[str] = "RunCompleted"
    output_json: str | None = None
    output_ref: ArtifactRef | None = None


class RunFailed(_Error):
    event_type: ClassVar[str] = "RunFailed"


class RunCancelled(Event):
    event_type: ClassVar[str] = "RunCancelled"
    reason: str = ""


class RunParked(Event):
    """A resume coordinator cannot run this run (its workflow or version is not registered
    there) and leaves it for one that can. Not terminal: the next accepted claim ends it."""

    event_type: ClassVar[str] = "RunParked"
    reason: str
    workflow: str | None = None
    workflow_version: str | None = None


# -- steps -----------------------------------------------------------------------------------


class StepStarted(Event):
    event_type: ClassVar[str] = "StepStarted"
    step_id: str
    attempt: int = 1
    visit: int = 1
    max_visits: int = 1
    branch_path: str | None = None


class StepCompleted(Event):
    event_type: ClassVar[str] = "StepCompleted"
    step_id: str
    attempt: int = 1
    visit: int = 1
    branch_path: str | None = None
    output_json: str | None = None
    output_ref: ArtifactRef | None = None
    artifact_refs: tuple[ArtifactRef, ...] = ()


class StepFailed(_Error):
    event_type: ClassVar[str] = "StepFailed"
    step_id: str
    attempt: int = 1
    visit: int = 1
    branch_path: str | None = None
    will_retry: bool = False


class ParallelBranchScheduled(Event):
    event_type: ClassVar[str] = "ParallelBranchScheduled"
    branches: tuple[str, ...]
    branch_set_hash: str


class DecisionRecorded(Event):
    event_type: ClassVar[str] = "DecisionRecorded"
    step_id: str
    visit: int = 1
    target: str | None = None
    output_json: str | None = None


class ArtifactCommitted(Event):
    event_type: ClassVar[str] = "ArtifactCommitted"
    name: str
    ref: ArtifactRef


class SubRunReserved(Event):
    event_type: ClassVar[str] = "SubRunReserved"
    sub_run_id: str
    workflow: str
    input_json: str | None = None
    call_id: str | None = None


class ValueRecorded(Event):
    event_type: ClassVar[str] = "ValueRecorded"
    kind: str
    ordinal: int
    value_json: str
    source_run_id: str | None = None
    """Recorded-call replay: the run whose value at this place was served (v2)."""


# -- durable waits ---------------------------------------------------------------------------


class WaitStarted(Event):
    """A durable wait began (write-ahead): a timer, a signal, or a tool call's approval.

    Its place is ``step_path`` (the scope that waits: None the run itself, else a parallel
    branch's or a step's path) and ``ordinal`` (the scope's waits in order). A resume finds
    it and waits only for what is left: ``due_at`` is the timer's due time, or a signal's or
    an approval's timeout."""

    event_type: ClassVar[str] = "WaitStarted"
    kind: str
    """``timer``, ``signal`` or ``approval`` (a string on the wire: a newer kind still decodes)."""
    ordinal: int = Field(ge=0)
    name: str
    """The signal's name, the call id an approval is for, or the timer's label."""
    due_at: datetime | None = None
    details_json: str | None = None
    """An approval's request: the tool, its arguments and the call id, as JSON."""


class WaitEnded(Event):
    """A durable wait ended: the timer fired, a signal (or an approval decision) was taken,
    or the wait timed out. ``signal_id`` names the ``SignalSent`` it took."""

    event_type: ClassVar[str] = "WaitEnded"
    kind: str
    ordinal: int = Field(ge=0)
    name: str
    outcome: str
    """``fired``, ``received``, ``timed_out``, ``approved`` or ``rejected``."""
    signal_id: str | None = None


class SignalSent(Event):
    """A signal delivered to a run from outside (``little signal``, an approval decision, the
    coordinator's HTTP API): kept in the run's log until a wait takes it. Outside the run's
    chain, like a claim: any producer may append it (``seq`` -1, ``epoch`` 0). ``signal_id``
    makes a re-delivery (a command read twice) a no-op."""

    event_type: ClassVar[str] = "SignalSent"
    seq: int = -1
    epoch: int = 0
    name: str = Field(min_length=1)
    payload_json: str
    signal_id: str = Field(min_length=1)
    sender: str = ""


class RunSuspended(Event):
    """The execution let go of the run until a wait can end: nothing holds it, and whoever
    wakes it (a worker, the resume coordinator, ``little resume``) claims it again at
    ``wake_at`` or when a signal it waits for arrives. Not terminal."""

    event_type: ClassVar[str] = "RunSuspended"
    wake_at: datetime | None = None
    waiting_for: tuple[str, ...] = ()
    """What the run waits for, readable: ``timer``, ``signal:<name>``, ``approval:<call>``."""


class PatchMarked(Event):
    """A run passed a patch point (``ctx.patched(patch_id)``) on the new path: recorded once
    per patch and scope, so every resume takes the same path (docs/architecture.md,
    "Changing workflow code")."""

    event_type: ClassVar[str] = "PatchMarked"
    patch_id: str = Field(min_length=1)
    scope: str = ""
    """The workflow scope of the call ("" the run, a parallel branch's path); for a call in a
    step (``step_path``), the scope that step runs in."""
    visit: int | None = Field(default=None, ge=1)
    """The step's visit, for a call inside a step; None for a workflow scope."""


# -- harness sessions ------------------------------------------------------------------------


class SessionStarted(Event):
    event_type: ClassVar[str] = "harness.session.started"
    session_name: str
    model: str
    manifest_json: str
    manifest_hash: str
    system_json: str | None = None
    """The system prompt as canonical JSON (``"null"``: none), so the full request of every
    model call can be rebuilt from the log (v2; None: in ``system_ref``, or logged before)."""
    system_ref: ArtifactRef | None = None


class SessionCompacted(Event):
    """A session's history was compacted before an exchange by its compaction policy."""

    event_type: ClassVar[str] = "harness.session.compacted"
    exchange: int = Field(ge=0)
    policy_json: str
    policy_hash: str
    replaced_messages: int = Field(ge=0)
    replaced_hash: str
    previous_request_hash: str | None = None
    history_json: str | None = None
    history_ref: ArtifactRef | None = None
    history_hash: str
    summary_session_id: str | None = None


class SessionCompleted(Event):
    event_type: ClassVar[str] = "harness.session.completed"
    turns: int
    output_json: str | None = None
    output_ref: ArtifactRef | None = None
    """The answer in the artifact store when large (v2): inline, a 5 MB answer made a record
    over the broker's ``message.max.bytes`` and failed the run on Kafka."""
    usage: Usage


class ModelCalled(Event):
    event_type: ClassVar[str] = "harness.model.called"
    turn: int
    provider: str
    model: str
    request_hash: str
    previous_request_hash: str | None = None
    appended_messages_json: str | None = None
    appended_messages_ref: ArtifactRef | None = None
    message_count: int
    tools_hash: str | None = None


class ModelResponded(Event):
    event_type: ClassVar[str] = "harness.model.responded"
    turn: int
    provider: str
    model: str
    request_hash: str
    response_json: str | None = None
    response_ref: ArtifactRef | None = None
    usage: Usage
    replayed_from_run_id: str | None = None
    finish_reason: str | None = None
    latency_ms: int | None = None


class ModelFailed(_Error):
    event_type: ClassVar[str] = "harness.model.failed"
    turn: int
    provider: str
    model: str
    request_hash: str


class ToolCallStarted(Event):
    event_type: ClassVar[str] = "harness.tool_call.started"
    call_id: str
    tool: str
    turn: int
    arguments_json: str
    idempotency_key: str


class ToolCallSucceeded(Event):
    event_type: ClassVar[str] = "harness.tool_call.succeeded"
    call_id: str
    tool: str
    result_json: str | None = None
    result_ref: ArtifactRef | None = None
    replayed_from_run_id: str | None = None


class ToolCallFailed(_Error):
    event_type: ClassVar[str] = "harness.tool_call.failed"
    call_id: str
    tool: str


# -- recorded-call replay (seed 003) ---------------------------------------------------------


class AgentCallAdmitted(Event):
    event_type: ClassVar[str] = "agent.call.admitted"
    ordinal: int = Field(ge=0)
    request_key: str
    node_phase: str | None = None
    node_label: str | None = None
    node_occurrence: int | None = None
    side_effecting: bool = False
    scope: str | None = None
    """The admitting workflow scope ("" the run, a parallel branch's path); None in v1."""


class AgentCallSettled(Event):
    event_type: ClassVar[str] = "agent.call.settled"
    ordinal: int = Field(ge=0)
    outcome: str
    result_json: str | None = None
    result_ref: ArtifactRef | None = None
    usage: Usage | None = None
    replayed: bool = False
    source_run_id: str | None = None
    miss_reason: str | None = None
    provider: str | None = None
    model: str | None = None
    model_calls: int | None = Field(default=None, ge=0)
    """Model calls of the exchange. A replayed settlement carries the recorded call's
    ``usage``, ``provider``, ``model`` and ``model_calls``: avoided, never billed."""


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """A decoded event and where it sits in the log."""

    event: Event
    partition: int
    offset: int


EVENT_TYPES: dict[str, type[Event]] = {
    cls.event_type: cls
    for cls in (
        RunStarted,
        RunClaimed,
        RunCompleted,
        RunFailed,
        RunCancelled,
        RunParked,
        StepStarted,
        StepCompleted,
        StepFailed,
        ParallelBranchScheduled,
        DecisionRecorded,
        ArtifactCommitted,
        SubRunReserved,
        ValueRecorded,
        PatchMarked,
        SessionStarted,
        SessionCompacted,
        SessionCompleted,
        ModelCalled,
        ModelResponded,
        ModelFailed,
        ToolCallStarted,
        ToolCallSucceeded,
        ToolCallFailed,
        AgentCallAdmitted,
        AgentCallSettled,
        WaitStarted,
        WaitEnded,
        SignalSent,
        RunSuspended,
    )
}
"""Every event type by its wire name (the envelope's ``type``)."""

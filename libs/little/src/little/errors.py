"""Every exception little raises, under two roots: errors, and the interrupts of a run.

    LittleError (Exception)                          the root of errors
    ├── ConfigurationError (ValueError)              bad settings, topic config or argument
    │   ├── KafkaAuthenticationError                 the brokers refused the SASL credentials
    │   ├── UnknownWorkflowError   (little.runtime)  no workflow of that name is registered here
    │   ├── SignalRefusedError     (little.runtime)  a signal to an unknown or ended run, not JSON
    │   └── UnsupportedFeatureError                  a framework feature little cannot record
    ├── EventDecodeError (ValueError)                bytes that are not a little event
    ├── EventValidationError                         an event breaks a recording rule
    ├── RecordDecodeError (ValueError)  (little)     a record of a run's stream does not decode
    ├── CommandDecodeError (ValueError)  (little.commands)  a commands record that is no command
    ├── SnapshotError (ValueError)  (little.replay)  a snapshot that cannot be used: replay refolds
    ├── GoldenFileError (ValueError)  (little.golden)  a golden run file that cannot be read
    ├── LogError                                     the event log failed; retryable
    │   ├── AppendOutcomeUnknownError (TimeoutError)  may have landed: end the writer; retryable
    │   └── BrokerUnavailableError (ConnectionError)  no broker answered; retryable
    ├── ArtifactError                                the artifact store failed
    │   ├── ArtifactNotFoundError (KeyError)         no artifact is stored under this hash
    │   └── ArtifactIntegrityError (ValueError)      stored bytes do not hash to their ref
    ├── RuntimeIntegrityError                        a run's log cannot stand in for the run
    │   ├── CapabilityDriftError                     a session's manifest changed since it started
    │   ├── SessionDivergedError   (little.runtime)  a resumed session built another request
    │   ├── WorkflowVersionError   (little.runtime)  the version the run started on is not registered
    │   ├── SimulationDivergedError (little.runtime)  a simulated run needed a call its golden lacks
    │   ├── StreamIntegrityError   (little.replay)   seq gap, two events at one seq, event of another run, ...
    │   ├── ParallelBranchMismatchError  (little.replay)  a parallel group resolved other branches
    │   └── ArtifactMismatchError  (little.replay)   a committed artifact is missing or differs
    ├── ClaimRejectedError         (little.runtime)  a racing claimer claimed first; retryable
    ├── WaitTimeoutError (TimeoutError)  (little.runtime)  no signal came before the timeout
    ├── RunNotStartedError         (little.runtime)  no RunStarted in the log and no workflow given
    ├── StepFailedError            (little.runtime)  a step failed after its last attempt
    ├── SubRunFailedError          (little.runtime)  a sub-run ended failed or cancelled
    ├── BudgetExceededError        (little.runtime)  a run's cap on fresh calls or tokens is spent
    ├── LoopLimitError             (little.runtime)  a step was visited more than its max_visits
    ├── OutputValidationError      (little.runtime)  a structured answer did not validate, retries spent
    ├── PanelMixedError            (little.runtime)  a replayed panel's legs were recorded and fresh
    ├── PatchDeprecatedError       (little.runtime)  a run on a patch's old path met deprecate_patch
    ├── StreamStoppedError                           a streamed model call's consumer stopped early
    ├── McpError                   (little.harness)  an MCP server was not listed; retryable
    └── ToolError                  (little.harness)  a tool's failure, reported to the model
    RunInterrupt (BaseException)                     ends an execution, not a failure
    ├── ExecutionStopped           (little.runtime)  its supervisor stopped it; retryable
    ├── ExecutionSuspended         (little.runtime)  it waits for a timer or signal; retryable
    └── BranchStopped              (little.runtime)  a sibling branch failed: stopped, not failed

``RunInterrupt`` is a ``BaseException``, not an ``Exception``, as asyncio's cancellation is: it
ends an execution where it is raised and goes up through the workflow's code, so an ``except
Exception`` around a durable wait, a step or a sub-run cannot swallow a suspension, a stop or a
branch stop and go on as if the wait had ended. Code that must clean up uses ``finally``.

The drawing is the class hierarchy (a test holds it to the code): indentation is inheritance
from little's classes, ``(ValueError)`` names a standard base besides, and ``(little.x)`` the
public module a class is defined in and exported from when it is not this one. The
projector's errors (``little_services.projection``) are under the root too, drawn with the
services (``little_services``), not here.

``retryable`` (a class attribute, ``False`` on the root) answers one question: can the same
operation succeed if it is simply done again later, with nobody changing the code, the
configuration or the data? For a run the operation is executing it (claim, replay, continue),
never re-sending one append: after an ``AppendOutcomeUnknownError`` the writer must end,
because sending the append again could record it twice, but resuming the run later reads
what landed and is safe, so it is retryable. A claim a racing claimer beat is retryable (the
next claim, once that writer is gone, has a higher epoch); a stop asked by a supervisor is
(the run's next owner continues it). Every class not marked retryable is terminal: an
integrity, configuration or decode error, a failed step or sub-run, a spent budget, gives
the same answer however often it is retried. The resume coordinator retries a retryable
error (the run's lease runs out and it is resumed) and parks anything else until a
ResumeRun.

Messages name what was wrong and where (run, event, offset) so a user can act on them.
"""

from __future__ import annotations


class LittleError(Exception):
    """Root of every error little raises on purpose.

    ``retryable``: whether the same operation, done again later and unchanged, can succeed
    (see the module docstring). ``False`` here; each class that can says so.
    """

    retryable: bool = False


class RunInterrupt(BaseException):
    """Root of what ends an execution without failing its run: a suspension on a durable
    wait, a supervisor's stop or cancel, a parallel branch stopped by a failed sibling.

    Not an ``Exception``, so a workflow's ``except Exception`` never catches one (see the
    module docstring). ``retryable`` as on ``LittleError``; each interrupt says.
    """

    retryable: bool = False


class ConfigurationError(LittleError, ValueError):
    """Settings, topic configuration or an argument is wrong. Terminal."""

    retryable = False


class KafkaAuthenticationError(ConfigurationError):
    """The Kafka brokers refused the client's SASL credentials. Terminal: the same
    credentials are refused again. The message names the user, never the password."""

    retryable = False


class EventDecodeError(LittleError, ValueError):
    """Bytes could not be decoded into a little event.

    ``reason`` is one of the ``REASON_*`` constants, stable for matching and metrics.
    """

    NOT_AVRO_FRAMING = "not-avro-framing"
    UNKNOWN_FINGERPRINT = "unknown-fingerprint"
    UNKNOWN_SCHEMA_ID = "unknown-schema-id"
    TRUNCATED = "truncated-body"
    MALFORMED = "malformed-body"
    UNKNOWN_TYPE = "unknown-type"
    INVALID = "invalid-event"

    retryable = False

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"cannot decode event ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


class EventValidationError(LittleError):
    """An event breaks a recording rule (for example usage that carries a cost). Terminal.

    Deliberately not a ValueError, so pydantic lets it through unwrapped.
    """

    retryable = False


class LogError(LittleError):
    """The event log failed to append or read. Retryable.

    The log failed, not the run: whatever landed is in the log, so executing the run again
    later (a new claim, a replay of what landed) is safe, and succeeds once the log serves.
    The writer that saw it must still end (``little.runtime``: a LogError is fatal to it).
    """

    retryable = True


class AppendOutcomeUnknownError(LogError, TimeoutError):
    """An append timed out after the producer's own retries: it may or may not be in the log.

    The writer must stop as if it had crashed: sending the append again could record it
    twice. A resume reads what actually landed, so the run is retryable (a new execution),
    the append is not.
    """

    retryable = True


class BrokerUnavailableError(LogError, ConnectionError):
    """No broker answered in time. Retryable."""

    retryable = True


class ArtifactError(LittleError):
    """The artifact store failed."""

    retryable = False


class ArtifactNotFoundError(ArtifactError, KeyError):
    """No artifact is stored under this hash."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ArtifactIntegrityError(ArtifactError, ValueError):
    """Stored bytes do not hash to the reference that names them. Terminal."""


class RuntimeIntegrityError(LittleError):
    """A run's log is inconsistent (seq gap, missing artifact, drifted branch set). Terminal.

    Raised inside an execution (a resumed session, a parallel group), it finishes it even if
    the workflow catches it: every later step or call raises it again and nothing more is
    recorded (``little.runtime``, docs/architecture.md)."""

    retryable = False


class CapabilityDriftError(RuntimeIntegrityError):
    """A harness session's manifest differs from the one its run committed. Terminal."""


class UnsupportedFeatureError(ConfigurationError):
    """A framework feature little cannot record and replay (server-side state, a realtime
    session, ...): refused at the call, never run unrecorded (``little.integrations``)."""


class StreamStoppedError(LittleError):
    """A streamed model call ended before its answer did: its consumer stopped reading or
    closed the stream (a framework adapter's, or ``Recorder.live_turn``'s). Recorded as the
    call's failure; a resume asks the model again."""

    retryable = False


__all__ = [
    "AppendOutcomeUnknownError",
    "ArtifactError",
    "ArtifactIntegrityError",
    "ArtifactNotFoundError",
    "BrokerUnavailableError",
    "CapabilityDriftError",
    "ConfigurationError",
    "EventDecodeError",
    "EventValidationError",
    "KafkaAuthenticationError",
    "LittleError",
    "LogError",
    "RunInterrupt",
    "RuntimeIntegrityError",
    "StreamStoppedError",
    "UnsupportedFeatureError",
]

"""Every exception little raises, under one root.

    LittleError
    ├── ConfigurationError (ValueError)        bad settings or topic config; terminal
    ├── EventDecodeError (ValueError)          bytes that are not a little event; terminal for that record
    ├── EventValidationError                   an event that breaks a recording rule (e.g. usage with cost); terminal
    ├── LogError                               the event log failed
    │   ├── AppendOutcomeUnknownError (TimeoutError)  the append may or may not have landed; end the writer
    │   └── BrokerUnavailableError (ConnectionError)  no broker answered; retryable
    ├── ArtifactError
    │   ├── ArtifactNotFoundError (KeyError)
    │   └── ArtifactIntegrityError (ValueError)  stored bytes do not hash to their ref; terminal
    └── RuntimeIntegrityError                  a run's log cannot stand in for the run; terminal
        └── CapabilityDriftError               the harness manifest changed since the run started

"Terminal" means retrying the same call with the same input cannot succeed; "retryable" means
it can. Messages name what was wrong and where (run, event, offset) so a user can act on them.
"""

from __future__ import annotations


class LittleError(Exception):
    """Root of every error little raises on purpose."""

    retryable: bool = False


class ConfigurationError(LittleError, ValueError):
    """Settings, topic configuration or an argument is wrong. Terminal."""


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

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"cannot decode event ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


class EventValidationError(LittleError):
    """An event breaks a recording rule (for example usage that carries a cost). Terminal.

    Deliberately not a ValueError, so pydantic lets it through unwrapped.
    """


class LogError(LittleError):
    """The event log failed to append or read."""


class AppendOutcomeUnknownError(LogError, TimeoutError):
    """An append timed out after the producer's own retries: it may or may not be in the log.

    The writer must stop as if it had crashed; a resume reads what actually landed.
    """


class BrokerUnavailableError(LogError, ConnectionError):
    """No broker answered in time. Retryable."""

    retryable = True


class ArtifactError(LittleError):
    """The artifact store failed."""


class ArtifactNotFoundError(ArtifactError, KeyError):
    """No artifact is stored under this hash."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ArtifactIntegrityError(ArtifactError, ValueError):
    """Stored bytes do not hash to the reference that names them. Terminal."""


class RuntimeIntegrityError(LittleError):
    """A run's log is inconsistent (seq gap, missing artifact, drifted branch set). Terminal."""


class CapabilityDriftError(RuntimeIntegrityError):
    """A harness session's manifest differs from the one its run committed. Terminal."""


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
    "LittleError",
    "LogError",
    "RuntimeIntegrityError",
]

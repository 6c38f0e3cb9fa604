"""Errors of the runtime (subclasses of little's root error)."""

from __future__ import annotations

from little.errors import LittleError, RuntimeIntegrityError


class ClaimRejectedError(LittleError):
    """Another writer claimed the run first with an equal or higher epoch: back off."""


class StepFailedError(LittleError):
    """A step failed after its last attempt. Terminal for that step."""

    def __init__(self, step_path: str, error: BaseException) -> None:
        super().__init__(f"step {step_path} failed: {type(error).__name__}: {error}")
        self.step_path = step_path
        self.error = error


class BudgetExceededError(LittleError):
    """A run's cap on fresh agent calls or tokens would be exceeded. Terminal."""


class LoopLimitError(LittleError):
    """A step was visited more often than its ``max_visits``. Terminal."""


class SessionDivergedError(RuntimeIntegrityError):
    """A resumed session built a different request than the one its log recorded."""


class WorkflowVersionError(RuntimeIntegrityError):
    """The run was started by another version of its workflow than the one registered now."""
